// The inference actor pool on CPU devices and the HTTP API in front of it: requests from
// several threads over two worker replicas get the tokens the engine gives each alone; a
// request the engine refuses fails its future; Megatron's PUT /api and OpenAI's
// /v1/completions answers and their 400s, through a real HTTP server.
#include <nlohmann/json.hpp>

#include <thread>
#include <vector>

#include "actors/fabric/collective_groups.hpp"
#include "actors/serve/completion_api.hpp"
#include "actors/http/http_server.hpp"
#include "actors/serve/inference_pool.hpp"
#include "data/gpt2_tokenizer.hpp"
#include "tests/http_client.hpp"
#include "tests/inference_test_util.hpp"
#include "tests/serve_test_model.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

using json = nlohmann::json;

struct PoolFixture : ::testing::Test {
  ServeTestModel m;
  const Gpt2Tokenizer& tok = m.tok;
  std::vector<actors::InferenceReplica> replicas(int n) { return m.replicas(n); }
  std::vector<int32_t> alone(const GenerationRequest& req) { return m.alone(req); }
};

TEST_F(PoolFixture, ConcurrentRequestsGetTheirOwnTokens) {
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 8; ++i) {
    SamplingParams p;
    p.max_tokens = 4 + i;
    p.seed = uint64_t(i);
    p.temperature = i % 2 == 0 ? 0.0f : 0.9f;
    reqs.push_back({random_token_list(3 + 2 * i, uint64_t(i), 50257), p});
  }
  std::vector<std::vector<int32_t>> got(reqs.size());
  {
    actors::InferencePool pool(replicas(2));
    EXPECT_EQ(pool.workers(), 2u);
    run_threads(4, [&](int t) {
      std::vector<std::future<actors::GenerationResult>> f;
      for (size_t i = size_t(t); i < reqs.size(); i += 4) f.push_back(pool.generate_async(reqs[i]));
      for (size_t k = 0, i = size_t(t); i < reqs.size(); i += 4, ++k) got[i] = f[k].get().tokens;
    });
    EXPECT_THROW(pool.generate({{}, {}}), Error);      // an empty prompt: the engine refuses it
    EXPECT_EQ(pool.generate(reqs[0]).tokens, got[0]);  // the pool still works
  }
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(got[i], alone(reqs[i])) << "request " << i;
}

// A tensor-parallel replica whose group fails (here: aborted, as when a peer dies) fails the
// request it was running and leaves service; the router sends every later request to the
// replica still in service, which answers it correctly. With no replica left, requests fail
// at once, naming why.
TEST_F(PoolFixture, AFailedTensorParallelReplicaLeavesServiceAndTheOthersServe) {
  auto group = actors::make_cpu_group(2, {"tp", std::chrono::seconds(30)});
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 4;
  const GenerationRequest req{random_token_list(5, 1, 50257), p};
  const std::vector<int32_t> expected = alone(req);
  std::vector<actors::InferenceReplica> reps;
  reps.push_back(m.tensor_parallel_replica(group));  // worker 0: the router's first choice when all are idle
  for (auto& r : replicas(1)) reps.push_back(std::move(r));
  actors::InferencePool pool(std::move(reps));
  EXPECT_EQ(pool.generate(req).tokens, expected);  // served by the TP2 replica
  for (auto& member : group) member->abort();
  int failed = 0;
  for (int i = 0; i < 4; ++i) {
    try {
      EXPECT_EQ(pool.generate(req).tokens, expected) << "request " << i;
    } catch (const Error& e) {
      ++failed;
      EXPECT_NE(std::string(e.what()).find("inference worker 0"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(failed, 1);  // only the request that met the failure

  auto alone_group = actors::make_cpu_group(2, {"tp alone", std::chrono::seconds(30)});
  std::vector<actors::InferenceReplica> only;
  only.push_back(m.tensor_parallel_replica(alone_group));
  actors::InferencePool tp_only(std::move(only));
  for (auto& member : alone_group) member->abort();
  EXPECT_THROW(tp_only.generate(req), Error);
  try {
    tp_only.generate(req);
    ADD_FAILURE() << "a pool with no replica in service answered";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of service"), std::string::npos) << e.what();
  }
}

TEST_F(PoolFixture, HttpApis) {
  actors::InferencePool pool(replicas(1));
  actors::CompletionApi api(pool, tok, {.model_names = {"tiny"}});
  actors::HttpServer http("127.0.0.1", 0, api.routes(), 4);
  auto call = [&](const char* method, const char* path, const json& body) {
    return http_request(method, "127.0.0.1", http.port(), path, body.dump());
  };

  // Megatron's legacy API: text = prompt + completion, tokens = prompt + generated ids.
  const HttpResponse r =
      call("PUT", "/api",
           {{"prompts", {"Hello there", "A"}}, {"tokens_to_generate", 5}, {"temperature", 0}, {"logprobs", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json a = json::parse(r.body);
  ASSERT_EQ(a["text"].size(), 2u);
  const std::vector<int32_t> prompt = tok.encode("Hello there");
  const std::vector<int32_t> gen = alone({prompt, {.temperature = 0.0f, .max_tokens = 5, .stop_tokens = {tok.eod()}}});
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), gen.begin(), gen.end());
  EXPECT_EQ(a["tokens"][0].get<std::vector<int32_t>>(), all);
  EXPECT_EQ(a["text"][0].get<std::string>(), "Hello there" + tok.decode(gen));
  EXPECT_EQ(a["logprobs"][0].size(), gen.size());

  for (const json& bad :
       {json{{"tokens_to_generate", 5}}, json{{"prompts", "x"}}, json{{"prompts", {"x"}}, {"top_k", 2}, {"top_p", 0.5}},
        json{{"prompts", {"x"}}, {"max_len", 3}}, json{{"prompts", {"x"}}, {"temperature", -1}}}) {
    const HttpResponse e = call("PUT", "/api", bad);
    EXPECT_EQ(e.status, 400) << bad.dump() << " -> " << e.body;
  }
  EXPECT_EQ(http_request("PUT", "127.0.0.1", http.port(), "/api", "{not json").status, 400);

  // OpenAI completions: greedy, log-probs, echo, usage; a stop string cuts the text.
  const HttpResponse c = call("POST", "/v1/completions",
                              {{"prompt", "Hello there"}, {"max_tokens", 5}, {"temperature", 0}, {"logprobs", 1}});
  ASSERT_EQ(c.status, 200) << c.body;
  const json o = json::parse(c.body);
  EXPECT_EQ(o["object"], "text_completion");
  EXPECT_EQ(o["model"], "tiny");
  EXPECT_EQ(o["choices"][0]["text"].get<std::string>(), tok.decode(gen));
  EXPECT_EQ(o["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(o["choices"][0]["logprobs"]["token_logprobs"].size(), gen.size());
  EXPECT_EQ(o["choices"][0]["logprobs"]["text_offset"][0], 0);
  const json echoed =
      json::parse(call("POST", "/v1/completions",
                       {{"prompt", "Hello there"}, {"max_tokens", 5}, {"temperature", 0}, {"echo", true}})
                      .body);
  EXPECT_EQ(echoed["choices"][0]["text"].get<std::string>(), "Hello there" + tok.decode(gen));
  // echo with logprobs would also score the prompt (not implemented): refused, not half-answered.
  EXPECT_EQ(call("POST", "/v1/completions", {{"prompt", "Hello there"}, {"logprobs", 1}, {"echo", true}}).status, 400);
  EXPECT_EQ(o["usage"]["prompt_tokens"], prompt.size());
  EXPECT_EQ(o["usage"]["total_tokens"], prompt.size() + gen.size());
  const std::string text = tok.decode(gen);
  const std::string stop = text.substr(text.size() / 2, 2);
  const json s = json::parse(
      call("POST", "/completions", {{"prompt", {"Hello there"}}, {"max_tokens", 5}, {"temperature", 0}, {"stop", stop}})
          .body);
  EXPECT_EQ(s["choices"][0]["text"].get<std::string>(), text.substr(0, text.find(stop)));
  EXPECT_EQ(s["choices"][0]["finish_reason"], "stop");
  // n: choices per prompt, prompt-major; greedy choices agree.
  const json two = json::parse(call("POST", "/v1/completions",
                                    {{"prompt", {"Hello there", "x"}}, {"max_tokens", 5}, {"temperature", 0}, {"n", 2}})
                                   .body);
  ASSERT_EQ(two["choices"].size(), 4u);
  EXPECT_EQ(two["choices"][0]["text"], json(tok.decode(gen)));
  EXPECT_EQ(two["choices"][1]["text"], two["choices"][0]["text"]);
  EXPECT_EQ(two["choices"][3]["index"], 3);
  EXPECT_EQ(two["usage"]["completion_tokens"], 20);
  EXPECT_EQ(json::parse(http_get("127.0.0.1", http.port(), "/v1/health").body)["status"], "ok");
}

}  // namespace
}  // namespace troupe::test
