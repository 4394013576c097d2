// Sum of squares and an all-finite flag over a list of f32 tensors, deterministically:
//   1. partials kernel: blocks mapped to (tensor, chunk) as in adamw.cu (the tensor table is a
//      __grid_constant__ parameter); each block writes an f32 partial sum and a non-finite flag;
//   2. final kernel: one block adds the partials in f64, in a fixed order;
//   3. the 16-byte result is read back (this synchronizes the stream).
// Partials and result live in the context's workspace: ops on one stream run in order, so the
// workspace is free between the cuBLAS calls that also use it.
#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/grad_norm.hpp"

namespace troupe::cuda {

namespace {
constexpr int kThreads = 256;
constexpr int kItemsPerThread = 16;
constexpr int64_t kChunk = int64_t(kThreads) * kItemsPerThread;  // elements per block
constexpr int kFinalThreads = 1024;
constexpr int kMaxTensorsPerLaunch = 1536;
constexpr int64_t kMaxPieceNumel = int64_t(1) << 30;

struct TensorTable {
  int count;
  const float* data[kMaxTensorsPerLaunch];
  int32_t numel[kMaxTensorsPerLaunch];        // <= kMaxPieceNumel
  int32_t first_block[kMaxTensorsPerLaunch];  // ascending
};
static_assert(sizeof(TensorTable) < 30 * 1024, "the table must fit in the kernel parameter space");

struct GradStatsResult {
  double sum_sq;
  int nonfinite;
};

__device__ __forceinline__ int find_tensor(const TensorTable& table, int block) {
  return last_not_above(table.first_block, table.count, block);
}

// partial_sums, partial_nonfinite: [block_base + gridDim.x] (this launch fills its share).
__global__ void __launch_bounds__(kThreads)
    grad_partials_kernel(const __grid_constant__ TensorTable table, int block_base, float* __restrict__ partial_sums,
                         int* __restrict__ partial_nonfinite) {
  const int t = find_tensor(table, int(blockIdx.x));
  const int64_t begin = int64_t(int(blockIdx.x) - table.first_block[t]) * kChunk;
  const int64_t left = table.numel[t] - begin;
  const int64_t n = left < kChunk ? left : kChunk;
  const float* x = table.data[t] + begin;
  float values[kItemsPerThread];
#pragma unroll
  for (int k = 0; k < kItemsPerThread; ++k) {
    const int j = k * kThreads + threadIdx.x;
    values[k] = j < n ? x[j] : 0.0f;
  }
  float sum = 0.0f;
  bool nonfinite = false;
#pragma unroll
  for (int k = 0; k < kItemsPerThread; ++k) {
    sum += values[k] * values[k];
    nonfinite |= !isfinite(values[k]);
  }
  sum = block_sum(sum);
  const int any_nonfinite = __syncthreads_or(nonfinite);
  if (threadIdx.x == 0) {
    partial_sums[block_base + blockIdx.x] = sum;
    partial_nonfinite[block_base + blockIdx.x] = any_nonfinite;
  }
}

__device__ __forceinline__ double warp_sum_f64(double x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// One block: result = (sum of the partials in f64, any flag set).
__global__ void __launch_bounds__(kFinalThreads)
    grad_stats_final_kernel(const float* __restrict__ partial_sums, const int* __restrict__ partial_nonfinite,
                            int count, GradStatsResult* result) {
  __shared__ double warp_sums[32];
  double sum = 0.0;
  int nonfinite = 0;
  for (int i = threadIdx.x; i < count; i += kFinalThreads) {
    sum += double(partial_sums[i]);
    nonfinite |= partial_nonfinite[i];
  }
  sum = warp_sum_f64(sum);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
  nonfinite = __syncthreads_or(nonfinite);  // also the barrier for warp_sums
  if (threadIdx.x < 32) {
    sum = warp_sum_f64(warp_sums[threadIdx.x]);
    if (threadIdx.x == 0) *result = GradStatsResult{sum, nonfinite};
  }
}

struct Piece {
  const float* data;
  int64_t numel;
};

std::vector<Piece> split_into_pieces(const std::vector<Tensor>& grads) {
  std::vector<Piece> pieces;
  for (const Tensor& t : grads)
    for (int64_t done = 0; done < t.numel(); done += kMaxPieceNumel)
      pieces.push_back({t.data_as<float>() + done, std::min(kMaxPieceNumel, t.numel() - done)});
  return pieces;
}
}  // namespace

GradStats grad_stats(const Context& ctx, const std::vector<Tensor>& grads) {
  const std::vector<Piece> pieces = split_into_pieces(grads);
  if (pieces.empty()) return GradStats{};
  int64_t total_blocks = 0;
  for (const Piece& p : pieces) total_blocks += (p.numel + kChunk - 1) / kChunk;

  // Workspace layout: [result][partial sums: f32 x total_blocks][flags: i32 x total_blocks].
  const CudaState& state = ctx.cuda_state();
  const size_t needed = sizeof(GradStatsResult) + size_t(total_blocks) * (sizeof(float) + sizeof(int));
  TROUPE_CHECK(needed <= state.workspace_bytes, "grad_stats: ", total_blocks, " partials need ", needed,
               " bytes of workspace, the context has ", state.workspace_bytes);
  auto* result = static_cast<GradStatsResult*>(state.workspace);
  auto* partial_sums = reinterpret_cast<float*>(result + 1);
  auto* partial_nonfinite = reinterpret_cast<int*>(partial_sums + total_blocks);

  const cudaStream_t stream = state.stream;
  int block_base = 0;
  for (size_t first = 0; first < pieces.size(); first += kMaxTensorsPerLaunch) {
    TensorTable table{};
    table.count = int(std::min<size_t>(kMaxTensorsPerLaunch, pieces.size() - first));
    int blocks = 0;
    for (int k = 0; k < table.count; ++k) {
      const Piece& p = pieces[first + k];
      table.data[k] = p.data;
      table.numel[k] = int32_t(p.numel);
      table.first_block[k] = blocks;
      blocks += int((p.numel + kChunk - 1) / kChunk);
    }
    if (blocks > 0) {
      grad_partials_kernel<<<unsigned(blocks), kThreads, 0, stream>>>(table, block_base, partial_sums,
                                                                      partial_nonfinite);
      TROUPE_CUDA_CHECK_LAUNCH();
    }
    block_base += blocks;
  }
  grad_stats_final_kernel<<<1, kFinalThreads, 0, stream>>>(partial_sums, partial_nonfinite, int(total_blocks), result);
  TROUPE_CUDA_CHECK_LAUNCH();

  GradStatsResult host{};
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(&host, result, sizeof(host), cudaMemcpyDeviceToHost, stream));
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(stream));
  return GradStats{host.sum_sq, host.nonfinite == 0};
}

}  // namespace troupe::cuda
