// `troupe generate` as a child process on the CPU: greedy ids from an HF folder and from a
// Troupe checkpoint (word embedding saved unpadded, tokenizer files in the iteration
// directory) equal the engine's run in this process on the same weights, several prompts
// batched; text streams in prompt order; errors name the flag or file; `troupe serve` answers
// PUT /api with the same ids.
#include <nlohmann/json.hpp>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "data/gpt2_tokenizer.hpp"
#include "model/hf_checkpoint.hpp"
#include "model/inference_engine.hpp"
#include "storage/checkpoint_writer.hpp"
#include "tests/http_client.hpp"
#include "tests/inference_test_util.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kPrompts{"Hello, my name is", "The sea was"};

struct ChildRun {
  int status = -1;
  std::string out, err;
};

// Runs `troupe <args>` (each argument single-quoted for the shell).
ChildRun troupe(const std::vector<std::string>& args, const TempDir& tmp) {
  std::string cmd = troupe_binary();
  for (const std::string& a : args) cmd += " '" + a + "'";
  cmd += " 2> " + tmp / "stderr.txt";
  ChildRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  r.status = ::pclose(p);
  std::ifstream in(tmp / "stderr.txt");
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  return r;
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
    weights_ = random_normal({layout.size()}, 4, 0.3f);
    // Padding rows of the vocabulary hold zeros, as after an import or an unpadded load.
    const ParamInfo& wte = layout.find("embedding.word_embeddings.weight");
    std::fill_n(weights_.data_as<float>() + wte.offset + config_.vocab_size * 32,
                (config_.padded_vocab_size() - config_.vocab_size) * 32, 0.0f);
    save_hf_checkpoint(hf_, layout, HfArch::gpt2, weights_);
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
    std::vector<std::string> a{"generate", source_flag, dir, "--device", "cpu", "--temperature", "0",
                               "--max-tokens", "8", "--print-ids", "--ignore-eod"};
    for (const std::string& p : kPrompts) a.insert(a.end(), {"--prompt", p});
    return a;
  }

  TempDir tmp_{"generate"};
  std::string hf_ = tmp_ / "hf";
  GptConfig config_;
  Tensor weights_;
};

TEST_F(GenerateCommand, HfFolderGreedyIdsMatchTheEngine) {
  const ChildRun r = troupe(args("--hf", hf_), tmp_);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(ids_lines(r.out), expected());
  // Prompt order, each prompt followed by its continuation.
  EXPECT_EQ(r.out.rfind("==== prompt 1\nHello, my name is", 0), 0u) << r.out;
  EXPECT_LT(r.out.find("==== prompt 1"), r.out.find("==== prompt 2\nThe sea was"));
  EXPECT_NE(r.err.find("[8 tokens, finish: length]"), std::string::npos) << r.err;
}

TEST_F(GenerateCommand, CheckpointWithUnpaddedVocabularyLoadsTheSameWeights) {
  const ParamLayout layout(config_, ChunkSpec::whole_model());
  const std::string root = tmp_ / "ckpt";
  {
    CheckpointWriter w(root, 5);
    for (const ParamInfo& p : layout.params()) {
      Shape shape = p.shape;
      if (p.name == "embedding.word_embeddings.weight") shape[0] = config_.vocab_size;  // unpadded rows
      const Tensor data = weights_.slice(p.offset, shape);
      w.add_shard(0, p.name, shape, ShardSlice::whole(shape), data);
    }
    CheckpointMetadata meta;
    meta.iteration = 5;
    meta.model_config = to_json(config_);
    const std::string dir = w.commit(meta);
    fs::copy_file(fs::path(hf_) / "vocab.json", fs::path(dir) / "vocab.json");
    fs::copy_file(fs::path(hf_) / "merges.txt", fs::path(dir) / "merges.txt");
  }
  const ChildRun r = troupe(args("--load", root), tmp_);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(ids_lines(r.out), expected());
}

// `troupe serve` on the same folder: PUT /api answers with the ids `troupe generate` prints
// (one CPU replica), and SIGTERM stops it cleanly.
TEST_F(GenerateCommand, ServeAnswersLikeGenerateAndStopsOnSigterm) {
  const std::string log = tmp_ / "serve.txt";
  const std::string start = troupe_binary() + " serve --hf '" + hf_ + "' --device cpu --host 127.0.0.1 --port 0 > '" +
                            log + "' 2>&1 & echo $!";
  FILE* p = ::popen(start.c_str(), "r");
  int pid = 0;
  ASSERT_EQ(std::fscanf(p, "%d", &pid), 1);
  ::pclose(p);
  int port = 0;
  for (int i = 0; i < 600 && port == 0; ++i) {  // up to a minute to load and bind
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::ifstream in(log);
    std::stringstream ss;
    ss << in.rdbuf();
    const size_t at = ss.str().find("http://127.0.0.1:");
    if (at != std::string::npos) port = std::atoi(ss.str().c_str() + at + 17);
  }
  ASSERT_GT(port, 0) << "no 'serving' line";
  nlohmann::json body = {{"prompts", kPrompts}, {"tokens_to_generate", 8}, {"temperature", 0}, {"stop_token", 0}};
  const HttpResponse r = http_request("PUT", "127.0.0.1", port, "/api", body.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  const nlohmann::json a = nlohmann::json::parse(r.body);
  const std::vector<std::vector<int32_t>> want = expected();
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    const std::vector<int32_t> all = a["tokens"][i].get<std::vector<int32_t>>();
    const std::vector<int32_t> generated(all.end() - long(want[i].size()), all.end());
    if (std::find(want[i].begin(), want[i].end(), 0) != want[i].end()) continue;  // stop_token 0 came up
    EXPECT_EQ(generated, want[i]) << i;
  }
  ::kill(pid, SIGTERM);
  std::string out;
  for (int i = 0; i < 200 && out.find("stopped") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::ifstream in(log);
    std::stringstream ss;
    ss << in.rdbuf();
    out = ss.str();
  }
  EXPECT_NE(out.find("stopping\nstopped"), std::string::npos) << out;
}

TEST_F(GenerateCommand, ErrorsNameTheFlagOrFile) {
  const ChildRun missing = troupe({"generate", "--load", tmp_ / "nowhere", "--prompt", "x", "--device", "cpu"}, tmp_);
  EXPECT_NE(missing.status, 0);
  EXPECT_NE(missing.err.find("nowhere"), std::string::npos) << missing.err;
  fs::remove(fs::path(hf_) / "vocab.json");
  const ChildRun no_vocab = troupe({"generate", "--hf", hf_, "--prompt", "x", "--device", "cpu"}, tmp_);
  EXPECT_NE(no_vocab.status, 0);
  EXPECT_NE(no_vocab.err.find("--vocab-file"), std::string::npos) << no_vocab.err;
  const ChildRun both = troupe({"generate", "--hf", hf_, "--top-k", "3", "--top-p", "0.5", "--prompt", "x"}, tmp_);
  EXPECT_NE(both.status, 0);
  EXPECT_NE(both.err.find("top_k"), std::string::npos) << both.err;
  const ChildRun no_prompt = troupe({"generate", "--hf", hf_}, tmp_);
  EXPECT_NE(no_prompt.err.find("--prompt"), std::string::npos) << no_prompt.err;
}

}  // namespace
}  // namespace troupe::test
