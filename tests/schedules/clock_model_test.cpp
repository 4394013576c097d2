// The clock model behind `troupe replay --what-if` (schedules/clock_model.hpp), on runs whose
// truth is known: simulated pipelines whose stages run their ops at the clock their load gives
// (clock = 2000 MHz - 400 MHz x busy share), recorded with clock samples. A what-if from one
// schedule's trace must predict the other schedule's loaded run; without the samples it predicts
// the run at the recorded clocks, off by the clock change.
#include <gtest/gtest.h>

#include <cmath>

#include "schedules/clock_model.hpp"
#include "schedules/replay.hpp"
#include "tests/schedules/recorded_trace.hpp"

namespace troupe::schedules {
namespace {

constexpr double kIdleMhz = 2000, kPerBusyMhz = -400, kReferenceMhz = 1700;

double law(double busy) { return kIdleMhz + kPerBusyMhz * busy; }

// The model with the law as if fitted, durations given at kReferenceMhz.
ClockModel law_model(int stages) {
  ClockModel m;
  m.stage_mhz.assign(size_t(stages), kReferenceMhz);
  m.reference_mhz = kReferenceMhz;
  m.at_idle_mhz = kIdleMhz;
  m.per_busy_mhz = kPerBusyMhz;
  m.fitted = true;
  return m;
}

// The run of `schedule` whose ops take `at_reference` at kReferenceMhz, each stage at the clock
// of its own load (iterated to the fixed point), and that load.
struct LoadedRun {
  OpDurations durations;
  Simulation simulation;
};
LoadedRun loaded_run(Schedule schedule, const PipelineShape& shape, const OpDurations& at_reference) {
  const ClockModel m = law_model(shape.stages);
  LoadedRun r{at_reference, simulate(schedule, shape, at_reference)};
  for (int round = 0; round < 30; ++round) {
    r.durations = at_busy_clock(m, at_reference, busy_fractions(r.simulation.stats));
    r.simulation = simulate(schedule, shape, r.durations);
  }
  return r;
}

// Three iterations of the loaded run, with each stage's clock sampled at every op's end.
Trace recorded_with_clocks(Schedule schedule, const PipelineShape& shape, const OpDurations& at_reference) {
  const LoadedRun r = loaded_run(schedule, shape, at_reference);
  Trace t = recorded_trace(schedule, shape, r.durations, 3);
  t.header.num_layers = 8;
  const std::vector<double> busy = busy_fractions(r.simulation.stats);
  std::vector<TraceEvent> samples;
  for (const TraceEvent& e : t.events)
    if (is_op_kind(e.kind))
      samples.push_back({.actor = "clock", .device = e.stage, .stage = e.stage, .kind = EventKind::clock,
                         .iteration = e.iteration, .start_ns = e.end_ns, .end_ns = e.end_ns,
                         .sm_clock_mhz = int32_t(std::lround(law(busy[size_t(e.stage)])))});
  t.events.insert(t.events.end(), samples.begin(), samples.end());
  return t;
}

TEST(ClockModel, FitsTheLineThroughTheStagesAndScalesTheirOps) {
  const ClockModel m = fit_clock_model({1960, 1915}, {0.767, 0.903});
  ASSERT_TRUE(m.fitted);
  EXPECT_NEAR(m.per_busy_mhz, -45 / 0.136, 1e-6);
  EXPECT_NEAR(m.clock_at(0.767), 1960, 1e-6);
  EXPECT_NEAR(m.reference_mhz, 1937.5, 1e-9);
  // Loads too close together: no line, and durations stay as they are.
  EXPECT_FALSE(fit_clock_model({1960, 1915}, {0.80, 0.81}).fitted);
  EXPECT_TRUE(fit_clock_model({}, {}).stage_mhz.empty());
  const PipelineShape p2{.stages = 2, .chunks = 1, .microbatches = 4};
  const OpDurations d = OpDurations::uniform(p2, 1'000'000, 2'000'000);
  const OpDurations ref = at_reference_clock(m, d);
  EXPECT_EQ(ref.forward_ns[0][0], std::llround(1e6 * 1960 / 1937.5));  // the faster stage took less at its clock
  EXPECT_EQ(ref.backward_ns[1][0], std::llround(2e6 * 1915 / 1937.5));
  const OpDurations busy = at_busy_clock(m, ref, {0.767, 0.903});
  EXPECT_NEAR(double(busy.forward_ns[0][0]), 1e6, 1);  // back at the clocks they ran at
  EXPECT_NEAR(double(busy.backward_ns[1][0]), 2e6, 1);
}

TEST(ClockModel, WhatIfRunsEachStageAtItsPredictedLoadsClock) {
  const PipelineShape p2{.stages = 2, .chunks = 1, .microbatches = 8};
  const PipelineShape v2{.stages = 2, .chunks = 2, .microbatches = 8};
  // 8 layers of 1 ms forward and 2 ms backward at the reference clock; the LM head on the last
  // stage makes it the busier one, at the lower clock.
  OpDurations one = OpDurations::uniform(p2, 4'000'000, 8'000'000, 50'000);
  one.forward_ns[1][0] += 2'000'000, one.backward_ns[1][0] += 4'000'000;
  const Trace recorded = recorded_with_clocks(Schedule::one_f_one_b, p2, one);

  ReplayOptions o;
  o.what_ifs = {"schedule=zb-v"};
  const ReplayReport r = replay_trace(recorded, o);
  ASSERT_TRUE(r.clocks.fitted);
  EXPECT_NEAR(r.clocks.per_busy_mhz, kPerBusyMhz, 5);  // the law, from two stages' samples
  EXPECT_NEAR(r.clocks.at_idle_mhz, kIdleMhz, 5);

  // The truth: ZB-V's chunks (2 layers each; the head on virtual stage 3, stage 0) loaded by
  // the same law. ZB-V keeps stage 0 busier than 1F1B kept either stage.
  OpDurations v = OpDurations::uniform(v2, 2'000'000, 4'000'000, 50'000);
  v.forward_ns[0][1] += 2'000'000, v.backward_ns[0][1] += 4'000'000;
  const LoadedRun truth = loaded_run(Schedule::zb_v, v2, v);
  const double predicted = double(r.what_ifs.at(0).simulation.stats.step_ns);
  const double actual = double(truth.simulation.stats.step_ns);
  EXPECT_NEAR(predicted / actual, 1.0, 0.005) << predicted << " vs " << actual;
  EXPECT_NEAR(r.what_ifs.at(0).simulation.stats.bubble_fraction, truth.simulation.stats.bubble_fraction, 0.005);

  // The same trace without its clock samples: ZB-V predicted at the recorded clocks, too fast.
  Trace unclocked = recorded;
  std::erase_if(unclocked.events, [](const TraceEvent& e) { return e.kind == EventKind::clock; });
  const double blind = double(replay_trace(unclocked, o).what_ifs.at(0).simulation.stats.step_ns);
  EXPECT_LT(blind / actual, 0.99) << blind << " vs " << actual;
}

}  // namespace
}  // namespace troupe::schedules
