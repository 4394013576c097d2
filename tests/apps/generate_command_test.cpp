// `troupe generate` as a child process on the CPU: greedy ids from an HF folder and from a
// Troupe checkpoint (tokenizer files in the iteration directory) equal the engine's run in this process on the same
// weights, several prompts batched, also from a tensor-parallel group of two CPU devices; text streams in prompt order;
// errors name the flag or file; `troupe serve` answers PUT /api with the same ids (one CPU
// replica, and one TP2 replica).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "actors/train/checkpoint_shards.hpp"
#include "data/gpt2_tokenizer.hpp"
#include "model/hf/hf_checkpoint.hpp"
#include "model/inference/inference_engine.hpp"
#include "tests/http_client.hpp"
#include "tests/inference_test_util.hpp"
#include "tests/test_util.hpp"
#include "tests/troupe_process.hpp"

namespace troupe::test {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kPrompts{"Hello, my name is", "The sea was"};

struct ChildRun {
  int status = -1;
  std::string out;  // stdout and stderr
};

// Runs `troupe <args>` to the end (a minute at most).
ChildRun troupe(const std::vector<std::string>& args, const TempDir& tmp) {
  Troupe p(args, tmp / "out.txt");
  const std::optional<int> code = p.wait(std::chrono::seconds(60));
  return {code.value_or(-1), p.output()};
}

std::vector<std::vector<int32_t>> ids_lines(const std::string& out) {
  std::vector<std::vector<int32_t>> rows;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("ids:", 0) != 0) continue;
    std::istringstream nums(line.substr(4));
    rows.emplace_back();
    for (int32_t id; nums >> id;) rows.back().push_back(id);
  }
  return rows;
}

class GenerateCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = tiny_inference_config(false, 32, 64, 50257);
    const ParamLayout layout(config_, ChunkSpec::whole_model());
    save_hf_checkpoint(hf_, layout, HfArch::gpt2, random_normal({layout.size()}, 4, 0.3f));
    fs::copy_file(source_path("assets/gpt2/gpt2-vocab.json"), fs::path(hf_) / "vocab.json");
    fs::copy_file(source_path("assets/gpt2/gpt2-merges.txt"), fs::path(hf_) / "merges.txt");
  }

  // The engine in this process: greedy, 8 tokens, both prompts together.
  std::vector<std::vector<int32_t>> expected() const {
    const Gpt2Tokenizer tok = Gpt2Tokenizer::from_files(source_path("assets/gpt2/gpt2-vocab.json"),
                                                        source_path("assets/gpt2/gpt2-merges.txt"));
    InferenceModel model(cpu(), config_, DType::f32, {.max_tokens = 64, .max_sequences = 4});
    model.load_weights(load_hf_weights(hf_, model.layout(), HfArch::gpt2));
    InferenceEngine engine(model, {.num_blocks = 16, .block_size = 16});
    std::vector<std::vector<int32_t>> out(kPrompts.size());
    for (size_t i = 0; i < kPrompts.size(); ++i)
      engine.add_request({tok.encode(kPrompts[i]), {.temperature = 0.0f, .max_tokens = 8}},
                         [&out, i](const TokenEvent& e) {
                           if (e.has_token) out[i].push_back(e.token);
                         });
    engine.run();
    return out;
  }

  std::vector<std::string> args(const std::string& source_flag, const std::string& dir) const {
    std::vector<std::string> a{"generate", source_flag,    dir, "--device",    "cpu",         "--temperature",
                               "0",        "--max-tokens", "8", "--print-ids", "--ignore-eod"};
    for (const std::string& p : kPrompts) a.insert(a.end(), {"--prompt", p});
    return a;
  }

  // `troupe serve` with `extra` flags: PUT /api answers with the ids `troupe generate` prints,
  // and SIGTERM stops it cleanly.
  void expect_serve_answers_like_generate(const std::vector<std::string>& extra) {
    std::vector<std::string> a{"serve", "--hf", hf_, "--device", "cpu", "--host", "127.0.0.1", "--port", "0"};
    a.insert(a.end(), extra.begin(), extra.end());
    Troupe serve(a, tmp_ / "serve.txt");
    const std::string banner = serve.await_output("http://127.0.0.1:", std::chrono::seconds(60));
    const int port = std::atoi(banner.c_str() + banner.find("http://127.0.0.1:") + 17);
    ASSERT_GT(port, 0) << banner;
    const nlohmann::json body = {
        {"prompts", kPrompts}, {"tokens_to_generate", 8}, {"temperature", 0}, {"stop_token", 0}};
    const HttpResponse r = http_request("PUT", "127.0.0.1", port, "/api", body.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const nlohmann::json answer = nlohmann::json::parse(r.body);
    const std::vector<std::vector<int32_t>> want = expected();
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      if (std::find(want[i].begin(), want[i].end(), 0) != want[i].end()) continue;  // stop_token 0 came up
      const std::vector<int32_t> all = answer["tokens"][i].get<std::vector<int32_t>>();
      EXPECT_EQ(std::vector<int32_t>(all.end() - long(want[i].size()), all.end()), want[i]) << i;
    }
    serve.signal(SIGTERM);
    EXPECT_EQ(serve.wait(std::chrono::seconds(20)), std::optional<int>(0)) << serve.output();
    EXPECT_NE(serve.output().find("stopping\nstopped"), std::string::npos) << serve.output();
  }

  TempDir tmp_{"generate"};
  std::string hf_ = tmp_ / "hf";
  GptConfig config_;
};

TEST_F(GenerateCommand, HfFolderGreedyIdsMatchTheEngine) {
  const ChildRun r = troupe(args("--hf", hf_), tmp_);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(ids_lines(r.out), expected());
  // Prompt order, each prompt followed by its continuation.
  EXPECT_NE(r.out.find("==== prompt 1\nHello, my name is"), std::string::npos) << r.out;
  EXPECT_LT(r.out.find("==== prompt 1"), r.out.find("==== prompt 2\nThe sea was"));
  EXPECT_NE(r.out.find("[8 tokens, finish: length]"), std::string::npos) << r.out;
}

TEST_F(GenerateCommand, CheckpointLoadsTheSameWeights) {
  // Written as `troupe convert --from hf` writes it: global tensors without the vocabulary
  // padding, the tokenizer files in the iteration directory.
  const ParamLayout layout(config_, ChunkSpec::whole_model());
  const std::string root = tmp_ / "ckpt";
  actors::write_params_checkpoint(root, layout, load_hf_weights(hf_, layout, HfArch::gpt2),
                                  {{hf_ + "/vocab.json", "vocab.json"}, {hf_ + "/merges.txt", "merges.txt"}});
  const ChildRun r = troupe(args("--load", root), tmp_);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(ids_lines(r.out), expected());
}

// Two CPU devices holding one model: the same greedy ids as one device (the engine here).
TEST_F(GenerateCommand, TensorParallelPrintsTheSameIds) {
  std::vector<std::string> a = args("--hf", hf_);
  a.insert(a.end(), {"--tensor-model-parallel-size", "2"});
  const ChildRun r = troupe(a, tmp_);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(ids_lines(r.out), expected());
  EXPECT_NE(r.out.find("on 2 cpu devices"), std::string::npos) << r.out;
}

TEST_F(GenerateCommand, ServeAnswersLikeGenerateAndStopsOnSigterm) { expect_serve_answers_like_generate({}); }

TEST_F(GenerateCommand, ServeTensorParallelReplicaAnswersLikeGenerate) {
  expect_serve_answers_like_generate({"--devices", "2", "--tensor-model-parallel-size", "2"});
}

TEST_F(GenerateCommand, ErrorsNameTheFlagOrFile) {
  const ChildRun missing = troupe({"generate", "--load", tmp_ / "nowhere", "--prompt", "x", "--device", "cpu"}, tmp_);
  EXPECT_NE(missing.status, 0);
  EXPECT_NE(missing.out.find("nowhere"), std::string::npos) << missing.out;
  fs::remove(fs::path(hf_) / "vocab.json");
  const ChildRun no_vocab = troupe({"generate", "--hf", hf_, "--prompt", "x", "--device", "cpu"}, tmp_);
  EXPECT_NE(no_vocab.status, 0);
  EXPECT_NE(no_vocab.out.find("--vocab-file"), std::string::npos) << no_vocab.out;
  const ChildRun both = troupe({"generate", "--hf", hf_, "--top-k", "3", "--top-p", "0.5", "--prompt", "x"}, tmp_);
  EXPECT_NE(both.status, 0);
  EXPECT_NE(both.out.find("top_k"), std::string::npos) << both.out;
  const ChildRun no_prompt = troupe({"generate", "--hf", hf_}, tmp_);
  EXPECT_NE(no_prompt.out.find("--prompt"), std::string::npos) << no_prompt.out;
  const ChildRun tp3 = troupe({"generate", "--hf", hf_, "--prompt", "x", "--device", "cpu", "--vocab-file",
                               source_path("assets/gpt2/gpt2-vocab.json"), "--merge-file",
                               source_path("assets/gpt2/gpt2-merges.txt"), "--tensor-model-parallel-size", "3"},
                              tmp_);
  EXPECT_NE(tp3.status, 0);
  EXPECT_NE(tp3.out.find("--tensor-model-parallel-size (3)"), std::string::npos) << tp3.out;
  const ChildRun odd =
      troupe({"serve", "--hf", hf_, "--device", "cpu", "--vocab-file", source_path("assets/gpt2/gpt2-vocab.json"),
              "--merge-file", source_path("assets/gpt2/gpt2-merges.txt"), "--devices", "3",
              "--tensor-model-parallel-size", "2"},
             tmp_);
  EXPECT_NE(odd.status, 0);
  EXPECT_NE(odd.out.find("must be a positive multiple of --tensor-model-parallel-size (2)"), std::string::npos)
      << odd.out;
  // Sizes that would divide by zero (issue 23: SIGFPE) are refused naming the flag.
  for (const char* flag : {"--kv-block-size", "--inference-max-requests", "--kv-cache-gb"}) {
    const ChildRun zero = troupe({"generate", "--hf", hf_, "--prompt", "x", "--device", "cpu", flag, "0"}, tmp_);
    EXPECT_NE(zero.status, 0) << flag;
    EXPECT_LT(zero.status, 128) << flag << " crashed: " << zero.out;
    EXPECT_NE(zero.out.find(flag), std::string::npos) << zero.out;
  }
  const ChildRun log0 = troupe(tiny_train_args(2, {"--log-interval", "0"}), tmp_);
  EXPECT_NE(log0.status, 0);
  EXPECT_LT(log0.status, 128) << log0.out;
  EXPECT_NE(log0.out.find("--log-interval"), std::string::npos) << log0.out;
}

// The HF config reader from the command line: a key that would change the math, or one it
// does not know, is refused by every command that reads an HF folder, naming it; so are
// weights that are not safetensors, before anything is converted.
TEST_F(GenerateCommand, HfConfigKeysAndWeightFilesAreRefusedFromTheCommandLine) {
  const fs::path config = fs::path(hf_) / "config.json";
  nlohmann::json j = nlohmann::json::parse(std::ifstream(config));
  auto write = [&](const nlohmann::json& c) { std::ofstream(config) << c.dump(2); };
  nlohmann::json scaled = j;
  scaled["scale_attn_weights"] = false;
  write(scaled);
  const ChildRun gen = troupe({"generate", "--hf", hf_, "--prompt", "x", "--device", "cpu"}, tmp_);
  EXPECT_NE(gen.status, 0);
  EXPECT_NE(gen.out.find("'scale_attn_weights' = false is not supported"), std::string::npos) << gen.out;
  const ChildRun conv = troupe({"convert", "--from", "hf", "--input", hf_, "--save", tmp_ / "ckpt"}, tmp_);
  EXPECT_NE(conv.status, 0);
  EXPECT_NE(conv.out.find("'scale_attn_weights' = false"), std::string::npos) << conv.out;
  EXPECT_FALSE(fs::exists(tmp_.path() / "ckpt" / "latest_checkpointed_iteration.txt")) << "nothing converted";

  nlohmann::json unknown = j;
  unknown["some_new_switch"] = 3;
  write(unknown);
  const ChildRun refused = troupe({"convert", "--from", "hf", "--input", hf_, "--save", tmp_ / "ckpt2"}, tmp_);
  EXPECT_NE(refused.status, 0);
  EXPECT_NE(refused.out.find(config.string() + ": unknown key 'some_new_switch' = 3"), std::string::npos)
      << refused.out;
  EXPECT_FALSE(fs::exists(tmp_.path() / "ckpt2" / "latest_checkpointed_iteration.txt")) << "nothing converted";
  write(j);
  const ChildRun ok = troupe({"convert", "--from", "hf", "--input", hf_, "--save", tmp_ / "ckpt2"}, tmp_);
  EXPECT_EQ(ok.status, 0) << ok.out;
  EXPECT_NE(ok.out.find("[1/"), std::string::npos) << "a progress line per tensor: " << ok.out;

  fs::rename(fs::path(hf_) / "model.safetensors", fs::path(hf_) / "pytorch_model.bin");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"convert", "--from", "hf", "--input", hf_, "--save", tmp_ / "ckpt3"},
        std::vector<std::string>{"generate", "--hf", hf_, "--prompt", "x", "--device", "cpu"}}) {
    const ChildRun bin = troupe(args, tmp_);
    EXPECT_NE(bin.status, 0) << args[0];
    EXPECT_NE(bin.out.find("holds its weights as pytorch_model.bin"), std::string::npos) << bin.out;
    EXPECT_NE(bin.out.find("safe_serialization=True"), std::string::npos) << bin.out;
    EXPECT_EQ(bin.out.find("converting"), std::string::npos) << "refused before converting: " << bin.out;
  }
  fs::rename(fs::path(hf_) / "pytorch_model.bin", fs::path(hf_) / "model.safetensors");
}

}  // namespace
}  // namespace troupe::test
