// ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", 2023, section 6): the V placement, the
// canonical order against orders worked out by hand from the paper's construction, its
// properties for many (P, M), the stage policy reproducing it in the simulator, the simulated
// bubble against the closed form, and `troupe replay --what-if schedule=zb-v`.
#include <gtest/gtest.h>

#include <msgpack.hpp>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "base/check.hpp"
#include "schedules/replay.hpp"
#include "schedules/schedule.hpp"
#include "schedules/simulator.hpp"
#include "schedules/trace.hpp"
#include "tests/schedules/recorded_trace.hpp"

namespace troupe::schedules {
namespace {

// "F0 F0' B0' W0' ...": chunk 1 primed.
std::string short_str(const std::vector<Op>& ops) {
  std::string s;
  for (const Op& op : ops) {
    const std::string full = op_str(op);
    s += str_cat(s.empty() ? "" : " ", full.substr(0, full.find('.')), op.chunk == 1 ? "'" : "");
  }
  return s;
}

PipelineShape v_shape(int P, int M) { return {.stages = P, .chunks = 2, .microbatches = M}; }

std::string zbv(int P, int M, int s) { return short_str(canonical_order(Schedule::zb_v, v_shape(P, M), s)); }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ZbVPlacement, StageSHoldsVirtualStagesSAnd2PMinus1MinusS) {
  const PipelineShape shape = v_shape(4, 8);
  EXPECT_EQ(placement(Schedule::zb_v), Placement::v);
  EXPECT_EQ(placement(Schedule::interleaved_1f1b), Placement::loop);
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(virtual_stage(Schedule::zb_v, shape, s, 0), s);
    EXPECT_EQ(virtual_stage(Schedule::zb_v, shape, s, 1), 7 - s);
    EXPECT_EQ(virtual_stage(Schedule::interleaved_1f1b, shape, s, 1), 4 + s);
  }
  for (int k = 0; k < 8; ++k) {
    const StageChunk sc = stage_chunk(Placement::v, shape, k);
    EXPECT_EQ(virtual_stage(Placement::v, shape, sc.stage, sc.chunk), k);
    const StageChunk loop = stage_chunk(Placement::loop, shape, k);
    EXPECT_EQ(virtual_stage(Placement::loop, shape, loop.stage, loop.chunk), k);
  }
  // The embedding (virtual stage 0) and the LM head (7) both on stage 0.
  EXPECT_EQ(stage_chunk(Placement::v, shape, 7).stage, 0);
  // Transfers: down the stages on links 0..2, none at the turn on stage 3, back up on links 2..0.
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(transfer_link(Placement::v, shape, k, false).link, k);
    EXPECT_TRUE(transfer_link(Placement::v, shape, k, false).up);
    EXPECT_FALSE(transfer_link(Placement::v, shape, k, true).up);
  }
  EXPECT_EQ(transfer_link(Placement::v, shape, 3, false).link, -1);
  for (int k = 4; k < 7; ++k) {
    EXPECT_EQ(transfer_link(Placement::v, shape, k, false).link, 6 - k);  // from stage 7-k to 6-k
    EXPECT_FALSE(transfer_link(Placement::v, shape, k, false).up);
    EXPECT_TRUE(transfer_link(Placement::v, shape, k, true).up);
  }
  EXPECT_EQ(transfer_link(Placement::loop, shape, 3, false).link, 3);  // interleaving's wrap: stage 3 -> 0
}

TEST(ZbVOrder, MatchesThePapersConstruction) {
  // P = 2, M = 4. Stage 0: 2(P-s)-1 = 3 forwards of chunk 0, P-s = 2 triples of chunk 1, the
  // steady state, and the cool-down's B and W of chunk 0.
  EXPECT_EQ(zbv(2, 4, 0), "F0 F1 F2 F0' B0' W0' F1' B1' W1' F3 B0 W0 F2' B2' W2' B1 W1 F3' B3' W3' B2 W2 B3 W3");
  // Stage 1 (the V's bottom): one forward, a pair (F chunk 1, F chunk 0), one triple; its cool-down
  // holds the Ws of one pair of Bs back and runs them last.
  EXPECT_EQ(zbv(2, 4, 1), "F0 F0' F1 F1' B0' W0' F2 B0 W0 F2' B1' W1' F3 B1 W1 F3' B2' W2' B2 B3' B3 W2 W3' W3");
  EXPECT_EQ(zbv(3, 5, 0),
            "F0 F1 F2 F3 F4 F0' B0' W0' F1' B1' W1' F2' B2' W2' B0 W0 F3' B3' W3' B1 W1 F4' B4' W4' B2 W2 B3 W3 B4 W4");
  EXPECT_EQ(zbv(3, 5, 1),
            "F0 F1 F2 F0' F3 F1' B0' W0' F2' B1' W1' F4 B0 W0 F3' B2' W2' B1 W1 F4' B3' W3' B2 B4' B3 W2 B4 W3 W4' W4");
  EXPECT_EQ(zbv(3, 5, 2),
            "F0 F0' F1 F1' F2 F2' B0' W0' F3 B0 W0 F3' B1' W1' F4 B1 W1 F4' B2' W2' B2 B3' B3 B4' B4 W2 W3' W4' W3 W4");
  // Fewer than 2P-1 microbatches: the order of M >= 2P-1 with the missing microbatches left out.
  EXPECT_EQ(zbv(2, 2, 0), "F0 F1 F0' B0' W0' F1' B1' W1' B0 W0 B1 W1");
  EXPECT_EQ(zbv(2, 2, 1), "F0 F0' F1 F1' B0' W0' B0 W0 B1' W1' B1 W1");
  // One stage holds the whole V.
  EXPECT_EQ(zbv(1, 2, 0), "F0 F0' B0' W0' F1 B0 W0 F1' B1' W1' B1 W1");
  const std::vector<Op> order = canonical_order(Schedule::zb_v, v_shape(1, 1), 0);
  EXPECT_EQ(order, (std::vector<Op>{{OpKind::forward, 0, 0},
                                    {OpKind::forward, 0, 1},
                                    {OpKind::backward_input, 0, 1},
                                    {OpKind::backward_weight, 0, 1},
                                    {OpKind::backward_input, 0, 0},
                                    {OpKind::backward_weight, 0, 0}}));
}

TEST(ZbVOrder, PropertiesForManyShapes) {
  for (int P : {1, 2, 3, 4, 5, 8})
    for (int M = 1; M <= 16; ++M) {
      const PipelineShape shape = v_shape(P, M);
      for (int s = 0; s < P; ++s) {
        SCOPED_TRACE(str_cat("P=", P, " M=", M, " stage ", s));
        const std::vector<Op> order = canonical_order(Schedule::zb_v, shape, s);
        ASSERT_EQ(order.size(), size_t(6 * M));
        std::vector<int> at[3][2];  // [F, B, W][chunk][microbatch]: position
        for (auto& kind : at)
          for (auto& chunk : kind) chunk.assign(size_t(M), -1);
        int to_b = 0, to_w = 0, peak_to_b = 0, peak_to_w = 0;  // chunk activations held to the B / the W
        for (int i = 0; i < int(order.size()); ++i) {
          const Op& op = order[size_t(i)];
          ASSERT_NE(op.kind, OpKind::backward);  // ZB-V never fuses
          ASSERT_TRUE(op.chunk == 0 || op.chunk == 1);
          const int kind = op.kind == OpKind::forward ? 0 : op.kind == OpKind::backward_input ? 1 : 2;
          ASSERT_EQ(at[kind][op.chunk][size_t(op.microbatch)], -1) << op_str(op) << " twice";
          at[kind][op.chunk][size_t(op.microbatch)] = i;
          if (op.kind == OpKind::forward) ++to_b, ++to_w;
          if (op.kind == OpKind::backward_input) --to_b;
          if (op.kind == OpKind::backward_weight) --to_w;
          peak_to_b = std::max(peak_to_b, to_b);
          peak_to_w = std::max(peak_to_w, to_w);
        }
        for (int c = 0; c < 2; ++c)
          for (int m = 0; m < M; ++m) {
            EXPECT_LT(at[0][c][size_t(m)], at[1][c][size_t(m)]) << "B" << m << ".c" << c << " before its F";
            EXPECT_LT(at[1][c][size_t(m)], at[2][c][size_t(m)]) << "W" << m << ".c" << c << " before its B";
            if (m > 0) {
              EXPECT_LT(at[0][c][size_t(m - 1)], at[0][c][size_t(m)]);  // forwards in microbatch order
            }
          }
        // Same activation memory as 1F1B: at most 2P half-model chunks (P stages' worth, 1F1B's
        // peak on stage 0) until the W; all of them on every stage once M >= 2P-1.
        EXPECT_LE(peak_to_w, 2 * P);
        EXPECT_EQ(peak_to_b, max_in_flight(Schedule::zb_v, shape, s));
        if (M >= 2 * P - 1) {
          EXPECT_EQ(peak_to_w, 2 * P);
          EXPECT_EQ(warmup_forwards(Schedule::zb_v, shape, s), 2 * P - 1);
        }
        // The kinds' own orders are the order's.
        std::vector<Op> forwards, inputs, weights;
        for (const Op& op : order)
          (op.kind == OpKind::forward ? forwards : op.kind == OpKind::backward_input ? inputs : weights).push_back(op);
        EXPECT_EQ(forwards, forward_order(Schedule::zb_v, shape, s));
        EXPECT_EQ(inputs, backward_order(Schedule::zb_v, shape, s));
        EXPECT_EQ(weights, weight_order(Schedule::zb_v, shape, s));
      }
    }
}

TEST(ZbVOrder, ValidateRefusesByName) {
  for (int V : {1, 3}) {
    const std::string e = error_of([V] { validate(Schedule::zb_v, {.stages = 4, .chunks = V, .microbatches = 8}); });
    EXPECT_NE(e.find(str_cat("zb-v schedule runs two model chunks per stage")), std::string::npos) << e;
    EXPECT_NE(e.find(str_cat("got ", V)), std::string::npos) << e;
  }
  EXPECT_NE(error_of([] { validate(Schedule::zb_v, v_shape(4, 0)); }), "");
  EXPECT_NE(error_of([] { canonical_order(Schedule::zb_v, v_shape(2, 4), 2); }).find("outside the pipeline"),
            std::string::npos);
  EXPECT_EQ(schedule_from_name("zb-v"), Schedule::zb_v);
  EXPECT_EQ(schedule_from_name("zb_v"), Schedule::zb_v);
  EXPECT_STREQ(schedule_name(Schedule::zb_v), "zb-v");
  EXPECT_TRUE(splits_backward(Schedule::zb_v));
}

std::vector<int64_t> idle(const Simulation& sim) {
  std::vector<int64_t> out;
  for (const StageStats& s : sim.stats.stages) out.push_back(s.idle_ns);
  return out;
}

// The stage policy's rule (schedule.hpp) reproduces canonical_order() when F, B and W take the
// same time, for every P and M here (fewer microbatches than 2P-1 included), with free transfers
// and with a latency (the turn within stage P-1 is free).
TEST(ZbVSimulation, TheRuleYieldsTheCanonicalOrder) {
  for (int P : {1, 2, 3, 4, 5, 8})
    for (int M = 1; M <= 16; ++M)
      for (int64_t latency : {0, 100, 1000, 3000}) {
        SCOPED_TRACE(str_cat("P=", P, " M=", M, " latency ", latency));
        const PipelineShape shape = v_shape(P, M);
        const Simulation sim = simulate(Schedule::zb_v, shape, OpDurations::uniform(shape, 1000, 2000, latency));
        for (int s = 0; s < P; ++s) EXPECT_EQ(short_str(sim.order[size_t(s)]), zbv(P, M, s)) << "stage " << s;
      }
}

TEST(ZbVSimulation, BubbleIsTheClosedFormAndBelowZbH1) {
  // F = B = W = 1000 per chunk; the one-chunk schedules run the same model with ops of a whole
  // stage (two chunks' layers): F = 2000, backward 4000.
  for (int P : {1, 2, 3, 4, 8})
    for (int M : {2 * P - 1, 2 * P, 3 * P + 1, 16}) {
      SCOPED_TRACE(str_cat("P=", P, " M=", M));
      const PipelineShape shape = v_shape(P, M), one_chunk{.stages = P, .chunks = 1, .microbatches = M};
      const Simulation zb = simulate(Schedule::zb_v, shape, OpDurations::uniform(shape, 1000, 2000));
      for (int64_t ns : idle(zb)) EXPECT_EQ(ns, (P - 1) * 1000);  // every stage idles (P-1) F
      EXPECT_EQ(zb.stats.step_ns, (6 * M + P - 1) * 1000);
      EXPECT_NEAR(zb.stats.bubble_fraction, theoretical_bubble(Schedule::zb_v, shape), 1e-12);
      EXPECT_NEAR(zb.stats.bubble_fraction, (P - 1.0) / (6 * M + P - 1), 1e-12);
      const OpDurations whole = OpDurations::uniform(one_chunk, 2000, 4000);
      const Simulation h1 = simulate(Schedule::zb_h1, one_chunk, whole);
      const Simulation one = simulate(Schedule::one_f_one_b, one_chunk, whole);
      if (P > 1) {
        EXPECT_LT(zb.stats.step_ns, h1.stats.step_ns);
        EXPECT_LT(h1.stats.step_ns, one.stats.step_ns);
      }
      for (int s = 0; s < P; ++s) EXPECT_LE(zb.stats.stages[size_t(s)].peak_in_flight, 2 * P);
    }
  // Fewer microbatches than 2P-1: never less idle than the closed form (often more: P=2, M=2 idles 2F).
  for (int P : {2, 4, 8})
    for (int M = 1; M < 2 * P - 1; ++M) {
      const PipelineShape shape = v_shape(P, M);
      const Simulation zb = simulate(Schedule::zb_v, shape, OpDurations::uniform(shape, 1000, 2000));
      EXPECT_GE(zb.stats.bubble_fraction + 1e-12, theoretical_bubble(Schedule::zb_v, shape)) << "P=" << P << " M=" << M;
    }
  const PipelineShape two = v_shape(2, 2);
  for (int64_t ns : idle(simulate(Schedule::zb_v, two, OpDurations::uniform(two, 1000, 2000)))) EXPECT_EQ(ns, 2000);
}

TEST(ZbVPolicy, NeverRunsAWBeforeItsBAndHoldsAtMost2PChunks) {
  // Every op ready at once (a stage never waits): every op once, the Ws after their Bs.
  for (int P : {1, 3, 4})
    for (int M : {1, 3, 8}) {
      const PipelineShape shape = v_shape(P, M);
      for (int s = 0; s < P; ++s) {
        StagePolicy policy(Schedule::zb_v, shape, s);
        std::vector<Op> seen;
        int held = 0;
        while (std::optional<Op> op = policy.next([](const Op&) { return true; })) {
          if (op->kind == OpKind::backward_weight) {
            EXPECT_NE(std::find(seen.begin(), seen.end(), Op{OpKind::backward_input, op->microbatch, op->chunk}),
                      seen.end())
                << op_str(*op);
          }
          held += op->kind == OpKind::forward ? 1 : op->kind == OpKind::backward_weight ? -1 : 0;
          EXPECT_LE(held, 2 * P);
          seen.push_back(*op);
        }
        EXPECT_EQ(seen, canonical_order(Schedule::zb_v, shape, s));
        EXPECT_TRUE(policy.done());
        policy.reset();
        EXPECT_FALSE(policy.done());
      }
    }
}

TEST(ZbVWhatIf, FromA1F1BTracePredictsTheClosedForm) {
  // 1F1B on 4 stages, F = 2000 and backward 4000 per stage: on the V's 8 chunks, F = B = W = 1000.
  const PipelineShape shape{.stages = 4, .chunks = 1, .microbatches = 8};
  const Trace t = recorded_trace(Schedule::one_f_one_b, shape, OpDurations::uniform(shape, 2000, 4000), 3);
  const WhatIf w = parse_what_if("schedule=zb-v", t.header);
  EXPECT_EQ(w.schedule, Schedule::zb_v);
  EXPECT_EQ(w.shape.chunks, 2);
  EXPECT_NE(error_of([&] { parse_what_if("schedule=zb-v,v=3", t.header); }).find("two model chunks per stage"),
            std::string::npos);
  ReplayOptions opt;
  opt.what_ifs = {"schedule=zb-v", "schedule=zb-v,m=16"};
  const ReplayReport r = replay_trace(t, opt);
  ASSERT_EQ(r.what_ifs.size(), 2u);
  EXPECT_NEAR(r.stats.bubble_fraction, 3.0 / 11, 1e-12);
  EXPECT_NEAR(r.what_ifs[0].simulation.stats.bubble_fraction, 3.0 / 51, 1e-12);
  EXPECT_EQ(r.what_ifs[0].simulation.stats.step_ns, (48 + 3) * 1000);
  EXPECT_NEAR(r.what_ifs[1].simulation.stats.bubble_fraction, 3.0 / 99, 1e-12);
  EXPECT_EQ(r.what_ifs[0].transfers, 2 * 6 * 8);  // 7 edges, one of them within stage 3
  for (int s = 0; s < 4; ++s)
    EXPECT_EQ(r.what_ifs[0].simulation.order[size_t(s)], canonical_order(Schedule::zb_v, w.shape, s));
  const std::string text = format_replay_report(r);
  for (const char* want : {"what-if zb-v P=4 V=2 M=8 [schedule=zb-v]", "bubble 5.9% (theory 5.9%)",
                           "W of a split backward taken as half the backward", "96 transfers per iteration"})
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
}

TEST(ZbVWhatIf, ATraceOfZbVReplaysAsRecordedAndCarriesItsHeadToTheLastStage) {
  // ZB-V on 2 stages: stage 0's chunk 1 holds the LM head (+200 forward, +400 backward).
  const PipelineShape shape = v_shape(2, 4);
  OpDurations d = OpDurations::uniform(shape, 100, 200);
  d.forward_ns[0][1] = 300;
  d.backward_ns[0][1] = 600;
  d.weight_ns = {{100, 100}, {100, 100}};
  const Trace t = recorded_trace(Schedule::zb_v, shape, d, 2);
  EXPECT_EQ(t.header.schedule, Schedule::zb_v);
  const OpDurations m = measured_durations(t);
  EXPECT_EQ(m.forward_ns, d.forward_ns);
  EXPECT_EQ(m.backward_ns, d.backward_ns);
  EXPECT_EQ(m.weight_ns, d.weight_ns);
  ReplayOptions opt;
  opt.what_ifs = {"schedule=1f1b", "schedule=interleaved,v=2"};
  const ReplayReport r = replay_trace(t, opt);
  EXPECT_EQ(r.replayed.stats.step_ns, simulate(Schedule::zb_v, shape, d).stats.step_ns);
  // 1F1B: each stage two of the four chunks' layers; the head's extra on the last stage.
  const OpDurations one = predict_durations(m, t.header, Schedule::one_f_one_b, {.stages = 2, .microbatches = 4});
  EXPECT_EQ(one.forward_ns, (std::vector<std::vector<int64_t>>{{200}, {400}}));
  EXPECT_EQ(one.backward_ns, (std::vector<std::vector<int64_t>>{{400}, {800}}));
  // Interleaving on the same P and V: the same chunks, placed in a loop: the head on stage 1.
  const OpDurations loop = predict_durations(m, t.header, Schedule::interleaved_1f1b, shape);
  EXPECT_EQ(loop.forward_ns, (std::vector<std::vector<int64_t>>{{100, 100}, {100, 300}}));
  ASSERT_EQ(r.what_ifs.size(), 2u);
  EXPECT_GT(r.what_ifs[1].simulation.stats.step_ns, r.replayed.stats.step_ns);
  // The trace format keeps the schedule.
  EXPECT_EQ(trace_from_msgpack(trace_to_msgpack(t)).header.schedule, Schedule::zb_v);
}

TEST(ZbVWhatIf, MeasuresTheLinksOfTheVAndNoTransferAtItsTurn) {
  // A ZB-V run with a 300 ns latency on every link: measured back per edge, the turn within stage
  // P-1 at 0, and replayed to the recorded step.
  const PipelineShape shape = v_shape(3, 6);
  const OpDurations d = OpDurations::uniform(shape, 1000, 2000, 300);
  const Trace t = recorded_trace(Schedule::zb_v, shape, d, 2);
  const OpDurations m = measured_durations(t);
  ASSERT_EQ(m.activation_p2p_ns.size(), 5u);
  EXPECT_EQ(m.activation_p2p_ns[2], 0);
  EXPECT_EQ(m.gradient_p2p_ns[2], 0);
  for (int k : {0, 1, 3, 4}) {
    EXPECT_EQ(m.activation_p2p_ns[size_t(k)], 300) << "edge " << k;
    EXPECT_EQ(m.gradient_p2p_ns[size_t(k)], 300) << "edge " << k;
  }
  const ReplayReport r = replay_trace(t, {});
  EXPECT_EQ(r.replayed.stats.step_ns, simulate(Schedule::zb_v, shape, d).stats.step_ns);
}

}  // namespace
}  // namespace troupe::schedules
