// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", 2023): the canonical order against
// orders worked out by hand from the paper's construction (figure 3, top), its properties for
// many (P, M), the simulated bubble against the paper's formula and 1F1B, the trace format of
// split backwards, and `troupe replay --what-if schedule=zb-h1` from a 1F1B trace.
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

// "F0 B0 W0 ..." for V = 1.
std::string short_str(const std::vector<Op>& ops) {
  std::string s;
  for (const Op& op : ops) s += str_cat(s.empty() ? "" : " ", op_str(op).substr(0, op_str(op).find('.')));
  return s;
}

std::string zb(int P, int M, int s) {
  return short_str(canonical_order(Schedule::zb_h1, {.stages = P, .chunks = 1, .microbatches = M}, s));
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ZbH1Order, MatchesThePapersFigure) {
  // P = 4, M = 8: 1F1B's warmup and F/B pairs; stage s skips the W after its first s
  // steady-state Bs and runs those s Ws last, in the cool-down bubble.
  EXPECT_EQ(zb(4, 8, 0), "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7");
  EXPECT_EQ(zb(4, 8, 1), "F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 B6 W5 B7 W6 W7");
  EXPECT_EQ(zb(4, 8, 2), "F0 F1 B0 F2 B1 F3 B2 W0 F4 B3 W1 F5 B4 W2 F6 B5 W3 F7 B6 W4 B7 W5 W6 W7");
  EXPECT_EQ(zb(4, 8, 3), "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7");
  // P = 3, M = 4.
  EXPECT_EQ(zb(3, 4, 0), "F0 F1 F2 B0 W0 F3 B1 W1 B2 W2 B3 W3");
  EXPECT_EQ(zb(3, 4, 1), "F0 F1 B0 F2 B1 W0 F3 B2 W1 B3 W2 W3");
  EXPECT_EQ(zb(3, 4, 2), "F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 W2 W3");
  // Fewer microbatches than stages: the warmup is cut at M.
  EXPECT_EQ(zb(3, 2, 0), "F0 F1 B0 W0 B1 W1");
  EXPECT_EQ(zb(3, 2, 1), "F0 F1 B0 B1 W0 W1");
  EXPECT_EQ(zb(3, 2, 2), "F0 B0 F1 B1 W0 W1");
  // One stage: nothing to defer.
  EXPECT_EQ(zb(1, 3, 0), "F0 B0 W0 F1 B1 W1 F2 B2 W2");
  // The split kinds are what the order holds.
  const std::vector<Op> order = canonical_order(Schedule::zb_h1, {.stages = 2, .chunks = 1, .microbatches = 1}, 1);
  EXPECT_EQ(order, (std::vector<Op>{
                       {OpKind::forward, 0, 0}, {OpKind::backward_input, 0, 0}, {OpKind::backward_weight, 0, 0}}));
}

TEST(ZbH1Order, PropertiesForManyShapes) {
  for (int P : {1, 2, 3, 4, 5, 8})
    for (int M = 1; M <= 16; ++M) {
      const PipelineShape shape{.stages = P, .chunks = 1, .microbatches = M};
      for (int s = 0; s < P; ++s) {
        SCOPED_TRACE(str_cat("P=", P, " M=", M, " stage ", s));
        const std::vector<Op> order = canonical_order(Schedule::zb_h1, shape, s);
        ASSERT_EQ(order.size(), size_t(3 * M));
        std::vector<int> f_at(size_t(M), -1), b_at(size_t(M), -1), w_at(size_t(M), -1);
        int to_b = 0, to_w = 0, peak_to_b = 0, peak_to_w = 0;  // activations held until the B / the W
        for (int i = 0; i < int(order.size()); ++i) {
          const Op& op = order[size_t(i)];
          ASSERT_EQ(op.chunk, 0);
          std::vector<int>& at = op.kind == OpKind::forward ? f_at : op.kind == OpKind::backward_input ? b_at : w_at;
          ASSERT_NE(op.kind, OpKind::backward);  // ZB-H1 never fuses
          ASSERT_EQ(at[size_t(op.microbatch)], -1) << op_str(op) << " twice";
          at[size_t(op.microbatch)] = i;
          if (op.kind == OpKind::forward) ++to_b, ++to_w;
          if (op.kind == OpKind::backward_input) --to_b;
          if (op.kind == OpKind::backward_weight) --to_w;
          peak_to_b = std::max(peak_to_b, to_b);
          peak_to_w = std::max(peak_to_w, to_w);
        }
        for (int m = 0; m < M; ++m) {
          EXPECT_LT(f_at[size_t(m)], b_at[size_t(m)]) << "B" << m << " before its F";
          EXPECT_LT(b_at[size_t(m)], w_at[size_t(m)]) << "W" << m << " before its B";
        }
        // Same activation memory as 1F1B: up to the B, 1F1B's P - s on this stage; kept to the
        // W (a part of them), never above 1F1B's peak, on stage 0.
        EXPECT_LE(peak_to_b, max_in_flight(Schedule::one_f_one_b, shape, s));
        EXPECT_EQ(peak_to_b, max_in_flight(Schedule::zb_h1, shape, s));
        EXPECT_LE(peak_to_w, max_in_flight(Schedule::one_f_one_b, shape, 0));
        // Forwards and Bs in 1F1B's order and places.
        std::vector<Op> without_w;
        for (Op op : order)
          if (op.kind != OpKind::backward_weight) {
            if (op.kind == OpKind::backward_input) op.kind = OpKind::backward;
            without_w.push_back(op);
          }
        EXPECT_EQ(without_w, canonical_order(Schedule::one_f_one_b, shape, s));
      }
    }
}

TEST(ZbH1Order, ValidateRefusesByName) {
  const std::string e = error_of([] { validate(Schedule::zb_h1, {.stages = 4, .chunks = 2, .microbatches = 8}); });
  EXPECT_NE(e.find("zb-h1 schedule runs one model chunk per stage, got 2"), std::string::npos) << e;
  EXPECT_NE(error_of([] { validate(Schedule::zb_h1, {.stages = 4, .chunks = 1, .microbatches = 0}); }), "");
  EXPECT_EQ(schedule_from_name("zb-h1"), Schedule::zb_h1);
  EXPECT_EQ(schedule_from_name("zb_h1"), Schedule::zb_h1);
  EXPECT_STREQ(schedule_name(Schedule::zb_h1), "zb-h1");
  EXPECT_NE(error_of([] { schedule_from_name("zb-h2"); }).find("unknown pipeline schedule 'zb-h2'"), std::string::npos);
  EXPECT_TRUE(splits_backward(Schedule::zb_h1));
  EXPECT_FALSE(splits_backward(Schedule::one_f_one_b));
  EXPECT_TRUE(weight_order(Schedule::one_f_one_b, {.stages = 2, .chunks = 1, .microbatches = 2}, 0).empty());
}

// Per-stage idle time of a simulation.
std::vector<int64_t> idle(const Simulation& sim) {
  std::vector<int64_t> out;
  for (const StageStats& s : sim.stats.stages) out.push_back(s.idle_ns);
  return out;
}

TEST(ZbH1Simulation, BubbleIsThePapersAndBelow1F1B) {
  // Equal F = B = W = 1000 (a fused backward of 2000, split in halves by default).
  for (int P : {2, 3, 4, 8})
    for (int M : {P, 2 * P, 3 * P + 1}) {
      SCOPED_TRACE(str_cat("P=", P, " M=", M));
      const PipelineShape shape{.stages = P, .chunks = 1, .microbatches = M};
      const OpDurations d = OpDurations::uniform(shape, 1000, 2000);
      const Simulation zb = simulate(Schedule::zb_h1, shape, d);
      const Simulation one = simulate(Schedule::one_f_one_b, shape, d);
      for (int s = 0; s < P; ++s) EXPECT_EQ(zb.order[size_t(s)], canonical_order(Schedule::zb_h1, shape, s));
      // The paper: every stage idles (P-1)(F+B-W), against 1F1B's (P-1)(F+B+W).
      for (int64_t ns : idle(zb)) EXPECT_EQ(ns, int64_t(zb_h1_bubble_ns(P, 1000, 1000, 1000)));
      for (int64_t ns : idle(one)) EXPECT_EQ(ns, (P - 1) * 3000);
      EXPECT_NEAR(zb.stats.bubble_fraction, theoretical_bubble(Schedule::zb_h1, shape), 1e-12);
      EXPECT_NEAR(zb.stats.bubble_fraction, (P - 1.0) / (3 * M + P - 1), 1e-12);
      EXPECT_LT(zb.stats.bubble_fraction, one.stats.bubble_fraction);
      EXPECT_EQ(zb.stats.step_ns, (3 * M + P - 1) * 1000);
      for (int s = 0; s < P; ++s) EXPECT_LE(zb.stats.stages[size_t(s)].peak_in_flight, P - s);
    }
}

// The stage policy's rule (schedule.hpp: deferred Ws, forced past s of them or after a cool-down
// B) reproduces canonical_order() when F, B and W take the same time, for every P and M here,
// with free transfers and with a latency of a tenth of an op.
TEST(ZbH1Simulation, TheRuleYieldsTheCanonicalOrder) {
  for (int P : {1, 2, 3, 4, 5, 8})
    for (int M = 1; M <= 16; ++M)
      for (int64_t latency : {0, 100}) {
        SCOPED_TRACE(str_cat("P=", P, " M=", M, " latency ", latency));
        const PipelineShape shape{.stages = P, .chunks = 1, .microbatches = M};
        const Simulation sim = simulate(Schedule::zb_h1, shape, OpDurations::uniform(shape, 1000, 2000, latency));
        for (int s = 0; s < P; ++s) EXPECT_EQ(short_str(sim.order[size_t(s)]), zb(P, M, s)) << "stage " << s;
      }
}

TEST(ZbH1Policy, DefersAtMostSWeightsAndNeverRunsAWBeforeItsB) {
  // Every op ready at once (a stage never waits): stage s defers at most s Ws (s + 1 right after
  // a B, until its forced W).
  const PipelineShape shape{.stages = 4, .chunks = 1, .microbatches = 8};
  for (int s = 0; s < 4; ++s) {
    StagePolicy policy(Schedule::zb_h1, shape, s);
    int bs = 0, ws = 0, ops = 0;
    while (std::optional<Op> op = policy.next([](const Op&) { return true; })) {
      ++ops;
      if (op->kind == OpKind::backward_input) ++bs;
      if (op->kind == OpKind::backward_weight) ++ws;
      EXPECT_LE(ws, bs);
      EXPECT_LE(bs - ws, s + 1) << "stage " << s;
    }
    EXPECT_EQ(ops, 3 * 8);
    EXPECT_TRUE(policy.done());
    policy.reset();
    EXPECT_FALSE(policy.done());
  }
}

TEST(ZbH1Simulation, OwnWeightTimesAndLatency) {
  // W = 500 of a 2000 backward (B = 1500), and a P2P latency: every op once, W its own time,
  // and the step at least the last stage's work plus the pipeline fill.
  const PipelineShape shape{.stages = 4, .chunks = 1, .microbatches = 8};
  OpDurations d = OpDurations::uniform(shape, 1000, 2000, 50);
  d.weight_ns.assign(4, std::vector<int64_t>(1, 500));
  const Simulation sim = simulate(Schedule::zb_h1, shape, d);
  int w = 0, b = 0;
  for (const TraceEvent& e : sim.trace.events) {
    if (e.kind == EventKind::backward_weight) {
      ++w;
      EXPECT_EQ(e.end_ns - e.start_ns, 500);
    }
    if (e.kind == EventKind::backward_input) {
      ++b;
      EXPECT_EQ(e.end_ns - e.start_ns, 1500);
    }
    EXPECT_NE(e.kind, EventKind::backward);
  }
  EXPECT_EQ(w, 4 * 8);
  EXPECT_EQ(b, 4 * 8);
  for (int s = 0; s < 4; ++s) EXPECT_EQ(sim.order[size_t(s)], canonical_order(Schedule::zb_h1, shape, s));
  EXPECT_LT(sim.stats.step_ns, simulate(Schedule::one_f_one_b, shape, d).stats.step_ns);
  // Without the latency, the paper's (P-1)(F+B-W) holds for unequal times too while W <= B;
  // a longer W leaves (P-1)F.
  for (int64_t weight : {250, 500, 1000, 1200, 1500}) {
    OpDurations e = OpDurations::uniform(shape, 1000, 2000);
    e.weight_ns.assign(4, std::vector<int64_t>(1, weight));
    const int64_t paper = 3 * (1000 + (2000 - weight) - weight);
    for (int64_t ns : idle(simulate(Schedule::zb_h1, shape, e))) {
      EXPECT_EQ(ns, int64_t(zb_h1_bubble_ns(4, 1000, 2000 - double(weight), double(weight)))) << "W = " << weight;
      EXPECT_EQ(ns, weight <= 1000 ? paper : 3 * 1000) << "W = " << weight;
    }
  }
  d.weight_ns[2][0] = 2500;  // more than the backward it is part of
  EXPECT_NE(error_of([&] { simulate(Schedule::zb_h1, shape, d); }).find("weight gradient of stage 2"),
            std::string::npos);
}

TEST(ZbH1Trace, SplitKindsRoundTripAndOldFilesReadTheSame) {
  const PipelineShape shape{.stages = 2, .chunks = 1, .microbatches = 2};
  Simulation sim = simulate(Schedule::zb_h1, shape, OpDurations::uniform(shape, 10, 20));
  const Trace back = trace_from_msgpack(trace_to_msgpack(sim.trace));
  EXPECT_EQ(back.header.schedule, Schedule::zb_h1);
  EXPECT_EQ(back.header.version, 6);
  EXPECT_EQ(back.events, sim.trace.events);
  EXPECT_STREQ(event_kind_name(EventKind::backward_weight), "backward_weight");
  EXPECT_NE(trace_to_chrome_json(back).find("\"W1.c0\""), std::string::npos);

  // A file of one event of kind `kind`, under header `version` (version 1 ignores the keys of 2).
  auto one_event_file = [](int version, int kind) {
    msgpack::sbuffer b;
    msgpack::packer<msgpack::sbuffer> p(&b);
    p.pack_map(9);
    p.pack(std::string("format")), p.pack(std::string("troupe-trace"));
    p.pack(std::string("version")), p.pack(version);
    p.pack(std::string("schedule")), p.pack(std::string("1f1b"));
    p.pack(std::string("stages")), p.pack(2);
    p.pack(std::string("chunks")), p.pack(1);
    p.pack(std::string("microbatches")), p.pack(4);
    p.pack(std::string("processes")), p.pack(1);
    p.pack(std::string("process")), p.pack(0);
    p.pack(std::string("clock_offset_ns")), p.pack(0);
    p.pack(std::make_tuple(std::string("stage0"), 0, 0, kind, 1, 0, 0, 0, 10, 0));
    return std::string(b.data(), b.size());
  };
  // Versions 1 and 2 knew kinds 0-8: 9 and 10 (and anything above) read as other, as they did.
  EXPECT_EQ(trace_from_msgpack(one_event_file(1, 10)).events.at(0).kind, EventKind::other);
  EXPECT_EQ(trace_from_msgpack(one_event_file(2, 9)).events.at(0).kind, EventKind::other);
  EXPECT_EQ(trace_from_msgpack(one_event_file(2, 1)).events.at(0).kind, EventKind::backward);
  // Version 3 reads the split kinds and refuses a kind it does not know, by its number.
  EXPECT_EQ(trace_from_msgpack(one_event_file(3, 10)).events.at(0).kind, EventKind::backward_weight);
  EXPECT_EQ(trace_from_msgpack(one_event_file(3, 9)).events.at(0).kind, EventKind::backward_input);
  const std::string e = error_of([&] { trace_from_msgpack(one_event_file(3, 11), "trace 'x'"); });
  EXPECT_NE(e.find("trace 'x': event 0 (stage0) has kind 11, unknown to version 3 traces"), std::string::npos) << e;
  // Version 4 adds the span kinds 11-13 (kernels/stream_spans.hpp) and refuses what follows.
  EXPECT_EQ(trace_from_msgpack(one_event_file(4, 11)).events.at(0).kind, EventKind::moe_dispatch);
  EXPECT_EQ(trace_from_msgpack(one_event_file(4, 13)).events.at(0).kind, EventKind::moe_overlap);
  const std::string e4 = error_of([&] { trace_from_msgpack(one_event_file(4, 14), "trace 'x'"); });
  EXPECT_NE(e4.find("has kind 14, unknown to version 4 traces (0 to 13)"), std::string::npos) << e4;
  // Version 5 adds the layer spans (14).
  EXPECT_EQ(trace_from_msgpack(one_event_file(5, 14)).events.at(0).kind, EventKind::layer);
  EXPECT_STREQ(event_kind_name(EventKind::layer), "layer");
  const std::string e5 = error_of([&] { trace_from_msgpack(one_event_file(5, 15), "trace 'x'"); });
  EXPECT_NE(e5.find("has kind 15, unknown to version 5 traces (0 to 14)"), std::string::npos) << e5;
  // Version 6 adds the clock samples (15) and their sm_clock_mhz, a 12th field.
  EXPECT_EQ(trace_from_msgpack(one_event_file(6, 15)).events.at(0).kind, EventKind::clock);
  const std::string e6 = error_of([&] { trace_from_msgpack(one_event_file(6, 16), "trace 'x'"); });
  EXPECT_NE(e6.find("has kind 16, unknown to version 6 traces (0 to 15)"), std::string::npos) << e6;
  Trace clocked = sim.trace;
  clocked.events.push_back({.actor = "clock",
                            .device = 1,
                            .stage = 1,
                            .kind = EventKind::clock,
                            .start_ns = 7,
                            .end_ns = 7,
                            .sm_clock_mhz = 1905});
  EXPECT_EQ(trace_from_msgpack(trace_to_msgpack(clocked)).events.back().sm_clock_mhz, 1905);
  EXPECT_NE(trace_to_chrome_json(clocked).find("\"SM clock (MHz)\""), std::string::npos);
  EXPECT_NE(error_of([&] { trace_from_msgpack(one_event_file(7, 1)); }).find("version 7 is not supported"),
            std::string::npos);
}

TEST(ZbH1WhatIf, FromA1F1BTracePredictsASmallerBubble) {
  const PipelineShape shape{.stages = 4, .chunks = 1, .microbatches = 8};
  const Trace t = recorded_trace(Schedule::one_f_one_b, shape, OpDurations::uniform(shape, 1000, 2000), 3);
  const WhatIf w = parse_what_if("schedule=zb-h1", t.header);
  EXPECT_EQ(w.schedule, Schedule::zb_h1);
  EXPECT_EQ(w.shape.chunks, 1);
  EXPECT_NE(error_of([&] { parse_what_if("schedule=zb-h1,v=2", t.header); }).find("one model chunk per stage"),
            std::string::npos);
  ReplayOptions opt;
  opt.what_ifs = {"schedule=zb-h1", "schedule=zb-h1,m=16"};
  const ReplayReport r = replay_trace(t, opt);
  ASSERT_EQ(r.what_ifs.size(), 2u);
  // The fused backward of 2000 splits as B = W = 1000: the paper's bubble, 3/27 against 3/11.
  EXPECT_NEAR(r.stats.bubble_fraction, 3.0 / 11, 1e-12);
  EXPECT_NEAR(r.what_ifs[0].simulation.stats.bubble_fraction, 3.0 / 27, 1e-12);
  EXPECT_EQ(r.what_ifs[0].simulation.stats.step_ns, (24 + 3) * 1000);
  EXPECT_NEAR(r.what_ifs[1].simulation.stats.bubble_fraction, 3.0 / 51, 1e-12);
  const std::string text = format_replay_report(r);
  for (const char* want : {"what-if zb-h1 P=4 V=1 M=8 [schedule=zb-h1]", "bubble 11.1% (theory 11.1%)",
                           "W of a split backward taken as half the backward"})
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
}

TEST(ZbH1WhatIf, ATraceWithBAndWGivesTheirOwnTimes) {
  // A recorded ZB-H1 run (W = 400 of a 2000 backward) replays as recorded, and its measured W
  // carries to another shape through the cost model.
  const PipelineShape shape{.stages = 4, .chunks = 1, .microbatches = 8};
  OpDurations d = OpDurations::uniform(shape, 1000, 2000);
  d.weight_ns.assign(4, std::vector<int64_t>(1, 400));
  const Trace t = recorded_trace(Schedule::zb_h1, shape, d, 2);
  const OpDurations m = measured_durations(t);
  EXPECT_EQ(m.backward_ns, d.backward_ns);
  EXPECT_EQ(m.weight_ns, d.weight_ns);
  ReplayOptions opt;
  opt.what_ifs = {"schedule=1f1b", "p=2"};
  const ReplayReport r = replay_trace(t, opt);
  EXPECT_EQ(r.replayed.stats.step_ns, simulate(Schedule::zb_h1, shape, d).stats.step_ns);
  EXPECT_NEAR(r.what_ifs[0].simulation.stats.bubble_fraction, 3.0 / 11, 1e-12);  // fused again: 1F1B's
  ASSERT_FALSE(r.what_ifs[1].simulation.trace.events.empty());
  for (const TraceEvent& e : r.what_ifs[1].simulation.trace.events) {  // two stages of twice the layers
    if (e.kind == EventKind::backward_weight) {
      EXPECT_EQ(e.end_ns - e.start_ns, 800);
    }
  }
  EXPECT_TRUE(r.cost_model.has_weight);
}

}  // namespace
}  // namespace troupe::schedules
