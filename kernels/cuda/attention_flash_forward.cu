// Flash-attention-2 forward on tensor cores (mma.sync m16n8k16, f32 accumulators).
//
// One block per (batch, query head, tile of kBr query rows); each warp owns 16 * kMTiles
// rows. The block walks the key/value tiles of its kv head from the window edge of its first
// row (sliding window; tile 0 without one) up to the diagonal (causal block skipping),
// double-buffered with cp.async, and keeps per row the running max m, the running
// sum l and the unnormalized output O (online softmax), so no T x T matrix exists anywhere:
//   S = Q K^T;  m' = max(m, rowmax S);  P = exp(scale (S - m'));  l = l e^{scale (m - m')} + rowsum P
//   O = O e^{scale (m - m')} + P V;   at the end out = O / l,  lse = scale m + ln l.
#include "kernels/cuda/attention_flash_tiles.cuh"
#include "kernels/cuda/attention_tuning.cuh"

namespace troupe::cuda {

namespace {

using namespace flash;
using namespace mma;

template <int D, int kWarps, int kMTiles, int kBc>
struct ForwardShape {
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kWarpRows = 16 * kMTiles;
  static constexpr int kBr = kWarpRows * kWarps;  // query rows per block
  static constexpr int kStride = kSmemStride<D>;
  // q [kBr][stride], then k [2][kBc][stride] and v [2][kBc][stride] (double-buffered).
  template <typename T>
  static constexpr size_t smem_bytes() {
    return size_t(kBr + 4 * kBc) * kStride * sizeof(T);
  }
};

template <typename T, int D, int kWarps, int kMTiles, int kBc>
__global__ void __launch_bounds__(32 * kWarps)
    flash_forward_kernel(const T* __restrict__ qkv, T* __restrict__ out, float* __restrict__ lse, AttentionDims dims) {
  using Tile = ForwardShape<D, kWarps, kMTiles, kBc>;
  constexpr int kStride = Tile::kStride, kBr = Tile::kBr, kWarpRows = Tile::kWarpRows;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* q_s = reinterpret_cast<T*>(smem_raw);
  T* k_s = q_s + kBr * kStride;
  T* v_s = k_s + 2 * kBc * kStride;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int b = blockIdx.x / dims.H, h = blockIdx.x % dims.H, g = h / dims.group_size();
  const int q0 = (gridDim.y - 1 - blockIdx.y) * kBr;  // the longest (last) query tiles start first
  const int T_len = dims.T;
  const int64_t ld = dims.qkv_stride();
  const T* seq = qkv + dims.token(b, 0) * ld;
  const T* k_head = seq + int64_t(dims.key_slot(g)) * D;
  const T* v_head = seq + int64_t(dims.value_slot(g)) * D;

  const int W = dims.window;
  const int kv_end = min(T_len, q0 + kBr);              // causal: no key after the tile's last row
  const int kv_begin = dims.first_key(q0) / kBc * kBc;  // window: none before its first row's window
  const int n_kv = (kv_end - kv_begin + kBc - 1) / kBc;
  load_rows_async<kBr, D, Tile::kThreads>(q_s, seq + int64_t(h) * D, ld, q0, T_len);
  load_rows_async<kBc, D, Tile::kThreads>(k_s, k_head, ld, kv_begin, T_len);
  load_rows_async<kBc, D, Tile::kThreads>(v_s, v_head, ld, kv_begin, T_len);
  cp_async_commit();

  const int warp_row0 = q0 + warp * kWarpRows;  // first query row of this warp
  const float scale_log2 = dims.scale * kLog2e;
  uint32_t q_frag[kMTiles][D / 16][4];
  float o[kMTiles][D / 8][4] = {};
  float row_max[kMTiles][2], row_sum[kMTiles][2] = {};  // [m-tile][rows g, g + 8]
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) row_max[mt][0] = row_max[mt][1] = -INFINITY;

  for (int j = 0; j < n_kv; ++j) {
    const int buf = j % 2, kv0 = kv_begin + j * kBc;
    if (j + 1 < n_kv) {  // prefetch the next tile into the other buffer (free since the last sync)
      load_rows_async<kBc, D, Tile::kThreads>(k_s + (1 - buf) * kBc * kStride, k_head, ld, kv0 + kBc, T_len);
      load_rows_async<kBc, D, Tile::kThreads>(v_s + (1 - buf) * kBc * kStride, v_head, ld, kv0 + kBc, T_len);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (j == 0) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk)
          ldmatrix_x4(q_frag[mt][kk],
                      a_frag_addr(q_s + (warp * kWarpRows + mt * 16) * kStride + kk * 16, kStride, lane));
    }
    // Skip the tile for this warp when all its keys come after all the warp's rows, or before
    // the window of all of them.
    if (kv0 <= warp_row0 + kWarpRows - 1 && kv0 + kBc - 1 >= warp_row0 - W + 1) {
      const T* k_tile = k_s + buf * kBc * kStride;
      const T* v_tile = v_s + buf * kBc * kStride;
      float s[kMTiles][kBc / 8][4] = {};
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
        for (int nb = 0; nb < kBc / 16; ++nb) {
          uint32_t kb[4];
          ldmatrix_x4(kb, b_frag_addr_nk(k_tile + nb * 16 * kStride + kk * 16, kStride, lane));
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            mma_16816<T>(s[mt][2 * nb], q_frag[mt][kk], kb[0], kb[1]);
            mma_16816<T>(s[mt][2 * nb + 1], q_frag[mt][kk], kb[2], kb[3]);
          }
        }
      }
      // Masked where the tile crosses the diagonal, the end or the window's left edge.
      if (kv0 + kBc - 1 > warp_row0 || kv0 + kBc > T_len || kv0 <= warp_row0 + kWarpRows - 1 - W) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
          for (int n = 0; n < kBc / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int row = warp_row0 + mt * 16 + lane / 4 + (e / 2) * 8;
              const int col = kv0 + n * 8 + (lane % 4) * 2 + e % 2;
              if (col > row || col >= T_len || col <= row - W) s[mt][n][e] = -INFINITY;
            }
      }
      // Online softmax; each row is spread over the 4 lanes of a quad.
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float mx = row_max[mt][r];
#pragma unroll
          for (int n = 0; n < kBc / 8; ++n) mx = fmaxf(mx, fmaxf(s[mt][n][2 * r], s[mt][n][2 * r + 1]));
          mx = quad_max(mx);
          // A row's max stays -inf until a tile holds one of its keys (under a window, earlier
          // tiles may hold keys only for the warp's first rows); the guard keeps such a row at
          // p = 0 and its sums at 0 instead of NaN. Every row sees itself, so it ends finite.
          const float m_scaled = mx == -INFINITY ? 0.0f : mx * scale_log2;
          const float correction = fast_exp2(row_max[mt][r] * scale_log2 - m_scaled);
          row_max[mt][r] = mx;
          float sum = 0.0f;
#pragma unroll
          for (int n = 0; n < kBc / 8; ++n) {
#pragma unroll
            for (int e = 2 * r; e < 2 * r + 2; ++e) {
              s[mt][n][e] = fast_exp2(fmaf(s[mt][n][e], scale_log2, -m_scaled));
              sum += s[mt][n][e];
            }
          }
          row_sum[mt][r] = row_sum[mt][r] * correction + sum;  // partial over this lane's columns
#pragma unroll
          for (int n = 0; n < D / 8; ++n) {
            o[mt][n][2 * r] *= correction;
            o[mt][n][2 * r + 1] *= correction;
          }
        }
      }
      // O += P V, P straight from the score registers.
#pragma unroll
      for (int kk = 0; kk < kBc / 16; ++kk) {
        uint32_t p_frag[kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) acc_to_a_frag<T>(p_frag[mt], s[mt], kk);
#pragma unroll
        for (int nb = 0; nb < D / 16; ++nb) {
          uint32_t vb[4];
          ldmatrix_x4_trans(vb, b_frag_addr_kn(v_tile + kk * 16 * kStride + nb * 16, kStride, lane));
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            mma_16816<T>(o[mt][2 * nb], p_frag[mt], vb[0], vb[1]);
            mma_16816<T>(o[mt][2 * nb + 1], p_frag[mt], vb[2], vb[3]);
          }
        }
      }
    }
    __syncthreads();  // the buffer read here is refilled in the next iteration
  }

  // out = O / l (staged through this warp's own rows of q_s), lse = scale m + ln l.
  T* out_head = out + dims.token(b, 0) * dims.out_stride() + int64_t(h) * D;
  float* lse_row = lse + (int64_t(b) * dims.H + h) * T_len;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    float inv_sum[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float total = quad_sum(row_sum[mt][r]);
      inv_sum[r] = 1.0f / total;
      const int row = warp_row0 + mt * 16 + lane / 4 + r * 8;
      if (lane % 4 == 0 && row < T_len) lse_row[row] = row_max[mt][r] * dims.scale + logf(total);
    }
    stage_acc_rows<T, D>(q_s + (warp * kWarpRows + mt * 16) * kStride, o[mt], inv_sum, lane);
  }
  __syncwarp();
  store_rows_warp<kWarpRows, D>(out_head, dims.out_stride(), warp_row0, T_len, q_s + warp * kWarpRows * kStride, lane);
}

template <typename T, int D, typename Config>
void launch_flash_forward(const CudaState& st, const AttentionDims& d, const T* qkv, T* out, float* lse) {
  using Tile = ForwardShape<D, Config::kWarps, Config::kMTiles, Config::kKeys>;
  constexpr size_t smem = Tile::template smem_bytes<T>();
  auto kernel = flash_forward_kernel<T, D, Config::kWarps, Config::kMTiles, Config::kKeys>;
  TROUPE_CHECK(smem <= st.smem_per_block_optin, "attention_forward: flash kernel needs ", smem,
               " bytes of shared memory per block, the device allows ", st.smem_per_block_optin);
  TROUPE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const dim3 grid(unsigned(d.B * d.H), ceil_div(d.T, Tile::kBr));
  kernel<<<grid, Tile::kThreads, smem, st.stream>>>(qkv, out, lse, d);
  TROUPE_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool flash_attention_supports(const AttentionDims& d) { return d.D == 64 || d.D == 128; }

template <typename T>
void flash_attention_forward(const CudaState& st, const AttentionDims& d, const T* qkv, T* out, float* lse) {
  switch (d.D) {
    case 64:
      return launch_flash_forward<T, 64, FlashTuning<64>::Forward>(st, d, qkv, out, lse);
    case 128:
      return launch_flash_forward<T, 128, FlashTuning<128>::Forward>(st, d, qkv, out, lse);
    default:
      TROUPE_FAIL("attention_forward: no flash kernel for head_dim ", d.D);
  }
}

#define TROUPE_INSTANTIATE(T) \
  template void flash_attention_forward<T>(const CudaState&, const AttentionDims&, const T*, T*, float*);
TROUPE_INSTANTIATE(__nv_bfloat16)
TROUPE_INSTANTIATE(__half)
#undef TROUPE_INSTANTIATE

}  // namespace troupe::cuda
