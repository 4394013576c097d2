// `troupe serve --served-model-name tiny alias --api-key KEY` on a tiny GPT-2 folder, driven
// by the official OpenAI client for Node (tests/node/openai_clients.mjs): models, completions
// (text, token-id prompts, logprobs, penalties, logit_bias, streamed), chat (logprobs,
// streamed = plain), and the errors a client sees: 401 for a wrong key, 404 for an unknown
// model, 400 naming a field out of range.
#include <signal.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "model/hf/hf_checkpoint.hpp"
#include "tests/inference_test_util.hpp"
#include "tests/test_util.hpp"
#include "tests/troupe_process.hpp"

namespace troupe::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;

TEST(OpenAiNode, OfficialClientGetsWhatItAsksFor) {
  TempDir tmp{"openai_node"};
  const std::string hf = tmp / "hf";
  const GptConfig config = tiny_inference_config(false, 32, 64, 50257);
  const ParamLayout layout(config, ChunkSpec::whole_model());
  save_hf_checkpoint(hf, layout, HfArch::gpt2, random_normal({layout.size()}, 4, 0.3f));
  fs::copy_file(source_path("assets/gpt2/gpt2-vocab.json"), fs::path(hf) / "vocab.json");
  fs::copy_file(source_path("assets/gpt2/gpt2-merges.txt"), fs::path(hf) / "merges.txt");
  // A chat template for /v1/chat/completions.
  std::ofstream(tmp / "chat.jinja") << "{% for m in messages %}{{ m.content }}\n{% endfor %}";

  Troupe serve({"serve", "--hf", hf, "--device", "cpu", "--host", "127.0.0.1", "--port", "0", "--served-model-name",
                "tiny", "alias", "--api-key", "k3y", "--chat-template", tmp / "chat.jinja"},
               tmp / "serve.txt");
  const std::string banner = serve.await_output("http://127.0.0.1:", 60s);
  const int port = std::atoi(banner.c_str() + banner.find("http://127.0.0.1:") + 17);
  ASSERT_GT(port, 0) << banner;
  const json out =
      json::parse(run_node("openai_clients.mjs", {"http://127.0.0.1:" + std::to_string(port) + "/v1", "tiny", "k3y"}));

  EXPECT_EQ(out["models"], json({"tiny", "alias"}));
  const json& c = out["completion"];
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["model"], "tiny");
  EXPECT_EQ(c["usage"]["completion_tokens"].get<size_t>(), c["top"].size());
  for (const json& k : c["top"]) EXPECT_GE(k.get<int>(), 1);
  EXPECT_EQ(out["ids"], json({0, 1, 2, 3}));
  EXPECT_EQ(out["completion_streamed"]["text"], c["text"]);
  EXPECT_EQ(out["completion_streamed"]["usage"], c["usage"]);
  EXPECT_EQ(out["completion_streamed"]["finish_reason"], c["finish_reason"]);
  const json& chat = out["chat"];
  EXPECT_EQ(chat["model"], "alias");
  ASSERT_EQ(chat["logprobs"].size(), chat["usage"]["completion_tokens"].get<size_t>());
  for (const json& k : chat["logprobs"]) EXPECT_EQ(k, 2);
  EXPECT_EQ(out["chat_streamed"], out["chat_plain"]);
  EXPECT_EQ(out["wrong_key"]["status"], 401) << out.dump();
  EXPECT_EQ(out["unknown_model"]["status"], 404) << out.dump();
  EXPECT_NE(out["unknown_model"]["message"].get<std::string>().find("The model 'gpt-4' does not exist"),
            std::string::npos);
  EXPECT_EQ(out["out_of_range"]["status"], 400);
  EXPECT_EQ(out["out_of_range"]["param"], "frequency_penalty");

  serve.signal(SIGTERM);
  EXPECT_EQ(serve.wait(20s), std::optional<int>(0)) << serve.output();
}

}  // namespace
}  // namespace troupe::test
