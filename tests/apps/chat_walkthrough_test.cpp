// The walk-through of docs/walkthrough-llama3.md, from the command line on the CPU: a small
// Llama-3-shaped model (rope theta 500000, llama3 frequency scaling, GQA, SwiGLU, RMSNorm) with
// the real Llama 3 tokenizer goes `preprocess` (int32 ids, its eos as the EOD) -> `train`
// (TP2 x PP2 on four CPU devices) -> `convert --to hf` -> `serve`, and the official OpenAI
// client for Node gets chat completions from it (plain, streamed, n = 2) and a 400 naming a
// refused field. (That transformers gives the converted folder the same logits is checked on
// the GPU machine: scripts/check_hf_export.py.)
#include <nlohmann/json.hpp>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "data/chat/chat_template.hpp"
#include "data/indexed_dataset.hpp"
#include "data/tokenizer.hpp"
#include "tests/test_util.hpp"
#include "tests/troupe_process.hpp"

namespace troupe::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;

struct ChildRun {
  int status = -1;
  std::string out;
};

ChildRun run_troupe(const std::vector<std::string>& args, const std::string& log, std::chrono::seconds limit) {
  Troupe p(args, log);
  const std::optional<int> code = p.wait(limit);
  return {code.value_or(-1), p.output()};
}

// The first `n` documents of the Moby-Dick corpus, as a JSON-lines file.
void write_documents(const std::string& path, int n) {
  std::ifstream in(source_path("assets/corpora/moby-dick.jsonl"));
  std::ofstream out(path);
  std::string line;
  for (int i = 0; i < n && std::getline(in, line); ++i) out << line << "\n";
}

TEST(ChatWalkthrough, PreprocessTrainConvertServeChat) {
  TempDir tmp("walkthrough");
  const std::string tokenizer = source_path("assets/tokenizers/llama3");
  write_documents(tmp / "docs.jsonl", 12);

  // preprocess: ids past 65,535 need int32; every document ends with the tokenizer's eos.
  ChildRun pre =
      run_troupe({"preprocess", "--input", tmp / "docs.jsonl", "--output-prefix", tmp / "moby", "--tokenizer-type",
                  "HuggingFaceTokenizer", "--tokenizer-model", tokenizer, "--append-eod", "--workers", "2"},
                 tmp / "preprocess.txt", 120s);
  ASSERT_EQ(pre.status, 0) << pre.out;
  const std::string prefix = tmp / "moby_text_document";
  const IndexedDataset data = IndexedDataset::open(prefix);
  EXPECT_EQ(data.dtype(), TokenDtype::i32);
  ASSERT_EQ(data.num_documents(), 12);
  TokenizerOptions topt;
  topt.type = "HuggingFaceTokenizer";
  topt.tokenizer_model = tokenizer;
  const std::unique_ptr<Tokenizer> tok = build_tokenizer(topt);
  ASSERT_EQ(tok->token_id("<|end_of_text|>"), std::optional<int32_t>(tok->eod()));
  {
    std::ifstream in(tmp / "docs.jsonl");
    std::string first;
    std::getline(in, first);
    std::vector<int32_t> want;
    tok->encode_with_special_tokens_append(json::parse(first)["text"].get<std::string>(), want);
    want.push_back(tok->eod());
    EXPECT_EQ(data.get(0), want);
  }

  // train: TP2 x PP2 on four CPU devices, saving a checkpoint with the tokenizer files.
  const std::vector<std::string> model = {"--num-layers",
                                          "4",
                                          "--hidden-size",
                                          "64",
                                          "--num-attention-heads",
                                          "4",
                                          "--group-query-attention",
                                          "--num-query-groups",
                                          "2",
                                          "--ffn-hidden-size",
                                          "128",
                                          "--seq-length",
                                          "64",
                                          "--max-position-embeddings",
                                          "256",
                                          "--normalization",
                                          "RMSNorm",
                                          "--position-embedding-type",
                                          "rope",
                                          "--rotary-base",
                                          "500000",
                                          "--use-rope-scaling",
                                          "--swiglu",
                                          "--disable-bias-linear",
                                          "--untie-embeddings-and-output-weights"};
  std::vector<std::string> train = {"train",
                                    "--device",
                                    "cpu",
                                    "--devices",
                                    "4",
                                    "--tensor-model-parallel-size",
                                    "2",
                                    "--pipeline-model-parallel-size",
                                    "2",
                                    "--micro-batch-size",
                                    "1",
                                    "--global-batch-size",
                                    "2",
                                    "--train-iters",
                                    "3",
                                    "--lr",
                                    "1e-3",
                                    "--eval-iters",
                                    "0",
                                    "--log-interval",
                                    "1",
                                    "--split",
                                    "100,0,0",
                                    "--data-path",
                                    prefix,
                                    "--tokenizer-type",
                                    "HuggingFaceTokenizer",
                                    "--tokenizer-model",
                                    tokenizer,
                                    "--save",
                                    tmp / "ckpt"};
  train.insert(train.end(), model.begin(), model.end());
  ChildRun tr = run_troupe(train, tmp / "train.txt", 300s);
  ASSERT_EQ(tr.status, 0) << tr.out;

  // convert --to hf: a Llama config with the llama3 rope scaling, and the tokenizer files.
  ChildRun conv =
      run_troupe({"convert", "--to", "hf", "--load", tmp / "ckpt", "--output", tmp / "hf"}, tmp / "convert.txt", 120s);
  ASSERT_EQ(conv.status, 0) << conv.out;
  std::ifstream config_file(tmp / "hf/config.json");
  const json config = json::parse(config_file);
  EXPECT_EQ(config["architectures"], json({"LlamaForCausalLM"}));
  EXPECT_EQ(config["rope_theta"], 500000.0);
  EXPECT_EQ(config["rope_scaling"]["rope_type"], "llama3");
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) EXPECT_TRUE(fs::exists(tmp.path() / "hf" / f)) << f;

  // serve the HF folder; the OpenAI client chats with it.
  Troupe serve({"serve", "--hf", tmp / "hf", "--device", "cpu", "--host", "127.0.0.1", "--port", "0",
                "--served-model-name", "tiny-llama3"},
               tmp / "serve.txt");
  const std::string banner = serve.await_output("http://127.0.0.1:", 120s);
  const int port = std::atoi(banner.c_str() + banner.find("http://127.0.0.1:") + 17);
  ASSERT_GT(port, 0) << banner;
  const json got =
      json::parse(run_node("openai_chat.mjs", {"http://127.0.0.1:" + std::to_string(port) + "/v1", "tiny-llama3"}));
  EXPECT_EQ(got["models"], json({"tiny-llama3"}));
  EXPECT_EQ(got["plain"]["object"], "chat.completion");
  EXPECT_EQ(got["plain"]["role"], "assistant");
  EXPECT_EQ(got["plain"]["n"], 1);
  // The prompt is the Llama 3 template's rendering, encoded as written.
  const ChatTemplate chat = ChatTemplate::from_tokenizer_config(tokenizer + "/tokenizer_config.json");
  const json messages = {{{"role", "system"}, {"content", "You are a terse assistant."}},
                         {{"role", "user"}, {"content", "Name a whale."}}};
  EXPECT_EQ(got["plain"]["usage"]["prompt_tokens"], tok->encode(chat.render(messages, {})).size());
  EXPECT_LE(got["plain"]["usage"]["completion_tokens"].get<int>(), 12);
  EXPECT_EQ(got["streamed"]["content"], got["plain"]["content"]);  // greedy both times
  EXPECT_EQ(got["streamed"]["role"], "assistant");
  EXPECT_EQ(got["streamed"]["finish_reason"], got["plain"]["finish_reason"]);
  EXPECT_EQ(got["streamed"]["usage"], got["plain"]["usage"]);
  EXPECT_EQ(got["two"].size(), 2u);
  EXPECT_EQ(got["error"]["status"], 400);
  EXPECT_EQ(got["error"]["param"], "tools");
  serve.signal(SIGTERM);
  EXPECT_EQ(serve.wait(20s), std::optional<int>(0)) << serve.output();
}

}  // namespace
}  // namespace troupe::test
