#include <algorithm>
#include <cmath>

#include "kernels/argmax.hpp"

namespace troupe::cpu {

void argmax_logprob(const Tensor& logits, int64_t vocab, const Tensor& tokens, const Tensor& logprobs,
                    const Tensor& maxes) {
  const int64_t vp = logits.dim(1);
  for (int64_t r = 0; r < logits.dim(0); ++r) {
    const float* x = logits.data_as<float>() + r * vp;
    const float* best = std::max_element(x, x + vocab);  // the first of equal maxima
    double sum = 0.0;
    for (int64_t j = 0; j < vocab; ++j) sum += std::exp(double(x[j]) - double(*best));
    tokens.data_as<int32_t>()[r] = int32_t(best - x);
    logprobs.data_as<float>()[r] = float(-std::log(sum));
    if (maxes.defined()) maxes.data_as<float>()[r] = *best;
  }
}

}  // namespace troupe::cpu
