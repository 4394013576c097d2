// Which CUDA attention backend runs: ScopedAttentionBackend, else TROUPE_ATTENTION_BACKEND.
#include <atomic>
#include <cstdlib>
#include <string>

#include "base/check.hpp"
#include "kernels/cuda/attention_cudnn.hpp"

namespace troupe::cuda {

namespace {

constexpr const char* kVariable = "TROUPE_ATTENTION_BACKEND";
constexpr int kNoOverride = -1;

// A selection policy, like the environment variable it stands in for; no device state.
std::atomic<int> backend_override{kNoOverride};

}  // namespace

const char* attention_backend_name(AttentionBackend backend) {
  switch (backend) {
    case AttentionBackend::flash:
      return "flash";
    case AttentionBackend::cudnn:
      return "cudnn";
    case AttentionBackend::cudnn_deterministic:
      return "cudnn-deterministic";
  }
  return "?";
}

AttentionBackend parse_attention_backend(std::string_view value) {
  for (AttentionBackend b : {AttentionBackend::flash, AttentionBackend::cudnn, AttentionBackend::cudnn_deterministic})
    if (value == attention_backend_name(b)) return b;
  TROUPE_FAIL(kVariable, "=", std::string(value),
              " is not a CUDA attention backend; use flash, cudnn or cudnn-deterministic (or leave it unset)");
}

AttentionBackend attention_backend() {
  const int forced = backend_override.load(std::memory_order_relaxed);
  if (forced != kNoOverride) return AttentionBackend(forced);
  const char* env = std::getenv(kVariable);  // read each call: cheap next to any attention launch
  // cuDNN by default: 1.4-2.9x our flash kernels on an H100 (bench/results/2026-11-26-h100-attention.md).
  if (env == nullptr || env[0] == '\0') return TROUPE_HAVE_CUDNN ? AttentionBackend::cudnn : AttentionBackend::flash;
  const AttentionBackend backend = parse_attention_backend(env);
  TROUPE_CHECK(TROUPE_HAVE_CUDNN || backend == AttentionBackend::flash, kVariable, "=", env,
               ": this build of troupe has no cuDNN (it was not found when it was configured): use flash or unset it");
  return backend;
}

ScopedAttentionBackend::ScopedAttentionBackend(AttentionBackend backend)
    : previous_(backend_override.exchange(int(backend))) {}

ScopedAttentionBackend::~ScopedAttentionBackend() { backend_override.store(previous_); }

}  // namespace troupe::cuda
