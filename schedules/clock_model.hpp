// GPUs lower their SM clock the busier they are kept (DVFS): a stage that a schedule keeps busier
// runs the same ops slower. A trace that sampled each stage's clock (EventKind::clock) gives the
// line clock = at_idle + per_busy * busy fraction through its stages, and a what-if runs each
// stage's ops at the clock its predicted load gives (docs/replay-and-traces.md, "Clocks").
//
//   ClockModel c = fit_clock_model({1960, 1915}, {0.767, 0.903});   // MHz, busy share per stage
//   OpDurations at_ref = at_reference_clock(c, measured);             // as if every stage ran at c.reference_mhz
//   OpDurations loaded = at_busy_clock(c, at_ref, {0.999, 0.815});   // each stage at its load's clock
#pragma once

#include <string>
#include <vector>

#include "schedules/simulator.hpp"
#include "schedules/trace.hpp"

namespace troupe::schedules {

struct ClockModel {
  std::vector<double> stage_mhz;  // (P) each recorded stage's mean SM clock; empty: not sampled
  double reference_mhz = 0;       // their mean, the clock durations are normalised to
  // clock = at_idle_mhz + per_busy_mhz * busy fraction; fitted only where the stages' loads differ
  // by at least kMinBusySpread (else the clock does not follow load in this model).
  double at_idle_mhz = 0, per_busy_mhz = 0;
  bool fitted = false;
  double clock_at(double busy) const { return at_idle_mhz + per_busy_mhz * busy; }
};

inline constexpr double kMinBusySpread = 0.02;

// The least-squares line through (busy_s, mhz_s) of the recorded stages.
ClockModel fit_clock_model(const std::vector<double>& stage_mhz, const std::vector<double>& busy_fraction);

// Each stage's mean SM clock over [from_ns, to_ns] from the trace's clock samples (0 where a
// stage has none); empty when the trace has no samples.
std::vector<double> stage_clocks(const std::vector<TraceEvent>& events, int stages, int64_t from_ns, int64_t to_ns);

// `measured` with each stage's op times as if run at the reference clock (t * mhz_s / reference).
OpDurations at_reference_clock(const ClockModel& model, OpDurations measured);
// Op times at the reference clock carried to each stage's clock under `busy` (t * reference /
// clock_at(busy_s)).
OpDurations at_busy_clock(const ClockModel& model, OpDurations at_reference, const std::vector<double>& busy);

// The busy share of each stage of a simulated (or measured) iteration.
std::vector<double> busy_fractions(const PipelineStats& stats);

// "clocks: s0 1960 MHz at 76.7% busy, ...; 1960 MHz - 3.3 MHz per busy point" for the report.
std::string format_clock_model(const ClockModel& model, const std::vector<double>& busy);

}  // namespace troupe::schedules
