// The OpenAI / vLLM request fields of /v1/completions and /v1/chat/completions through a real
// server on a CPU replica (tests/serve_test_model): served model names (404 for others),
// prompts as token ids and lists, logit_bias, stop_token_ids, min_tokens, ignore_eos (the EOS
// token never shows in the text), penalties (the engine alone with the same parameters),
// logprobs with top alternatives in both shapes, out-of-range values as 400s naming the
// field, fields accepted with no effect, GET /metrics, and the --api-key check.
#include <nlohmann/json.hpp>

#include "actors/http/http_server.hpp"
#include "actors/serve/api_key.hpp"
#include "actors/serve/chat_api.hpp"
#include "actors/serve/completion_api.hpp"
#include "actors/serve/inference_pool.hpp"
#include "tests/http_client.hpp"
#include "tests/serve_test_model.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

using json = nlohmann::json;

struct Served {
  explicit Served(const ServeTestModel& m)
      : pool(m.replicas(1, 64), {.max_queued_requests = 16}),
        api(pool, m.tok, {.model_names = {"tiny", "alias"}, .stop_tokens = {m.tok.eod()}}),
        chat(pool, m.tok,
             std::make_shared<const ChatTemplate>(ChatTemplate::from_string(
                 "{% for m in messages %}{{ m.content }}{% endfor %}", json::object(), "test")),
             {.model_names = {"tiny", "alias"}, .stop_tokens = {m.tok.eod()}}),
        http("127.0.0.1", 0, routes(), 8) {}
  std::vector<actors::HttpRoute> routes() {
    std::vector<actors::HttpRoute> r = api.routes();
    for (actors::HttpRoute& c : chat.routes()) r.push_back(std::move(c));
    return r;
  }
  HttpResponse post(const char* path, const json& body) {
    return http_request("POST", "127.0.0.1", http.port(), path, body.dump());
  }
  json completion(const json& body) {
    const HttpResponse r = post("/v1/completions", body);
    EXPECT_EQ(r.status, 200) << body.dump() << " -> " << r.body;
    return json::parse(r.body);
  }
  actors::InferencePool pool;
  actors::CompletionApi api;
  actors::ChatApi chat;
  actors::HttpServer http;
};

TEST(OpenAiFields, ServedModelNamesAreListedAndOthersAre404) {
  ServeTestModel m(128);
  Served s(m);
  const json models = json::parse(http_get("127.0.0.1", s.http.port(), "/v1/models").body);
  ASSERT_EQ(models["data"].size(), 2u);
  EXPECT_EQ(models["data"][0]["id"], "tiny");
  EXPECT_EQ(models["data"][1]["id"], "alias");
  EXPECT_EQ(s.completion({{"prompt", "Hi"}, {"max_tokens", 2}, {"model", "alias"}})["model"], "alias");
  const json completion = {{"prompt", "Hi"}, {"model", "x"}};
  const json chat = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"model", "x"}};
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    const HttpResponse r = s.post(path, std::string(path) == "/v1/completions" ? completion : chat);
    EXPECT_EQ(r.status, 404) << path << " " << r.body;
    EXPECT_EQ(json::parse(r.body)["error"]["message"], "The model 'x' does not exist.") << path;
  }
}

TEST(OpenAiFields, PromptsAsTokenIdsAndListsGetNChoicesEach) {
  ServeTestModel m(128);
  Served s(m);
  const std::vector<int32_t> ids = m.tok.encode("Hello there");
  const json base = {{"max_tokens", 4}, {"temperature", 0}};
  json as_text = base, as_ids = base, mixed = base;
  as_text["prompt"] = "Hello there";
  as_ids["prompt"] = ids;
  mixed["prompt"] = {json(ids), json("x")};
  mixed["n"] = 2;
  mixed["echo"] = true;
  const json a = s.completion(as_text), b = s.completion(as_ids), c = s.completion(mixed);
  EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]);
  ASSERT_EQ(c["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(c["choices"][i]["index"], i);
  EXPECT_EQ(c["choices"][1]["text"].get<std::string>(), "Hello there" + a["choices"][0]["text"].get<std::string>());
  EXPECT_EQ(c["choices"][2]["text"].get<std::string>().rfind("x", 0), 0u);  // echoed prompt 1
  const HttpResponse bad = s.post("/v1/completions", {{"prompt", {1, 99999999}}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(json::parse(bad.body)["error"]["param"], "prompt");
}

TEST(OpenAiFields, EosNeverShowsAndIgnoreEosKeepsGenerating) {
  ServeTestModel m(128);
  Served s(m);
  const json eos_bias = {{std::to_string(m.tok.eod()), 100}};
  const json stopped =
      s.completion({{"prompt", "Hi"}, {"max_tokens", 5}, {"temperature", 0}, {"logit_bias", eos_bias}});
  EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(stopped["choices"][0]["text"], "");
  EXPECT_EQ(stopped["usage"]["completion_tokens"], 1);
  const json ignored = s.completion(
      {{"prompt", "Hi"}, {"max_tokens", 3}, {"temperature", 0}, {"logit_bias", eos_bias}, {"ignore_eos", true}});
  EXPECT_EQ(ignored["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(ignored["usage"]["completion_tokens"], 3);
  EXPECT_EQ(ignored["choices"][0]["text"], "");  // three EOS tokens, none as text
  // min_tokens masks EOS: the biased EOS comes only after two other tokens.
  const json late = s.completion(
      {{"prompt", "Hi"}, {"max_tokens", 5}, {"temperature", 0}, {"logit_bias", eos_bias}, {"min_tokens", 2}});
  EXPECT_EQ(late["usage"]["completion_tokens"], 3);
  EXPECT_EQ(late["choices"][0]["finish_reason"], "stop");
}

TEST(OpenAiFields, StopTokenIdsEndTheChoiceWithoutTheirText) {
  ServeTestModel m(128);
  Served s(m);
  const std::vector<int32_t> ids = m.tok.encode("Hello there");
  const std::vector<int32_t> gen = m.alone({ids, {.temperature = 0.0f, .max_tokens = 4, .stop_tokens = {m.tok.eod()}}});
  ASSERT_GE(gen.size(), 2u);
  const json j =
      s.completion({{"prompt", "Hello there"}, {"max_tokens", 4}, {"temperature", 0}, {"stop_token_ids", {gen[1]}}});
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["completion_tokens"], 2);
  EXPECT_EQ(j["choices"][0]["text"], m.tok.decode_skipping_special(std::vector<int32_t>{gen[0]}));
}

TEST(OpenAiFields, PenaltiesAndBiasGiveWhatTheEngineGivesWithThem) {
  ServeTestModel m(128);
  Served s(m);
  const std::vector<int32_t> ids = m.tok.encode("Hello there");
  SamplingParams p{.temperature = 0.0f, .max_tokens = 8, .stop_tokens = {m.tok.eod()}};
  p.frequency_penalty = 1.5f;
  p.presence_penalty = 0.5f;
  p.repetition_penalty = 1.3f;
  p.logit_bias = {{13, 2.0f}};
  const std::vector<int32_t> want = m.alone({ids, p});
  const json j = s.completion({{"prompt", "Hello there"},
                               {"max_tokens", 8},
                               {"temperature", 0},
                               {"frequency_penalty", 1.5},
                               {"presence_penalty", 0.5},
                               {"repetition_penalty", 1.3},
                               {"logit_bias", {{"13", 2.0}}}});
  EXPECT_EQ(j["choices"][0]["text"], m.tok.decode_skipping_special(want));
  const std::vector<int32_t> plain =
      m.alone({ids, {.temperature = 0.0f, .max_tokens = 8, .stop_tokens = {m.tok.eod()}}});
  EXPECT_NE(want, plain) << "the penalties changed nothing: the test shows nothing";
}

TEST(OpenAiFields, LogprobsWithTopAlternativesInBothShapes) {
  ServeTestModel m(128);
  Served s(m);
  const json c = s.completion({{"prompt", "Hello"}, {"max_tokens", 3}, {"temperature", 0}, {"logprobs", 3}});
  const json& lp = c["choices"][0]["logprobs"];
  ASSERT_EQ(lp["top_logprobs"].size(), 3u);
  for (const json& top : lp["top_logprobs"]) EXPECT_GE(top.size(), 2u);  // 3 ids; pieces may decode alike
  // Greedy: the chosen token is the most likely one.
  double best = -1e9;
  for (const auto& [piece, v] : lp["top_logprobs"][0].items()) best = std::max(best, v.get<double>());
  EXPECT_NEAR(lp["token_logprobs"][0].get<double>(), best, 1e-5);

  const HttpResponse r = s.post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "Hello"}}}},
                                                         {"max_tokens", 3},
                                                         {"temperature", 0},
                                                         {"logprobs", true},
                                                         {"top_logprobs", 2}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json content = json::parse(r.body)["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 3u);
  EXPECT_EQ(content[0]["top_logprobs"].size(), 2u);
  EXPECT_NEAR(content[0]["logprob"].get<double>(), content[0]["top_logprobs"][0]["logprob"].get<double>(), 1e-5);
  EXPECT_TRUE(content[0]["bytes"].is_array());
}

TEST(OpenAiFields, BadValuesAre400sNamingTheFieldAndNeutralFieldsAreAccepted) {
  ServeTestModel m(128);
  Served s(m);
  const std::vector<std::pair<json, std::string>> bad = {
      {{{"frequency_penalty", 3}}, "frequency_penalty"},
      {{{"presence_penalty", -2.5}}, "presence_penalty"},
      {{{"repetition_penalty", 0}}, "repetition_penalty"},
      {{{"logit_bias", {{"abc", 1}}}}, "logit_bias"},
      {{{"logit_bias", {{"5", 101}}}}, "logit_bias"},
      {{{"logit_bias", {{"99999999", 1}}}}, "logit_bias"},
      {{{"min_tokens", 20}}, "min_tokens"},
      {{{"stop_token_ids", {-1}}}, "stop_token_ids"},
      {{{"best_of", 3}}, "best_of"},
      {{{"suffix", "end"}}, "suffix"},
      {{{"logprobs", 21}}, "logprobs"},
      {{{"ignore_eos", 1}}, "ignore_eos"},
      {{{"echo", true}, {"logprobs", 1}}, "echo"},  // the prompt's log probabilities: not implemented
      {{{"echo", true}, {"logprobs", true}}, "echo"},
  };
  for (const auto& [fields, param] : bad) {
    json body = {{"prompt", "Hi"}, {"max_tokens", 4}};
    body.update(fields);
    const HttpResponse r = s.post("/v1/completions", body);
    EXPECT_EQ(r.status, 400) << body.dump();
    EXPECT_EQ(json::parse(r.body)["error"]["param"], param) << r.body;
  }
  const json ok = s.completion({{"prompt", "Hi"},
                                {"max_tokens", 2},
                                {"user", "u"},
                                {"service_tier", "auto"},
                                {"metadata", {{"k", "v"}}},
                                {"store", false},
                                {"best_of", 1},
                                {"suffix", ""}});
  EXPECT_EQ(ok["choices"].size(), 1u);
}

TEST(OpenAiFields, MetricsCountRequestsAndTokensInVllmNames) {
  ServeTestModel m(128);
  Served s(m);
  s.completion({{"prompt", "Hello there"}, {"max_tokens", 4}, {"temperature", 0}, {"n", 2}});
  const HttpResponse r = http_get("127.0.0.1", s.http.port(), "/metrics");
  ASSERT_EQ(r.status, 200);
  const std::string prompt_tokens = std::to_string(2 * m.tok.encode("Hello there").size());
  for (const std::string& line :
       {std::string("vllm:generation_tokens_total{model_name=\"tiny\"} 8"),
        "vllm:prompt_tokens_total{model_name=\"tiny\"} " + prompt_tokens,
        std::string("vllm:num_requests_running{model_name=\"tiny\"} 0"),
        std::string("vllm:num_requests_waiting{model_name=\"tiny\"} 0"),
        std::string("# TYPE vllm:time_to_first_token_seconds histogram"),
        std::string("vllm:time_to_first_token_seconds_count{model_name=\"tiny\"} 2"),
        std::string("vllm:e2e_request_latency_seconds_bucket{model_name=\"tiny\",le=\"+Inf\"} 2"),
        std::string("vllm:time_per_output_token_seconds_count{model_name=\"tiny\"} 6")})
    EXPECT_NE(r.body.find(line + "\n"), std::string::npos) << line << "\n" << r.body;
}

TEST(OpenAiFields, ApiKeyGuardsV1Only) {
  const auto admit = actors::api_key_check("s3cret");
  ASSERT_TRUE(admit);
  actors::HttpRequest r;
  r.path = "/v1/models";
  const std::optional<actors::HttpReply> none = admit(r);
  ASSERT_TRUE(none.has_value());
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(json::parse(none->body)["error"]["type"], "invalid_request_error");
  r.headers = {{"authorization", "Bearer wrong"}};
  EXPECT_EQ(admit(r)->status, 401);
  r.headers = {{"Authorization", "Bearer s3cret"}};
  EXPECT_FALSE(admit(r).has_value());
  r.headers.clear();
  r.path = "/health";
  EXPECT_FALSE(admit(r).has_value());
  EXPECT_FALSE(actors::api_key_check(""));  // no key: no check
}

}  // namespace
}  // namespace troupe::test
