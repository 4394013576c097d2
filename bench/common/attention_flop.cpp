// FLOP counts of causal attention (attention_flop.hpp).
#include "bench/common/attention_flop.hpp"

namespace troupe::bench {

double causal_attention_forward_flop(int64_t B, int64_t T, int64_t H, int64_t D, int64_t W) {
  const double t = double(T), w = double(W);
  const double pairs = W == 0 || W >= T ? t * t / 2.0 : w * (w + 1.0) / 2.0 + (t - w) * w;
  return 4.0 * double(B * H) * double(D) * pairs;
}

}  // namespace troupe::bench
