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
  const char* asked = std::getenv("TROUPE_ATTENTION_BACKEND");
  TROUPE_CHECK(
      asked == nullptr || asked[0] == '\0' || cuda::parse_attention_backend(asked) != cuda::AttentionBackend::cudnn,
      "--deterministic-mode: TROUPE_ATTENTION_BACKEND=cudnn sums the attention backward with atomics; "
      "use cudnn-deterministic or flash, or leave it unset");
  if (cuda::attention_backend() == cuda::AttentionBackend::cudnn)  // the default one
    backend_ = std::make_unique<Backend>(cuda::AttentionBackend::cudnn_deterministic);
}
#else
struct DeterministicMode::Backend {};

DeterministicMode::DeterministicMode(bool on) { (void)on; }  // no GPU kernels: nothing to choose
#endif

DeterministicMode::~DeterministicMode() = default;

}  // namespace troupe::apps
