// POST /v1/chat/completions through a real server on CPU replicas (the tiny GPT-2 of
// tests/serve_test_model with a ChatML-style template): the prompt is the rendered conversation
// encoded as written; the answer has OpenAI's chat shape; streaming sends the same text as a
// plain call; n gives n choices; refused fields and a model without a template are 400s naming
// the field.
#include <nlohmann/json.hpp>

#include "actors/http/http_server.hpp"
#include "actors/serve/chat_api.hpp"
#include "actors/serve/inference_pool.hpp"
#include "tests/http_client.hpp"
#include "tests/serve_test_model.hpp"
#include "tests/sse_client.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

using json = nlohmann::json;

const char* const kTemplate =
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}";

struct ChatServed {
  ChatServed(const ServeTestModel& m, std::shared_ptr<const ChatTemplate> chat)
      : pool(m.replicas(1, 64), {.max_queued_requests = 8}),
        api(pool, m.tok, std::move(chat), {.model_names = {"tiny"}, .stop_tokens = {m.tok.eod()}}),
        http("127.0.0.1", 0, api.routes(), 8) {}
  HttpResponse call(const json& body) {
    return http_request("POST", "127.0.0.1", http.port(), "/v1/chat/completions", body.dump());
  }
  actors::InferencePool pool;
  actors::ChatApi api;
  actors::HttpServer http;
};

std::shared_ptr<const ChatTemplate> tiny_template() {
  return std::make_shared<const ChatTemplate>(ChatTemplate::from_string(kTemplate, json::object(), "test"));
}

const json kMessages = {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hello there"}}};

TEST(ChatApi, AnswersWithTheRenderedConversationAsPrompt) {
  ServeTestModel m(128);
  ChatServed s(m, tiny_template());
  const HttpResponse r = s.call({{"messages", kMessages}, {"max_tokens", 6}, {"temperature", 0}, {"model", "tiny"}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["model"], "tiny");
  ASSERT_EQ(j["choices"].size(), 1u);
  const json& c = j["choices"][0];
  EXPECT_EQ(c["message"]["role"], "assistant");
  EXPECT_EQ(c["finish_reason"], "length");

  // What the engine alone generates from the template's text, encoded as written.
  const std::string prompt = "<|system|>Be brief.\n<|user|>Hello there\n<|assistant|>";
  EXPECT_EQ(tiny_template()->render(kMessages, {}), prompt);
  const std::vector<int32_t> ids = m.tok.encode(prompt);
  const std::vector<int32_t> want =
      m.alone({ids, {.temperature = 0.0f, .max_tokens = 6, .stop_tokens = {m.tok.eod()}}});
  EXPECT_EQ(c["message"]["content"].get<std::string>(), m.tok.decode_skipping_special(want));
  EXPECT_EQ(j["usage"]["prompt_tokens"], ids.size());
  EXPECT_EQ(j["usage"]["completion_tokens"], 6);
  EXPECT_EQ(j["usage"]["total_tokens"], ids.size() + 6);
}

TEST(ChatApi, StreamSendsTheTextOfAPlainCall) {
  ServeTestModel m(128);
  ChatServed s(m, tiny_template());
  const json req = {{"messages", kMessages}, {"max_completion_tokens", 7}, {"temperature", 0}};
  const json plain = json::parse(s.call(req).body);
  json streamed = req;
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  SseClient c("127.0.0.1", s.http.port(), "/v1/chat/completions", streamed.dump());
  ASSERT_EQ(c.head().status, 200) << c.head().body;
  std::vector<json> chunks;
  for (std::optional<std::string> e; (e = c.next()) && *e != "[DONE]";) chunks.push_back(json::parse(*e));
  ASSERT_GE(chunks.size(), 3u);
  EXPECT_EQ(chunks.front()["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  std::string text, finish;
  for (const json& ch : chunks) {
    EXPECT_EQ(ch["object"], "chat.completion.chunk");
    for (const json& choice : ch["choices"]) {
      if (choice["delta"].contains("content")) text += choice["delta"]["content"].get<std::string>();
      if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
    }
  }
  EXPECT_EQ(text, plain["choices"][0]["message"]["content"].get<std::string>());
  EXPECT_EQ(finish, "length");
  EXPECT_TRUE(chunks.back()["choices"].empty());
  EXPECT_EQ(chunks.back()["usage"], plain["usage"]);
}

TEST(ChatApi, NGivesChoicesThatDrawFromTheirOwnGenerators) {
  ServeTestModel m(128);
  ChatServed s(m, tiny_template());
  const HttpResponse r =
      s.call({{"messages", kMessages}, {"max_tokens", 8}, {"temperature", 1.5}, {"seed", 3}, {"n", 3}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = json::parse(r.body);
  ASSERT_EQ(j["choices"].size(), 3u);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(j["choices"][k]["index"], k);
  // Choice k samples with seed 3 + k: choice 1 is what a single call with seed 4 gets.
  const json one =
      json::parse(s.call({{"messages", kMessages}, {"max_tokens", 8}, {"temperature", 1.5}, {"seed", 4}}).body);
  EXPECT_EQ(j["choices"][1]["message"]["content"], one["choices"][0]["message"]["content"]);
  EXPECT_EQ(j["usage"]["completion_tokens"], 24);
}

TEST(ChatApi, RefusesWhatItWouldGetWrong) {
  ServeTestModel m(128);
  ChatServed s(m, tiny_template());
  const std::vector<std::pair<json, std::string>> bad = {
      {{{"messages", kMessages}, {"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}}}}, "tools"},
      {{{"messages", kMessages}, {"presence_penalty", 2.5}}, "presence_penalty"},
      {{{"messages", kMessages}, {"top_logprobs", 2}}, "top_logprobs"},
      {{{"messages", kMessages}, {"logprobs", true}, {"stream", true}}, "logprobs"},
      {{{"messages", kMessages}, {"best_of", 2}}, "best_of"},
      {{{"messages", kMessages}, {"response_format", {{"type", "json_object"}}}}, "response_format"},
      {{{"messages", kMessages}, {"frobnicate", 1}}, "frobnicate"},
      {{{"messages", json::array()}}, "messages"},
      {{{"messages", {{{"role", "wizard"}, {"content", "hi"}}}}}, "messages"},
      {{{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}}, "messages"},
      {{{"messages", kMessages}, {"max_tokens", 4}, {"max_completion_tokens", 4}}, "max_completion_tokens"},
  };
  for (const auto& [body, param] : bad) {
    const HttpResponse r = s.call(body);
    EXPECT_EQ(r.status, 400) << body.dump();
    EXPECT_EQ(json::parse(r.body)["error"]["param"], param) << r.body;
  }
}

TEST(ChatApi, ModelWithoutTemplateIsRefusedSaying) {
  ServeTestModel m(128);
  ChatServed s(m, nullptr);
  const HttpResponse r = s.call({{"messages", kMessages}});
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(json::parse(r.body)["error"]["message"].get<std::string>().find("no chat template"), std::string::npos);
}

}  // namespace
}  // namespace troupe::test
