// `troupe replay`'s analysis: what-if strings, measured and rescaled op times, and the
// report on traces whose answer is known (simulated ones).
#include <gtest/gtest.h>

#include <numeric>

#include "base/check.hpp"
#include "schedules/op_cost_model.hpp"
#include "schedules/replay.hpp"
#include "tests/schedules/recorded_trace.hpp"

namespace troupe::schedules {
namespace {

TraceHeader header_1f1b(int P, int M, int layers = 0) {
  TraceHeader h;
  h.schedule = Schedule::one_f_one_b;
  h.shape = {.stages = P, .chunks = 1, .microbatches = M};
  h.num_layers = layers;
  return h;
}

std::string what_if_error(const std::string& spec, const TraceHeader& h) {
  try {
    parse_what_if(spec, h);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(WhatIf, Parses) {
  const TraceHeader h = header_1f1b(4, 8, 24);
  WhatIf w = parse_what_if("schedule=interleaved,v=2", h);
  EXPECT_EQ(w.schedule, Schedule::interleaved_1f1b);
  EXPECT_EQ(w.shape.stages, 4);
  EXPECT_EQ(w.shape.chunks, 2);
  EXPECT_EQ(w.shape.microbatches, 8);
  w = parse_what_if(" v = 3 , M=12 ", h);  // v > 1 alone selects interleaving; keys are case-insensitive
  EXPECT_EQ(w.schedule, Schedule::interleaved_1f1b);
  EXPECT_EQ(w.shape.chunks, 3);
  EXPECT_EQ(w.shape.microbatches, 12);
  w = parse_what_if("p=2,m=16", h);
  EXPECT_EQ(w.schedule, Schedule::one_f_one_b);
  EXPECT_EQ(w.shape.stages, 2);
  w = parse_what_if("schedule=gpipe", h);
  EXPECT_EQ(w.schedule, Schedule::gpipe);
  TraceHeader inter = h;
  inter.schedule = Schedule::interleaved_1f1b;
  inter.shape.chunks = 2;
  w = parse_what_if("schedule=1f1b", inter);  // leaving interleaving drops to one chunk
  EXPECT_EQ(w.shape.chunks, 1);
  w = parse_what_if("g=8", inter);
  EXPECT_EQ(w.shape.group_size, 8);
}

TEST(WhatIf, BadStringsSayWhatIsWrong) {
  const TraceHeader h = header_1f1b(4, 8, 24);
  EXPECT_NE(what_if_error("", h).find("empty"), std::string::npos);
  EXPECT_NE(what_if_error("schedule=zigzag", h).find("unknown schedule 'zigzag'"), std::string::npos);
  EXPECT_NE(what_if_error("w=2", h).find("unknown key 'w'"), std::string::npos);
  EXPECT_NE(what_if_error("v2", h).find("not key=value"), std::string::npos);
  EXPECT_NE(what_if_error("v=two", h).find("not a whole number"), std::string::npos);
  EXPECT_NE(what_if_error("v=2x", h).find("not a whole number"), std::string::npos);
  EXPECT_NE(what_if_error("p=0", h).find("p must be >= 1"), std::string::npos);
  EXPECT_NE(what_if_error("v=2,,m=8", h).find("empty item"), std::string::npos);
  EXPECT_NE(what_if_error("v=2,v=3", h).find("given twice"), std::string::npos);
  EXPECT_NE(what_if_error("schedule=interleaved", h).find("needs v="), std::string::npos);
  EXPECT_NE(what_if_error("schedule=1f1b,v=2", h).find("--num-layers-per-virtual-pipeline-stage"), std::string::npos);
  EXPECT_NE(what_if_error("v=2,m=6", h).find("impossible pipeline"), std::string::npos);  // M % P
  EXPECT_NE(what_if_error("v=5,m=8", h).find("do not split"), std::string::npos);         // 24 layers, 20 chunks
}

TEST(PredictDurations, SameChunksAsMeasuredOtherChunksByTheCostModel) {
  TraceHeader h = header_1f1b(2, 4, /*layers=*/4);
  OpDurations d = OpDurations::uniform(h.shape, 0, 0, 9);
  d.forward_ns = {{100}, {300}};  // 2 layers each; the last stage also runs the LM head (+200)
  d.backward_ns = {{200}, {600}};
  // Same shape (another M): as measured.
  const OpDurations same =
      predict_durations(d, h, Schedule::one_f_one_b, {.stages = 2, .chunks = 1, .microbatches = 8});
  EXPECT_EQ(same.forward_ns, d.forward_ns);
  EXPECT_EQ(same.p2p_ns, 9);
  // V = 2 on 2 stages: a layer each; the head stays on virtual stage 3 (stage 1, chunk 1) whole.
  const OpDurations v2 =
      predict_durations(d, h, Schedule::interleaved_1f1b, {.stages = 2, .chunks = 2, .microbatches = 4});
  EXPECT_EQ(v2.forward_ns, (std::vector<std::vector<int64_t>>{{50, 50}, {50, 250}}));
  EXPECT_EQ(v2.backward_ns, (std::vector<std::vector<int64_t>>{{100, 100}, {100, 500}}));
  EXPECT_EQ(v2.activation_p2p_ns, (std::vector<int64_t>{9, 9, 9}));  // three transfers per microbatch, not one
  // One stage holds the whole model: the time is conserved.
  const OpDurations p1 = predict_durations(d, h, Schedule::one_f_one_b, {.stages = 1, .chunks = 1, .microbatches = 4});
  EXPECT_EQ(p1.forward_ns[0][0], 400);
  EXPECT_EQ(p1.backward_ns[0][0], 800);
  // ZB-V on 2 stages: stage 0 holds virtual stages 0 and 3 (embedding and LM head), stage 1 holds 1 and 2, whose
  // hop is no transfer; the way back up (2 -> 3) takes the link from stage 1 to 0, the 1F1B gradients' (9).
  const OpDurations zv = predict_durations(d, h, Schedule::zb_v, {.stages = 2, .chunks = 2, .microbatches = 4});
  EXPECT_EQ(zv.forward_ns, (std::vector<std::vector<int64_t>>{{50, 250}, {50, 50}}));
  EXPECT_EQ(zv.backward_ns, (std::vector<std::vector<int64_t>>{{100, 500}, {100, 100}}));
  EXPECT_EQ(zv.activation_p2p_ns, (std::vector<int64_t>{9, 0, 9}));
  EXPECT_EQ(zv.gradient_p2p_ns, (std::vector<int64_t>{9, 0, 9}));
}

TEST(MeasuredDurations, RecoverTheSimulatorsInput) {
  const PipelineShape shape{.stages = 3, .chunks = 2, .microbatches = 6};
  OpDurations d = OpDurations::uniform(shape, 0, 0);
  for (int s = 0; s < 3; ++s)
    for (int c = 0; c < 2; ++c)
      d.forward_ns[size_t(s)][size_t(c)] = 100 + 10 * s + c, d.backward_ns[size_t(s)][size_t(c)] = 300 + s;
  const Trace t = recorded_trace(Schedule::interleaved_1f1b, shape, d, 3, 3);
  const OpDurations m = measured_durations(t, {1, 2});
  EXPECT_EQ(m.forward_ns, d.forward_ns);
  EXPECT_EQ(m.backward_ns, d.backward_ns);
  EXPECT_EQ(m.p2p_ns, 0);                                          // no send events
  EXPECT_NE(measured_durations(t, {0}).forward_ns, d.forward_ns);  // the slow first iteration
  EXPECT_THROW(measured_durations(t, {7}), Error);
}

// A trace of fused backwards that timed their weight-gradient part (weight_ns, as `troupe train
// --trace` records them for each chunk's first microbatch) tells a what-if to a split backward what
// W takes, instead of half: the timed backwards' share of their time, of the mean backward.
TEST(MeasuredDurations, FusedBackwardsThatTimedTheirWeightGradientGiveW) {
  const PipelineShape shape{.stages = 4, .chunks = 1, .microbatches = 8};
  const OpDurations d = OpDurations::uniform(shape, 1000, 2000);
  constexpr int64_t kW = 600;  // 30% of the backward, not half of it
  Trace t = recorded_trace(Schedule::one_f_one_b, shape, d, 3);
  for (TraceEvent& e : t.events)
    if (e.kind == EventKind::backward && e.microbatch == 0) {
      // The timed backward ran 10% slower (its events cost time); its share is what counts.
      e.end_ns += (e.end_ns - e.start_ns) / 10;
      e.weight_ns = kW + kW / 10;
    }
  OpDurations m = measured_durations(t, {1, 2});
  for (std::vector<int64_t>& b : m.backward_ns)  // the slower timed ones move the mean: 2000 + 200 / 8
    for (int64_t& ns : b) {
      EXPECT_EQ(ns, 2025);
      ns = 2000;
    }
  for (std::vector<int64_t>& w : m.weight_ns)
    for (int64_t& ns : w) {
      EXPECT_EQ(ns, 608);  // 30% of 2025
      ns = kW;
    }
  OpDurations truth = d;
  truth.weight_ns.assign(4, std::vector<int64_t>{kW});
  const int64_t want = simulate(Schedule::zb_h1, shape, truth).stats.step_ns;
  EXPECT_EQ(simulate(Schedule::zb_h1, shape, predict_durations(m, t.header, Schedule::zb_h1, shape)).stats.step_ns,
            want);
  EXPECT_NE(simulate(Schedule::zb_h1, shape, d).stats.step_ns, want) << "half the backward as W would be just as good";
  // Another P goes through the cost model, which keeps W's share.
  const OpCostModel fit = fit_op_cost_model(t.header, m);
  EXPECT_TRUE(fit.has_weight);
  EXPECT_NEAR(fit.weight.layer_ns / fit.backward.layer_ns, 0.3, 1e-9);

  // A stage none of whose backwards timed it (FP8 or MoE chunks do not): not measured, W as half.
  for (TraceEvent& e : t.events)
    if (e.kind == EventKind::backward && e.stage == 2) e.weight_ns = 0;
  EXPECT_TRUE(measured_durations(t, {1, 2}).weight_ns.empty());
}

TEST(Replay, EqualTimesMatchTheoryAndPredictInterleaving) {
  const PipelineShape shape{.stages = 4, .chunks = 1, .microbatches = 8};
  const Trace t = recorded_trace(Schedule::one_f_one_b, shape, OpDurations::uniform(shape, 1000, 2000), 4, 3);
  ReplayOptions opt;
  opt.what_ifs = {"schedule=interleaved,v=2", "m=16", "schedule=gpipe"};
  const ReplayReport r = replay_trace(t, opt);
  EXPECT_EQ(r.iterations, (std::vector<int64_t>{1, 2, 3}));  // the first is left out
  EXPECT_EQ(r.stats.step_ns, (8 + 3) * 3000);
  EXPECT_NEAR(r.stats.bubble_fraction, 3.0 / 11, 1e-12);
  EXPECT_NEAR(r.theory_bubble, 3.0 / 11, 1e-12);
  for (const StageStats& s : r.stats.stages) {
    EXPECT_EQ(s.busy_ns, 8 * 3000);
    EXPECT_EQ(s.idle_ns, 3 * 3000);
  }
  EXPECT_EQ(r.stats.stages[0].peak_in_flight, 4);
  EXPECT_EQ(r.stats.stages[3].peak_in_flight, 1);
  EXPECT_EQ(r.path_iteration, 3);
  EXPECT_EQ(r.replayed.stats.step_ns, r.stats.step_ns);  // the simulator reproduces the recording
  ASSERT_EQ(r.what_ifs.size(), 3u);
  // Interleaving with V = 2: chunks of half the layers, bubble (P-1)/(V*M+P-1) = 3/19.
  EXPECT_NEAR(r.what_ifs[0].simulation.stats.bubble_fraction, 3.0 / 19, 1e-12);
  EXPECT_EQ(r.what_ifs[0].simulation.stats.step_ns, int64_t((8 + 3.0 / 2) * 3000));
  EXPECT_NEAR(r.what_ifs[1].simulation.stats.bubble_fraction, 3.0 / 19, 1e-12);
  EXPECT_EQ(r.what_ifs[2].simulation.stats.step_ns, r.stats.step_ns);  // same bubble as 1F1B
  EXPECT_EQ(r.what_ifs[2].simulation.stats.stages[0].peak_in_flight, 8);

  const std::string text = format_replay_report(r);
  for (const char* want :
       {"1f1b P=4 V=1 M=8", "analysing 3 iterations (1..3)", "27.3% measured, 27.3% theory", "(P-1)/(M+P-1) = 3/11",
        "critical path (iteration 3)", "s0:F0.c0 -> s1:F0.c0",
        "what-if interleaved P=4 V=2 M=8 G=4 [schedule=interleaved,v=2]", "bubble 15.8% (theory 15.8%)"})
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  // No what-if splits the backward: the report says nothing about how W would be taken.
  EXPECT_EQ(text.find("W of a split backward"), std::string::npos) << text;

  opt.iteration = 0;
  opt.what_ifs.clear();
  EXPECT_EQ(replay_trace(t, opt).iterations, (std::vector<int64_t>{0}));
  opt.iteration = 9;
  EXPECT_THROW(replay_trace(t, opt), Error);
}

// One iteration stalled: the mean step moves, the median the report prints beside it does not,
// and the stalled iteration stays out of the bubble and the op times (unless the threshold is 0).
TEST(Replay, MedianStepLeavesOutAStalledIteration) {
  const PipelineShape shape{.stages = 2, .chunks = 1, .microbatches = 4};
  Trace t = recorded_trace(Schedule::one_f_one_b, shape, OpDurations::uniform(shape, 1000, 2000), 6);
  const Trace clean = t;
  // Iteration 3 stalls half-way for 10 us: every event from then on starts and ends that much later.
  int64_t lo = INT64_MAX, hi = 0;
  for (const TraceEvent& e : t.events)
    if (e.iteration == 3) lo = std::min(lo, e.start_ns), hi = std::max(hi, e.end_ns);
  for (TraceEvent& e : t.events)
    if (e.start_ns >= (lo + hi) / 2) e.start_ns += 10'000, e.end_ns += 10'000;
  const ReplayReport r = replay_trace(t, {}), c = replay_trace(clean, {});
  EXPECT_EQ(median_step_ns(r), median_step_ns(c));
  const std::string text = format_replay_report(r);
  EXPECT_NE(text.find("(median "), std::string::npos);
  EXPECT_NE(text.find("stalled: 1 of 5 iterations"), std::string::npos) << text;
  EXPECT_EQ(r.stalled, (std::vector<int64_t>{3}));
  EXPECT_TRUE(c.stalled.empty());
  EXPECT_EQ(r.stats.step_ns, c.stats.step_ns);
  EXPECT_DOUBLE_EQ(r.stats.bubble_fraction, c.stats.bubble_fraction);
  EXPECT_EQ(r.durations.forward_ns, c.durations.forward_ns);
  EXPECT_EQ(r.durations.backward_ns, c.durations.backward_ns);

  ReplayOptions keep;
  keep.stall_threshold = 0;
  const ReplayReport k = replay_trace(t, keep);
  EXPECT_TRUE(k.stalled.empty());
  EXPECT_GT(k.stats.step_ns, c.stats.step_ns);
  EXPECT_GT(k.stats.bubble_fraction, c.stats.bubble_fraction);
}

TEST(Replay, StalledIterationsAreThoseOverTheMedianByTheThreshold) {
  const std::vector<int64_t> its = {1, 2, 3, 4, 5};
  EXPECT_EQ(stalled_iterations(its, {100, 100, 104, 100, 103}, 0.03), (std::vector<int64_t>{3}));
  EXPECT_TRUE(stalled_iterations(its, {100, 100, 104, 100, 103}, 0).empty());
  EXPECT_TRUE(stalled_iterations({}, {}, 0.03).empty());
  EXPECT_THROW(stalled_iterations(its, {100}, 0.03), Error);
}

TEST(Replay, TraceWithoutPipelineOps) {
  Trace t;
  t.header = header_1f1b(2, 2);
  t.events.push_back({.actor = "optimizer", .kind = EventKind::optimizer, .start_ns = 0, .end_ns = 5});
  EXPECT_THROW(replay_trace(t, {}), Error);
}

}  // namespace
}  // namespace troupe::schedules
