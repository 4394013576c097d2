// The CUDA attention backend a GPU test runs on, whatever TROUPE_ATTENTION_BACKEND says: Troupe's
// kernels (flash) or cuDNN's fused attention (cudnn, cudnn_deterministic). Without CUDA the test
// binaries only skip, and the switch does nothing.
//
//   const UseBackend use(Backend::cudnn);   // while it lives
#pragma once

#include <optional>

#if TROUPE_HAVE_CUDA
#include "kernels/cuda/attention_cudnn.hpp"
#endif

namespace troupe::test {

enum class Backend { flash, cudnn, cudnn_deterministic };

inline const char* backend_name(Backend b) {
  return b == Backend::flash ? "flash" : b == Backend::cudnn ? "cudnn" : "cudnn_deterministic";
}

class UseBackend {
 public:
  explicit UseBackend(Backend b) {
#if TROUPE_HAVE_CUDA
    scope_.emplace(b == Backend::flash   ? cuda::AttentionBackend::flash
                   : b == Backend::cudnn ? cuda::AttentionBackend::cudnn
                                         : cuda::AttentionBackend::cudnn_deterministic);
#else
    (void)b;
#endif
  }

 private:
#if TROUPE_HAVE_CUDA
  std::optional<cuda::ScopedAttentionBackend> scope_;
#endif
};

}  // namespace troupe::test
