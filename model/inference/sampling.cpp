#include "model/inference/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/check.hpp"

namespace troupe {

void SamplingParams::validate() const {
  TROUPE_CHECK(std::isfinite(temperature) && temperature >= 0.0f, "sampling: temperature must be >= 0, got ",
               temperature);
  TROUPE_CHECK(top_k >= 0, "sampling: top_k must be >= 0, got ", top_k);
  TROUPE_CHECK(top_p >= 0.0f && top_p <= 1.0f, "sampling: top_p must be in [0, 1], got ", top_p);
  TROUPE_CHECK(!(top_k > 0 && top_p > 0.0f), "sampling: top_k (", top_k, ") and top_p (", top_p,
               ") cannot both be set");
  TROUPE_CHECK(max_tokens >= 0, "sampling: max_tokens must be >= 0, got ", max_tokens);
  for (const std::string& s : stop_strings) TROUPE_CHECK(!s.empty(), "sampling: a stop string is empty");
}

TokenSampler::TokenSampler(const SamplingParams& params) : params_(params), rng_(params.seed) { params_.validate(); }

float token_logprob(std::span<const float> logits, int32_t token) {
  const double top = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float x : logits) sum += std::exp(double(x) - top);
  return float(double(logits[size_t(token)]) - top - std::log(sum));
}

SampledToken TokenSampler::sample(std::span<const float> logits) {
  TROUPE_CHECK(!logits.empty(), "TokenSampler::sample: empty logits");
  const int64_t V = int64_t(logits.size());
  SampledToken out;
  if (params_.greedy()) {
    out.token = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  } else {
    // Candidates in descending logit order (all of them unless top-k or top-p cuts the list).
    const double t = params_.temperature;
    order_.resize(size_t(V));
    std::iota(order_.begin(), order_.end(), 0);
    const auto by_logit = [&](int32_t a, int32_t b) {  // ties: the lower id first (deterministic)
      return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
    };
    const double top = *std::max_element(logits.begin(), logits.end());
    auto weight = [&](int32_t id) { return std::exp((logits[size_t(id)] - top) / t); };
    int64_t keep = V;
    double nucleus_mass = 0.0;  // top-p: p times the whole vocabulary's mass
    if (params_.top_k > 0) {
      keep = std::min<int64_t>(params_.top_k, V);
      std::partial_sort(order_.begin(), order_.begin() + keep, order_.end(), by_logit);
    } else if (params_.top_p > 0.0f) {
      // Sorting the whole vocabulary is the cost: sort the largest 256 first, and 8x more
      // until the sorted prefix holds the first token that crosses p (all of them at worst).
      double total = 0.0;
      for (int64_t i = 0; i < V; ++i) total += weight(int32_t(i));
      nucleus_mass = double(params_.top_p) * total;
      for (keep = std::min<int64_t>(256, V);; keep = std::min(V, keep * 8)) {
        std::partial_sort(order_.begin(), order_.begin() + keep, order_.end(), by_logit);
        double prefix = 0.0;
        for (int64_t i = 0; i < keep; ++i) prefix += weight(order_[size_t(i)]);
        if (prefix > nucleus_mass || keep == V) break;
      }
    }
    probs_.resize(size_t(keep));
    double sum = 0.0;
    for (int64_t i = 0; i < keep; ++i) sum += probs_[size_t(i)] = weight(order_[size_t(i)]);
    if (params_.top_k == 0 && params_.top_p > 0.0f) {
      // Nucleus (Megatron's rule): drop a token when the probability of the tokens before it
      // exceeds p, so the first token that crosses p stays.
      double before = 0.0;
      int64_t n = 0;
      while (n < keep && before <= nucleus_mass) before += probs_[size_t(n++)];
      keep = std::max<int64_t>(n, 1);
      sum = std::accumulate(probs_.begin(), probs_.begin() + keep, 0.0);
    }
    // One uniform draw in [0, sum) from the top 53 bits, walked over the kept probabilities.
    const double u = double(rng_() >> 11) * 0x1.0p-53 * sum;
    double acc = 0.0;
    int64_t pick = keep - 1;
    for (int64_t i = 0; i < keep; ++i) {
      acc += probs_[size_t(i)];
      if (u < acc) {
        pick = i;
        break;
      }
    }
    out.token = order_[size_t(pick)];
  }
  if (params_.logprobs) out.logprob = token_logprob(logits, out.token);
  return out;
}

size_t find_stop_string(std::string_view text, const std::vector<std::string>& stops, size_t from) {
  size_t best = std::string_view::npos;
  for (const std::string& s : stops) {
    // A match ending at or after `from` starts at or after from - (len - 1).
    const size_t begin = from >= s.size() ? from - s.size() + 1 : 0;
    const size_t at = text.find(s, begin);
    if (at != std::string_view::npos) best = std::min(best, at);
  }
  return best;
}

}  // namespace troupe
