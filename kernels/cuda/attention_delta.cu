// delta[b, t, h] = sum_d dout[b, t, h, d] * out[b, t, h, d]: the softmax backward's row term
// (sum_k P_tk dP_tk), written into the delta slot of dqkv (see attention_kernels.cuh).
#include "kernels/cuda/attention_kernels.cuh"
#include "kernels/cuda/common.cuh"

namespace troupe::cuda {

namespace {
constexpr int kThreads = 256;

// One thread per 16 bytes of a head row; the D/8 lanes of a row (a power of two <= 32, so
// rows never straddle warps) sum with shuffles.
template <typename T>
__global__ void attention_delta_packed_kernel(const T* __restrict__ dout, const T* __restrict__ out,
                                              T* __restrict__ dqkv, AttentionDims dims) {
  constexpr int kPack = Pack128<T>::size;
  const int lanes_per_row = dims.D / kPack;
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t row = i / lanes_per_row;  // (token, head): out is [B * T * H, D]
  const bool valid = row < int64_t(dims.B) * dims.T * dims.H;
  float sum = 0.0f;
  if (valid) {
    const Pack128<T> dy = load128(dout + i * kPack), y = load128(out + i * kPack);
#pragma unroll
    for (int k = 0; k < kPack; ++k) sum += to_f32(dy[k]) * to_f32(y[k]);
  }
  for (int offset = lanes_per_row / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (valid && i % lanes_per_row == 0) {
    const int64_t token = row / dims.H;
    delta_slot(dqkv, dims, int(token / dims.T), int(token % dims.T))[row % dims.H] = sum;
  }
}

// Any D and alignment: one warp per (token, head).
template <typename T>
__global__ void attention_delta_kernel(const T* __restrict__ dout, const T* __restrict__ out, T* __restrict__ dqkv,
                                       AttentionDims dims) {
  const int64_t row = int64_t(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= int64_t(dims.B) * dims.T * dims.H) return;
  float sum = 0.0f;
  for (int d = lane; d < dims.D; d += 32) sum += to_f32(dout[row * dims.D + d]) * to_f32(out[row * dims.D + d]);
  sum = warp_sum(sum);
  const int64_t token = row / dims.H;
  if (lane == 0) delta_slot(dqkv, dims, int(token / dims.T), int(token % dims.T))[row % dims.H] = sum;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
}  // namespace

template <typename T>
void attention_delta(const CudaState& st, const AttentionDims& d, const T* dout, const T* out, T* dqkv) {
  const int64_t rows = int64_t(d.B) * d.T * d.H;
  constexpr int kPack = Pack128<T>::size;
  const int lanes_per_row = d.D / kPack;
  const bool packed = d.D % kPack == 0 && lanes_per_row <= 32 && (lanes_per_row & (lanes_per_row - 1)) == 0 &&
                      aligned16(dout) && aligned16(out);
  if (packed) {
    attention_delta_packed_kernel<T>
        <<<ceil_div(rows * lanes_per_row, kThreads), kThreads, 0, st.stream>>>(dout, out, dqkv, d);
  } else {
    attention_delta_kernel<T><<<ceil_div(rows, kThreads / 32), kThreads, 0, st.stream>>>(dout, out, dqkv, d);
  }
  TROUPE_CUDA_CHECK_LAUNCH();
}

#define TROUPE_INSTANTIATE(T) \
  template void attention_delta<T>(const CudaState&, const AttentionDims&, const T*, const T*, T*);
TROUPE_INSTANTIATE(__nv_bfloat16)
TROUPE_INSTANTIATE(__half)
#undef TROUPE_INSTANTIATE

}  // namespace troupe::cuda
