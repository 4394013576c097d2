// Grouped linear on CUDA. y and dx: one cublasGemmGroupedBatchedEx launch over every non-empty
// group (cuBLAS 12.5+), each group its own problem (its row count differs), the matrices' row
// slices given as device pointer arrays. Row slices off 16-byte alignment (odd widths) take one
// cuBLASLt GEMM per group instead.
//
// dw[g] += dy_g^T x_g in f32 cannot be that grouped GEMM as it stands: it takes bf16/f16 inputs
// only with an output of the same type. Four ways, chosen by grouped_dw(groups) (kernels/grouped_dw_path.hpp):
//   kernel   our own kernel, one launch for every group (kernels/cuda/grouped_dw_kernel.hpp), after
//            dx on ctx's stream; the offsets go to the device first. Operands it does not take
//            (f32, N or K off a multiple of 8) take the streams way.
//   loop     one cuBLASLt GEMM per group, one after another on ctx's stream. With many small
//            experts (64 of [512, 512] over ~384 rows each) each GEMM fills a few CTAs and the
//            backward runs at ~0.1 of one dense GEMM of the same work.
//   streams  the same GEMMs (the same algorithm, so the same bits) dealt over kDwLanes side
//            streams of ctx (kernels/cuda/stream_fork.cuh), each with its own cuBLASLt workspace,
//            while dx runs on ctx's stream; ctx's stream waits for all of them before its next op.
//   tf32     dy and x converted to f32 and dw as one grouped GEMM in f32 with C = dw, beta 1:
//            bf16/f16 values are exact in TF32, so CUBLAS_COMPUTE_32F_FAST_TF32 multiplies them
//            exactly and sums in f32 (f32 inputs use CUBLAS_COMPUTE_32F: they are not exact in TF32).
//
// Row-major Y[m, N] = X[m, K] W[N, K]^T is column-major Y^T = W^T X^T: cuBLAS's A is our W
// (read transposed), its B our X, its m = N, n = m (rows), k = K. Likewise dX = dY W is
// dX^T = W^T dY^T with cuBLAS's A = W (not transposed), B = dY, m = K, n = rows, k = N. And
// dW[N, K] = dY^T X is dW^T = X^T dY with cuBLAS's A = X (not transposed), B = dY (transposed),
// m = K, n = N, k = rows.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm_lt.hpp"
#include "kernels/cuda/grouped_dw_kernel.hpp"
#include "kernels/cuda/host_upload.hpp"
#include "kernels/cuda/stream_buffer.cuh"
#include "kernels/cuda/stream_fork.cuh"
#include "kernels/elementwise.hpp"
#include "kernels/grouped_dw_path.hpp"
#include "kernels/grouped_linear.hpp"

#if CUBLAS_VERSION >= 120500
#define TROUPE_HAVE_GROUPED_GEMM 1
#else
#define TROUPE_HAVE_GROUPED_GEMM 0
#endif

namespace troupe::cuda {

namespace {

// Side streams of the streams way. Four: the 64 experts' [512, 512] weight gradients of a
// DeepSeek-like layer take 8-16 CTAs each, so four at once beside dx take a good share of an
// H100's 132 SMs; each lane costs a workspace as large as ctx's (32 MiB).
constexpr int kDwLanes = 4;

Tensor rows(const Tensor& t, int64_t from, int64_t to) { return t.slice(from * t.dim(1), {to - from, t.dim(1)}); }
Tensor group(const Tensor& w, int64_t g) { return w.slice(g * w.dim(1) * w.dim(2), {w.dim(1), w.dim(2)}); }

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// One cublasGemmGroupedBatchedEx call in cuBLAS's column-major terms: C_i = op(A_i) op(B_i) + beta C_i,
// one problem per added entry (each a group of one), the same transposes and leading dimensions.
struct GroupedGemm {
  cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  int64_t lda = 0, ldb = 0, ldc = 0;
  DType type = DType::f32;  // of A, B and C
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  float beta = 0.0f;
  std::vector<const void*> a{}, b{};
  std::vector<void*> c{};
  std::vector<int64_t> m{}, n{}, k{};

  void add(const Tensor& ta, const Tensor& tb, const Tensor& tc, int64_t pm, int64_t pn, int64_t pk) {
    a.push_back(ta.data());
    b.push_back(tb.data());
    c.push_back(tc.data());
    m.push_back(pm);
    n.push_back(pn);
    k.push_back(pk);
  }
};

// Returns false (nothing enqueued) where the grouped GEMM cannot take the problems: an old
// cuBLAS, matrices off 16-byte alignment, or sizes past int32.
bool grouped_gemm(const Context& ctx, const GroupedGemm& p) {
#if TROUPE_HAVE_GROUPED_GEMM
  const int count = int(p.a.size());
  if (count == 0) return true;
  for (int i = 0; i < count; ++i)
    if (!aligned16(p.a[size_t(i)]) || !aligned16(p.b[size_t(i)]) || !aligned16(p.c[size_t(i)])) return false;
  const auto fits = [](int64_t v) { return v <= INT32_MAX; };
  if (!fits(p.lda) || !fits(p.ldb) || !fits(p.ldc) || !std::all_of(p.m.begin(), p.m.end(), fits) ||
      !std::all_of(p.n.begin(), p.n.end(), fits) || !std::all_of(p.k.begin(), p.k.end(), fits))
    return false;
  cudaStream_t stream = stream_of(ctx);
  // The pointer arrays live in device memory, uploaded without the host waiting (host_upload.hpp).
  StreamBuffer<void*> ptrs(stream, size_t(3 * count));
  std::vector<const void*> all(p.a.begin(), p.a.end());
  all.insert(all.end(), p.b.begin(), p.b.end());
  all.insert(all.end(), p.c.begin(), p.c.end());
  upload_async(ctx, ptrs.get(), all.data(), all.size() * sizeof(void*));
  const auto ints = [](const std::vector<int64_t>& v) { return std::vector<int>(v.begin(), v.end()); };
  const std::vector<int> m = ints(p.m), n = ints(p.n), k = ints(p.k);
  const std::vector<cublasOperation_t> trans_a(size_t(count), p.trans_a), trans_b(size_t(count), p.trans_b);
  const std::vector<int> lda(size_t(count), int(p.lda)), ldb(size_t(count), int(p.ldb)), ldc(size_t(count), int(p.ldc)),
      group_size(size_t(count), 1);
  const std::vector<float> alpha(size_t(count), 1.0f), beta(size_t(count), p.beta);
  const cudaDataType_t type = blas_data_type(p.type, "grouped_linear");
  TROUPE_CUBLAS_CHECK(cublasGemmGroupedBatchedEx(
      ctx.cuda_state().blas, trans_a.data(), trans_b.data(), m.data(), n.data(), k.data(), alpha.data(),
      const_cast<const void* const*>(ptrs.get()), type, lda.data(), const_cast<const void* const*>(ptrs.get() + count),
      type, ldb.data(), beta.data(), ptrs.get() + 2 * count, type, ldc.data(), count, group_size.data(), p.compute));
  return true;
#else
  (void)ctx, (void)p;
  return false;
#endif
}

// c_g = b_g op(w_g) for every non-empty group: the forward (op T: w_g^T, b = x, c = y) or dx
// (op N, b = dy, c = dx). One grouped GEMM, else one cuBLASLt GEMM per group.
void activations(const Context& ctx, bool trans_w, const Tensor& w, const Tensor& b, const Tensor& c,
                 const std::vector<int64_t>& offsets) {
  // CUBLAS_COMPUTE_32F: f32 accumulation; on f32 inputs full FP32 (the handle's default math
  // mode allows no TF32), as linear_forward's f32 path.
  GroupedGemm p{.trans_a = trans_w ? CUBLAS_OP_T : CUBLAS_OP_N,
                .lda = w.dim(2),
                .ldb = b.dim(1),
                .ldc = c.dim(1),
                .type = b.dtype()};
  for (int64_t g = 0; g < w.dim(0); ++g) {
    const int64_t from = offsets[size_t(g)], to = offsets[size_t(g) + 1];
    if (from < to) p.add(group(w, g), rows(b, from, to), rows(c, from, to), c.dim(1), to - from, b.dim(1));
  }
  if (grouped_gemm(ctx, p)) return;
  for (int64_t g = 0; g < w.dim(0); ++g) {
    const int64_t from = offsets[size_t(g)], to = offsets[size_t(g) + 1];
    if (from == to) continue;
    const Tensor bg = rows(b, from, to), wg = group(w, g), cg = rows(c, from, to);
    matmul_lt(ctx, {&bg, false, &wg, trans_w, &cg, 0.0f});
  }
}

// dw_g += dy_g^T x_g (f32), one cuBLASLt GEMM per non-empty group: on ctx's stream, or dealt
// over the fork's lanes, each group to the lane with the fewest rows so far.
void dw_gemms(const Context& ctx, const Tensor& dy, const Tensor& x, const std::vector<int64_t>& offsets,
              const Tensor& dw, const StreamFork* fork) {
  std::vector<int64_t> lane_rows(fork ? size_t(fork->size()) : 0, 0);
  for (int64_t g = 0; g < dw.dim(0); ++g) {
    const int64_t from = offsets[size_t(g)], to = offsets[size_t(g) + 1];
    if (from == to) continue;
    const Tensor dyg = rows(dy, from, to), xg = rows(x, from, to), dwg = group(dw, g);
    const MatmulProblem p{&dyg, true, &xg, false, &dwg, 1.0f};
    if (!fork) {
      matmul_lt(ctx, p);
      continue;
    }
    const auto lane = std::min_element(lane_rows.begin(), lane_rows.end());
    *lane += to - from;
    matmul_lt(ctx, p, fork->lane(int(lane - lane_rows.begin())));
  }
}

// The tf32 way: dw_g += dy_g^T x_g as one grouped GEMM over f32 copies of dy and x (the inputs
// themselves when f32), in cuBLAS's terms dw_g^T += x_g^T dy_g. False (nothing enqueued but the
// copies) where the grouped GEMM cannot take it.
bool dw_grouped_f32(const Context& ctx, const Tensor& dy, const Tensor& x, const std::vector<int64_t>& offsets,
                    const Tensor& dw) {
  const bool exact_in_tf32 = x.dtype() != DType::f32;
  Tensor dy32 = dy, x32 = x;
  if (exact_in_tf32) {  // bf16 / f16 -> f32 is exact; the copies go back to the pool after the GEMM
    dy32 = Tensor::stream_ordered(ctx, DType::f32, dy.shape());
    x32 = Tensor::stream_ordered(ctx, DType::f32, x.shape());
    cuda::convert(ctx, dy, dy32);
    cuda::convert(ctx, x, x32);
  }
  const int64_t n = dw.dim(1), k = dw.dim(2);
  GroupedGemm p{.trans_b = CUBLAS_OP_T,
                .lda = k,
                .ldb = n,
                .ldc = k,
                .compute = exact_in_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                .beta = 1.0f};
  for (int64_t g = 0; g < dw.dim(0); ++g) {
    const int64_t from = offsets[size_t(g)], to = offsets[size_t(g) + 1];
    if (from < to) p.add(rows(x32, from, to), rows(dy32, from, to), group(dw, g), k, n, to - from);
  }
  return grouped_gemm(ctx, p);
}

// The kernel way: the host offsets uploaded to an i32 tensor on ctx's device (host_upload.hpp: the
// host does not wait), then one launch.
void dw_kernel(const Context& ctx, const Tensor& dy, const Tensor& x, const std::vector<int64_t>& offsets,
               const Tensor& dw) {
  const std::vector<int32_t> host(offsets.begin(), offsets.end());  // R fits in i32 (grouped_dw_kernel_fits)
  const Tensor device = Tensor::stream_ordered(ctx, DType::i32, {int64_t(host.size())});
  upload_async(ctx, device.data(), host.data(), host.size() * sizeof(int32_t));
  grouped_dw_kernel(ctx, dy, x, device, dw);
}

}  // namespace

void grouped_linear_forward(const Context& ctx, const Tensor& x, const Tensor& w, const std::vector<int64_t>& offsets,
                            const Tensor& y) {
  activations(ctx, true, w, x, y, offsets);
}

void grouped_linear_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w,
                             const std::vector<int64_t>& offsets, const Tensor& dx, const Tensor& dw) {
  GroupedDw path = grouped_dw(int64_t(offsets.size()) - 1);
  if (path == GroupedDw::kernel && !grouped_dw_kernel_fits(dy, x, dw)) path = GroupedDw::streams;
  if (path == GroupedDw::streams) {
    StreamFork fork(ctx, kDwLanes);  // before dx: the lanes need not wait for it
    if (dx.defined()) activations(ctx, false, w, dy, dx, offsets);
    dw_gemms(ctx, dy, x, offsets, dw, &fork);
    fork.join();
    return;
  }
  if (dx.defined()) activations(ctx, false, w, dy, dx, offsets);
  if (path == GroupedDw::kernel) {
    dw_kernel(ctx, dy, x, offsets, dw);
    return;
  }
  if (path == GroupedDw::tf32 && dw_grouped_f32(ctx, dy, x, offsets, dw)) return;
  dw_gemms(ctx, dy, x, offsets, dw, nullptr);
}

}  // namespace troupe::cuda
