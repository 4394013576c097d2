// The stage speed model behind `troupe replay --what-if` (schedules/stage_speed.hpp), on runs
// whose truth is known: simulated pipelines whose stages run their layers at the speed their load
// gives (speed = 2000 - 400 x busy share, layers per second), recorded with layer spans. A
// what-if from one schedule's trace must predict the other schedule's loaded run; without the
// spans it predicts the run at the recorded speeds, off by the change.
#include <gtest/gtest.h>

#include <cmath>

#include "schedules/stage_speed.hpp"
#include "schedules/replay.hpp"
#include "tests/schedules/recorded_trace.hpp"

namespace troupe::schedules {
namespace {

constexpr double kIdleSpeed = 2000, kPerBusySpeed = -400, kReferenceSpeed = 1700;

double law(double busy) { return kIdleSpeed + kPerBusySpeed * busy; }

// The model with the law as if fitted, durations given at kReferenceSpeed.
SpeedModel law_model(int stages) {
  SpeedModel m;
  m.stage_speed.assign(size_t(stages), kReferenceSpeed);
  m.reference_speed = kReferenceSpeed;
  m.speed_at_idle = kIdleSpeed;
  m.speed_per_busy = kPerBusySpeed;
  m.fitted = true;
  return m;
}

// The run of `schedule` whose ops take `at_reference` at kReferenceSpeed, each stage at the speed
// of its own load (iterated to the fixed point), and that load.
struct LoadedRun {
  OpDurations durations;
  Simulation simulation;
};
LoadedRun loaded_run(Schedule schedule, const PipelineShape& shape, const OpDurations& at_reference) {
  const SpeedModel m = law_model(shape.stages);
  LoadedRun r{at_reference, simulate(schedule, shape, at_reference)};
  for (int round = 0; round < 30; ++round) {
    r.durations = at_busy_speed(m, at_reference, busy_fractions(r.simulation.stats));
    r.simulation = simulate(schedule, shape, r.durations);
  }
  return r;
}

// Three iterations of the loaded run, each op marking its 4 layers (1 ms forward, 2 ms backward at
// the reference speed, at its stage's speed), back to back from its start; the rest of the op
// (the LM head) after them.
Trace recorded_with_layer_spans(Schedule schedule, const PipelineShape& shape, const OpDurations& at_reference) {
  const LoadedRun r = loaded_run(schedule, shape, at_reference);
  Trace t = recorded_trace(schedule, shape, r.durations, 3);
  t.header.num_layers = 8;
  const std::vector<double> busy = busy_fractions(r.simulation.stats);
  std::vector<TraceEvent> spans;
  for (const TraceEvent& e : t.events)
    if (is_op_kind(e.kind)) {
      const double layer_ns = (e.kind == EventKind::forward ? 1e6 : 2e6) * kReferenceSpeed / law(busy[size_t(e.stage)]);
      for (int i = 0; i < 4; ++i) {
        TraceEvent l = e;
        l.kind = EventKind::layer;
        l.start_ns = e.start_ns + std::llround(i * layer_ns);
        l.end_ns = e.start_ns + std::llround((i + 1) * layer_ns);
        spans.push_back(l);
      }
    }
  t.events.insert(t.events.end(), spans.begin(), spans.end());
  return t;
}

TEST(SpeedModel, FitsTheLineThroughTheStagesAndScalesTheirOps) {
  const SpeedModel m = fit_speed_model({1960, 1915}, {0.767, 0.903});
  ASSERT_TRUE(m.fitted);
  EXPECT_NEAR(m.speed_per_busy, -45 / 0.136, 1e-6);
  EXPECT_NEAR(m.speed_at(0.767), 1960, 1e-6);
  EXPECT_NEAR(m.reference_speed, 1937.5, 1e-9);
  // Loads too close together: no line, and durations stay as they are.
  EXPECT_FALSE(fit_speed_model({1960, 1915}, {0.80, 0.81}).fitted);
  EXPECT_TRUE(fit_speed_model({}, {}).stage_speed.empty());
  const PipelineShape p2{.stages = 2, .chunks = 1, .microbatches = 4};
  const OpDurations d = OpDurations::uniform(p2, 1'000'000, 2'000'000);
  const OpDurations ref = at_reference_speed(m, d);
  EXPECT_EQ(ref.forward_ns[0][0], std::llround(1e6 * 1960 / 1937.5));  // the faster stage took less at its speed
  EXPECT_EQ(ref.backward_ns[1][0], std::llround(2e6 * 1915 / 1937.5));
  const OpDurations busy = at_busy_speed(m, ref, {0.767, 0.903});
  EXPECT_NEAR(double(busy.forward_ns[0][0]), 1e6, 1);  // back at the speeds they ran at
  EXPECT_NEAR(double(busy.backward_ns[1][0]), 2e6, 1);
}

TEST(SpeedModel, WhatIfRunsEachStageAtItsPredictedLoadsSpeed) {
  const PipelineShape p2{.stages = 2, .chunks = 1, .microbatches = 8};
  const PipelineShape v2{.stages = 2, .chunks = 2, .microbatches = 8};
  // 8 layers of 1 ms forward and 2 ms backward at the reference speed; the LM head on the last
  // stage makes it the busier one, at the lower speed.
  OpDurations one = OpDurations::uniform(p2, 4'000'000, 8'000'000, 50'000);
  one.forward_ns[1][0] += 2'000'000, one.backward_ns[1][0] += 4'000'000;
  const Trace recorded = recorded_with_layer_spans(Schedule::one_f_one_b, p2, one);

  ReplayOptions o;
  o.what_ifs = {"schedule=zb-v"};
  const ReplayReport r = replay_trace(recorded, o);
  ASSERT_TRUE(r.speed.fitted);
  // The law's shape (its units are the spans'), from two stages' layer spans.
  EXPECT_NEAR(r.speed.speed_per_busy / r.speed.speed_at_idle, kPerBusySpeed / kIdleSpeed, 1e-3);

  // The truth: ZB-V's chunks (2 layers each; the head on virtual stage 3, stage 0) loaded by
  // the same law. ZB-V keeps stage 0 busier than 1F1B kept either stage.
  OpDurations v = OpDurations::uniform(v2, 2'000'000, 4'000'000, 50'000);
  v.forward_ns[0][1] += 2'000'000, v.backward_ns[0][1] += 4'000'000;
  const LoadedRun truth = loaded_run(Schedule::zb_v, v2, v);
  const double predicted = double(r.what_ifs.at(0).simulation.stats.step_ns);
  const double actual = double(truth.simulation.stats.step_ns);
  EXPECT_NEAR(predicted / actual, 1.0, 0.005) << predicted << " vs " << actual;
  EXPECT_NEAR(r.what_ifs.at(0).simulation.stats.bubble_fraction, truth.simulation.stats.bubble_fraction, 0.005);

  // The same trace without its layer spans: ZB-V predicted at the recorded speeds, too fast.
  Trace blind_trace = recorded;
  std::erase_if(blind_trace.events, [](const TraceEvent& e) { return e.kind == EventKind::layer; });
  const double blind = double(replay_trace(blind_trace, o).what_ifs.at(0).simulation.stats.step_ns);
  EXPECT_LT(blind / actual, 0.99) << blind << " vs " << actual;
}

}  // namespace
}  // namespace troupe::schedules
