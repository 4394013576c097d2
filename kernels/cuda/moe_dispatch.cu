// MoE dispatch bookkeeping on CUDA. Both the capacity drop and the row map need, per expert,
// its choices in a fixed order; a stable radix sort (CUB) of (expert, order key) pairs gives
// it: a choice's rank within its expert is its sorted position minus where its expert's run
// begins. Counts use integer-valued f32 atomics, exact and so order-independent. The row map also
// takes offsets computed on the device (moe_expert_offsets): then nothing waits for the host,
// and a per-expert block scan replaces the sort, so nothing allocates either (CUDA graphs).
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/host_upload.hpp"
#include "kernels/cuda/stream_buffer.cuh"
#include "kernels/moe_dispatch.hpp"

namespace troupe::cuda {

namespace {

constexpr int kThreads = 256;

int bits_for(int64_t values) {  // bits that hold 0 .. values - 1
  int b = 1;
  while ((int64_t(1) << b) < values) ++b;
  return b;
}

__global__ void counts_kernel(const int32_t* __restrict__ experts, const uint8_t* __restrict__ kept,
                              float* __restrict__ counts, int64_t choices) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= choices || (kept && !kept[i])) return;
  atomicAdd(counts + experts[i], 1.0f);  // integers below 2^24: exact in any order
}

// Sort items in Megatron's [T, B] order, item q = (token m = q / K, choice q % K), keyed by
// (expert, ~prob bits) for "probs" or by expert for "position"; the stable sort keeps Megatron's
// order among equal keys. Probs are >= 0, so their bit patterns order like their values.
__global__ void drop_keys_kernel(const int32_t* __restrict__ experts, const float* __restrict__ probs,
                                 uint64_t* __restrict__ keys, int32_t* __restrict__ vals, int64_t n, int k,
                                 int64_t seq_length, bool by_probs) {
  const int64_t q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= n * k) return;
  const int64_t batch = n / seq_length, m = q / k;
  const int64_t row = (m % batch) * seq_length + m / batch;
  const int64_t i = row * k + q % k;
  uint32_t bits = __float_as_uint(probs[i]);
  if (bits == 0x80000000u) bits = 0;  // -0 sorts as +0, as it compares on the CPU
  keys[q] = (uint64_t(uint32_t(experts[i])) << 32) | (by_probs ? ~bits : 0u);
  vals[q] = int32_t(i);
}

// begin[e] = the first sorted position of expert e (written only for experts present).
template <typename Key>
__global__ void run_begin_kernel(const Key* __restrict__ keys, int shift, int32_t* __restrict__ begin, int64_t total) {
  const int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= total) return;
  const Key e = keys[p] >> shift;
  if (p == 0 || (keys[p - 1] >> shift) != e) begin[e] = int32_t(p);
}

__global__ void drop_apply_kernel(const uint64_t* __restrict__ keys, const int32_t* __restrict__ vals,
                                  const int32_t* __restrict__ begin, int64_t capacity, uint8_t* __restrict__ kept,
                                  float* __restrict__ probs, int64_t total) {
  const int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= total) return;
  const int64_t rank = p - begin[keys[p] >> 32];
  const int32_t i = vals[p];
  const bool keep = rank < capacity;
  kept[i] = keep ? 1 : 0;
  if (!keep) probs[i] = 0.0f;
}

// Kept choices keyed by expert, dropped ones by E (sorted last); values the choice index.
__global__ void map_keys_kernel(const int32_t* __restrict__ experts, const uint8_t* __restrict__ kept,
                                uint32_t* __restrict__ keys, int32_t* __restrict__ vals, int64_t choices, int e) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= choices) return;
  keys[i] = !kept || kept[i] ? uint32_t(experts[i]) : uint32_t(e);
  vals[i] = int32_t(i);
}

__global__ void map_scatter_kernel(const uint32_t* __restrict__ keys, const int32_t* __restrict__ vals,
                                   const int32_t* __restrict__ begin, const int64_t* __restrict__ offsets, int e,
                                   int32_t* __restrict__ row_choice, int32_t* __restrict__ choice_row, int64_t total) {
  const int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= total) return;
  const uint32_t x = keys[p];
  if (x >= uint32_t(e)) return;  // dropped: choice_row stays -1
  const int64_t row = offsets[x] + (p - begin[x]);
  const int32_t i = vals[p];
  choice_row[i] = int32_t(row);
  row_choice[row] = i;
}

// offsets[0 .. e] = exclusive scan of the per-expert choice counts; one block, counts in shared
// memory (integer atomics: exact in any order).
__global__ void offsets_kernel(const int32_t* __restrict__ experts, int32_t* __restrict__ offsets, int64_t choices,
                               int e) {
  extern __shared__ int32_t counts[];
  for (int j = int(threadIdx.x); j < e; j += int(blockDim.x)) counts[j] = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < choices; i += blockDim.x) {
    const int32_t x = experts[i];
    if (x >= 0 && x < e) atomicAdd(counts + x, 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t total = 0;
    offsets[0] = 0;
    for (int j = 0; j < e; ++j) offsets[j + 1] = (total += counts[j]);
  }
}

// The row map from device offsets, without a sort (so without temporary memory): block e walks
// every choice in order, 256 at a time, and numbers expert e's kept ones with a block-wide
// prefix sum: the same rows as the sorted path's.
constexpr int kMapThreads = 256;
__global__ void expert_rows_kernel(const int32_t* __restrict__ experts, const uint8_t* __restrict__ kept,
                                   const int32_t* __restrict__ offsets, int32_t* __restrict__ row_choice,
                                   int32_t* __restrict__ choice_row, int64_t choices, int64_t rows) {
  using Scan = cub::BlockScan<int, kMapThreads>;
  __shared__ typename Scan::TempStorage scan;
  const int e = int(blockIdx.x);
  int64_t next = offsets[e];
  for (int64_t base = 0; base < choices; base += kMapThreads) {
    const int64_t i = base + threadIdx.x;
    const int mine = i < choices && experts[i] == e && (!kept || kept[i]) ? 1 : 0;
    int before = 0, chunk = 0;
    Scan(scan).ExclusiveSum(mine, before, chunk);
    const int64_t row = next + before;
    if (mine && row < rows) {  // rows past R: offsets that do not hold the choices
      row_choice[row] = int32_t(i);
      choice_row[i] = int32_t(row);
    }
    next += chunk;
    __syncthreads();  // the scan's storage is reused
  }
}

// Stable ascending sort of (keys, vals) over the low end_bit bits of the keys, into the
// *_out buffers; CUB's temporary storage comes from the stream.
template <typename Key>
void stable_sort_pairs(cudaStream_t stream, const Key* keys_in, Key* keys_out, const int32_t* vals_in,
                       int32_t* vals_out, int64_t total, int end_bit) {
  size_t temp_bytes = 0;
  TROUPE_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in, keys_out, vals_in, vals_out, total, 0,
                                                    end_bit, stream));
  StreamBuffer<uint8_t> temp(stream, temp_bytes);
  TROUPE_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.get(), temp_bytes, keys_in, keys_out, vals_in, vals_out, total,
                                                    0, end_bit, stream));
}

}  // namespace

void moe_expert_counts(const Context& ctx, const Tensor& experts, const Tensor& kept, const Tensor& counts) {
  cudaStream_t stream = stream_of(ctx);
  TROUPE_CUDA_CHECK(cudaMemsetAsync(counts.data(), 0, counts.nbytes(), stream));
  const int64_t choices = experts.numel();
  if (choices == 0) return;
  counts_kernel<<<ceil_div(choices, kThreads), kThreads, 0, stream>>>(
      experts.data_as<int32_t>(), kept.defined() ? kept.data_as<uint8_t>() : nullptr, counts.data_as<float>(), choices);
  TROUPE_CUDA_CHECK_LAUNCH();
}

void moe_capacity_drop(const Context& ctx, const Tensor& experts, const Tensor& probs, int num_experts,
                       int64_t seq_length, int64_t capacity, bool by_probs, const Tensor& kept) {
  cudaStream_t stream = stream_of(ctx);
  const int64_t n = experts.dim(0), k = experts.dim(1), total = n * k;
  TROUPE_CUDA_CHECK(cudaMemsetAsync(kept.data(), 1, kept.nbytes(), stream));
  if (capacity <= 0 || total == 0) return;
  StreamBuffer<uint64_t> keys(stream, size_t(total)), sorted_keys(stream, size_t(total));
  StreamBuffer<int32_t> vals(stream, size_t(total)), sorted_vals(stream, size_t(total)),
      begin(stream, size_t(num_experts));
  const unsigned blocks = ceil_div(total, kThreads);
  drop_keys_kernel<<<blocks, kThreads, 0, stream>>>(experts.data_as<int32_t>(), probs.data_as<float>(), keys.get(),
                                                    vals.get(), n, int(k), seq_length, by_probs);
  TROUPE_CUDA_CHECK_LAUNCH();
  stable_sort_pairs(stream, keys.get(), sorted_keys.get(), vals.get(), sorted_vals.get(), total,
                    32 + bits_for(num_experts));
  run_begin_kernel<uint64_t><<<blocks, kThreads, 0, stream>>>(sorted_keys.get(), 32, begin.get(), total);
  TROUPE_CUDA_CHECK_LAUNCH();
  drop_apply_kernel<<<blocks, kThreads, 0, stream>>>(sorted_keys.get(), sorted_vals.get(), begin.get(), capacity,
                                                     kept.data_as<uint8_t>(), probs.data_as<float>(), total);
  TROUPE_CUDA_CHECK_LAUNCH();
}

void moe_expert_offsets(const Context& ctx, const Tensor& experts, const Tensor& offsets) {
  const int e = int(offsets.numel()) - 1;
  offsets_kernel<<<1, 1024, size_t(e) * sizeof(int32_t), stream_of(ctx)>>>(
      experts.data_as<int32_t>(), offsets.data_as<int32_t>(), experts.numel(), e);
  TROUPE_CUDA_CHECK_LAUNCH();
}

void moe_row_map(const Context& ctx, const Tensor& experts, const Tensor& kept,
                 const std::vector<int64_t>& expert_offsets, const MoeRowMap& map) {
  cudaStream_t stream = stream_of(ctx);
  const int e = int(expert_offsets.size()) - 1;
  const int64_t total = experts.numel();
  // -1 everywhere (all bytes 0xff): padding rows and dropped choices.
  TROUPE_CUDA_CHECK(cudaMemsetAsync(map.row_choice.data(), 0xff, map.row_choice.nbytes(), stream));
  TROUPE_CUDA_CHECK(cudaMemsetAsync(map.choice_row.data(), 0xff, map.choice_row.nbytes(), stream));
  if (total == 0) return;
  StreamBuffer<uint32_t> keys(stream, size_t(total)), sorted_keys(stream, size_t(total));
  StreamBuffer<int32_t> vals(stream, size_t(total)), sorted_vals(stream, size_t(total)), begin(stream, size_t(e) + 1);
  StreamBuffer<int64_t> offsets(stream, expert_offsets.size());
  upload_async(ctx, offsets.get(), expert_offsets.data(), expert_offsets.size() * sizeof(int64_t));  // no host wait
  const unsigned blocks = ceil_div(total, kThreads);
  map_keys_kernel<<<blocks, kThreads, 0, stream>>>(
      experts.data_as<int32_t>(), kept.defined() ? kept.data_as<uint8_t>() : nullptr, keys.get(), vals.get(), total, e);
  TROUPE_CUDA_CHECK_LAUNCH();
  stable_sort_pairs(stream, keys.get(), sorted_keys.get(), vals.get(), sorted_vals.get(), total, bits_for(e + 1));
  run_begin_kernel<uint32_t><<<blocks, kThreads, 0, stream>>>(sorted_keys.get(), 0, begin.get(), total);
  TROUPE_CUDA_CHECK_LAUNCH();
  map_scatter_kernel<<<blocks, kThreads, 0, stream>>>(sorted_keys.get(), sorted_vals.get(), begin.get(), offsets.get(),
                                                      e, map.row_choice.data_as<int32_t>(),
                                                      map.choice_row.data_as<int32_t>(), total);
  TROUPE_CUDA_CHECK_LAUNCH();
}

void moe_row_map(const Context& ctx, const Tensor& experts, const Tensor& kept, const Tensor& expert_offsets,
                 const MoeRowMap& map) {
  cudaStream_t stream = stream_of(ctx);
  TROUPE_CUDA_CHECK(cudaMemsetAsync(map.row_choice.data(), 0xff, map.row_choice.nbytes(), stream));
  TROUPE_CUDA_CHECK(cudaMemsetAsync(map.choice_row.data(), 0xff, map.choice_row.nbytes(), stream));
  const int64_t total = experts.numel();
  if (total == 0) return;
  expert_rows_kernel<<<unsigned(expert_offsets.numel() - 1), kMapThreads, 0, stream>>>(
      experts.data_as<int32_t>(), kept.defined() ? kept.data_as<uint8_t>() : nullptr, expert_offsets.data_as<int32_t>(),
      map.row_choice.data_as<int32_t>(), map.choice_row.data_as<int32_t>(), total, map.row_choice.numel());
  TROUPE_CUDA_CHECK_LAUNCH();
}

}  // namespace troupe::cuda
