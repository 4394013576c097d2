// `troupe serve`'s HTTP API beyond plain answers, through a real server on CPU replicas:
// "stream": true sends the same tokens as a plain call, one event each; a client that leaves
// mid-stream cancels its request and its KV blocks come back; a full pool answers 503; bad
// requests are 400 with a JSON error naming the field; GET /v1/models and /health.
#include <nlohmann/json.hpp>

#include <chrono>
#include <future>
#include <thread>

#include "actors/serve/completion_api.hpp"
#include "actors/http/http_server.hpp"
#include "actors/serve/inference_pool.hpp"
#include "tests/http_client.hpp"
#include "tests/serve_test_model.hpp"
#include "tests/sse_client.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

// A pool of one replica behind the API and an HTTP server on a free loopback port.
struct Served {
  Served(const ServeTestModel& m, int64_t num_blocks, int64_t max_queued)
      : pool(m.replicas(1, num_blocks), {.max_queued_requests = max_queued}),
        api(pool, m.tok, {.model_names = {"tiny"}}),
        http("127.0.0.1", 0, api.routes(), 8) {}
  HttpResponse call(const char* method, const char* path, const json& body) {
    return http_request(method, "127.0.0.1", http.port(), path, body.dump());
  }
  // Polls until `done` holds (true) or `limit` passes (false).
  bool wait_for(const std::function<bool(const actors::PoolStats&)>& done, std::chrono::milliseconds limit) {
    for (auto end = std::chrono::steady_clock::now() + limit; std::chrono::steady_clock::now() < end;) {
      if (done(pool.stats())) return true;
      std::this_thread::sleep_for(5ms);
    }
    return done(pool.stats());
  }

  actors::InferencePool pool;
  actors::CompletionApi api;
  actors::HttpServer http;
};

TEST(CompletionStream, EventsCarryTheTokensOfAPlainCall) {
  ServeTestModel m;
  Served s(m, 32, 8);
  const json req = {{"prompt", "Hello there"}, {"max_tokens", 7}, {"temperature", 0}, {"logprobs", 1}};
  const HttpResponse plain = s.call("POST", "/v1/completions", req);
  ASSERT_EQ(plain.status, 200) << plain.body;
  const json p = json::parse(plain.body);
  EXPECT_EQ(p["usage"]["completion_tokens"], 7);

  json streamed = req;
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  SseClient c("127.0.0.1", s.http.port(), "/v1/completions", streamed.dump());
  ASSERT_EQ(c.head().status, 200) << c.head().body;
  EXPECT_EQ(c.head().headers.at("content-type"), "text/event-stream");
  std::vector<json> chunks;
  std::string text, last;
  for (std::optional<std::string> e; (e = c.next());) {
    last = *e;
    if (*e == "[DONE]") break;
    chunks.push_back(json::parse(*e));
  }
  EXPECT_EQ(last, "[DONE]");
  ASSERT_EQ(chunks.size(), 8u);  // a chunk per token, then the usage chunk
  for (size_t i = 0; i < 7; ++i) {
    const json& ch = chunks[i]["choices"][0];
    EXPECT_EQ(chunks[i]["object"], "text_completion");
    EXPECT_EQ(chunks[i]["model"], "tiny");
    EXPECT_EQ(ch["index"], 0);
    EXPECT_EQ(ch["finish_reason"], i == 6 ? json("length") : json(nullptr));
    EXPECT_FLOAT_EQ(ch["logprobs"]["token_logprobs"][0].get<float>(),
                    p["choices"][0]["logprobs"]["token_logprobs"][i].get<float>());
    text += ch["text"].get<std::string>();
  }
  EXPECT_EQ(text, p["choices"][0]["text"].get<std::string>());
  EXPECT_TRUE(chunks[7]["choices"].empty());
  EXPECT_EQ(chunks[7]["usage"], p["usage"]);
  EXPECT_FALSE(c.next().has_value());  // the reply ends after [DONE]
}

TEST(CompletionStream, StopStringCutsTheStreamedText) {
  ServeTestModel m;
  Served s(m, 32, 8);
  const json req = {{"prompt", "Hello there"}, {"max_tokens", 8}, {"temperature", 0}};
  const std::string full = json::parse(s.call("POST", "/v1/completions", req).body)["choices"][0]["text"];
  ASSERT_GE(full.size(), 4u);
  const std::string stop = full.substr(full.size() / 2, 2);
  json streamed = req;
  streamed["stream"] = true;
  streamed["stop"] = stop;
  SseClient c("127.0.0.1", s.http.port(), "/v1/completions", streamed.dump());
  std::string text, finish;
  for (std::optional<std::string> e; (e = c.next()) && *e != "[DONE]";) {
    const json ch = json::parse(*e)["choices"][0];
    text += ch["text"].get<std::string>();
    if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
  }
  EXPECT_EQ(text, full.substr(0, full.find(stop)));
  EXPECT_EQ(finish, "stop");
}

TEST(CompletionStream, ClientThatLeavesCancelsItsRequestAndFreesItsBlocks) {
  ServeTestModel m(1024);  // room for a long request: it cannot end by itself within the test
  Served s(m, 160, 8);
  const actors::PoolStats idle = s.pool.stats();
  ASSERT_EQ(idle.free_kv_blocks, 160);
  const json req = {{"prompt", "Hello there"}, {"max_tokens", 1000}, {"temperature", 0}, {"stream", true}};
  auto c = std::make_unique<SseClient>("127.0.0.1", s.http.port(), "/v1/completions", req.dump());
  ASSERT_EQ(c->head().status, 200);
  ASSERT_TRUE(c->next().has_value());
  EXPECT_TRUE(s.wait_for([](const actors::PoolStats& st) { return st.free_kv_blocks < 160; }, 5s))
      << "the running request holds blocks";
  EXPECT_EQ(s.pool.stats().pending, 1);
  c.reset();  // closes the socket mid-stream
  EXPECT_TRUE(s.wait_for([](const actors::PoolStats& st) { return st.pending == 0 && st.free_kv_blocks == 160; }, 10s))
      << "pending " << s.pool.stats().pending << ", free blocks " << s.pool.stats().free_kv_blocks;
  EXPECT_EQ(s.pool.stats().cancelled, 1);
}

// curl's -d sends JSON as application/x-www-form-urlencoded: a call of 128 prompts (over the
// 8 KiB cpp-httplib allows such bodies by default) is answered, not refused with an empty 413.
TEST(CompletionStream, LongBodiesOfAnyContentTypeAreRead) {
  ServeTestModel m;
  Served s(m, 64, 200);
  json prompts = json::array();
  for (int i = 0; i < 128; ++i)
    prompts.push_back("A prompt, number " + std::to_string(i) + ", for the model to continue: it was a dark night.");
  const std::string body = json{{"prompts", prompts}, {"tokens_to_generate", 1}, {"temperature", 0}}.dump();
  ASSERT_GT(body.size(), 8192u);
  const HttpResponse r =
      http_request("PUT", "127.0.0.1", s.http.port(), "/api", body, 60, "application/x-www-form-urlencoded");
  ASSERT_EQ(r.status, 200) << r.body.substr(0, 300);
  EXPECT_EQ(json::parse(r.body)["text"].size(), 128u);
}

TEST(CompletionStream, FullPoolAnswers503) {
  ServeTestModel m;
  Served s(m, 32, /*max_queued=*/1);
  ASSERT_EQ(s.pool.stats().capacity, 5);  // 4 running slots + 1 queued
  // Requests whose first token blocks the worker until `release`: the pool stays full.
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  for (int i = 0; i < 5; ++i) {
    s.pool.submit(
        {{1, 2, 3}, {.max_tokens = 2}}, [released](const TokenEvent&) { released.wait(); }, nullptr);
  }
  EXPECT_THROW(s.pool.submit({{1, 2, 3}, {.max_tokens = 2}}, nullptr, nullptr), actors::PoolFull);
  for (const char* path : {"/v1/completions", "/api"}) {
    const json body = std::string(path) == "/api" ? json{{"prompts", {"Hi"}}, {"tokens_to_generate", 2}}
                                                  : json{{"prompt", "Hi"}, {"max_tokens", 2}};
    const HttpResponse r = s.call(std::string(path) == "/api" ? "PUT" : "POST", path, body);
    EXPECT_EQ(r.status, 503) << path << ": " << r.body;
    EXPECT_NE(json::parse(r.body)["error"]["message"].get<std::string>().find("--max-queued-requests"),
              std::string::npos);
  }
  json streamed = {{"prompt", "Hi"}, {"max_tokens", 2}, {"stream", true}};
  EXPECT_EQ(s.call("POST", "/v1/completions", streamed).status, 503);
  EXPECT_EQ(json::parse(http_get("127.0.0.1", s.http.port(), "/health").body)["pending_requests"], 5);
  release.set_value();
  ASSERT_TRUE(s.wait_for([](const actors::PoolStats& st) { return st.pending == 0; }, 10s));
  EXPECT_EQ(s.call("POST", "/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 2}}).status, 200);
}

TEST(CompletionStream, BadRequestsNameTheField) {
  ServeTestModel m;
  Served s(m, 32, 8);
  std::string long_prompt;  // 100 tokens: over the 64 a step (and the context) takes
  for (int i = 0; i < 100; ++i) long_prompt += " hello";
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"prompt", "x"}, {"max_tokens", 2}, {"frobnicate", 1}}, "frobnicate"},
      {{{"prompt", "x"}, {"top_k", 2}, {"top_p", 0.5}}, "top_p"},
      {{{"prompt", "x"}, {"max_tokens", 0}}, "max_tokens"},
      {{{"prompt", "x"}, {"temperature", -1}}, "temperature"},
      {{{"prompt", "x"}, {"n", 0}}, "n"},
      {{{"prompt", "x"}, {"n", 4294967297LL}}, "n"},
      {{{"prompt", "x"}, {"top_k", 4294967297LL}}, "top_k"},
      {{{"prompt", "x"}, {"frequency_penalty", 9}}, "frequency_penalty"},
      {{{"prompt", "x"}, {"stream", true}, {"echo", true}}, "echo"},
      {{{"max_tokens", 2}}, "prompt"},
      {{{"prompt", long_prompt}, {"max_tokens", 2}}, "prompt"},
      {{{"prompt", long_prompt}, {"max_tokens", 2}, {"stream", true}}, "prompt"},
  };
  for (const auto& [body, field] : cases) {
    const HttpResponse r = s.call("POST", "/v1/completions", body);
    ASSERT_EQ(r.status, 400) << body.dump() << " -> " << r.body;
    const json e = json::parse(r.body)["error"];
    EXPECT_EQ(e["param"], field) << r.body;
    EXPECT_EQ(e["type"], "invalid_request_error");
  }
  const HttpResponse bad_api = s.call("PUT", "/api", {{"prompts", {"x"}}, {"add_BOS", true}});
  EXPECT_EQ(bad_api.status, 400);
  EXPECT_EQ(json::parse(bad_api.body)["error"]["param"], "add_BOS");
  const HttpResponse not_json = http_request("POST", "127.0.0.1", s.http.port(), "/v1/completions", "{\"prompt\":");
  EXPECT_EQ(not_json.status, 400);
  EXPECT_TRUE(json::parse(not_json.body).contains("error"));
  EXPECT_EQ(s.pool.stats().pending, 0);  // nothing refused is left running

  const json models = json::parse(http_get("127.0.0.1", s.http.port(), "/v1/models").body);
  EXPECT_EQ(models["data"][0]["id"], "tiny");
  const json health = json::parse(http_get("127.0.0.1", s.http.port(), "/health").body);
  EXPECT_EQ(health["status"], "ok");
  EXPECT_EQ(health["free_kv_blocks"], 32);
}

}  // namespace
}  // namespace troupe::test
