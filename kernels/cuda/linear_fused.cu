// kernels/linear_fused.hpp on cuBLASLt: each fusion is one matmul_lt with an epilogue. The DGELU
// epilogue's algorithm is searched at first use (matmul_lt_searched): cuBLASLt's heuristic picks
// poorly for it at some shapes. (Searching GELU_AUX's gained nothing in sustained runs.)
#include <array>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>

#include "kernels/activation.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm_lt.hpp"
#include "kernels/cuda/stream_timing.hpp"
#include "kernels/linear.hpp"
#include "kernels/linear_fused.hpp"

namespace troupe::cuda {

void linear_gelu_aux_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& pre,
                             const Tensor& y) {
  MatmulProblem p{&x, false, &w, true, &y, 0.0f, MatmulEpilogue::gelu_aux, b.defined() ? &b : nullptr};
  p.aux = &pre;
  matmul_lt(ctx, p);
}

namespace {

constexpr const char* kDgeluVariable = "TROUPE_MLP_DGELU";
// The epilogue stays unless the plain GEMM and the GELU's backward kernel are this much faster:
// a margin, so that noise in the measurement does not flip the choice between runs.
constexpr float kApartMargin = 0.97f;
constexpr int kTimingReps = 5;
std::atomic<int> path_override{int(DgeluPath::measured)};  // ScopedDgeluPath's

void run_dgelu(const Context& ctx, DgeluPath path, const Tensor& dy, const Tensor& w, const Tensor& pre,
               const Tensor& dpre, const Tensor& db) {
  if (path == DgeluPath::epilogue) {
    MatmulProblem p{&dy, false, &w, false, &dpre, 0.0f, MatmulEpilogue::dgelu};
    p.aux = &pre;
    matmul_lt_searched(ctx, p);
    if (db.defined()) cuda::bias_grad_accumulate(ctx, dpre, db);
    return;
  }
  matmul_lt(ctx, {&dy, false, &w, false, &dpre, 0.0f});
  if (db.defined())
    cuda::gelu_backward_bias_grad(ctx, dpre, pre, dpre, db);
  else
    cuda::gelu_backward(ctx, dpre, pre, dpre);
}

// The measured path of this problem's shape (see kernels/linear_fused.hpp), timed the first time.
DgeluPath measured_dgelu_path(const Context& ctx, const Tensor& dy, const Tensor& w, const Tensor& pre,
                              const Tensor& dpre, const Tensor& db) {
  using Key = std::array<int64_t, 6>;  // device, M, N, K, dtype, with db
  static std::mutex mutex;
  static std::map<Key, DgeluPath> paths;
  const Key key{ctx.device_index(), dy.dim(0), dy.dim(1), pre.dim(1), int64_t(dy.dtype()), int64_t(db.defined())};
  std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = paths.find(key); it != paths.end()) return it->second;
  if (dy.numel() == 0 || pre.numel() == 0) return DgeluPath::epilogue;  // nothing to time
  // The timed runs accumulate into a scratch bias gradient, not db; dpre is rewritten by the real call.
  const Tensor scratch = db.defined() ? Tensor::stream_ordered(ctx, DType::f32, db.shape()) : Tensor();
  const std::vector<float> ms =
      median_ms_on_stream(ctx, stream_of(ctx),
                          {[&] { run_dgelu(ctx, DgeluPath::epilogue, dy, w, pre, dpre, scratch); },
                           [&] { run_dgelu(ctx, DgeluPath::apart, dy, w, pre, dpre, scratch); }},
                          kTimingReps);
  const DgeluPath path = ms[1] < kApartMargin * ms[0] ? DgeluPath::apart : DgeluPath::epilogue;
  paths.emplace(key, path);
  return path;
}

}  // namespace

DgeluPath dgelu_path_from_env() {
  const char* env = std::getenv(kDgeluVariable);  // read each call: cheap next to the GEMM
  if (env == nullptr || env[0] == '\0' || std::string_view(env) == "measure") return DgeluPath::measured;
  if (std::string_view(env) == "epilogue") return DgeluPath::epilogue;
  if (std::string_view(env) == "apart") return DgeluPath::apart;
  TROUPE_FAIL(kDgeluVariable, "=", env, " is not a path of the GELU's input gradient; use epilogue, apart or measure");
}

ScopedDgeluPath::ScopedDgeluPath(DgeluPath path) : previous_(path_override.exchange(int(path))) {}

ScopedDgeluPath::~ScopedDgeluPath() { path_override.store(previous_); }

void linear_input_grad_dgelu(const Context& ctx, const Tensor& dy, const Tensor& w, const Tensor& pre,
                             const Tensor& dpre, const Tensor& db) {
  DgeluPath path = dgelu_path_from_env();
  if (path == DgeluPath::measured) path = DgeluPath(path_override.load(std::memory_order_relaxed));
  if (path == DgeluPath::measured) path = measured_dgelu_path(ctx, dy, w, pre, dpre, db);
  run_dgelu(ctx, path, dy, w, pre, dpre, db);
}

void linear_residual_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b,
                             const Tensor& residual, const Tensor& y) {
  MatmulProblem p{&x,
                  false,
                  &w,
                  true,
                  &y,
                  0.0f,
                  b.defined() ? MatmulEpilogue::bias : MatmulEpilogue::none,
                  b.defined() ? &b : nullptr};
  p.c = &residual;
  matmul_lt(ctx, p);
}

}  // namespace troupe::cuda
