// Sampling from a known distribution: frequencies under temperature, top-k and top-p
// (Megatron's nucleus rule), greedy, seeding, log-probs, parameter checks and stop strings.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <set>
#include <vector>

#include "base/check.hpp"
#include "model/inference/sampling.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

const std::vector<double> kProbs{0.05, 0.5, 0.15, 0.3};  // token 1 most likely, then 3, 2, 0

std::vector<float> logits_of(const std::vector<double>& p) {
  std::vector<float> l;
  for (double x : p) l.push_back(float(std::log(x)) + 3.0f);  // any shift: softmax is the same
  return l;
}

// Frequencies of each token over n draws.
std::vector<double> frequencies(SamplingParams params, int n) {
  TokenSampler sampler(params);
  const std::vector<float> logits = logits_of(kProbs);
  std::vector<double> f(kProbs.size(), 0.0);
  for (int i = 0; i < n; ++i) f[size_t(sampler.sample(logits).token)] += 1.0 / n;
  return f;
}

void expect_frequencies(const std::vector<double>& got, const std::vector<double>& want) {
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 0.012) << "token " << i;
}

TEST(Sampling, TemperatureOneDrawsTheSoftmax) { expect_frequencies(frequencies({}, 20000), kProbs); }

TEST(Sampling, TemperatureSharpensAndFlattens) {
  for (float t : {0.5f, 2.0f}) {
    std::vector<double> want;
    double sum = 0;
    for (double p : kProbs) sum += std::pow(p, 1.0 / t);
    for (double p : kProbs) want.push_back(std::pow(p, 1.0 / t) / sum);
    SamplingParams params;
    params.temperature = t;
    expect_frequencies(frequencies(params, 20000), want);
  }
}

TEST(Sampling, TopKKeepsTheKMostLikely) {
  SamplingParams params;
  params.top_k = 2;
  expect_frequencies(frequencies(params, 20000), {0.0, 0.5 / 0.8, 0.0, 0.3 / 0.8});
}

TEST(Sampling, TopPKeepsTheFirstTokenThatCrossesP) {
  SamplingParams params;
  params.top_p = 0.6f;  // 0.5 (< 0.6, keep the next) + 0.3 -> stop: {1, 3}
  expect_frequencies(frequencies(params, 20000), {0.0, 0.5 / 0.8, 0.0, 0.3 / 0.8});
  params.top_p = 0.4f;  // 0.5 already crosses 0.4: token 1 alone
  expect_frequencies(frequencies(params, 2000), {0.0, 1.0, 0.0, 0.0});
  params.top_p = 0.85f;  // 0.5 + 0.3 = 0.8 < 0.85: token 2 joins
  expect_frequencies(frequencies(params, 20000), {0.0, 0.5 / 0.95, 0.15 / 0.95, 0.3 / 0.95});
}

// The nucleus of a large vocabulary, by a full sort: what top-p may draw.
std::set<int32_t> nucleus(const std::vector<float>& logits, double p) {
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
  double total = 0;
  for (float l : logits) total += std::exp(double(l));
  std::set<int32_t> keep;
  double before = 0;
  for (int32_t id : ids) {
    if (before > p * total) break;
    keep.insert(id);
    before += std::exp(double(logits[size_t(id)]));
  }
  return keep;
}

TEST(Sampling, TopPOnALargeVocabularyDrawsOnlyFromTheNucleus) {
  // Peaked (the nucleus is in the first 256 sorted) and flat (it is not: the sort widens).
  const Tensor peaked_t = random_normal({5000}, 3, 2.0f), flat_t = random_uniform({5000}, 4, 0.0f, 0.1f);
  for (const Tensor* t : {&peaked_t, &flat_t}) {
    const std::vector<float> logits(t->data_as<float>(), t->data_as<float>() + 5000);
    const std::set<int32_t> allowed = nucleus(logits, 0.6);
    TokenSampler sampler(SamplingParams{.top_p = 0.6f});
    std::set<int32_t> drawn;
    for (int i = 0; i < 1500; ++i) drawn.insert(sampler.sample(logits).token);
    for (int32_t id : drawn) EXPECT_TRUE(allowed.count(id)) << "token " << id << " outside the nucleus";
    std::printf("nucleus %zu tokens, %zu drawn\n", allowed.size(), drawn.size());
    if (t == &flat_t) {
      EXPECT_GT(allowed.size(), 256u);
      EXPECT_GT(drawn.size(), 256u);
    } else {
      EXPECT_LT(allowed.size(), 256u);
      EXPECT_GT(drawn.size(), 2u);
    }
  }
}

TEST(Sampling, GreedyIsArgmaxAndLogprobIsTheRawLogSoftmax) {
  for (SamplingParams params : {SamplingParams{.temperature = 0.0f}, SamplingParams{.top_k = 1}}) {
    params.logprobs = true;
    TokenSampler sampler(params);
    const SampledToken t = sampler.sample(logits_of(kProbs));
    EXPECT_EQ(t.token, 1);
    EXPECT_NEAR(t.logprob, std::log(0.5), 1e-6);
  }
  SamplingParams hot{.temperature = 5.0f, .logprobs = true};
  TokenSampler sampler(hot);
  for (int i = 0; i < 50; ++i) {
    const SampledToken t = sampler.sample(logits_of(kProbs));
    EXPECT_NEAR(t.logprob, std::log(kProbs[size_t(t.token)]), 1e-5);  // not the tempered distribution
  }
}

TEST(Sampling, SameSeedSameTokensOtherSeedOtherTokens) {
  auto draw = [](uint64_t seed) {
    TokenSampler s(SamplingParams{.seed = seed});
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.sample(logits_of(kProbs)).token);
    return out;
  };
  EXPECT_EQ(draw(7), draw(7));
  EXPECT_NE(draw(7), draw(8));
}

TEST(Sampling, BadParametersAreErrors) {
  EXPECT_THROW(SamplingParams{.temperature = -1.0f}.validate(), Error);
  EXPECT_THROW(SamplingParams{.top_k = -1}.validate(), Error);
  EXPECT_THROW(SamplingParams{.top_p = 1.5f}.validate(), Error);
  EXPECT_THROW((SamplingParams{.top_k = 5, .top_p = 0.5f}.validate()), Error);
  EXPECT_THROW(SamplingParams{.max_tokens = -1}.validate(), Error);
  EXPECT_THROW(SamplingParams{.stop_strings = {""}}.validate(), Error);
  EXPECT_THROW(TokenSampler(SamplingParams{.top_k = 2, .top_p = 0.3f}), Error);
  EXPECT_NO_THROW((SamplingParams{.temperature = 0.0f, .top_p = 1.0f}.validate()));
}

TEST(StopStrings, EarliestMatchAndOnlyNewText) {
  const std::vector<std::string> stops{"\n\n", "END"};
  EXPECT_EQ(find_stop_string("abc", stops), std::string::npos);
  EXPECT_EQ(find_stop_string("abEND x\n\n", stops), 2u);
  EXPECT_EQ(find_stop_string("ab\n\nEND", stops), 2u);
  // A match straddling the old/new boundary is found; one wholly in old text is not.
  EXPECT_EQ(find_stop_string("xxEN"
                             "D",
                             stops, 4),
            2u);
  EXPECT_EQ(find_stop_string("END....", stops, 5), std::string::npos);
}

}  // namespace
}  // namespace troupe::test
