#include "apps/train/deterministic_mode.hpp"

#include <cstdlib>

#include "base/check.hpp"
#if TROUPE_HAVE_CUDA
#include "kernels/cuda/attention_cudnn.hpp"
#endif

namespace troupe::apps {

#if TROUPE_HAVE_CUDA
struct DeterministicMode::Backend {
  explicit Backend(cuda::AttentionBackend b) : scope(b) {}
  cuda::ScopedAttentionBackend scope;
};

DeterministicMode::DeterministicMode(bool on) {
  if (!on) return;
  const cuda::AttentionBackend now = cuda::attention_backend();  // the environment's, or the default
  TROUPE_CHECK(now != cuda::AttentionBackend::cudnn || !std::getenv("TROUPE_ATTENTION_BACKEND"),
               "--deterministic-mode: TROUPE_ATTENTION_BACKEND=cudnn sums the attention backward with atomics; "
               "use cudnn-deterministic or flash, or leave it unset");
  if (now == cuda::AttentionBackend::cudnn)
    backend_ = std::make_unique<Backend>(cuda::AttentionBackend::cudnn_deterministic);
}
#else
struct DeterministicMode::Backend {};

DeterministicMode::DeterministicMode(bool on) { (void)on; }  // no GPU kernels: nothing to choose
#endif

DeterministicMode::~DeterministicMode() = default;

}  // namespace troupe::apps
