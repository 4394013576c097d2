// Column sums of a row-major [rows, cols] matrix into an f32 vector (db[c] += sum over rows),
// in two passes: partial sums per chunk of rows into the context's cuBLASLt workspace (free
// between GEMMs: all work on a context is ordered on its stream), then the chunks added in
// order, so the result is deterministic. The matrix comes from a Source, which may produce it
// in the same pass (the GELU's backward writes its output and sums it: a bias gradient at no
// extra read).
//
//   struct Source {  // kVec adjacent elements starting at element offset i, as f32
//     __device__ void operator()(int64_t i, float (&v)[kVec]) const;
//   };
//   column_sums<kVec>(ctx, "linear_backward", source, rows, cols, db);
#pragma once

#include "base/check.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/tensor.hpp"

namespace troupe::cuda {

namespace column_sum_detail {

// A block is kColumnThreads x kRowLanes threads; each thread sums kVec adjacent columns over
// every kRowLanes-th row of the block's chunk of rows.
constexpr int kColumnThreads = 32;
constexpr int kRowLanes = 8;
constexpr int kFinishThreads = 256;
// Blocks per SM the chunking aims for: enough loads in flight to stream the matrix at full bandwidth.
constexpr int kBlocksPerSm = 4;

// partial[chunk, c] = sum of the source's [r, c] over the rows r of chunk blockIdx.y.
template <int kVec, typename Source>
__global__ void partial_kernel(Source src, float* __restrict__ partial, int64_t rows, int64_t cols,
                               int64_t rows_per_chunk) {
  __shared__ float lane_sums[kRowLanes][kColumnThreads * kVec];
  const int64_t block_col = int64_t(blockIdx.x) * kColumnThreads * kVec;
  const int64_t col = block_col + int64_t(threadIdx.x) * kVec;
  const int64_t r0 = int64_t(blockIdx.y) * rows_per_chunk;
  const int64_t r1 = min(rows, r0 + rows_per_chunk);
  float acc[kVec] = {};
  if (col < cols) {
#pragma unroll 4
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) {
      float v[kVec];
      src(r * cols + col, v);
#pragma unroll
      for (int k = 0; k < kVec; ++k) acc[k] += v[k];
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

// db[c] += sum over chunks of partial[chunk, c], chunks in order. (A template: defined in every
// file that includes this header.)
template <int kUnused = 0>
__global__ void finish_kernel(const float* __restrict__ partial, int chunks, int64_t cols, float* __restrict__ db) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float s = 0.0f;
  for (int i = 0; i < chunks; ++i) s += partial[int64_t(i) * cols + c];
  db[c] += s;
}

}  // namespace column_sum_detail

// db[c] += sum over r of src[r, c]; kVec: the columns a thread takes (cols must be a multiple).
template <int kVec, typename Source>
void column_sums(const Context& ctx, const char* op, const Source& src, int64_t rows, int64_t cols, float* db) {
  using namespace column_sum_detail;
  if (rows == 0 || cols == 0) return;
  TROUPE_CHECK(cols % kVec == 0, op, ": column sums of ", cols, " columns, ", kVec, " a thread");
  const CudaState& st = ctx.cuda_state();
  const int64_t col_blocks = (cols + kColumnThreads * kVec - 1) / (kColumnThreads * kVec);
  int64_t chunks = (int64_t(kBlocksPerSm) * st.sm_count + col_blocks - 1) / col_blocks;
  chunks = std::min(chunks, (rows + kRowLanes - 1) / kRowLanes);                            // >= kRowLanes rows each
  chunks = std::min(chunks, int64_t(st.workspace_bytes / (sizeof(float) * size_t(cols))));  // fits the workspace
  chunks = std::max<int64_t>(chunks, 1);
  TROUPE_CHECK(size_t(chunks) * size_t(cols) * sizeof(float) <= st.workspace_bytes, op, ": column sums of ", cols,
               " columns do not fit the workspace");
  const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
  chunks = (rows + rows_per_chunk - 1) / rows_per_chunk;  // no empty chunks

  float* partial = static_cast<float*>(st.workspace);
  const dim3 block(kColumnThreads, kRowLanes);
  const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>(chunks));
  partial_kernel<kVec><<<grid, block, 0, st.stream>>>(src, partial, rows, cols, rows_per_chunk);
  TROUPE_CUDA_CHECK_LAUNCH();
  finish_kernel<><<<ceil_div(cols, kFinishThreads), kFinishThreads, 0, st.stream>>>(partial, int(chunks), cols, db);
  TROUPE_CUDA_CHECK_LAUNCH();
}

}  // namespace troupe::cuda
