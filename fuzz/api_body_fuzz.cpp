// The JSON request bodies of `troupe serve` (PUT /api, POST /v1/completions, POST
// /v1/chat/completions), each input read by the three readers the handlers call
// (actors/serve/api_calls.hpp) inside answer_or_error, as the handlers do, with the GPT-2
// tokenizer and Qwen3's chat template and no server or model. What it checks:
//   - a refused body is a 400 or 404 whose reply is JSON naming the problem; any other exception
//     escapes (the server would answer 500) and is a finding;
//   - an accepted body gives requests the engine takes: SamplingParams::validate() passes, every
//     token id is in the vocabulary, the choice count is what was asked and within the bound.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "actors/serve/api_calls.hpp"
#include "actors/serve/api_request.hpp"
#include "data/gpt2_tokenizer.hpp"
#include "fuzz/fuzz_util.hpp"

namespace {

using namespace troupe;
using namespace troupe::actors;

void expect(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "api_body_fuzz: %s\n", what);
  std::abort();
}

void expect_runnable(const GenerationRequest& r, int64_t vocab_size) {
  r.sampling.validate();  // troupe::Error escapes answer_or_error: a finding
  expect(!r.prompt.empty(), "a request with an empty prompt was accepted");
  expect(r.sampling.max_tokens >= 1, "a request with max_tokens < 1 was accepted");
  expect(r.sampling.min_tokens <= r.sampling.max_tokens, "min_tokens > max_tokens was accepted");
  expect(r.sampling.top_logprobs <= 20, "top_logprobs > 20 was accepted");
  auto in_vocab = [&](int32_t id) { return id >= 0 && id < vocab_size; };
  for (int32_t id : r.prompt) expect(in_vocab(id), "a prompt id outside the vocabulary was accepted");
  for (int32_t id : r.sampling.stop_tokens) expect(in_vocab(id), "a stop token outside the vocabulary was accepted");
  for (const auto& [id, bias] : r.sampling.logit_bias)
    expect(in_vocab(id) && bias >= -100 && bias <= 100, "a logit_bias entry out of range was accepted");
}

// Reads `body` with `read` as the handler does; checks the reply of a refused body.
template <typename Read>
void answer(const Read& read) {
  const HttpReply reply = answer_or_error([&] {
    read();
    return HttpReply{200, ""};
  });
  if (reply.status == 200) return;
  expect(reply.status == 400 || reply.status == 404, "a refused body got a status other than 400 or 404");
  const nlohmann::json j = nlohmann::json::parse(reply.body, nullptr, false);
  expect(!j.is_discarded() && j.contains("error") && j["error"].value("message", "") != "",
         "an error reply is not JSON with a message");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Gpt2Tokenizer tok = Gpt2Tokenizer::from_files(TROUPE_SOURCE_DIR "/assets/gpt2/gpt2-vocab.json",
                                                             TROUPE_SOURCE_DIR "/assets/gpt2/gpt2-merges.txt");
  static const ChatTemplate chat =
      ChatTemplate::from_tokenizer_config(TROUPE_SOURCE_DIR "/assets/tokenizers/qwen3/tokenizer_config.json");
  static const CompletionApiOptions completion_options = {
      .model_names = {"troupe", "alias"}, .max_prompts = 8, .stop_tokens = {tok.eod()}};
  static const ChatApiOptions chat_options = {.model_names = {"troupe"}, .stop_tokens = {tok.eod()}, .max_choices = 4};
  const std::string body(fuzz::as_text(data, size));
  const int64_t vocab = tok.vocab_size();
  const std::unique_ptr<Tokenizer> call_tok = tok.clone();  // per call, as the handlers do (its own cache)

  answer([&] {
    const MegatronCall call = read_megatron_call(body, *call_tok, completion_options);
    expect(!call.prompts.empty() && call.requests.size() == call.prompts.size() &&
               int(call.prompts.size()) <= completion_options.max_prompts,
           "/api: the requests do not match the prompts");
    for (const GenerationRequest& r : call.requests) expect_runnable(r, vocab);
  });
  answer([&] {
    const CompletionCall call = read_completion_call(body, *call_tok, completion_options);
    const size_t n = size_t(call.sampling.n);
    expect(n >= 1 && call.choices.size() == call.prompts.size() * n &&
               int(call.choices.size()) <= completion_options.max_prompts,
           "/v1/completions: the choices are not prompts times n within max_prompts");
    for (const GenerationRequest& r : call.choices) expect_runnable(r, vocab);
  });
  answer([&] {
    const ChatCall call = read_chat_call(body, *call_tok, &chat, chat_options);
    expect(call.sampling.n >= 1 && int(call.choices.size()) == call.sampling.n &&
               call.sampling.n <= chat_options.max_choices,
           "/v1/chat/completions: the choices are not n within max_choices");
    for (const GenerationRequest& r : call.choices) expect_runnable(r, vocab);
  });
  return 0;
}
