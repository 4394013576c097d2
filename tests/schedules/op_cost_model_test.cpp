// The per-op cost model behind `troupe replay --what-if` (schedules/op_cost_model.hpp) and the
// transfer latencies it is fitted with (schedules/transfer_latency.hpp), on traces whose truth
// is known: simulated runs of a model whose first chunk carries an embedding, whose last chunk
// carries the LM head and loss, and whose transfers take time. A what-if from one schedule's
// trace must predict the other schedule's run; the old model (time spread evenly over the
// recorded chunks, transfers free) does not, which the last test shows.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "base/check.hpp"
#include "schedules/op_cost_model.hpp"
#include "schedules/replay.hpp"
#include "schedules/transfer_latency.hpp"
#include "tests/schedules/recorded_trace.hpp"

namespace troupe::schedules {
namespace {

constexpr int kLayers = 8;

// The truth: a layer 1 ms forward, 2 ms backward; the embedding 0.2 / 0.4 ms; the LM head and
// loss 3 / 6 ms; 0.4 ms per transfer.
OpCostModel truth(int stages) {
  OpCostModel m;
  m.forward = {.layer_ns = 1e6, .first_ns = 0.2e6, .last_ns = 3e6};
  m.backward = {.layer_ns = 2e6, .first_ns = 0.4e6, .last_ns = 6e6};
  m.model_layers = kLayers;
  m.stages = stages;
  m.activation_link_ns.assign(size_t(stages), 400'000);
  m.gradient_link_ns.assign(size_t(stages), 400'000);
  m.activation_ns = m.gradient_ns = 400'000;
  return m;
}

// A recorded run: `iterations` simulated iterations back to back, the first slower.
Trace recorded(Schedule sch, const PipelineShape& shape, int iterations = 3) {
  Trace out = recorded_trace(sch, shape, model_durations(truth(shape.stages), shape), iterations, 2, 5'000'000);
  out.header.num_layers = kLayers;
  return out;
}

TEST(OpCostModel, FitRecoversLayerEmbeddingAndHead) {
  const PipelineShape p4{.stages = 4, .chunks = 1, .microbatches = 8};
  TraceHeader h;
  h.shape = p4;
  h.num_layers = kLayers;
  const OpCostModel m = fit_op_cost_model(h, model_durations(truth(4), p4));
  EXPECT_EQ(m.fit, "middle chunks");
  EXPECT_NEAR(m.forward.layer_ns, 1e6, 1);
  EXPECT_NEAR(m.forward.first_ns, 0.2e6, 1);
  EXPECT_NEAR(m.forward.last_ns, 3e6, 1);
  EXPECT_NEAR(m.backward.layer_ns, 2e6, 1);
  EXPECT_NEAR(m.backward.last_ns, 6e6, 1);
  EXPECT_EQ(m.activation_ns, 400'000);
  // Two chunks: one equation short, the embedding is taken as free.
  const PipelineShape p2{.stages = 2, .chunks = 1, .microbatches = 4};
  h.shape = p2;
  OpCostModel no_embedding = truth(2);
  no_embedding.forward.first_ns = no_embedding.backward.first_ns = 0;
  const OpCostModel m2 = fit_op_cost_model(h, model_durations(no_embedding, p2));
  EXPECT_EQ(m2.fit, "embedding taken as free");
  EXPECT_NEAR(m2.forward.layer_ns, 1e6, 1);
  EXPECT_NEAR(m2.forward.last_ns, 3e6, 1);
  // Uneven layer counts from the header: the layer cost from the middle chunks' layers.
  h.shape = p4;
  h.chunk_layers = {1, 3, 3, 1};
  const OpCostModel m3 = fit_op_cost_model(h, model_durations(truth(4), p4, h.chunk_layers));
  EXPECT_NEAR(m3.forward.layer_ns, 1e6, 1);
  EXPECT_NEAR(m3.forward.last_ns, 3e6, 1);
}

TEST(OpCostModel, InterleavingPutsTheHeadOnTheLastChunkAndPaysEveryTransfer) {
  const PipelineShape v2{.stages = 4, .chunks = 2, .microbatches = 8};
  const OpDurations d = model_durations(truth(4), v2);
  // Virtual stage 7 = stage 3 chunk 1 holds 1 layer and the head; stage 2's chunk 1 only its layer.
  EXPECT_EQ(d.forward_ns[3][1], 4'000'000);
  EXPECT_EQ(d.forward_ns[2][1], 1'000'000);
  EXPECT_EQ(d.forward_ns[0][0], 1'200'000);
  EXPECT_EQ(d.activation_p2p_ns.size(), 7u);  // every edge between the 8 virtual stages
  for (int64_t ns : d.gradient_p2p_ns) EXPECT_EQ(ns, 400'000);
}

TEST(TransferLatency, ReadFromTheGapsOfASimulatedRun) {
  const PipelineShape shape{.stages = 4, .chunks = 2, .microbatches = 8};
  const Trace t = recorded(Schedule::interleaved_1f1b, shape);
  const TransferLatencies l = measured_transfer_latencies(t, {1, 2});
  ASSERT_EQ(l.activation_ns.size(), 7u);
  for (int64_t ns : l.activation_ns) EXPECT_EQ(ns, 400'000);
  for (int64_t ns : l.gradient_ns) EXPECT_EQ(ns, 400'000);
  EXPECT_EQ(l.smallest_gap_ns, 400'000);
  EXPECT_GT(l.samples, 0);
  // recv events, where a trace has them, are taken as they are.
  Trace with_recv = t;
  for (const TraceEvent& e : t.events)
    if (e.kind == EventKind::forward && e.chunk * 4 + e.stage > 0 && e.iteration == 1) {
      TraceEvent r = e;
      r.kind = EventKind::recv;
      r.end_ns = e.start_ns - 100'000;
      r.start_ns = r.end_ns - 250'000;
      with_recv.events.push_back(r);
    }
  const TransferLatencies lr = measured_transfer_latencies(with_recv, {1});
  for (int64_t ns : lr.activation_ns) EXPECT_EQ(ns, 250'000);
  for (int64_t ns : lr.gradient_ns) EXPECT_EQ(ns, 400'000);
  // A receive posted long before its producer ended (as every one is across processes) counts
  // only from that end: each receive here ends 300 us after its producer's forward, 5 ms after it
  // was posted.
  const auto virtual_stage = [](const TraceEvent& e) { return e.chunk * 4 + e.stage; };
  Trace posted_early = t;
  for (const TraceEvent& e : t.events) {
    if (e.kind != EventKind::forward || virtual_stage(e) == 0 || e.iteration != 1) continue;
    for (const TraceEvent& p : t.events)
      if (p.kind == EventKind::forward && p.iteration == 1 && p.microbatch == e.microbatch &&
          virtual_stage(p) == virtual_stage(e) - 1) {
        TraceEvent r = e;
        r.kind = EventKind::recv;
        r.end_ns = p.end_ns + 300'000;
        r.start_ns = r.end_ns - 5'000'000;
        posted_early.events.push_back(r);
      }
  }
  for (int64_t ns : measured_transfer_latencies(posted_early, {1}).activation_ns) EXPECT_EQ(ns, 300'000);
}

// Layer spans' around-time for every (stage, chunk) of `shape`: `op` per op, plus the extras the
// truth puts on the first and last virtual stages.
LayerTime around_layers(const OpCostModel& truth_model, const PipelineShape& shape, Placement where, double op_fwd,
                        double op_bwd) {
  LayerTime t;
  const int K = shape.stages * shape.chunks;
  for (const auto& [kind, op, c] : {std::tuple{EventKind::forward, op_fwd, truth_model.forward},
                                    std::tuple{EventKind::backward, op_bwd, truth_model.backward}}) {
    LayerTimeOfKind k;
    k.kind = kind;
    for (int v = 0; v < K; ++v) {
      const StageChunk sc = stage_chunk(where, shape, v);
      const double extra = (v == 0 ? c.first_ns : 0) + (v == K - 1 ? c.last_ns : 0);
      k.around[{sc.stage, sc.chunk}] = {1, std::llround(op + extra)};
    }
    t.kinds.push_back(k);
  }
  return t;
}

// Each op pays a fixed 50 us forward and 80 us backward however many layers it holds. A 1F1B trace
// on two stages, whose layer spans show that cost, predicts interleaving (twice the ops) exactly;
// without the spans the cost hides in the layers and the prediction is short by it on every
// extra op.
TEST(OpCostModel, EachOpsOverheadFromTheLayerSpansCarriesToMoreChunks) {
  const PipelineShape p2{.stages = 2, .chunks = 1, .microbatches = 4};
  const PipelineShape v2{.stages = 2, .chunks = 2, .microbatches = 4};
  OpCostModel t = truth(2);
  t.forward.first_ns = t.backward.first_ns = 0;  // two chunks: the embedding is taken as free
  t.overhead = {.forward_ns = 50'000, .backward_ns = 80'000, .weight_ns = 80'000};
  TraceHeader h;
  h.shape = p2;
  h.num_layers = kLayers;
  const OpDurations recorded_1f1b = model_durations(t, p2);
  EXPECT_EQ(recorded_1f1b.forward_ns[0][0], 4 * 1'000'000 + 50'000);

  const LayerTime spans = around_layers(t, p2, Placement::loop, 50'000, 80'000);
  const OpOverhead o = op_overhead(h, spans);
  EXPECT_TRUE(o.measured());
  EXPECT_NEAR(o.forward_ns, 50'000, 1);
  EXPECT_NEAR(o.backward_ns, 80'000, 1);
  EXPECT_NEAR(o.weight_ns, 80'000, 1);  // fused backwards: the W op taken as one of them
  const OpCostModel m = fit_op_cost_model(h, recorded_1f1b, spans);
  EXPECT_NEAR(m.forward.layer_ns, 1e6, 1);
  EXPECT_NEAR(m.backward.layer_ns, 2e6, 1);
  EXPECT_NEAR(m.forward.last_ns, 3e6, 1);

  const OpDurations truth_v2 = model_durations(t, v2);
  const OpDurations predicted = model_durations(m, v2);
  const OpDurations no_spans = model_durations(fit_op_cost_model(h, recorded_1f1b), v2);
  for (int s = 0; s < 2; ++s)
    for (int c = 0; c < 2; ++c) {
      EXPECT_EQ(predicted.forward_ns[s][c], truth_v2.forward_ns[s][c]) << s << " " << c;
      EXPECT_EQ(predicted.backward_ns[s][c], truth_v2.backward_ns[s][c]) << s << " " << c;
    }
  const auto total = [](const OpDurations& d) {
    int64_t sum = 0;
    for (const auto& stage : d.forward_ns)
      for (int64_t ns : stage) sum += ns;
    return sum;
  };
  // Four forward ops where the trace had two: the spans-less model misses two overheads.
  EXPECT_EQ(total(truth_v2) - total(no_spans), 2 * 50'000);

  // One virtual stage: the extras cannot be told apart, no overhead is read.
  TraceHeader one = h;
  one.shape = {.stages = 1, .chunks = 1, .microbatches = 4};
  EXPECT_FALSE(op_overhead(one, around_layers(t, one.shape, Placement::loop, 50'000, 80'000)).measured());
  // Four virtual stages: the middle ones give it, the first and last keep their extras apart.
  TraceHeader four = h;
  four.shape = {.stages = 4, .chunks = 1, .microbatches = 8};
  OpCostModel t4 = truth(4);
  const OpOverhead o4 = op_overhead(four, around_layers(t4, four.shape, Placement::loop, 30'000, 70'000));
  EXPECT_NEAR(o4.forward_ns, 30'000, 1);
  EXPECT_NEAR(o4.backward_ns, 70'000, 1);
}

// A W op is one more op: a fused trace carried to a split schedule pays its overhead on each
// backward (and W); a split trace carried to a fused schedule drops it.
TEST(OpCostModel, AWOpAddsItsOverheadAndAFusedBackwardDropsIt) {
  const PipelineShape p2{.stages = 2, .chunks = 1, .microbatches = 4};
  OpCostModel m = truth(2);
  m.overhead = {.forward_ns = 50'000, .backward_ns = 80'000, .weight_ns = 60'000};
  OpDurations d = OpDurations::uniform(p2, 1'000'000, 2'000'000);
  const OpDurations split = with_weight_ops(m, d, true);
  EXPECT_EQ(split.backward_ns[1][0], 2'060'000);
  EXPECT_EQ(split.weight_grad(1, 0), 1'060'000);  // half the fused backward, and its op's overhead
  EXPECT_EQ(split.input_grad(1, 0), 1'000'000);
  EXPECT_EQ(with_weight_ops(m, d, false).backward_ns, d.backward_ns);  // fused to fused: as measured
  m.recorded_split = true;
  EXPECT_EQ(with_weight_ops(m, d, false).backward_ns[0][0], 1'940'000);
  EXPECT_EQ(with_weight_ops(m, d, true).backward_ns, d.backward_ns);
  // The model for another shape: each W op carries it too.
  m.recorded_split = false;
  m.has_weight = true;
  m.weight = {.layer_ns = 1e6};
  const OpDurations v = model_durations(m, {.stages = 2, .chunks = 2, .microbatches = 4}, {}, Placement::v, true);
  EXPECT_EQ(v.weight_ns[0][0], 2'000'000 + 60'000);             // two layers of W and the W op
  EXPECT_EQ(v.backward_ns[1][1], 4'000'000 + 80'000 + 60'000);  // stage 1 chunk 1 (virtual 2): no extra
}

double what_if_bubble(const Trace& t, const std::string& spec) {
  ReplayOptions o;
  o.what_ifs = {spec};
  return replay_trace(t, o).what_ifs.at(0).simulation.stats.bubble_fraction;
}

// The old model: each recorded chunk's time spread evenly over its layers, transfers free.
OpDurations spread_evenly(const OpDurations& measured, const PipelineShape& from, const PipelineShape& to) {
  const int K = from.stages * from.chunks, K2 = to.stages * to.chunks;
  OpDurations out = OpDurations::uniform(to, 0, 0);
  for (int j = 0; j < K2; ++j) {
    double f = 0, b = 0;
    for (int k = 0; k < K; ++k) {
      const int64_t overlap = std::min((k + 1) * K2, (j + 1) * K) - std::max(k * K2, j * K);
      if (overlap <= 0) continue;
      f += double(measured.forward_ns[size_t(k % from.stages)][size_t(k / from.stages)]) * double(overlap) / K2;
      b += double(measured.backward_ns[size_t(k % from.stages)][size_t(k / from.stages)]) * double(overlap) / K2;
    }
    out.forward_ns[size_t(j % to.stages)][size_t(j / to.stages)] = std::llround(f);
    out.backward_ns[size_t(j % to.stages)][size_t(j / to.stages)] = std::llround(b);
  }
  return out;
}

TEST(OpCostModel, WhatIfPredictsTheOtherScheduleWhereEvenSpreadingDoesNot) {
  const PipelineShape p4{.stages = 4, .chunks = 1, .microbatches = 8};
  const PipelineShape v2{.stages = 4, .chunks = 2, .microbatches = 8};
  const Trace one_f_one_b = recorded(Schedule::one_f_one_b, p4), interleaved = recorded(Schedule::interleaved_1f1b, v2);
  const double bubble_1f1b = pipeline_stats(trace_iteration(one_f_one_b, 1)).bubble_fraction;
  const double bubble_v2 = pipeline_stats(trace_iteration(interleaved, 1)).bubble_fraction;
  // Each way, the prediction is the other run's bubble (the same model made both runs).
  EXPECT_NEAR(what_if_bubble(one_f_one_b, "schedule=interleaved,v=2"), bubble_v2, 1e-3);
  EXPECT_NEAR(what_if_bubble(interleaved, "schedule=1f1b"), bubble_1f1b, 1e-3);
  // The old model: the head spread over the last two new chunks, no transfer cost; off by more
  // than the 2 points the replay is held to.
  const Simulation old =
      simulate(Schedule::interleaved_1f1b, v2, spread_evenly(measured_durations(one_f_one_b, {1, 2}), p4, v2));
  EXPECT_GT(std::abs(old.stats.bubble_fraction - bubble_v2), 0.02) << old.stats.bubble_fraction << " vs " << bubble_v2;
}

}  // namespace
}  // namespace troupe::schedules
