#include "model/inference/sampler.hpp"

#include <algorithm>
#include <span>

#include "base/check.hpp"

namespace troupe {

SamplingParams training_sample_params(int64_t max_tokens, uint64_t seed) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 40;
  p.seed = seed;
  p.max_tokens = max_tokens;
  return p;
}

std::vector<int32_t> generate(GptChunk& model, const std::vector<int32_t>& prompt, const SamplingParams& params) {
  const GptConfig& c = model.config();
  TROUPE_CHECK(!prompt.empty(), "generate: empty prompt");
  TROUPE_CHECK(params.stop_strings.empty(), "generate: stop strings need the serving engine");
  const int64_t T = c.seq_length;
  std::vector<int32_t> context = prompt, out;
  TokenSampler sampler(params);
  Tensor window = Tensor::host(DType::i32, {1, T});
  for (int64_t step = 0; step < params.max_tokens; ++step) {
    // Keep the most recent T tokens.
    const int64_t len = std::min<int64_t>(int64_t(context.size()), T);
    const int32_t* src = context.data() + context.size() - size_t(len);
    std::fill_n(window.data_as<int32_t>(), T, 0);
    std::copy_n(src, len, window.data_as<int32_t>());
    ActivationsPtr a = model.forward(window, Tensor(), Tensor(), {.training = false});
    const Tensor row = a->logits.slice((len - 1) * a->logits.dim(1), {c.padded_vocab_size()});
    const Tensor host = to_host_f32(model.context(), row);
    model.release(std::move(a));
    const int32_t next =
        sampler.sample(std::span<const float>(host.data_as<float>(), size_t(c.vocab_size)), context, prompt.size())
            .token;
    out.push_back(next);
    context.push_back(next);
    if (std::find(params.stop_tokens.begin(), params.stop_tokens.end(), next) != params.stop_tokens.end()) break;
  }
  return out;
}

}  // namespace troupe
