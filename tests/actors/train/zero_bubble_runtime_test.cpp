// ZB-H1 and ZB-V in the actor runtime: stage actors run backward_input (B) and backward_weight (W)
// ops. With equal op times each stage runs the schedule's canonical_order(); the trace records the
// B and W ops (a B sends its input gradient, a W sends nothing); and PP2, PP4, PP2 x TP2
// (sequence parallel) and PP2 x DP2 (distributed optimizer, overlapped reduction fed by W's
// grads-ready hook) reproduce the single-device Trainer's loss per iteration for 10 iterations,
// GPT-2 and Llama shapes. ZB-V places two chunks per stage in a V (stage s: virtual stages s and
// 2P-1-s; stage 0 holds the embedding and the LM head and sums a tied embedding's two copies
// itself); chunk 1 sends its activations back up the stages and its gradients down, and stage
// P-1 hands its chunk 0's output to its chunk 1 without a transfer.
#include <filesystem>
#include <map>
#include <mutex>

#include "schedules/trace.hpp"
#include "tests/actors/train/pipeline_test_util.hpp"

namespace troupe::test {
namespace {

using schedules::EventKind;
using schedules::Op;
using schedules::Schedule;

// ZB-V: two chunks per stage, a layer each.
actors::TrainingConfig zb_config(Schedule schedule, bool llama, int P, int M = 8) {
  const bool v = schedule == Schedule::zb_v;
  actors::TrainingConfig config = tiny_config(llama, P, v ? 2 : 1, M);
  config.parallel.schedule = schedule;
  if (v) config.model.num_layers = 2 * P;
  return config;
}

struct Layout {
  Schedule schedule;
  bool llama;
  int T, P, D;
  bool sequence_parallel = false, distributed_optimizer = false, overlap = false;
};

std::string name_of(const Layout& l) {
  return str_cat(l.schedule == Schedule::zb_v ? "zbv_" : "zbh1_", l.llama ? "llama" : "gpt2", "_TP", l.T, "_PP", l.P,
                 "_DP", l.D, l.sequence_parallel ? "_SP" : "", l.distributed_optimizer ? "_DistOpt" : "",
                 l.overlap ? "_Overlap" : "");
}

class ZeroBubbleParity : public ::testing::TestWithParam<Layout> {};

TEST_P(ZeroBubbleParity, SameLossAsOneDevice) {
  const Layout l = GetParam();
  actors::TrainingConfig config = zb_config(l.schedule, l.llama, l.P);
  config.parallel.tensor_size = l.T;
  config.parallel.data_size = l.D;
  config.parallel.sequence_parallel = l.sequence_parallel;
  config.parallel.distributed_optimizer = l.distributed_optimizer;
  config.parallel.overlap_grad_reduce = l.overlap;
  config.parallel.bucket_elements = 3000;  // many buckets: each handed over when its W finishes
  // As parallel_parity_test: tensor parallelism's other summation order moves the grad norm, not the loss.
  const Tolerance tol = l.T > 1 ? Tolerance{1e-5, 2e-3, 1e-4} : Tolerance{};
  expect_parity(name_of(l), config, tol);
}

constexpr Schedule H1 = Schedule::zb_h1, V = Schedule::zb_v;
INSTANTIATE_TEST_SUITE_P(Layouts, ZeroBubbleParity,
                         ::testing::Values(Layout{H1, false, 1, 2, 1}, Layout{H1, false, 1, 4, 1},
                                           Layout{H1, true, 1, 2, 1}, Layout{H1, false, 2, 2, 1, true},
                                           Layout{H1, true, 2, 2, 1, true},
                                           Layout{H1, false, 1, 2, 2, false, true, true}, Layout{V, false, 1, 2, 1},
                                           Layout{V, false, 1, 4, 1}, Layout{V, true, 1, 2, 1},
                                           Layout{V, true, 1, 4, 1}, Layout{V, false, 2, 2, 1, true},
                                           Layout{V, true, 2, 2, 1, true}, Layout{V, false, 1, 2, 2, false, true, true},
                                           Layout{V, true, 1, 2, 2, false, true, true}),
                         [](const auto& info) { return name_of(info.param); });

std::string order_str(const std::vector<Op>& ops) {
  std::string s;
  for (const Op& op : ops) s += schedules::op_str(op) + " ";
  return s;
}

struct OrderCase {
  Schedule schedule;
  int P, M;
};

class ZeroBubbleOrder : public ::testing::TestWithParam<OrderCase> {};

TEST_P(ZeroBubbleOrder, EqualsCanonicalOrder) {
  const auto [schedule, P, M] = GetParam();
  actors::TrainingConfig config = zb_config(schedule, false, P, M);
  const int V = schedule == Schedule::zb_v ? 2 : 1;
  config.model.num_layers = P * V;
  config.fixed_op_duration = std::chrono::milliseconds(30);
  std::mutex mu;
  std::vector<std::vector<Op>> order(static_cast<size_t>(P));
  config.before_op = [&](int stage, const Op& op) {
    std::lock_guard<std::mutex> lock(mu);
    order[size_t(stage)].push_back(op);
  };
  actors::TrainingRun run(config, loader(tiny_data(config.model), config.micro_batch_size), nullptr);
  const schedules::PipelineShape shape{P, V, M, 0};
  for (int it = 0; it < 2; ++it) {
    for (auto& o : order) o.clear();
    run.train_iteration();
    for (int s = 0; s < P; ++s) {
      EXPECT_EQ(order_str(order[size_t(s)]), order_str(schedules::canonical_order(schedule, shape, s)))
          << "stage " << s << ", iteration " << it + 1;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ZeroBubbleOrder,
                         ::testing::Values(OrderCase{H1, 2, 5}, OrderCase{H1, 4, 8}, OrderCase{H1, 4, 2},
                                           OrderCase{H1, 3, 6}, OrderCase{V, 2, 4}, OrderCase{V, 3, 5},
                                           OrderCase{V, 2, 2}),
                         [](const auto& info) {
                           return str_cat(info.param.schedule == V ? "zbv_" : "zbh1_", "P", info.param.P, "_M",
                                          info.param.M);
                         });

// The --trace of `iters` iterations of `config`.
schedules::Trace trace_of(actors::TrainingConfig config, int iters) {
  const std::string path =
      (std::filesystem::temp_directory_path() /
       str_cat("troupe_zero_bubble_trace_test_", schedules::schedule_name(config.parallel.schedule), ".trace"))
          .string();
  config.trace_path = path;
  {
    actors::TrainingRun run(config, loader(tiny_data(config.model), config.micro_batch_size), nullptr);
    for (int i = 0; i < iters; ++i) run.train_iteration();
  }
  schedules::Trace trace = schedules::trace_read(path);
  std::filesystem::remove(path);
  return trace;
}

TEST(ZeroBubbleTrace, RecordsInputAndWeightGradientOps) {
  const int P = 2, M = 4, iters = 2;
  const actors::TrainingConfig config = zb_config(Schedule::zb_h1, false, P, M);
  const schedules::Trace trace = trace_of(config, iters);
  EXPECT_EQ(trace.header.schedule, Schedule::zb_h1);
  std::map<EventKind, int> count;
  const int64_t hidden_bytes = config.micro_batch_size * config.model.seq_length * config.model.hidden_size * 4;
  for (const schedules::TraceEvent& e : trace.events) {
    ++count[e.kind];
    if (e.kind == EventKind::backward_input) {
      EXPECT_EQ(e.bytes, e.stage == 0 ? 0 : hidden_bytes);
    }
    if (e.kind == EventKind::backward_weight) {
      EXPECT_EQ(e.bytes, 0);
    }
  }
  EXPECT_EQ(count[EventKind::forward], iters * P * M);
  EXPECT_EQ(count[EventKind::backward], 0);
  EXPECT_EQ(count[EventKind::backward_input], iters * P * M);
  EXPECT_EQ(count[EventKind::backward_weight], iters * P * M);
}

TEST(ZeroBubbleVTrace, RecordsTheVsOpsAndNoTransferAtItsTurn) {
  const int P = 2, M = 4, iters = 2;
  const actors::TrainingConfig config = zb_config(Schedule::zb_v, false, P, M);
  const schedules::Trace trace = trace_of(config, iters);
  EXPECT_EQ(trace.header.schedule, Schedule::zb_v);
  EXPECT_EQ(trace.header.shape.chunks, 2);
  std::map<EventKind, int> count;
  const int64_t hidden_bytes = config.micro_batch_size * config.model.seq_length * config.model.hidden_size * 4;
  for (const schedules::TraceEvent& e : trace.events) {
    ++count[e.kind];
    // Sent over a channel: every forward but the V's turn (stage 1, chunk 0) and the loss's (stage 0, chunk 1);
    // every B but the first virtual stage's (stage 0, chunk 0) and the turn's (stage 1, chunk 1).
    if (e.kind == EventKind::forward) {
      EXPECT_EQ(e.bytes, e.stage == e.chunk ? hidden_bytes : 0) << "stage " << e.stage << " chunk " << e.chunk;
    }
    if (e.kind == EventKind::backward_input) {
      EXPECT_EQ(e.bytes, e.stage != e.chunk ? hidden_bytes : 0) << "stage " << e.stage << " chunk " << e.chunk;
    }
    if (e.kind == EventKind::backward_weight) {
      EXPECT_EQ(e.bytes, 0);
    }
  }
  EXPECT_EQ(count[EventKind::forward], iters * P * 2 * M);
  EXPECT_EQ(count[EventKind::backward], 0);
  EXPECT_EQ(count[EventKind::backward_input], iters * P * 2 * M);
  EXPECT_EQ(count[EventKind::backward_weight], iters * P * 2 * M);
}

}  // namespace
}  // namespace troupe::test
