// Linear layer on CUDA: three cuBLASLt GEMMs (kernels/cuda/gemm_lt.hpp) and a column-sum
// kernel for the bias gradient. The forwards of a decode step (at most 8 rows, bf16/f16) take
// the small-batch GEMV instead (kernels/cuda/gemv.hpp), unless TROUPE_DECODE_GEMV=0.
//
// db is our own two-pass column sum rather than cuBLASLt's BGRADB epilogue on the dw GEMM:
// measured by bench/gemm_bench on an H200 (GPT-2 shapes, M = 16384), the epilogue slows that
// GEMM by 30-40% (qkv: 0.127 vs 0.090 ms) while the column sum costs 0.016 ms; the epilogue
// also overwrites where db must accumulate. The fixed reduction order keeps db deterministic.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm_lt.hpp"
#include "kernels/cuda/gemv.hpp"
#include "kernels/linear.hpp"

namespace troupe::cuda {

namespace {

// Column-sum tiling: a block is kColumnThreads x kRowLanes threads; each thread sums kVec
// adjacent columns over every kRowLanes-th row of the block's chunk of rows.
constexpr int kColumnThreads = 32;
constexpr int kRowLanes = 8;
constexpr int kFinishThreads = 256;
// Blocks per SM the chunking aims for: enough loads in flight to stream dy at full bandwidth.
constexpr int kColumnSumBlocksPerSm = 4;

// partial[chunk, c] = sum of dy[r, c] over the rows r of chunk blockIdx.y.
template <typename T, int kVec>
__global__ void column_sum_partial_kernel(const T* __restrict__ dy, float* __restrict__ partial, int64_t rows,
                                          int64_t cols, int64_t rows_per_chunk) {
  __shared__ float lane_sums[kRowLanes][kColumnThreads * kVec];
  const int64_t block_col = int64_t(blockIdx.x) * kColumnThreads * kVec;
  const int64_t col = block_col + int64_t(threadIdx.x) * kVec;
  const int64_t r0 = int64_t(blockIdx.y) * rows_per_chunk;
  const int64_t r1 = min(rows, r0 + rows_per_chunk);
  float acc[kVec] = {};
  if (col < cols) {
#pragma unroll 4
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) {
      const T* row = dy + r * cols + col;
      if constexpr (kVec == Pack128<T>::size) {
        const Pack128<T> v = load128cs(row);
#pragma unroll
        for (int k = 0; k < kVec; ++k) acc[k] += to_f32(v[k]);
      } else {
        acc[0] += to_f32(row[0]);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kVec; ++k) lane_sums[threadIdx.y][threadIdx.x * kVec + k] = acc[k];
  __syncthreads();
  const int tid = threadIdx.y * kColumnThreads + threadIdx.x;
  for (int c = tid; c < kColumnThreads * kVec; c += kColumnThreads * kRowLanes) {
    float s = 0.0f;
#pragma unroll
    for (int y = 0; y < kRowLanes; ++y) s += lane_sums[y][c];
    if (block_col + c < cols) partial[int64_t(blockIdx.y) * cols + block_col + c] = s;
  }
}

// db[c] += sum over chunks of partial[chunk, c], chunks in order.
__global__ void column_sum_finish_kernel(const float* __restrict__ partial, int chunks, int64_t cols,
                                         float* __restrict__ db) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float s = 0.0f;
  for (int i = 0; i < chunks; ++i) s += partial[int64_t(i) * cols + c];
  db[c] += s;
}

// db[N] += column sums of dy[M, N]. The per-chunk partial sums live in the context's cuBLASLt
// workspace: free between GEMMs because all work on the context is ordered on one stream.
template <typename T>
void bias_grad_accumulate(const Context& ctx, const Tensor& dy, const Tensor& db) {
  const CudaState& st = ctx.cuda_state();
  const int64_t rows = dy.dim(0), cols = dy.dim(1);
  if (rows == 0 || cols == 0) return;
  constexpr int kPack = Pack128<T>::size;
  const bool packed = cols % kPack == 0 && reinterpret_cast<uintptr_t>(dy.data()) % 16 == 0;
  const int vec = packed ? kPack : 1;
  const int64_t col_blocks = (cols + kColumnThreads * vec - 1) / (kColumnThreads * vec);

  int64_t chunks = (int64_t(kColumnSumBlocksPerSm) * st.sm_count + col_blocks - 1) / col_blocks;
  chunks = std::min(chunks, (rows + kRowLanes - 1) / kRowLanes);                            // >= kRowLanes rows each
  chunks = std::min(chunks, int64_t(st.workspace_bytes / (sizeof(float) * size_t(cols))));  // fits the workspace
  chunks = std::max<int64_t>(chunks, 1);
  TROUPE_CHECK(size_t(chunks) * size_t(cols) * sizeof(float) <= st.workspace_bytes, "linear_backward: db of ", cols,
               " columns does not fit the workspace");
  const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
  chunks = (rows + rows_per_chunk - 1) / rows_per_chunk;  // no empty chunks

  float* partial = static_cast<float*>(st.workspace);
  const dim3 block(kColumnThreads, kRowLanes);
  const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>(chunks));
  if (packed)
    column_sum_partial_kernel<T, kPack>
        <<<grid, block, 0, st.stream>>>(dy.data_as<T>(), partial, rows, cols, rows_per_chunk);
  else
    column_sum_partial_kernel<T, 1>
        <<<grid, block, 0, st.stream>>>(dy.data_as<T>(), partial, rows, cols, rows_per_chunk);
  TROUPE_CUDA_CHECK_LAUNCH();
  column_sum_finish_kernel<<<ceil_div(cols, kFinishThreads), kFinishThreads, 0, st.stream>>>(partial, int(chunks), cols,
                                                                                             db.data_as<float>());
  TROUPE_CUDA_CHECK_LAUNCH();
}

}  // namespace

void linear_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                    bool accumulate) {
  if (gemv_applies(x, w, y)) {
    gemv_forward(ctx, x, w, b, y, accumulate, /*gelu=*/false);
    return;
  }
  // y[M, N] = x[M, K] · w[N, K]^T (+ y when accumulating, beta = 1) (+ b[N] in the epilogue)
  MatmulProblem p{&x, false, &w, true, &y, accumulate ? 1.0f : 0.0f};
  if (b.defined()) {
    p.epilogue = MatmulEpilogue::bias;
    p.vec = &b;
  }
  matmul_lt(ctx, p);
}

void linear_gelu_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  if (gemv_applies(x, w, y)) {
    gemv_forward(ctx, x, w, b, y, /*accumulate=*/false, /*gelu=*/true);
    return;
  }
  MatmulProblem p{&x, false, &w, true, &y, 0.0f, MatmulEpilogue::gelu};
  if (b.defined()) p.vec = &b;
  matmul_lt(ctx, p);
}

void linear_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx,
                     const Tensor& dw, const Tensor& db, bool accumulate_dx) {
  // dx[M, K] = dy[M, N] · w[N, K]  (+ dx)
  if (dx.defined()) matmul_lt(ctx, {&dy, false, &w, false, &dx, accumulate_dx ? 1.0f : 0.0f});
  // dw[N, K] += dy^T · x[M, K], f32 output; with no rows there is nothing to add.
  if (dw.defined() && x.dim(0) > 0) matmul_lt(ctx, {&dy, true, &x, false, &dw, 1.0f});
  if (db.defined()) {
    dispatch_float(dy.dtype(), "linear_backward", [&](auto tag) {
      using T = typename decltype(tag)::type;
      bias_grad_accumulate<T>(ctx, dy, db);
    });
  }
}

}  // namespace troupe::cuda
