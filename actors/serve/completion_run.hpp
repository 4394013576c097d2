// Running the choices of one API call on the inference pool: every request submitted at
// once (so they batch together and with other calls), then each one's result and text. A full
// pool (PoolFull) or a request the engine refuses (ApiError 400 naming `field` and the choice)
// cancels the others. Shared by the completions and chat completions APIs.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "actors/serve/inference_pool.hpp"
#include "data/tokenizer.hpp"

namespace troupe::actors {

struct Completion {
  std::vector<int32_t> prompt;
  GenerationResult result;
  std::string text;  // the generated text a user sees (special tokens skipped; cut before a stop string)
};

std::vector<Completion> run_all(InferencePool& pool, const Tokenizer& tok,
                                const std::vector<GenerationRequest>& requests, const char* field);

// OpenAI's "usage" of a call's completions.
nlohmann::json usage_json(const std::vector<Completion>& done);
// OpenAI's finish_reason.
const char* finish_reason_json(FinishReason r);
// Seconds since the epoch ("created").
int64_t unix_seconds();

}  // namespace troupe::actors
