// How fast each stage runs its layers against how busy the schedule keeps it. A GPU kept busier
// lowers its SM clock (DVFS), so the same layers take longer on the busier stage. The layer
// spans of a trace (EventKind::layer) give each stage's speed (layers per second of layer work);
// the line speed = at_idle + per_busy * busy share through the recorded stages carries it to a
// what-if's stages, whose loads the simulation gives (docs/replay-and-traces.md, "Load").
// Traced GPU runs also sample each GPU's SM clock (EventKind::clock), which the report shows;
// the model uses the layers' speed, what the clock does to them.
//
//   SpeedModel m = fit_speed_model(stage_layer_speed(layer_time(events, iterations), 2), {0.767, 0.903});
//   OpDurations at_ref = at_reference_speed(m, measured);            // every stage at m.reference_speed
//   OpDurations loaded = at_busy_speed(m, at_ref, {0.999, 0.815});   // each stage at its load's speed
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schedules/layer_time.hpp"
#include "schedules/simulator.hpp"
#include "schedules/trace.hpp"

namespace troupe::schedules {

struct SpeedModel {
  std::vector<double> stage_speed;  // (P) each recorded stage's layers per second; empty: no layer spans
  double reference_speed = 0;       // their mean, the speed durations are normalised to
  // speed = speed_at_idle + speed_per_busy * busy share; fitted only where the stages' loads
  // differ by at least kMinBusySpread (else speed does not follow load in this model).
  double speed_at_idle = 0, speed_per_busy = 0;
  bool fitted = false;
  double speed_at(double busy) const { return speed_at_idle + speed_per_busy * busy; }
};

inline constexpr double kMinBusySpread = 0.02;

// The least-squares line through (busy_s, speed_s) of the recorded stages.
SpeedModel fit_speed_model(const std::vector<double>& stage_speed, const std::vector<double>& busy_fraction);

// Each of `stages` stages' layers per second of layer-span time (layer_time()'s stage_layers);
// empty when a stage has no layer span.
std::vector<double> stage_layer_speed(const LayerTime& layers, int stages);

// Each stage's mean SM clock over [from_ns, to_ns] from the trace's clock samples (0 where a
// stage has none); empty when the trace has no samples.
std::vector<double> stage_clocks(const std::vector<TraceEvent>& events, int stages, int64_t from_ns, int64_t to_ns);

// `measured` with each stage's op times as if run at the reference speed (t * speed_s / reference).
OpDurations at_reference_speed(const SpeedModel& model, OpDurations measured);
// Op times at the reference speed carried to each stage's speed under `busy` (t * reference /
// speed_at(busy_s)).
OpDurations at_busy_speed(const SpeedModel& model, OpDurations at_reference, const std::vector<double>& busy);

// The busy share of each stage of a simulated (or measured) iteration.
std::vector<double> busy_fractions(const PipelineStats& stats);

// "stage speed: s0 1880 layers/s at 76.7% busy, ...; what-ifs ..." and, where sampled, the
// stages' SM clocks, for the report.
std::string format_speed_model(const SpeedModel& model, const std::vector<double>& busy,
                               const std::vector<double>& clocks_mhz);

}  // namespace troupe::schedules
