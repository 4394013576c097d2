#include "actors/serve/completion_run.hpp"

#include <chrono>
#include <future>
#include <span>

#include "actors/serve/api_request.hpp"

namespace troupe::actors {

using json = nlohmann::json;

std::vector<Completion> run_all(InferencePool& pool, const Tokenizer& tok,
                                const std::vector<GenerationRequest>& requests, const char* field) {
  std::vector<Completion> out(requests.size());
  std::vector<std::future<GenerationResult>> pending;
  std::vector<RequestTicket> tickets;
  auto cancel_all = [&] {
    for (const RequestTicket& t : tickets) t.cancel();
    for (auto& f : pending)
      if (f.valid()) f.wait();  // nothing left running for this call
  };
  try {
    for (const GenerationRequest& r : requests) {
      RequestTicket t(nullptr);
      pending.push_back(pool.generate_async(r, &t));
      tickets.push_back(t);
    }
  } catch (const PoolFull&) {
    cancel_all();
    throw;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].prompt = requests[i].prompt;
    try {
      out[i].result = pending[i].get();
    } catch (const Error& e) {
      cancel_all();
      throw ApiError(400, field, str_cat(field, " ", i, ": ", e.what()));
    }
    // A stop token's text is not part of the answer (as vLLM's stop_token_ids; EOS is special anyway).
    std::span<const int32_t> shown = out[i].result.tokens;
    if (out[i].result.finish == FinishReason::stop_token && !shown.empty()) shown = shown.first(shown.size() - 1);
    out[i].text = tok.decode_skipping_special(shown);
    if (out[i].result.finish == FinishReason::stop_string) out[i].text.resize(out[i].result.stop_text_bytes);
  }
  return out;
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

json usage_json(const std::vector<Completion>& done) {
  int64_t prompt_tokens = 0, completion_tokens = 0;
  for (const Completion& c : done) {
    prompt_tokens += int64_t(c.prompt.size());
    completion_tokens += int64_t(c.result.tokens.size());
  }
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

const char* finish_reason_json(FinishReason r) { return r == FinishReason::length ? "length" : "stop"; }

}  // namespace troupe::actors
