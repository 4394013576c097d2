// Launchers of the LayerNorm / RMSNorm kernels (kernels in norm_kernels.cuh), for plain
// [N, C] rows (with the FP8 side output of kernels/norm.hpp) and for the per-head norms' rows
// inside a fused activation.
//
// Parameter gradients: the backward kernel runs on at most as many blocks as fit on the
// GPU at once; each block writes its f32 partial column sums to a scratch buffer
// [planes, blocks, C], and a second kernel adds the sums over blocks into dw/db. The
// scratch comes from cudaMallocAsync on the context's stream: after the first call the
// stream-ordered pool serves it without a device synchronization, and it needs no state
// in the Context. The result is deterministic for a given GPU (no atomics).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/norm_kernels.cuh"
#include "kernels/norm.hpp"

namespace troupe::cuda {

namespace {

struct NormLaunch {
  int group;             // threads per row
  int threads;           // threads per block
  int packs_per_thread;  // 1..kMaxPacksPerThread
};

// Warp per row while a warp can hold the row in kMaxPacksPerThread packs per lane,
// otherwise the fewest warps per row (one block) that can.
template <typename T>
NormLaunch norm_launch(const char* op, int64_t c) {
  constexpr int P = Pack128<T>::size;
  constexpr int64_t max_c = int64_t(norm::kMaxGroupThreads) * norm::kMaxPacksPerThread * P;
  TROUPE_CHECK(c % 8 == 0, op, ": the CUDA kernel needs C to be a multiple of 8, got C = ", c);
  TROUPE_CHECK(c <= max_c, op, ": the CUDA kernel supports C up to ", max_c, " for this dtype, got C = ", c);
  const int packs = int(c / P);
  constexpr int per_warp = 32 * norm::kMaxPacksPerThread;
  if (packs <= per_warp) return {32, norm::kWarpModeThreads, int(ceil_div(packs, 32))};
  const int group = 32 * int(ceil_div(packs, per_warp));
  return {group, group, int(ceil_div(packs, group))};
}

// Calls f(std::integral_constant<int, K>{}) with K = packs_per_thread.
template <typename F>
void with_packs(int packs_per_thread, F&& f) {
  static_assert(norm::kMaxPacksPerThread == 4, "with_packs lists every instantiated pack count");
  switch (packs_per_thread) {
    case 1:
      f(std::integral_constant<int, 1>{});
      return;
    case 2:
      f(std::integral_constant<int, 2>{});
      return;
    case 3:
      f(std::integral_constant<int, 3>{});
      return;
    case 4:
      f(std::integral_constant<int, 4>{});
      return;
    default:
      TROUPE_FAIL("norm: no kernel for ", packs_per_thread, " packs per thread");
  }
}

// Blocks for n rows: one group per row, but no more blocks than fit on the GPU at once (the
// kernels walk the rows in a grid-stride loop).
template <typename Kernel>
int resident_grid(const Context& ctx, Kernel* kernel, const NormLaunch& cfg, int64_t n, size_t smem) {
  int blocks_per_sm = 0;
  TROUPE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel, cfg.threads, smem));
  const int64_t resident = int64_t(std::max(blocks_per_sm, 1)) * ctx.cuda_state().sm_count;
  return int(std::min<int64_t>(ceil_div(n, cfg.threads / cfg.group), resident));
}

void expect_aligned16(const char* op, const char* arg, const Tensor& t) {
  TROUPE_CHECK(reinterpret_cast<uintptr_t>(t.data()) % 16 == 0, op, ": the CUDA kernel needs argument '", arg,
               "' 16-byte aligned (a slice at an odd offset?), got ", t.str());
}

// A stream-ordered f32 scratch buffer, released on the stream when it goes out of scope.
class StreamScratch {
 public:
  StreamScratch(cudaStream_t stream, size_t floats) : stream_(stream) {
    TROUPE_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&ptr_), floats * sizeof(float), stream_));
  }
  ~StreamScratch() { cudaFreeAsync(ptr_, stream_); }  // no throw from a destructor
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  float* get() const { return ptr_; }

 private:
  cudaStream_t stream_;
  float* ptr_ = nullptr;
};

// n rows of c values; x: the input's rows, y: the output's (forward) or dy's and dx's (backward),
// each tensor's data pointer at its first row.
struct NormRows {
  int64_t n;
  int64_t c;
  norm::RowMap x, y;
};

NormRows plain_rows(const Tensor& x) { return {x.dim(0), x.dim(1), {x.dim(1), 1}, {x.dim(1), 1}}; }

// Heads [first, first + count) of x [N, Wx] and y [N, Wy]: views from the first head on.
NormRows head_rows(const char* op, const Tensor& x, const Tensor& y, int64_t d, HeadSpan heads) {
  TROUPE_CHECK(x.dim(1) % 8 == 0 && y.dim(1) % 8 == 0, op,
               ": the CUDA kernel needs row widths that are multiples of 8, got ", x.str(), " and ", y.str());
  return {x.dim(0) * heads.count, d, {x.dim(1), int(heads.count)}, {y.dim(1), int(heads.count)}};
}

// t from head `first` (of d values) of its first row on.
Tensor from_head(const Tensor& t, int64_t first, int64_t d) { return t.slice(first * d, {t.numel() - first * d}); }

// mean: nullptr for RMSNorm (kCentered false). fp8: the FP8 side output of plain rows (r.y maps
// q as it maps y).
template <bool kCentered>
void launch_forward(const Context& ctx, const char* op, const NormRows& r, const Tensor& x, const Tensor& w,
                    const Tensor& b, float eps, const Tensor& y, float* mean, const Tensor& rstd,
                    const Fp8SideOutput& fp8 = {}) {
  const Fp8SidePtrs q = fp8_side_ptrs(op, fp8);
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const NormLaunch cfg = norm_launch<T>(op, r.c);
    for (auto [name, t] : {std::pair{"x", &x}, std::pair{"w", &w}, std::pair{"y", &y}}) expect_aligned16(op, name, *t);
    if (b.defined()) expect_aligned16(op, "b", b);
    if (r.n == 0) return;
    const T* bias = b.defined() ? b.data_as<T>() : nullptr;
    with_packs(cfg.packs_per_thread, [&](auto packs) {
      auto* kernel = q.any() ? norm::forward_kernel<T, decltype(packs)::value, kCentered, true>
                             : norm::forward_kernel<T, decltype(packs)::value, kCentered, false>;
      const int grid = resident_grid(ctx, kernel, cfg, r.n, 0);
      kernel<<<grid, cfg.threads, 0, stream_of(ctx)>>>(x.data_as<T>(), r.x, w.data_as<T>(), bias, eps, y.data_as<T>(),
                                                       r.y, mean, rstd.data_as<float>(), r.n, int(r.c), cfg.group, q);
      TROUPE_CUDA_CHECK_LAUNCH();
    });
  });
}

// mean: nullptr for RMSNorm; db: nullptr when there is no bias gradient. kAccumulate: dx = dx_in +
// (dx_in may be dx; else dx =, and dx may be dy).
template <bool kCentered, bool kAccumulate>
void launch_backward(const Context& ctx, const char* op, const NormRows& r, const Tensor& dy, const Tensor& x,
                     const Tensor& w, const float* mean, const Tensor& rstd, const Tensor& dx_in, const Tensor& dx,
                     const Tensor& dw, float* db) {
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t c = r.c;
    const NormLaunch cfg = norm_launch<T>(op, c);
    for (auto [name, t] : {std::pair{"dy", &dy}, std::pair{"x", &x}, std::pair{"w", &w}, std::pair{"dx_in", &dx_in},
                           std::pair{"dx", &dx}})
      expect_aligned16(op, name, *t);
    if (r.n == 0) return;
    cudaStream_t stream = stream_of(ctx);
    const int planes = kCentered ? 2 : 1;
    with_packs(cfg.packs_per_thread, [&](auto packs) {
      constexpr int K = decltype(packs)::value;
      const bool warp_mode = cfg.group == 32;
      auto* kernel = warp_mode ? norm::backward_warp_kernel<T, K, kCentered, kAccumulate>
                               : norm::backward_block_kernel<T, K, kCentered, kAccumulate>;
      // Warp mode: each warp's column sums in shared memory (up to 64 KiB a block at C = 1024).
      const size_t smem = warp_mode ? size_t(cfg.threads / 32) * planes * size_t(c) * sizeof(float) : 0;
      if (smem > 0)
        TROUPE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
      // Only as many blocks as are resident at once: each block's partial sums cost C floats.
      const int grid = resident_grid(ctx, kernel, cfg, r.n, smem);
      StreamScratch partial(stream, size_t(planes) * size_t(grid) * size_t(c));
      kernel<<<grid, cfg.threads, smem, stream>>>(dy.data_as<T>(), r.y, x.data_as<T>(), r.x, w.data_as<T>(), mean,
                                                  rstd.data_as<float>(), dx_in.data_as<T>(), dx.data_as<T>(),
                                                  partial.get(), r.n, int(c));
      TROUPE_CUDA_CHECK_LAUNCH();
      const dim3 finish_grid(ceil_div(c, 32), db ? 2 : 1), finish_block(32, norm::kFinishSlices);
      norm::finish_param_grads_kernel<<<finish_grid, finish_block, 0, stream>>>(partial.get(), grid, int(c),
                                                                                dw.data_as<float>(), db);
      TROUPE_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace

void layernorm_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, float eps,
                       const Tensor& y, const Tensor& mean, const Tensor& rstd, const Fp8SideOutput& fp8) {
  launch_forward<true>(ctx, "layernorm_forward", plain_rows(x), x, w, b, eps, y, mean.data_as<float>(), rstd, fp8);
}

void layernorm_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dx_in) {
  launch_backward<true, true>(ctx, "layernorm_backward", plain_rows(x), dy, x, w, mean.data_as<float>(), rstd, dx_in,
                              dx, dw, db.defined() ? db.data_as<float>() : nullptr);
}

void rmsnorm_forward(const Context& ctx, const Tensor& x, const Tensor& w, float eps, const Tensor& y,
                     const Tensor& rstd, const Fp8SideOutput& fp8) {
  launch_forward<false>(ctx, "rmsnorm_forward", plain_rows(x), x, w, Tensor(), eps, y, nullptr, rstd, fp8);
}

void rmsnorm_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                      const Tensor& dx, const Tensor& dw, const Tensor& dx_in) {
  launch_backward<false, true>(ctx, "rmsnorm_backward", plain_rows(x), dy, x, w, nullptr, rstd, dx_in, dx, dw, nullptr);
}

void rmsnorm_heads_forward(const Context& ctx, const Tensor& x, const Tensor& w, float eps, HeadSpan heads,
                           const Tensor& y, const Tensor& rstd) {
  constexpr const char* op = "rmsnorm_heads_forward";
  const int64_t d = w.dim(0);
  launch_forward<false>(ctx, op, head_rows(op, x, y, d, heads), from_head(x, heads.first, d), w, Tensor(), eps,
                        from_head(y, heads.first, d), nullptr, rstd);
}

void rmsnorm_heads_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                            HeadSpan heads, const Tensor& dx, const Tensor& dw) {
  constexpr const char* op = "rmsnorm_heads_backward";
  const int64_t d = w.dim(0);
  launch_backward<false, false>(ctx, op, head_rows(op, x, dy, d, heads), from_head(dy, heads.first, d),
                                from_head(x, heads.first, d), w, nullptr, rstd, from_head(dx, heads.first, d),
                                from_head(dx, heads.first, d), dw, nullptr);
}

}  // namespace troupe::cuda
