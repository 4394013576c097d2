#include "model/inference/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
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
  TROUPE_CHECK(std::isfinite(repetition_penalty) && repetition_penalty > 0.0f,
               "sampling: repetition_penalty must be > 0, got ", repetition_penalty);
  TROUPE_CHECK(std::isfinite(frequency_penalty) && std::isfinite(presence_penalty),
               "sampling: frequency_penalty and presence_penalty must be finite");
  TROUPE_CHECK(min_tokens >= 0, "sampling: min_tokens must be >= 0, got ", min_tokens);
  TROUPE_CHECK(top_logprobs >= 0, "sampling: top_logprobs must be >= 0, got ", top_logprobs);
}

bool SamplingParams::adjusts_logits() const {
  return frequency_penalty != 0.0f || presence_penalty != 0.0f || repetition_penalty != 1.0f || !logit_bias.empty() ||
         (min_tokens > 0 && !stop_tokens.empty());
}

void apply_logits_processors(const SamplingParams& p, std::span<float> logits, std::span<const int32_t> tokens,
                             size_t prompt_len, std::vector<int32_t>& counts) {
  const auto V = int64_t(logits.size());
  auto in_vocab = [&](int32_t t) { return t >= 0 && t < V; };
  if (p.repetition_penalty != 1.0f) {  // each distinct token once
    counts.assign(size_t(V), 0);
    for (int32_t t : tokens)
      if (in_vocab(t) && counts[size_t(t)]++ == 0) {
        float& x = logits[size_t(t)];
        x = x > 0.0f ? x / p.repetition_penalty : x * p.repetition_penalty;
      }
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    counts.assign(size_t(V), 0);
    for (size_t i = std::min(prompt_len, tokens.size()); i < tokens.size(); ++i)
      if (in_vocab(tokens[i])) ++counts[size_t(tokens[i])];
    for (size_t i = std::min(prompt_len, tokens.size()); i < tokens.size(); ++i) {
      const int32_t t = tokens[i];
      if (!in_vocab(t) || counts[size_t(t)] == 0) continue;  // already applied
      logits[size_t(t)] -= p.frequency_penalty * float(counts[size_t(t)]) + p.presence_penalty;
      counts[size_t(t)] = 0;
    }
  }
  for (const auto& [t, bias] : p.logit_bias)
    if (in_vocab(t)) logits[size_t(t)] += bias;
  const size_t generated = tokens.size() - std::min(prompt_len, tokens.size());
  if (int64_t(generated) < p.min_tokens)
    for (int32_t t : p.stop_tokens)
      if (in_vocab(t)) logits[size_t(t)] = -std::numeric_limits<float>::infinity();
}

std::vector<std::pair<int32_t, float>> top_logprobs(std::span<const float> logits, int k) {
  const auto V = int64_t(logits.size());
  k = int(std::min<int64_t>(k, V));
  std::vector<int32_t> ids(static_cast<size_t>(V));
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  });
  const double top = V > 0 ? double(logits[size_t(ids[0])]) : 0.0;
  double sum = 0.0;
  for (float x : logits) sum += std::exp(double(x) - top);
  std::vector<std::pair<int32_t, float>> out;
  for (int i = 0; i < k; ++i)
    out.emplace_back(ids[size_t(i)], float(double(logits[size_t(ids[size_t(i)])]) - top - std::log(sum)));
  return out;
}

TokenSampler::TokenSampler(const SamplingParams& params) : params_(params), rng_(params.seed) { params_.validate(); }

float token_logprob(std::span<const float> logits, int32_t token) {
  const double top = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float x : logits) sum += std::exp(double(x) - top);
  return float(double(logits[size_t(token)]) - top - std::log(sum));
}

SampledToken TokenSampler::sample(std::span<const float> logits, std::span<const int32_t> tokens, size_t prompt_len) {
  TROUPE_CHECK(!logits.empty(), "TokenSampler::sample: empty logits");
  SampledToken out;
  if (params_.adjusts_logits()) {
    adjusted_.assign(logits.begin(), logits.end());
    apply_logits_processors(params_, adjusted_, tokens, prompt_len, counts_);
    out = pick(adjusted_);
  } else {
    out = pick(logits);
  }
  // Log-probabilities of the raw logits (vLLM's default "raw_logprobs").
  if (params_.logprobs) out.logprob = token_logprob(logits, out.token);
  if (params_.logprobs && params_.top_logprobs > 0) out.top = top_logprobs(logits, params_.top_logprobs);
  return out;
}

SampledToken TokenSampler::pick(std::span<const float> logits) {
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
    int64_t chosen = keep - 1;
    for (int64_t i = 0; i < keep; ++i) {
      acc += probs_[size_t(i)];
      if (u < acc) {
        chosen = i;
        break;
      }
    }
    out.token = order_[size_t(chosen)];
  }
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
