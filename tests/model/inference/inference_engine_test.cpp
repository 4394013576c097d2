// The inference engine on the CPU: requests of different lengths and sampling settings run
// together under tight token, sequence and KV-block budgets get the same tokens as each run
// alone, and every block is free at the end; stop tokens, stop strings, max_tokens 0,
// cancellation, and requests that can never run.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "model/inference/inference_engine.hpp"
#include "tests/inference_test_util.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

struct Model {
  GptConfig config;
  InferenceModel model;
  explicit Model(bool llama)
      : config(tiny_inference_config(llama, 32, 40, 50)),
        model(cpu(), config, DType::f32, {.max_tokens = 64, .max_sequences = 8}) {
    model.load_weights(random_normal({model.layout().size()}, 9, 0.3f));
  }
};

std::vector<int32_t> prompt(int64_t n, uint64_t seed) { return random_token_list(n, seed, 50); }

std::vector<GenerationRequest> mixed_requests() {
  const int64_t lens[] = {3, 11, 1, 7, 20, 5, 9};
  std::vector<GenerationRequest> out;
  for (int i = 0; i < 7; ++i) {
    SamplingParams p;
    p.max_tokens = 3 + (i * 5) % 11;
    p.seed = 100 + uint64_t(i);
    if (i % 3 == 0) p.temperature = 0.0f;  // greedy
    if (i % 3 == 1) p.top_k = 5;
    if (i == 5) p.top_p = 0.8f;
    p.logprobs = i % 2 == 0;
    out.push_back({prompt(lens[i], uint64_t(i)), p});
  }
  return out;
}

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  FinishReason finish = FinishReason::none;
  int final_events = 0;
};

// Runs `requests` on one engine; returns each request's tokens, in request order.
std::vector<Outcome> run(InferenceModel& model, const std::vector<GenerationRequest>& requests, EngineOptions opt,
                         int64_t* max_running = nullptr) {
  InferenceEngine engine(model, opt);
  std::vector<Outcome> out(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    engine.add_request(requests[i], [&out, i](const TokenEvent& e) {
      if (e.has_token) {
        out[i].tokens.push_back(e.token);
        out[i].logprobs.push_back(e.logprob);
      }
      if (e.finish != FinishReason::none) {
        out[i].finish = e.finish;
        ++out[i].final_events;
      }
    });
  }
  while (engine.step())
    if (max_running) *max_running = std::max(*max_running, engine.running());
  EXPECT_EQ(engine.cache().free_blocks(), engine.cache().num_blocks()) << "blocks leaked";
  return out;
}

class EngineBatching : public ::testing::TestWithParam<bool> {};

TEST_P(EngineBatching, TogetherEqualsAlone) {
  Model m(GetParam());
  const std::vector<GenerationRequest> requests = mixed_requests();
  std::vector<Outcome> alone;
  for (const GenerationRequest& r : requests)
    alone.push_back(run(m.model, {r}, {.num_blocks = 16, .block_size = 4})[0]);
  // Budgets that make requests wait: 24 tokens a step, 3 sequences, 14 blocks of 4 tokens.
  int64_t max_running = 0;
  const std::vector<Outcome> together =
      run(m.model, requests, {.num_blocks = 14, .block_size = 4, .max_tokens_per_step = 24, .max_sequences = 3},
          &max_running);
  // Not a degenerate model: requests get varied tokens.
  std::set<int32_t> distinct;
  for (const Outcome& o : alone) distinct.insert(o.tokens.begin(), o.tokens.end());
  EXPECT_GE(distinct.size(), 10u);
  EXPECT_GE(max_running, 2);
  EXPECT_LE(max_running, 3);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(together[i].tokens, alone[i].tokens) << "request " << i;
    EXPECT_EQ(int64_t(together[i].tokens.size()), requests[i].sampling.max_tokens) << "request " << i;
    EXPECT_EQ(together[i].finish, FinishReason::length);
    EXPECT_EQ(together[i].final_events, 1);
    for (size_t t = 0; t < together[i].logprobs.size(); ++t) {
      if (requests[i].sampling.logprobs) {
        EXPECT_LT(together[i].logprobs[t], 0.0f);
        EXPECT_NEAR(together[i].logprobs[t], alone[i].logprobs[t], 1e-5);
      } else {
        EXPECT_EQ(together[i].logprobs[t], 0.0f);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, EngineBatching, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "llama" : "gpt2"; });

TEST(Engine, StopTokensStopStringsAndLength) {
  Model m(false);
  GenerationRequest base{prompt(6, 1), {.temperature = 0.0f, .max_tokens = 10}};
  const std::vector<int32_t> free_run = run(m.model, {base}, {.num_blocks = 8, .block_size = 4})[0].tokens;
  ASSERT_EQ(free_run.size(), 10u);

  GenerationRequest stop_token = base;
  stop_token.sampling.stop_tokens = {free_run[3]};
  const size_t first = size_t(std::find(free_run.begin(), free_run.end(), free_run[3]) - free_run.begin());
  const Outcome o = run(m.model, {stop_token}, {.num_blocks = 8, .block_size = 4})[0];
  EXPECT_EQ(o.finish, FinishReason::stop_token);
  EXPECT_EQ(o.tokens, std::vector<int32_t>(free_run.begin(), free_run.begin() + long(first) + 1));

  // Text: token id -> one letter per id; stop at the text of tokens 4..5.
  auto detok = [](std::span<const int32_t> ids) {
    std::string s;
    for (int32_t id : ids) s += char('A' + id % 50);
    return s;
  };
  const std::string text = detok(free_run);
  GenerationRequest stop_string = base;
  stop_string.sampling.stop_strings = {text.substr(4, 2), "never-there"};
  const size_t at = find_stop_string(text, stop_string.sampling.stop_strings);
  InferenceEngine engine(m.model, {.num_blocks = 8, .block_size = 4}, detok);
  TokenEvent last;
  int tokens = 0;
  engine.add_request(stop_string, [&](const TokenEvent& e) {
    tokens += e.has_token;
    last = e;
  });
  engine.run();
  EXPECT_EQ(last.finish, FinishReason::stop_string);
  EXPECT_EQ(last.stop_text_bytes, at);
  EXPECT_EQ(tokens, int(at + 2));  // one letter per token: the stop string is complete after its last token

  GenerationRequest none = base;
  none.sampling.max_tokens = 0;
  const Outcome z = run(m.model, {none}, {.num_blocks = 8, .block_size = 4})[0];
  EXPECT_TRUE(z.tokens.empty());
  EXPECT_EQ(z.finish, FinishReason::length);
  EXPECT_EQ(z.final_events, 1);

  // The sequence limit ends a request early.
  const Outcome capped = run(m.model, {base}, {.num_blocks = 8, .block_size = 4, .max_sequence_length = 9})[0];
  EXPECT_EQ(capped.tokens, std::vector<int32_t>(free_run.begin(), free_run.begin() + 3));
  EXPECT_EQ(capped.finish, FinishReason::length);
}

TEST(Engine, CancellationFreesBlocksAndLeavesOthersAlone) {
  Model m(true);
  const std::vector<GenerationRequest> requests = mixed_requests();
  const std::vector<Outcome> all = run(m.model, requests, {.num_blocks = 40, .block_size = 4});
  InferenceEngine engine(m.model, {.num_blocks = 40, .block_size = 4});
  std::map<int64_t, Outcome> got;
  int64_t victim = -1, queued_victim = -1;
  for (size_t i = 0; i < requests.size(); ++i) {
    const int64_t id = engine.add_request(requests[i], [&](const TokenEvent& e) {
      Outcome& o = got[e.request];
      if (e.has_token) o.tokens.push_back(e.token);
      if (e.finish != FinishReason::none) o.finish = e.finish;
      if (e.request == victim && o.tokens.size() == 2 && e.finish == FinishReason::none) engine.cancel(victim);
    });
    if (i == 4) victim = id;
  }
  queued_victim = engine.add_request(requests[0], nullptr);
  EXPECT_TRUE(engine.cancel(queued_victim));
  EXPECT_FALSE(engine.cancel(queued_victim));  // already cancelled
  EXPECT_FALSE(engine.cancel(12345));
  engine.run();
  EXPECT_EQ(engine.cache().free_blocks(), 40);
  EXPECT_EQ(got[victim].finish, FinishReason::cancelled);
  EXPECT_EQ(got[victim].tokens, std::vector<int32_t>(all[4].tokens.begin(), all[4].tokens.begin() + 2));
  for (size_t i = 0; i < requests.size(); ++i) {
    if (int64_t(i) == victim) continue;
    EXPECT_EQ(got[int64_t(i)].tokens, all[i].tokens) << "request " << i;
  }
}

TEST(Engine, RequestsThatCanNeverRunAreErrors) {
  Model m(false);
  InferenceEngine engine(m.model, {.num_blocks = 4, .block_size = 4, .max_tokens_per_step = 16});
  EXPECT_THROW(engine.add_request({{}, {}}, nullptr), Error);                            // empty prompt
  EXPECT_THROW(engine.add_request({prompt(17, 1), {.max_tokens = 1}}, nullptr), Error);  // > step budget
  EXPECT_THROW(engine.add_request({prompt(8, 1), {.max_tokens = 9}}, nullptr), Error);   // 17 tokens > 4 blocks
  EXPECT_THROW(engine.add_request({prompt(8, 1), {.top_k = 3, .top_p = 0.5f}}, nullptr), Error);  // sampling
  EXPECT_THROW(engine.add_request({prompt(8, 1), {.stop_strings = {"x"}}}, nullptr), Error);      // no detokenizer
  const int32_t vocab = int32_t(m.model.config().vocab_size);
  EXPECT_THROW(engine.add_request({{1, vocab, 2}, {.max_tokens = 1}}, nullptr), Error);  // outside the vocabulary
  EXPECT_THROW(engine.add_request({{-1}, {.max_tokens = 1}}, nullptr), Error);
  EXPECT_THROW(InferenceEngine(m.model, {.num_blocks = 4, .max_tokens_per_step = 65}), Error);
  EXPECT_EQ(engine.add_request({prompt(8, 1), {.max_tokens = 8}}, nullptr), 0);
  engine.run();
  EXPECT_EQ(engine.cache().free_blocks(), 4);
}

}  // namespace
}  // namespace troupe::test
