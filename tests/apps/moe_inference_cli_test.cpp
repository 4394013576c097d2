// Mixture-of-experts models in `troupe generate` and `troupe serve` (issue 20), as a user runs
// them: a Llama-style model with four experts (top-2) trains a few iterations on Moby-Dick and
// saves; `troupe generate --load` prints the greedy continuation the training forward predicts
// token by token (GptChunk in this process on the checkpoint's weights), and `troupe serve`
// answers a /v1/completions request with it. A sigmoid router with a learned expert bias
// (--moe-router-enable-expert-bias) generates with the bias its checkpoint holds. What
// generate/serve refuse of an MoE model
// (tensor parallelism, a capacity factor) fails before any work, naming the flag.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <sstream>
#include <string>
#include <vector>

#include "actors/train/checkpoint_shards.hpp"
#include "apps/common/generate_load.hpp"
#include "data/gpt2_tokenizer.hpp"
#include "model/gpt_chunk.hpp"
#include "model/moe/router.hpp"
#include "tests/http_client.hpp"
#include "tests/inference_test_util.hpp"
#include "tests/test_util.hpp"
#include "tests/troupe_process.hpp"

namespace troupe::test {
namespace {

using namespace std::chrono_literals;

const std::string kPrompt = "Call me Ishmael. Some years ago";
constexpr int kTokens = 8;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::vector<std::string> tokenizer_flags() {
  return {"--vocab-file", source_path("assets/gpt2/gpt2-vocab.json"), "--merge-file",
          source_path("assets/gpt2/gpt2-merges.txt")};
}

Gpt2Tokenizer tokenizer() {
  return Gpt2Tokenizer::from_files(source_path("assets/gpt2/gpt2-vocab.json"),
                                   source_path("assets/gpt2/gpt2-merges.txt"));
}

// The ids after "ids:" on the output's first such line.
std::vector<int32_t> printed_ids(const std::string& out) {
  const size_t at = out.find("ids:");
  if (at == std::string::npos) return {};
  std::istringstream nums(out.substr(at + 4, out.find('\n', at) - at - 4));
  std::vector<int32_t> ids;
  for (int32_t id; nums >> id;) ids.push_back(id);
  return ids;
}

class MoeInferenceCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("moe_inference_cli");
    preprocess_moby_dick(dir_->path().string(), 8);
    ckpt_ = new std::string(*dir_ / "ckpt");
    bias_ckpt_ = new std::string(*dir_ / "bias_ckpt");
    train(*ckpt_, {"--moe-aux-loss-coeff", "1e-2"});
    // A bias update rate large enough for the bias to move the routing in three steps.
    train(*bias_ckpt_, {"--moe-router-score-function", "sigmoid", "--moe-router-enable-expert-bias",
                        "--moe-router-bias-update-rate", "0.5", "--moe-router-load-balancing-type", "none"});
  }
  static void TearDownTestSuite() {
    delete bias_ckpt_;
    delete ckpt_;
    delete dir_;
  }

  // llama-tiny with 4 experts (top-2) for 3 iterations, saved to `ckpt`.
  static void train(const std::string& ckpt, const std::vector<std::string>& router) {
    std::vector<std::string> flags{"--num-experts", "4",  "--moe-router-topk", "2", "--moe-ffn-hidden-size", "64",
                                   "--save",        ckpt, "--save-interval",   "3"};
    flags.insert(flags.end(), router.begin(), router.end());
    const TroupeExit t = run_to_exit(moby_dick_train_args(dir_->path().string(), "llama-tiny", 3, "2e-3", flags),
                                     "moe_inference_train", 300s);
    ASSERT_EQ(t.code, std::optional<int>(0)) << t.output;
  }

  // Greedy decoding with the training forward: the whole sequence again for each new token.
  static std::vector<int32_t> training_greedy(const std::vector<int32_t>& prompt, const std::string& ckpt) {
    const apps::LoadedModel m = apps::load_checkpoint_model(ckpt);
    EXPECT_TRUE(m.config.moe.enabled());
    GptChunk chunk(cpu(), m.config, ChunkSpec::whole_model(), DType::f32);
    chunk.load_weights(m.weights);
    for (const auto& [name, state] : chunk.moe_buffers()) {  // the checkpoint's expert bias, read by name
      for (const auto& [layer, bias] : m.expert_bias)
        if (name == moe_expert_bias_name(layer)) copy(cpu(), bias, state);
    }
    std::vector<int32_t> seq = prompt, out;
    for (int i = 0; i < kTokens; ++i) {
      ActivationsPtr a =
          chunk.forward(host_i32(seq, {1, int64_t(seq.size())}), Tensor(), Tensor(), {.training = false});
      Tensor logits = Tensor::host(DType::f32, a->logits.shape());
      copy(cpu(), a->logits, logits);
      const float* last = logits.data_as<float>() + (logits.dim(0) - 1) * logits.dim(1);
      int32_t best = 0;
      for (int32_t v = 1; v < int32_t(m.config.vocab_size); ++v)
        if (last[v] > last[best]) best = v;
      seq.push_back(best);
      out.push_back(best);
    }
    return out;
  }

  // `troupe generate --load ckpt` greedy: prints the training forward's continuation.
  static void expect_generate_like_training(const std::string& ckpt) {
    std::vector<std::string> a{"generate",      "--load",   ckpt,           "--device", "cpu",
                               "--temperature", "0",        "--max-tokens", "8",        "--print-ids",
                               "--ignore-eod",  "--prompt", kPrompt};
    const std::vector<std::string> tok = tokenizer_flags();
    a.insert(a.end(), tok.begin(), tok.end());
    const TroupeExit r = run_to_exit(a, "moe_generate", 120s);
    ASSERT_EQ(r.code, std::optional<int>(0)) << r.output;
    EXPECT_TRUE(contains(r.output, kPrompt + " ")) << r.output;  // one prompt: its text, then the continuation
    EXPECT_TRUE(contains(r.output, "[8 tokens, finish: length]")) << r.output;
    EXPECT_EQ(printed_ids(r.output), training_greedy(tokenizer().encode(kPrompt), ckpt)) << r.output;
  }

  static TempDir* dir_;
  static std::string* ckpt_;
  static std::string* bias_ckpt_;
};

TempDir* MoeInferenceCli::dir_ = nullptr;
std::string* MoeInferenceCli::ckpt_ = nullptr;
std::string* MoeInferenceCli::bias_ckpt_ = nullptr;

TEST_F(MoeInferenceCli, GenerateGreedyMatchesTheTrainingForward) { expect_generate_like_training(*ckpt_); }

TEST_F(MoeInferenceCli, GenerateWithTheCheckpointsExpertBias) {
  const apps::LoadedModel m = apps::load_checkpoint_model(*bias_ckpt_);
  ASSERT_EQ(m.expert_bias.size(), 4u);  // every layer of llama-tiny is MoE
  float largest = 0;
  for (const auto& [layer, bias] : m.expert_bias)
    for (int64_t e = 0; e < bias.numel(); ++e) largest = std::max(largest, std::abs(bias.data_as<float>()[e]));
  EXPECT_GE(largest, 0.5f) << "the expert bias did not move in training";
  expect_generate_like_training(*bias_ckpt_);
}

TEST_F(MoeInferenceCli, ServeAnswersACompletion) {
  std::vector<std::string> a{"serve", "--load", *ckpt_, "--device", "cpu", "--host", "127.0.0.1", "--port", "0"};
  const std::vector<std::string> tok = tokenizer_flags();
  a.insert(a.end(), tok.begin(), tok.end());
  TempDir tmp("moe_serve");
  Troupe serve(a, tmp / "serve.txt");
  const std::string banner = serve.await_output("http://127.0.0.1:", 60s);
  const int port = std::atoi(banner.c_str() + banner.find("http://127.0.0.1:") + 17);
  ASSERT_GT(port, 0) << banner;
  const nlohmann::json body = {{"prompt", kPrompt}, {"max_tokens", kTokens}, {"temperature", 0}};
  const HttpResponse r = http_request("POST", "127.0.0.1", port, "/v1/completions", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const nlohmann::json answer = nlohmann::json::parse(r.body);
  const int64_t n = answer["usage"]["completion_tokens"].get<int64_t>();
  ASSERT_GT(n, 0) << r.body;
  // The greedy continuation up to the model's end of text, if it chose one.
  std::vector<int32_t> want = training_greedy(tokenizer().encode(kPrompt), *ckpt_);
  want.resize(size_t(n));
  EXPECT_EQ(answer["choices"][0]["text"].get<std::string>(), tokenizer().decode_skipping_special(want)) << r.body;
  serve.signal(SIGTERM);
  EXPECT_EQ(serve.wait(20s), std::optional<int>(0)) << serve.output();
}

TEST_F(MoeInferenceCli, RefusalsNameTheFlag) {
  std::vector<std::string> a{"generate", "--load", *ckpt_, "--device", "cpu", "--prompt", "x"};
  const std::vector<std::string> tok = tokenizer_flags();
  a.insert(a.end(), tok.begin(), tok.end());
  std::vector<std::string> tp = a;
  tp.insert(tp.end(), {"--tensor-model-parallel-size", "2"});
  const TroupeExit t = run_to_exit(tp, "moe_generate_tp", 60s);
  EXPECT_NE(t.code, std::optional<int>(0)) << t.output;
  EXPECT_TRUE(contains(t.output, "--tensor-model-parallel-size 2 with a mixture-of-experts model (--num-experts 4)"))
      << t.output;

  // The same weights under a config with a capacity factor, as `troupe convert` writes a checkpoint.
  apps::LoadedModel m = apps::load_checkpoint_model(*ckpt_);
  m.config.moe.moe_expert_capacity_factor = 1.5;
  TempDir tmp("moe_capacity");
  const std::string dropping = tmp / "ckpt";
  actors::write_params_checkpoint(dropping, ParamLayout(m.config, ChunkSpec::whole_model()), m.weights);
  for (const char* command : {"generate", "serve"}) {
    std::vector<std::string> c{command, "--load", dropping, "--device", "cpu"};
    c.insert(c.end(), tok.begin(), tok.end());
    if (std::string(command) == "generate") c.insert(c.end(), {"--prompt", "x"});
    const TroupeExit d = run_to_exit(c, std::string("moe_capacity_") + command, 60s);
    EXPECT_NE(d.code, std::optional<int>(0)) << d.output;
    EXPECT_TRUE(contains(d.output, "--moe-expert-capacity-factor 1.5")) << d.output;
  }
}

}  // namespace
}  // namespace troupe::test
