// Uneven pipeline splits from the `troupe train` command line, as separate processes:
// - on real data (Moby-Dick, preprocessed with the GPT-2 tokenizer) --decoder-first-pipeline-num-layers
//   and the --account-for-*-in-pipeline-split flags (1F1B, and interleaved through
//   --num-layers-per-virtual-pipeline-stage) log the losses of the one-stage run;
// - impossible combinations exit non-zero with an error naming the flags, before training.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "tests/test_util.hpp"
#include "tests/troupe_process.hpp"

namespace troupe::test {
namespace {

using namespace std::chrono_literals;
using Args = std::vector<std::string>;

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

// 4 layers of a tiny GPT-2 on the CPU, 6 microbatches of one sample per iteration, 4 iterations
// (on `data_prefix`, or random tokens when empty); then `extra`.
Args train_args(const std::string& data_prefix, const Args& extra) {
  Args a = {"train",
            "--device",
            "cpu",
            "--num-layers",
            "4",
            "--hidden-size",
            "32",
            "--num-attention-heads",
            "4",
            "--seq-length",
            "32",
            "--micro-batch-size",
            "1",
            "--global-batch-size",
            "6",
            "--train-iters",
            "4",
            "--lr",
            "3e-3",
            "--eval-iters",
            "0",
            "--log-interval",
            "1",
            "--split",
            "100,0,0",
            "--seed",
            "77",
            "--vocab-file",
            source_path("assets/gpt2/gpt2-vocab.json"),
            "--merge-file",
            source_path("assets/gpt2/gpt2-merges.txt")};
  if (!data_prefix.empty())
    a.insert(a.end(), {"--data-path", data_prefix});
  else
    a.push_back("--mock-data");
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::map<int64_t, double> losses_of(const std::string& log) {
  std::map<int64_t, double> out;
  for (const auto& [it, loss] : logged_losses(log)) out[it] = std::stod(loss);
  return out;
}

TEST(UnevenPipelineCli, SameLossesAsOneStageOnRealData) {
  TempDir tmp("uneven_cli");
  const std::string data = preprocess_moby_dick(tmp.path().string(), 20);

  const TroupeExit one = run_to_exit(train_args(data, {"--devices", "1"}), "uneven_pp1", 300s);
  ASSERT_EQ(one.code, std::optional<int>(0)) << one.output;
  const std::map<int64_t, double> want = losses_of(one.output);
  ASSERT_EQ(want.size(), 4u) << one.output;

  struct Layout {
    Args flags;
    std::string layers;  // the run header's layers of each chunk
  };
  const std::vector<Layout> layouts = {
      {{"--pipeline-model-parallel-size", "2", "--decoder-first-pipeline-num-layers", "1"}, ": 1 3"},
      {{"--pipeline-model-parallel-size", "3", "--account-for-embedding-in-pipeline-split",
        "--account-for-loss-in-pipeline-split"},
       ": 1 2 1"},
      // (4 + 2) / 3 = 2 per stage, one per chunk: V = 2, the first chunk only the embedding, the last only the loss.
      {{"--pipeline-model-parallel-size", "3", "--account-for-embedding-in-pipeline-split",
        "--account-for-loss-in-pipeline-split", "--num-layers-per-virtual-pipeline-stage", "1"},
       ": 0 1 1 1 1 0"},
  };
  for (const Layout& l : layouts) {
    const std::string label = l.flags[1] + " " + l.flags[2] + (l.flags.size() > 3 ? " " + l.flags[3] : "");
    const TroupeExit run = run_to_exit(train_args(data, l.flags), "uneven_pp", 300s);  // one device per stage
    ASSERT_EQ(run.code, std::optional<int>(0)) << label << "\n" << run.output;
    EXPECT_TRUE(contains(
        run.output, "uneven pipeline split, layers of each chunk (stage 0 first, chunk by chunk)" + l.layers + "\n"))
        << label << "\n"
        << run.output;
    const std::map<int64_t, double> got = losses_of(run.output);
    ASSERT_EQ(got.size(), want.size()) << label << "\n" << run.output;
    for (const auto& [it, loss] : want) EXPECT_NEAR(got.at(it), loss, 1e-5 * loss) << label << ": iteration " << it;
  }
}

TEST(UnevenPipelineCli, ImpossibleSplitsAreErrorsNamingTheFlags) {
  const std::string first = "--decoder-first-pipeline-num-layers", last = "--decoder-last-pipeline-num-layers";
  const std::string emb = "--account-for-embedding-in-pipeline-split", loss = "--account-for-loss-in-pipeline-split";
  struct Refusal {
    Args flags;
    std::vector<std::string> named;
  };
  const std::vector<Refusal> refusals = {
      // First and last together hold more than the 4 layers.
      {{"--pipeline-model-parallel-size", "2", first, "3", last, "2"}, {first, last, "exceed"}},
      // 3 layers left over 2 middle stages.
      {{"--pipeline-model-parallel-size", "3", first, "1"}, {first, "middle"}},
      // 2 stages, both given, layers left over.
      {{"--pipeline-model-parallel-size", "2", first, "1", last, "1"}, {first, last}},
      {{"--pipeline-model-parallel-size", "2", first, "0"}, {first, "> 0"}},
      // Megatron refuses uneven with account-for, and layers per virtual stage with uneven.
      {{"--pipeline-model-parallel-size", "2", first, "1", emb}, {first, emb}},
      {{"--pipeline-model-parallel-size", "2", first, "2", "--num-layers-per-virtual-pipeline-stage", "1"},
       {"--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank"}},
      // Interleaved: 3 first-stage layers over 2 chunks.
      {{"--pipeline-model-parallel-size", "2", first, "3", "--num-virtual-stages-per-pipeline-rank", "2"},
       {first, "chunks"}},
      // (4 + 1) layers over 2 stages.
      {{"--pipeline-model-parallel-size", "2", loss}, {loss, "--pipeline-model-parallel-size"}},
      {{"--num-layers-per-virtual-pipeline-stage", "1", "--num-virtual-stages-per-pipeline-rank", "2"},
       {"--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank"}},
      {{"--pipeline-model-parallel-size", "2", "--pipeline-model-parallel-layout", "Et|ttt|L"},
       {"--pipeline-model-parallel-layout"}},
  };
  for (const Refusal& r : refusals) {
    const TroupeExit o = run_to_exit(train_args("", r.flags), "uneven_refused", 120s);
    EXPECT_NE(o.code, std::optional<int>(0)) << r.named.front() << "\n" << o.output;
    EXPECT_TRUE(o.code.has_value()) << "ran past the limit: " << o.output;
    for (const std::string& n : r.named) EXPECT_TRUE(contains(o.output, n)) << n << "\n" << o.output;
    EXPECT_FALSE(contains(o.output, "lm loss")) << o.output;
  }
}

}  // namespace
}  // namespace troupe::test
