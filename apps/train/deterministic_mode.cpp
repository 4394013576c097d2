#include "apps/train/deterministic_mode.hpp"

#include <cstdlib>
#include <optional>
#include <string_view>

#include "base/check.hpp"
#if TROUPE_HAVE_CUDA
#include "kernels/cuda/attention_cudnn.hpp"
#include "kernels/cuda/gemm_lt.hpp"
#include "kernels/linear_fused.hpp"
#endif

namespace troupe::apps {

#if TROUPE_HAVE_CUDA
struct DeterministicMode::Backend {
  std::optional<cuda::ScopedAttentionBackend> attention;
  cuda::ScopedDgeluPath dgelu{cuda::DgeluPath::epilogue};  // TROUPE_MLP_DGELU=apart still wins
  cuda::ScopedGemmSearch gemm_search{false};               // the heuristic's algorithms, not timed ones
};

DeterministicMode::DeterministicMode(bool on) {
  if (!on) return;
  const char* asked = std::getenv("TROUPE_ATTENTION_BACKEND");
  TROUPE_CHECK(
      asked == nullptr || asked[0] == '\0' || cuda::parse_attention_backend(asked) != cuda::AttentionBackend::cudnn,
      "--deterministic-mode: TROUPE_ATTENTION_BACKEND=cudnn sums the attention backward with atomics; "
      "use cudnn-deterministic or flash, or leave it unset");
  const char* dgelu = std::getenv("TROUPE_MLP_DGELU");
  TROUPE_CHECK(dgelu == nullptr || std::string_view(dgelu) != "measure",
               "--deterministic-mode: TROUPE_MLP_DGELU=measure picks the MLP backward's path by a timing, which "
               "may differ between runs; use epilogue or apart, or leave it unset");
  const char* search = std::getenv("TROUPE_GEMM_SEARCH");
  TROUPE_CHECK(search == nullptr || std::string_view(search) != "on",
               "--deterministic-mode: TROUPE_GEMM_SEARCH=on picks GEMM algorithms by a timing, which may differ "
               "between runs; use off, or leave it unset");
  backend_ = std::make_unique<Backend>();
  if (cuda::attention_backend() == cuda::AttentionBackend::cudnn)  // the default one
    backend_->attention.emplace(cuda::AttentionBackend::cudnn_deterministic);
}
#else
struct DeterministicMode::Backend {};

DeterministicMode::DeterministicMode(bool on) { (void)on; }  // no GPU kernels: nothing to choose
#endif

DeterministicMode::~DeterministicMode() = default;

}  // namespace troupe::apps
