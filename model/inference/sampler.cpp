#include "model/inference/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "base/check.hpp"

namespace troupe {

namespace {

int32_t sample_row(const float* logits, int64_t vocab, const SamplingOptions& o, std::mt19937_64& rng) {
  if (o.temperature <= 0.0f) return int32_t(std::max_element(logits, logits + vocab) - logits);
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  int64_t k = o.top_k > 0 ? std::min<int64_t>(o.top_k, vocab) : vocab;
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  std::vector<double> p(static_cast<size_t>(k));
  const double top = logits[ids[0]];
  for (int64_t i = 0; i < k; ++i) p[size_t(i)] = std::exp((double(logits[ids[size_t(i)]]) - top) / o.temperature);
  std::discrete_distribution<int64_t> d(p.begin(), p.end());
  return ids[size_t(d(rng))];
}

}  // namespace

std::vector<int32_t> generate(GptChunk& model, const std::vector<int32_t>& prompt, const SamplingOptions& o) {
  const GptConfig& c = model.config();
  TROUPE_CHECK(!prompt.empty(), "generate: empty prompt");
  const int64_t T = c.seq_length;
  std::vector<int32_t> context = prompt, out;
  std::mt19937_64 rng(o.seed);
  Tensor window = Tensor::host(DType::i32, {1, T});
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    // Keep the most recent T tokens.
    const int64_t len = std::min<int64_t>(int64_t(context.size()), T);
    const int32_t* src = context.data() + context.size() - size_t(len);
    std::fill_n(window.data_as<int32_t>(), T, 0);
    std::copy_n(src, len, window.data_as<int32_t>());
    ActivationsPtr a = model.forward(window, Tensor(), Tensor(), {.training = false});
    const Tensor row = a->logits.slice((len - 1) * a->logits.dim(1), {c.padded_vocab_size()});
    const Tensor host = to_host_f32(model.context(), row);
    model.release(std::move(a));
    const int32_t next = sample_row(host.data_as<float>(), c.vocab_size, o, rng);
    out.push_back(next);
    context.push_back(next);
    if (next == o.stop_token) break;
  }
  return out;
}

}  // namespace troupe
