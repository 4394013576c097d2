// Expert parallelism from the `troupe` command line (issue 20): a Llama-style MoE model (four
// experts, top-2) on Moby-Dick over two CPU devices prints the same losses, digit for digit at
// the printed precision, with --expert-model-parallel-size 2 (each device two experts, tokens
// exchanged all-to-all) as with 1 (each device all four), and its checkpoint resumes without
// expert parallelism. Under `mpirun -np 2` (one CPU device per process) EP2 prints the same
// losses again, the rows moving between the processes over MPI. A traced run records every MoE
// layer's dispatch and combine, and `troupe replay` reports them. What is not implemented stops
// before training, naming the flags.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "schedules/trace.hpp"
#include "tests/test_util.hpp"
#include "tests/troupe_process.hpp"

namespace troupe::test {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class MoeExpertParallelCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("moe_ep_cli");
    preprocess_moby_dick(dir_->path().string(), 8);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  // llama-tiny (4 layers, every one MoE) on two CPU devices (data-parallel 2), `global_batch`
  // sequences of 2 per microbatch an iteration (4: one microbatch per device).
  static TroupeExit train(int64_t iters, const std::vector<std::string>& extra, const std::string& tag,
                          const std::string& global_batch = "4") {
    std::vector<std::string> flags = {
        "--num-experts",         "4",  "--moe-router-topk", "2", "--moe-aux-loss-coeff", "1e-2",
        "--moe-ffn-hidden-size", "64", "--devices",         "2"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    std::vector<std::string> args = moby_dick_train_args(dir_->path().string(), "llama-tiny", iters, "2e-3", flags);
    *(std::find(args.begin(), args.end(), "--global-batch-size") + 1) = global_batch;
    return run_to_exit(args, tag, 300s);
  }

  static TempDir* dir_;
};

TempDir* MoeExpertParallelCli::dir_ = nullptr;

TEST_F(MoeExpertParallelCli, SameLossesAsWithoutExpertParallelism) {
  const TroupeExit ep1 = train(8, {}, "moe_ep1");
  ASSERT_EQ(ep1.code, std::optional<int>(0)) << ep1.output;
  const std::string ckpt = *dir_ / "ckpt";
  const TroupeExit ep2 =
      train(8, {"--expert-model-parallel-size", "2", "--save", ckpt, "--save-interval", "4"}, "moe_ep2");
  ASSERT_EQ(ep2.code, std::optional<int>(0)) << ep2.output;
  const std::map<int64_t, std::string> a = logged_losses(ep1.output), b = logged_losses(ep2.output);
  ASSERT_EQ(a.size(), 8u) << ep1.output;
  ASSERT_EQ(b.size(), 8u) << ep2.output;
  for (const auto& [it, loss] : a) EXPECT_EQ(b.at(it), loss) << "iteration " << it;
  EXPECT_LT(std::stod(a.at(8)), std::stod(a.at(1))) << "the loss did not fall";

  // The EP2 run's checkpoint of iteration 4 resumes without expert parallelism: 5..8 again.
  const TroupeExit resumed = train(8, {"--load", ckpt, "--ckpt-step", "4"}, "moe_ep1_resumed");
  ASSERT_EQ(resumed.code, std::optional<int>(0)) << resumed.output;
  const std::map<int64_t, std::string> again = logged_losses(resumed.output);
  ASSERT_EQ(again.size(), 4u) << resumed.output;
  for (const auto& [it, loss] : again) EXPECT_EQ(loss, a.at(it)) << "iteration " << it;
}

// The two devices in two processes: each process's device holds two experts, its rows to the
// other's experts cross the processes (MPI), the dense gradients are summed over them.
TEST_F(MoeExpertParallelCli, TwoProcessesUnderMpirunSameLosses) {
  const std::optional<std::vector<std::string>> mpirun = mpirun_launcher(2);
  if (!mpirun) GTEST_SKIP() << "no mpirun";
  const TroupeExit one = train(6, {"--expert-model-parallel-size", "2"}, "moe_ep2_one_process");
  ASSERT_EQ(one.code, std::optional<int>(0)) << one.output;
  std::vector<std::string> args =
      moby_dick_train_args(dir_->path().string(), "llama-tiny", 6, "2e-3",
                           {"--num-experts", "4", "--moe-router-topk", "2", "--moe-aux-loss-coeff", "1e-2",
                            "--moe-ffn-hidden-size", "64", "--devices", "1", "--expert-model-parallel-size", "2"});
  // One process alone would refuse EP2 over its one device: a clean exit means two ran.
  const TroupeExit two = run_to_exit(*mpirun, args, "moe_ep2_mpirun", 300s);
  ASSERT_EQ(two.code, std::optional<int>(0)) << two.output;
  const std::map<int64_t, std::string> a = logged_losses(one.output), b = logged_losses(two.output);
  ASSERT_EQ(a.size(), 6u) << one.output;
  ASSERT_EQ(b.size(), 6u) << two.output;
  for (const auto& [it, loss] : a) EXPECT_EQ(b.at(it), loss) << "iteration " << it;
}

// The trace holds one dispatch and one combine per MoE layer in each forward and backward (a
// shared expert beside them, --moe-shared-expert-overlap: on CPU devices the all-to-alls block,
// so nothing runs beside them), and `troupe replay` sums them up.
TEST_F(MoeExpertParallelCli, TheTraceShowsEveryAllToAll) {
  const std::string trace = *dir_ / "ep2.trace";
  const TroupeExit run = train(3,
                               {"--expert-model-parallel-size", "2", "--moe-shared-expert-intermediate-size", "64",
                                "--moe-shared-expert-overlap", "--trace", trace},
                               "moe_ep2_traced");
  ASSERT_EQ(run.code, std::optional<int>(0)) << run.output;
  std::map<std::pair<int64_t, schedules::EventKind>, int> count;  // (iteration, kind) -> spans
  int ops = 0;
  for (const schedules::TraceEvent& e : schedules::trace_read(trace).events) {
    if (schedules::is_span_kind(e.kind)) {
      ++count[{e.iteration, e.kind}];
      EXPECT_GE(e.stage, 0);
      EXPECT_GT(e.end_ns, e.start_ns);
    }
    ops += schedules::is_op_kind(e.kind) ? 1 : 0;
  }
  ASSERT_GT(ops, 0);
  const int layers = 4;  // llama-tiny, every layer MoE; one microbatch per rank and iteration
  for (int64_t it = 1; it <= 3; ++it) {
    EXPECT_EQ((count[{it, schedules::EventKind::moe_dispatch}]), 2 * layers) << "iteration " << it;
    EXPECT_EQ((count[{it, schedules::EventKind::moe_combine}]), 2 * layers) << "iteration " << it;
  }
  const TroupeExit replay = run_to_exit({"replay", trace}, "moe_ep2_replay", 60s);
  ASSERT_EQ(replay.code, std::optional<int>(0)) << replay.output;
  EXPECT_TRUE(contains(replay.output, "expert all-to-all: ")) << replay.output;
  EXPECT_TRUE(contains(replay.output, "0.0% hidden under the shared expert's compute")) << replay.output;
}

// --overlap-moe-expert-parallel-comm: each forward after the first of an iteration is enqueued
// beside the backward before it (on GPUs a second stream, its all-to-alls on a communicator of their
// own). Three microbatches a device, so every backward but the last has a forward beside it:
// the same losses as without, digit for digit, under --overlap-grad-reduce with the distributed
// optimizer too; a traced run's replay says how much of the all-to-all time ran beside other work.
TEST_F(MoeExpertParallelCli, OverlappedMicrobatchesKeepTheLosses) {
  const std::vector<std::string> ep2 = {"--expert-model-parallel-size", "2", "--moe-shared-expert-intermediate-size",
                                        "64"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), ep2.begin(), ep2.end());
    return more;
  };
  const TroupeExit plain = train(4, ep2, "moe_ep2_m3", "12");
  ASSERT_EQ(plain.code, std::optional<int>(0)) << plain.output;
  const std::string trace = *dir_ / "ep2_lanes.trace";
  const TroupeExit lanes =
      train(4, with({"--overlap-moe-expert-parallel-comm", "--trace", trace}), "moe_ep2_lanes", "12");
  ASSERT_EQ(lanes.code, std::optional<int>(0)) << lanes.output;
  const std::map<int64_t, std::string> a = logged_losses(plain.output), b = logged_losses(lanes.output);
  ASSERT_EQ(a.size(), 4u) << plain.output;
  ASSERT_EQ(b.size(), 4u) << lanes.output;
  for (const auto& [it, loss] : a) EXPECT_EQ(b.at(it), loss) << "iteration " << it;

  const std::vector<std::string> dist = {"--use-distributed-optimizer", "--overlap-grad-reduce"};
  const TroupeExit plain_dist = train(3, with(dist), "moe_ep2_m3_dist", "12");
  std::vector<std::string> lanes_dist = with(dist);
  lanes_dist.push_back("--overlap-moe-expert-parallel-comm");
  const TroupeExit lanes_dist_run = train(3, lanes_dist, "moe_ep2_lanes_dist", "12");
  ASSERT_EQ(plain_dist.code, std::optional<int>(0)) << plain_dist.output;
  ASSERT_EQ(lanes_dist_run.code, std::optional<int>(0)) << lanes_dist_run.output;
  const std::map<int64_t, std::string> c = logged_losses(plain_dist.output), d = logged_losses(lanes_dist_run.output);
  ASSERT_EQ(c.size(), 3u) << plain_dist.output;
  for (const auto& [it, loss] : c) EXPECT_EQ(d.at(it), loss) << "distributed optimizer, iteration " << it;

  const TroupeExit replay = run_to_exit({"replay", trace}, "moe_ep2_lanes_replay", 60s);
  ASSERT_EQ(replay.code, std::optional<int>(0)) << replay.output;
  EXPECT_TRUE(contains(replay.output, "beside another op")) << replay.output;
}

TEST_F(MoeExpertParallelCli, RefusalsNameTheFlags) {
  struct Case {
    std::vector<std::string> flags;
    std::vector<std::string> named;
  };
  const std::vector<Case> cases = {
      {{"--expert-model-parallel-size", "4"}, {"--expert-model-parallel-size 4", "data-parallel size 2"}},
      {{"--expert-model-parallel-size", "3"}, {"--expert-model-parallel-size 3", "--num-experts 4"}},
      {{"--moe-shared-expert-overlap"}, {"--moe-shared-expert-overlap", "--moe-shared-expert-intermediate-size"}},
      {{"--moe-shared-expert-overlap", "--moe-shared-expert-intermediate-size", "32",
        "--moe-all-to-all-on-compute-stream"},
       {"--moe-shared-expert-overlap", "--moe-all-to-all-on-compute-stream"}},
      {{"--overlap-moe-expert-parallel-comm"},
       {"--overlap-moe-expert-parallel-comm", "--expert-model-parallel-size > 1"}},
      {{"--overlap-moe-expert-parallel-comm", "--expert-model-parallel-size", "2", "--pipeline-model-parallel-size",
        "2"},
       {"--overlap-moe-expert-parallel-comm", "--pipeline-model-parallel-size 2"}},
      {{"--overlap-moe-expert-parallel-comm", "--expert-model-parallel-size", "2",
        "--moe-all-to-all-on-compute-stream"},
       {"--overlap-moe-expert-parallel-comm", "--moe-all-to-all-on-compute-stream"}},
  };
  for (const Case& c : cases) {
    const TroupeExit o = train(1, c.flags, "moe_ep_refused");
    ASSERT_TRUE(o.code.has_value()) << o.output;
    EXPECT_NE(*o.code, 0) << o.output;
    for (const std::string& n : c.named) EXPECT_TRUE(contains(o.output, n)) << n << "\n" << o.output;
  }
}

}  // namespace
}  // namespace troupe::test
