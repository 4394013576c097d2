// Flash-attention backward on tensor cores, as two kernels that rebuild the probabilities
// from the forward's lse instead of storing them (no T x T matrix, no atomics, no scratch
// beyond the delta slot described in attention_kernels.cuh):
//   P = exp(scale S - lse),  dP = dO V^T,  dS = P * (dP - delta),  delta = rowsum(dO * O)
//   dk/dv kernel, one block per (batch, kv head, tile of keys), looping over the query tiles
//   of every query head of the group (so GQA sums in registers):
//     dV += P^T dO,  dK += scale dS^T Q      (computed as S^T = K Q^T: each warp owns 16 keys)
//   dq kernel, one block per (batch, query head, tile of queries), looping over key tiles:
//     dQ += scale dS K
// S and dP are computed twice (seven matrix products instead of five) to avoid atomics.
// Under a sliding window both loops cover only the tiles some row/key of the block reaches:
// dq from its first row's window edge, dk/dv up to the query_end of its last key.
#include "kernels/cuda/attention_flash_tiles.cuh"
#include "kernels/cuda/attention_tuning.cuh"

namespace troupe::cuda {

namespace {

using namespace flash;
using namespace mma;

template <int D, int kWarps, int kMTiles, int kBc>
struct DqTile {
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kWarpRows = 16 * kMTiles;
  static constexpr int kBr = kWarpRows * kWarps;  // query rows per block
  static constexpr int kStride = kSmemStride<D>;
  // q [kBr][stride], dout [kBr][stride], then k and v [2][kBc][stride] (double-buffered).
  template <typename T>
  static constexpr size_t smem_bytes() {
    return size_t(2 * kBr + 4 * kBc) * kStride * sizeof(T);
  }
};

template <typename T, int D, int kWarps, int kMTiles, int kBc>
__global__ void __launch_bounds__(32 * kWarps)
    flash_backward_dq_kernel(const T* __restrict__ dout, const T* __restrict__ qkv, const T* __restrict__ out,
                             const float* __restrict__ lse, T* __restrict__ dqkv, AttentionDims dims) {
  using Tile = DqTile<D, kWarps, kMTiles, kBc>;
  constexpr int kStride = Tile::kStride, kBr = Tile::kBr, kWarpRows = Tile::kWarpRows;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* q_s = reinterpret_cast<T*>(smem_raw);
  T* do_s = q_s + kBr * kStride;
  T* k_s = do_s + kBr * kStride;
  T* v_s = k_s + 2 * kBc * kStride;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int b = blockIdx.x / dims.H, h = blockIdx.x % dims.H, g = h / dims.group_size();
  const int q0 = (gridDim.y - 1 - blockIdx.y) * kBr;  // the longest (last) query tiles start first
  const int T_len = dims.T;
  const int64_t ld = dims.qkv_stride(), out_ld = dims.out_stride();
  const T* seq = qkv + dims.token(b, 0) * ld;
  const T* k_head = seq + int64_t(dims.key_slot(g)) * D;
  const T* v_head = seq + int64_t(dims.value_slot(g)) * D;
  const T* do_head = dout + dims.token(b, 0) * out_ld + int64_t(h) * D;
  const T* out_head = out + dims.token(b, 0) * out_ld + int64_t(h) * D;

  const int W = dims.window;
  const int kv_end = min(T_len, q0 + kBr);
  const int kv_begin = dims.first_key(q0) / kBc * kBc;
  const int n_kv = (kv_end - kv_begin + kBc - 1) / kBc;
  load_rows_async<kBr, D, Tile::kThreads>(q_s, seq + int64_t(h) * D, ld, q0, T_len);
  load_rows_async<kBr, D, Tile::kThreads>(do_s, do_head, out_ld, q0, T_len);
  load_rows_async<kBc, D, Tile::kThreads>(k_s, k_head, ld, kv_begin, T_len);
  load_rows_async<kBc, D, Tile::kThreads>(v_s, v_head, ld, kv_begin, T_len);
  cp_async_commit();

  // Statistics of this lane's rows (g and g + 8 of each m-tile): lse in log2 units, and
  // delta = rowsum(dO * O) with each lane of the quad summing a quarter of the row.
  const int warp_row0 = q0 + warp * kWarpRows;
  float lse2[kMTiles][2], delta[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warp_row0 + mt * 16 + lane / 4 + r * 8;
      float part = 0.0f;
      if (row < T_len) {
#pragma unroll
        for (int c = 0; c < D / 32; ++c) {
          const int64_t at = int64_t(row) * out_ld + (lane % 4) * (D / 4) + c * 8;
          const Pack128<T> o = load128(out_head + at), dy = load128(do_head + at);
#pragma unroll
          for (int k = 0; k < Pack128<T>::size; ++k) part += to_f32(o[k]) * to_f32(dy[k]);
        }
      }
      delta[mt][r] = quad_sum(part);
      lse2[mt][r] = row < T_len ? lse[(int64_t(b) * dims.H + h) * T_len + row] * kLog2e : 0.0f;
    }
  }

  const float scale_log2 = dims.scale * kLog2e;
  uint32_t q_frag[kMTiles][D / 16][4], do_frag[kMTiles][D / 16][4];
  float dq[kMTiles][D / 8][4] = {};
  for (int j = 0; j < n_kv; ++j) {
    const int buf = j % 2, kv0 = kv_begin + j * kBc;
    if (j + 1 < n_kv) {
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
        for (int kk = 0; kk < D / 16; ++kk) {
          const int at = (warp * kWarpRows + mt * 16) * kStride + kk * 16;
          ldmatrix_x4(q_frag[mt][kk], a_frag_addr(q_s + at, kStride, lane));
          ldmatrix_x4(do_frag[mt][kk], a_frag_addr(do_s + at, kStride, lane));
        }
    }
    if (kv0 <= warp_row0 + kWarpRows - 1 && kv0 + kBc - 1 >= warp_row0 - W + 1) {  // as in the forward
      const T* k_tile = k_s + buf * kBc * kStride;
      const T* v_tile = v_s + buf * kBc * kStride;
      float s[kMTiles][kBc / 8][4] = {}, dp[kMTiles][kBc / 8][4] = {};
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
        for (int nb = 0; nb < kBc / 16; ++nb) {
          uint32_t kb[4], vb[4];
          ldmatrix_x4(kb, b_frag_addr_nk(k_tile + nb * 16 * kStride + kk * 16, kStride, lane));
          ldmatrix_x4(vb, b_frag_addr_nk(v_tile + nb * 16 * kStride + kk * 16, kStride, lane));
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            mma_16816<T>(s[mt][2 * nb], q_frag[mt][kk], kb[0], kb[1]);
            mma_16816<T>(s[mt][2 * nb + 1], q_frag[mt][kk], kb[2], kb[3]);
            mma_16816<T>(dp[mt][2 * nb], do_frag[mt][kk], vb[0], vb[1]);
            mma_16816<T>(dp[mt][2 * nb + 1], do_frag[mt][kk], vb[2], vb[3]);
          }
        }
      }
      const bool need_mask = kv0 + kBc - 1 > warp_row0 || kv0 + kBc > T_len || kv0 <= warp_row0 + kWarpRows - 1 - W;
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int n = 0; n < kBc / 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int row = warp_row0 + mt * 16 + lane / 4 + (e / 2) * 8;
            const int col = kv0 + n * 8 + (lane % 4) * 2 + e % 2;
            const bool keep = !need_mask || (col <= row && col < T_len && col > row - W);
            const float p = keep ? fast_exp2(fmaf(s[mt][n][e], scale_log2, -lse2[mt][e / 2])) : 0.0f;
            s[mt][n][e] = p * (dp[mt][n][e] - delta[mt][e / 2]);  // dS
          }
#pragma unroll
      for (int kk = 0; kk < kBc / 16; ++kk) {
        uint32_t ds_frag[kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) acc_to_a_frag<T>(ds_frag[mt], s[mt], kk);
#pragma unroll
        for (int nb = 0; nb < D / 16; ++nb) {
          uint32_t kb[4];
          ldmatrix_x4_trans(kb, b_frag_addr_kn(k_tile + kk * 16 * kStride + nb * 16, kStride, lane));
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            mma_16816<T>(dq[mt][2 * nb], ds_frag[mt], kb[0], kb[1]);
            mma_16816<T>(dq[mt][2 * nb + 1], ds_frag[mt], kb[2], kb[3]);
          }
        }
      }
    }
    __syncthreads();
  }

  const float scale[2] = {dims.scale, dims.scale};
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
    stage_acc_rows<T, D>(q_s + (warp * kWarpRows + mt * 16) * kStride, dq[mt], scale, lane);
  __syncwarp();
  store_rows_warp<kWarpRows, D>(dqkv + dims.token(b, 0) * ld + int64_t(h) * D, ld, warp_row0, T_len,
                                q_s + warp * kWarpRows * kStride, lane);
}

template <int D, int kWarps, int kMTiles, int kBr>
struct DkvTile {
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kWarpKeys = 16 * kMTiles;
  static constexpr int kBc = kWarpKeys * kWarps;  // keys per block
  static constexpr int kStride = kSmemStride<D>;
  static_assert(kBr <= kThreads, "one thread per query row loads the row statistics");
  // k [kBc][stride], v [kBc][stride], q [2][kBr][stride], dout [2][kBr][stride] (16-bit), then
  // lse [2][kBr] and delta [2][kBr] (f32).
  template <typename T>
  static constexpr size_t smem_bytes() {
    return size_t(2 * kBc + 4 * kBr) * kStride * sizeof(T) + 4 * kBr * sizeof(float);
  }
};

template <typename T, int D, int kWarps, int kMTiles, int kBr, bool kHoldKV>
__global__ void __launch_bounds__(32 * kWarps)
    flash_backward_dkdv_kernel(const T* __restrict__ dout, const T* __restrict__ qkv, const float* __restrict__ lse,
                               T* __restrict__ dqkv, AttentionDims dims) {
  using Tile = DkvTile<D, kWarps, kMTiles, kBr>;
  constexpr int kStride = Tile::kStride, kBc = Tile::kBc, kWarpKeys = Tile::kWarpKeys;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* k_s = reinterpret_cast<T*>(smem_raw);
  T* v_s = k_s + kBc * kStride;
  T* q_s = v_s + kBc * kStride;                                       // [2][kBr][stride]
  T* do_s = q_s + 2 * kBr * kStride;                                  // [2][kBr][stride]
  float* lse_s = reinterpret_cast<float*>(do_s + 2 * kBr * kStride);  // [2][kBr]
  float* delta_s = lse_s + 2 * kBr;                                   // [2][kBr]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int b = blockIdx.x / dims.G, g = blockIdx.x % dims.G;
  const int k0 = blockIdx.y * kBc;  // the first key tiles see the most queries and start first
  const int T_len = dims.T, group = dims.group_size();
  const int64_t ld = dims.qkv_stride(), out_ld = dims.out_stride();
  const T* seq = qkv + dims.token(b, 0) * ld;
  const T* dseq = dout + dims.token(b, 0) * out_ld;

  // Steps: for each query head of the group, the query tiles that see a key of [k0, k0 + kBc):
  // from the one holding query k0 to the one holding query query_end(last key) - 1.
  const int W = dims.window;
  const int first_tile = k0 / kBr;
  const int tiles_per_head = (dims.query_end(min(k0 + kBc, T_len) - 1) + kBr - 1) / kBr - first_tile;
  const int n_steps = group * tiles_per_head;
  auto load_step = [&](int step, int buf) {
    const int h = g * group + step / tiles_per_head;
    const int qt0 = (first_tile + step % tiles_per_head) * kBr;
    load_rows_async<kBr, D, Tile::kThreads>(q_s + buf * kBr * kStride, seq + int64_t(h) * D, ld, qt0, T_len);
    load_rows_async<kBr, D, Tile::kThreads>(do_s + buf * kBr * kStride, dseq + int64_t(h) * D, out_ld, qt0, T_len);
    if (int(threadIdx.x) < kBr) {
      const int t = qt0 + int(threadIdx.x);
      const bool valid = t < T_len;
      const int t_safe = valid ? t : 0;
      cp_async_4(lse_s + buf * kBr + threadIdx.x, lse + (int64_t(b) * dims.H + h) * T_len + t_safe, valid);
      cp_async_4(delta_s + buf * kBr + threadIdx.x, delta_slot(dqkv, dims, b, t_safe) + h, valid);
    }
  };

  load_rows_async<kBc, D, Tile::kThreads>(k_s, seq + int64_t(dims.key_slot(g)) * D, ld, k0, T_len);
  load_rows_async<kBc, D, Tile::kThreads>(v_s, seq + int64_t(dims.value_slot(g)) * D, ld, k0, T_len);
  load_step(0, 0);
  cp_async_commit();

  const int warp_key0 = k0 + warp * kWarpKeys;  // first key of this warp
  const T* k_warp = k_s + warp * kWarpKeys * kStride;
  const T* v_warp = v_s + warp * kWarpKeys * kStride;
  const float scale_log2 = dims.scale * kLog2e;
  constexpr int kHeld = kHoldKV ? kMTiles : 1;
  uint32_t k_frag[kHeld][kHoldKV ? D / 16 : 1][4], v_frag[kHeld][kHoldKV ? D / 16 : 1][4];
  float dk[kMTiles][D / 8][4] = {}, dv[kMTiles][D / 8][4] = {};
  for (int step = 0; step < n_steps; ++step) {
    const int buf = step % 2;
    if (step + 1 < n_steps) {
      load_step(step + 1, 1 - buf);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if constexpr (kHoldKV) {
      if (step == 0) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
          for (int kk = 0; kk < D / 16; ++kk) {
            ldmatrix_x4(k_frag[mt][kk], a_frag_addr(k_warp + mt * 16 * kStride + kk * 16, kStride, lane));
            ldmatrix_x4(v_frag[mt][kk], a_frag_addr(v_warp + mt * 16 * kStride + kk * 16, kStride, lane));
          }
      }
    }
    const int qt0 = (first_tile + step % tiles_per_head) * kBr;
    // Some query of the tile sees some key of the warp: not all before it, not all past its window.
    if (qt0 + kBr - 1 >= warp_key0 && qt0 <= warp_key0 + kWarpKeys - 1 + W - 1) {
      const T* q_tile = q_s + buf * kBr * kStride;
      const T* do_tile = do_s + buf * kBr * kStride;
      const float* lse_tile = lse_s + buf * kBr;
      const float* delta_tile = delta_s + buf * kBr;
      // S^T = K Q^T and dP^T = V dO^T: rows are this warp's keys, columns the tile's queries.
      float st[kMTiles][kBr / 8][4] = {}, dpt[kMTiles][kBr / 8][4] = {};
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t ka[kMTiles][4], va[kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          if constexpr (kHoldKV) {
#pragma unroll
            for (int i = 0; i < 4; ++i) ka[mt][i] = k_frag[mt][kk][i], va[mt][i] = v_frag[mt][kk][i];
          } else {
            ldmatrix_x4(ka[mt], a_frag_addr(k_warp + mt * 16 * kStride + kk * 16, kStride, lane));
            ldmatrix_x4(va[mt], a_frag_addr(v_warp + mt * 16 * kStride + kk * 16, kStride, lane));
          }
        }
#pragma unroll
        for (int nb = 0; nb < kBr / 16; ++nb) {
          uint32_t qb[4], ob[4];
          ldmatrix_x4(qb, b_frag_addr_nk(q_tile + nb * 16 * kStride + kk * 16, kStride, lane));
          ldmatrix_x4(ob, b_frag_addr_nk(do_tile + nb * 16 * kStride + kk * 16, kStride, lane));
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            mma_16816<T>(st[mt][2 * nb], ka[mt], qb[0], qb[1]);
            mma_16816<T>(st[mt][2 * nb + 1], ka[mt], qb[2], qb[3]);
            mma_16816<T>(dpt[mt][2 * nb], va[mt], ob[0], ob[1]);
            mma_16816<T>(dpt[mt][2 * nb + 1], va[mt], ob[2], ob[3]);
          }
        }
      }
      // P^T into st, dS^T into dpt. Masked: key after query, query past the end or past the key's window.
      const bool need_mask = qt0 < warp_key0 + kWarpKeys - 1 || qt0 + kBr > T_len || qt0 + kBr - 1 >= warp_key0 + W;
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int n = 0; n < kBr / 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = warp_key0 + mt * 16 + lane / 4 + (e / 2) * 8;
            const int qi = n * 8 + (lane % 4) * 2 + e % 2;
            const bool keep = !need_mask || (key <= qt0 + qi && qt0 + qi < T_len && qt0 + qi < key + W);
            const float p = keep ? fast_exp2(fmaf(st[mt][n][e], scale_log2, -lse_tile[qi] * kLog2e)) : 0.0f;
            dpt[mt][n][e] = p * (dpt[mt][n][e] - delta_tile[qi]);
            st[mt][n][e] = p;
          }
          // dV += P^T dO and dK += dS^T Q (scale applied at the end).
#pragma unroll
      for (int kk = 0; kk < kBr / 16; ++kk) {
        uint32_t p_frag[kMTiles][4], ds_frag[kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          acc_to_a_frag<T>(p_frag[mt], st[mt], kk);
          acc_to_a_frag<T>(ds_frag[mt], dpt[mt], kk);
        }
#pragma unroll
        for (int nb = 0; nb < D / 16; ++nb) {
          uint32_t ob[4], qb[4];
          ldmatrix_x4_trans(ob, b_frag_addr_kn(do_tile + kk * 16 * kStride + nb * 16, kStride, lane));
          ldmatrix_x4_trans(qb, b_frag_addr_kn(q_tile + kk * 16 * kStride + nb * 16, kStride, lane));
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            mma_16816<T>(dv[mt][2 * nb], p_frag[mt], ob[0], ob[1]);
            mma_16816<T>(dv[mt][2 * nb + 1], p_frag[mt], ob[2], ob[3]);
            mma_16816<T>(dk[mt][2 * nb], ds_frag[mt], qb[0], qb[1]);
            mma_16816<T>(dk[mt][2 * nb + 1], ds_frag[mt], qb[2], qb[3]);
          }
        }
      }
    }
    __syncthreads();
  }

  // Stage through this warp's own rows of k_s / v_s (only this warp ever read them).
  T* dk_warp = k_s + warp * kWarpKeys * kStride;
  T* dv_warp = v_s + warp * kWarpKeys * kStride;
  const float scale[2] = {dims.scale, dims.scale}, one[2] = {1.0f, 1.0f};
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    stage_acc_rows<T, D>(dk_warp + mt * 16 * kStride, dk[mt], scale, lane);
    stage_acc_rows<T, D>(dv_warp + mt * 16 * kStride, dv[mt], one, lane);
  }
  __syncwarp();
  T* dseq_qkv = dqkv + dims.token(b, 0) * ld;
  store_rows_warp<kWarpKeys, D>(dseq_qkv + int64_t(dims.key_slot(g)) * D, ld, warp_key0, T_len, dk_warp, lane);
  store_rows_warp<kWarpKeys, D>(dseq_qkv + int64_t(dims.value_slot(g)) * D, ld, warp_key0, T_len, dv_warp, lane);
}

template <typename Kernel>
void set_smem_limit(const CudaState& st, Kernel kernel, size_t smem, const char* what) {
  TROUPE_CHECK(smem <= st.smem_per_block_optin, "attention_backward: ", what, " kernel needs ", smem,
               " bytes of shared memory per block, the device allows ", st.smem_per_block_optin);
  TROUPE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
}

template <typename T, int D, typename Config>
void launch_flash_dq(const CudaState& st, const AttentionDims& d, const T* dout, const T* qkv, const T* out,
                     const float* lse, T* dqkv) {
  using Tile = DqTile<D, Config::kWarps, Config::kMTiles, Config::kKeys>;
  constexpr size_t smem = Tile::template smem_bytes<T>();
  auto kernel = flash_backward_dq_kernel<T, D, Config::kWarps, Config::kMTiles, Config::kKeys>;
  set_smem_limit(st, kernel, smem, "flash dq");
  const dim3 grid(unsigned(d.B * d.H), ceil_div(d.T, Tile::kBr));
  kernel<<<grid, Tile::kThreads, smem, st.stream>>>(dout, qkv, out, lse, dqkv, d);
  TROUPE_CUDA_CHECK_LAUNCH();
}

template <typename T, int D, typename Config>
void launch_flash_dkdv(const CudaState& st, const AttentionDims& d, const T* dout, const T* qkv, const float* lse,
                       T* dqkv) {
  using Tile = DkvTile<D, Config::kWarps, Config::kMTiles, Config::kQueries>;
  constexpr size_t smem = Tile::template smem_bytes<T>();
  auto kernel = flash_backward_dkdv_kernel<T, D, Config::kWarps, Config::kMTiles, Config::kQueries, Config::kHoldKV>;
  set_smem_limit(st, kernel, smem, "flash dk/dv");
  const dim3 grid(unsigned(d.B * d.G), ceil_div(d.T, Tile::kBc));
  kernel<<<grid, Tile::kThreads, smem, st.stream>>>(dout, qkv, lse, dqkv, d);
  TROUPE_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <typename T>
void flash_attention_backward_dkdv(const CudaState& st, const AttentionDims& d, const T* dout, const T* qkv,
                                   const float* lse, T* dqkv) {
  switch (d.D) {
    case 64:
      return launch_flash_dkdv<T, 64, FlashTuning<64>::Dkv>(st, d, dout, qkv, lse, dqkv);
    case 128:
      return launch_flash_dkdv<T, 128, FlashTuning<128>::Dkv>(st, d, dout, qkv, lse, dqkv);
    default:
      TROUPE_FAIL("attention_backward: no flash kernel for head_dim ", d.D);
  }
}

template <typename T>
void flash_attention_backward_dq(const CudaState& st, const AttentionDims& d, const T* dout, const T* qkv, const T* out,
                                 const float* lse, T* dqkv) {
  switch (d.D) {
    case 64:
      return launch_flash_dq<T, 64, FlashTuning<64>::Dq>(st, d, dout, qkv, out, lse, dqkv);
    case 128:
      return launch_flash_dq<T, 128, FlashTuning<128>::Dq>(st, d, dout, qkv, out, lse, dqkv);
    default:
      TROUPE_FAIL("attention_backward: no flash kernel for head_dim ", d.D);
  }
}

#define TROUPE_INSTANTIATE(T)                                                                                        \
  template void flash_attention_backward_dkdv<T>(const CudaState&, const AttentionDims&, const T*, const T*,         \
                                                 const float*, T*);                                                  \
  template void flash_attention_backward_dq<T>(const CudaState&, const AttentionDims&, const T*, const T*, const T*, \
                                               const float*, T*);
TROUPE_INSTANTIATE(__nv_bfloat16)
TROUPE_INSTANTIATE(__half)
#undef TROUPE_INSTANTIATE

}  // namespace troupe::cuda
