// Embedding on CUDA: one thread per 16-byte pack of an output (or gradient) row.
//
// Token ids are not read back to the host: the forward clamps an id outside [0, V) to the
// nearest valid row, the backward skips it (adding its gradient to a row it did not come
// from would corrupt a valid token's gradient). The CPU backend throws on such ids.
// A vocabulary shard (rows [start, start + V) of the table) reads a zero row for an id outside
// it, and its backward skips such ids: there they belong to another shard, not to an error.
//
// dwte, deterministically (the same bits every run, so that training on a GPU is reproducible
// and a resumed run equals an uninterrupted one): the positions are sorted by token id (a
// stable radix sort, so equal ids keep position order), and the first position of each id
// sums the gradient rows of all its positions in that order and adds them to dwte once; no
// atomics. dwpe: each thread sums its column over the batch in a fixed order.
#include <cstdint>

#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/common.cuh"
#include "kernels/embedding.hpp"

namespace troupe::cuda {

namespace {

constexpr int kThreads = 256;

// out[n, :] = wte[row(tokens[n]), :] + wpe[pos_offset + n % seq_len, :] (wpe nullable), where
// row(id) = clamp(id, 0, vocab - 1) for the whole table (vocab_start = 0); for a shard,
// id - vocab_start, and a zero token row when that falls outside [0, vocab).
// tokens: [rows]; wte: [vocab, c]; wpe: [P, c]; out: [rows, c].
template <typename T>
__global__ void forward_kernel(const int32_t* __restrict__ tokens, const T* __restrict__ wte, const T* __restrict__ wpe,
                               T* __restrict__ out, int64_t rows, int seq_len, int c, int vocab, int64_t vocab_start,
                               bool sharded, int64_t pos_offset) {
  constexpr int P = Pack128<T>::size;
  const int packs = c / P;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * packs) return;
  const int64_t n = i / packs;
  const int col = int(i % packs) * P;
  int64_t tok = int64_t(tokens[n]) - vocab_start;
  if (!sharded) tok = min(max(tok, int64_t(0)), int64_t(vocab - 1));
  Pack128<T> w;
  if (tok >= 0 && tok < vocab) {
    w = load128(wte + tok * c + col);
  } else {  // another shard's token
#pragma unroll
    for (int k = 0; k < P; ++k) w[k] = from_f32<T>(0.0f);
  }
  Pack128<T> y = w;
  if (wpe) {
    const Pack128<T> pos = load128(wpe + (pos_offset + n % seq_len) * c + col);
#pragma unroll
    for (int k = 0; k < P; ++k) y[k] = from_f32<T>(to_f32(w[k]) + to_f32(pos[k]));
  }
  store128(out + n * c + col, y);
}

// dst[0..P) += v[0..P) (one owner per element: plain 16-byte loads and stores); dst 16-byte aligned.
template <int P>
__device__ __forceinline__ void add_pack(float* dst, const float (&v)[P]) {
  float4* d4 = reinterpret_cast<float4*>(dst);
#pragma unroll
  for (int k = 0; k < P / 4; ++k) {
    float4 d = d4[k];
    d.x += v[4 * k];
    d.y += v[4 * k + 1];
    d.z += v[4 * k + 2];
    d.w += v[4 * k + 3];
    d4[k] = d;
  }
}

// dwte[id - vocab_start, :] += the dout rows of every position of id, in position order, for ids
// in [vocab_start, vocab_start + vocab). ids / positions: the rows' token ids sorted, and the
// position each came from (ties in position order). Thread (i, pack) works only if sorted row
// i is the first of its id. dout: [rows, c]; dwte: f32 [vocab, c].
template <typename T>
__global__ void backward_wte_kernel(const int32_t* __restrict__ ids, const int32_t* __restrict__ positions,
                                    const T* __restrict__ dout, float* __restrict__ dwte, int64_t rows, int c,
                                    int vocab, int64_t vocab_start) {
  constexpr int P = Pack128<T>::size;
  const int packs = c / P;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * packs) return;
  const int64_t first = i / packs;
  const int col = int(i % packs) * P;
  const int32_t id = ids[first];
  if (first > 0 && ids[first - 1] == id) return;  // not the first of its id
  const int64_t tok = int64_t(id) - vocab_start;
  if (tok < 0 || tok >= vocab) return;
  float sum[P] = {};
  for (int64_t j = first; j < rows && ids[j] == id; ++j) {
    const Pack128<T> g = load128(dout + int64_t(positions[j]) * c + col);
#pragma unroll
    for (int k = 0; k < P; ++k) sum[k] += to_f32(g[k]);
  }
  add_pack(dwte + tok * c + col, sum);
}

__global__ void iota_kernel(int32_t* out, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = int32_t(i);
}

// dwpe[pos_offset + t, :] += sum over b of dout[b, t, :]. dout: [batch, seq_len, c]; dwpe: f32 [P, c].
template <typename T>
__global__ void backward_wpe_kernel(const T* __restrict__ dout, float* __restrict__ dwpe, int batch, int seq_len, int c,
                                    int64_t pos_offset) {
  constexpr int P = Pack128<T>::size;
  const int packs = c / P;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(seq_len) * packs) return;
  const int t = int(i / packs), col = int(i % packs) * P;
  float sum[P] = {};
  for (int b = 0; b < batch; ++b) {
    const Pack128<T> g = load128(dout + (int64_t(b) * seq_len + t) * c + col);
#pragma unroll
    for (int k = 0; k < P; ++k) sum[k] += to_f32(g[k]);
  }
  add_pack(dwpe + (pos_offset + t) * c + col, sum);
}

void expect_aligned16(const char* op, const char* arg, const Tensor& t) {
  TROUPE_CHECK(reinterpret_cast<uintptr_t>(t.data()) % 16 == 0, op, ": the CUDA kernel needs argument '", arg,
               "' 16-byte aligned (a slice at an odd offset?), got ", t.str());
}

void expect_packed_width(const char* op, int64_t c) {
  TROUPE_CHECK(c % 8 == 0, op, ": the CUDA kernel needs C to be a multiple of 8, got C = ", c);
}

}  // namespace

void embedding_forward(const Context& ctx, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                       const Tensor& out, int64_t pos_offset, const VocabShard& shard) {
  constexpr const char* op = "embedding_forward";
  dispatch_float(wte.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t rows = tokens.numel(), c = wte.dim(1);
    expect_packed_width(op, c);
    expect_aligned16(op, "wte", wte);
    expect_aligned16(op, "out", out);
    if (wpe.defined()) expect_aligned16(op, "wpe", wpe);
    const int64_t threads = rows * (c / Pack128<T>::size);
    if (threads == 0) return;
    forward_kernel<T><<<ceil_div(threads, kThreads), kThreads, 0, stream_of(ctx)>>>(
        tokens.data_as<int32_t>(), wte.data_as<T>(), wpe.defined() ? wpe.data_as<T>() : nullptr, out.data_as<T>(), rows,
        int(tokens.dim(1)), int(c), int(wte.dim(0)), shard.sharded ? shard.start : 0, shard.sharded, pos_offset);
    TROUPE_CUDA_CHECK_LAUNCH();
  });
}

void embedding_backward(const Context& ctx, const Tensor& tokens, const Tensor& dout, const Tensor& dwte,
                        const Tensor& dwpe, int64_t pos_offset, const VocabShard& shard) {
  constexpr const char* op = "embedding_backward";
  dispatch_float(dout.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t batch = tokens.dim(0), seq_len = tokens.dim(1), c = dout.dim(2);
    expect_packed_width(op, c);
    expect_aligned16(op, "dout", dout);
    expect_aligned16(op, "dwte", dwte);
    if (dwpe.defined()) expect_aligned16(op, "dwpe", dwpe);
    const int64_t packs = c / Pack128<T>::size;
    if (batch * seq_len * packs == 0) return;
    cudaStream_t stream = stream_of(ctx);
    // Positions sorted by token id (stable), for the deterministic sum per id. The ids, the
    // positions and the sort's temporary storage live in the context's workspace (ops on one
    // stream run in order, so it is free here): no allocation while other devices' NCCL
    // kernels may be waiting on this one.
    const int64_t rows = batch * seq_len;
    TROUPE_CHECK(rows < (int64_t(1) << 31), op, ": too many rows for int32 positions: ", rows);
    const CudaState& state = ctx.cuda_state();
    int32_t* ids = static_cast<int32_t*>(state.workspace);
    int32_t* positions_in = ids + rows;
    int32_t* positions = ids + 2 * rows;
    const size_t index_bytes = (size_t(rows) * 3 * sizeof(int32_t) + 255) / 256 * 256;
    size_t temp_bytes = 0;
    TROUPE_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, tokens.data_as<int32_t>(), ids, positions_in,
                                                      positions, int(rows), 0, 32, stream));
    TROUPE_CHECK(index_bytes + temp_bytes <= state.workspace_bytes, op, ": sorting ", rows, " token ids needs ",
                 index_bytes + temp_bytes, " bytes of workspace, the context has ", state.workspace_bytes);
    iota_kernel<<<ceil_div(rows, kThreads), kThreads, 0, stream>>>(positions_in, rows);
    TROUPE_CUDA_CHECK_LAUNCH();
    TROUPE_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(static_cast<char*>(state.workspace) + index_bytes, temp_bytes,
                                                      tokens.data_as<int32_t>(), ids, positions_in, positions,
                                                      int(rows), 0, 32, stream));
    backward_wte_kernel<T><<<ceil_div(rows * packs, kThreads), kThreads, 0, stream>>>(
        ids, positions, dout.data_as<T>(), dwte.data_as<float>(), rows, int(c), int(dwte.dim(0)),
        shard.sharded ? shard.start : 0);
    TROUPE_CUDA_CHECK_LAUNCH();
    if (!dwpe.defined()) return;
    backward_wpe_kernel<T><<<ceil_div(seq_len * packs, kThreads), kThreads, 0, stream>>>(
        dout.data_as<T>(), dwpe.data_as<float>(), int(batch), int(seq_len), int(c), pos_offset);
    TROUPE_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace troupe::cuda
