// Tile shapes of the flash-attention kernels, per head dim. Registers bound them: every warp
// keeps its rows' f32 accumulators in registers, and an m16n8k16 MMA whose B fragment comes
// from shared memory is limited by shared-memory bandwidth unless that fragment feeds
// several MMAs (kMTiles 16-row tiles per warp).
//
// Chosen on an H200 (bench/attention_bench, bf16, causal) among 3 candidates per kernel,
// written (warps, m-tiles, keys or queries per step); times are whole forward/backward:
//   D = 64, B=16 T=1024 H=12:  forward (4, 2, 64) 0.119 ms vs 0.132 (8, 2, 64), 0.158 (8, 1, 64);
//     dq (4, 2, 32) beat (4, 1, 64) by 1.5% and (8, 1, 64) by 9%;
//     dk/dv (4, 1, 64, held) beat (4, 2, 32, reread) and (8, 1, 64, held) by 6%.
//   D = 128, B=4 T=2048 H=32 G=8:  forward (8, 1, 64) 0.569 ms vs 0.579 (4, 1, 64);
//     dq (4, 1, 32) beat (8, 1, 32) and (4, 1, 64) by 3%;
//     dk/dv (4, 1, 64) 2.47 ms vs 2.71 (4, 1, 32) and 2.81 (8, 1, 32).
#pragma once

namespace troupe::cuda::flash {

// Forward: kWarps warps x (16 kMTiles) query rows per block, kKeys keys per step.
template <int Warps, int MTiles, int Keys>
struct ForwardConfig {
  static constexpr int kWarps = Warps, kMTiles = MTiles, kKeys = Keys;
};
// dq: kWarps warps x (16 kMTiles) query rows (Q and dO fragments in registers), kKeys keys per step.
template <int Warps, int MTiles, int Keys>
struct DqConfig {
  static constexpr int kWarps = Warps, kMTiles = MTiles, kKeys = Keys;
};
// dk/dv: kWarps warps x (16 kMTiles) keys, kQueries queries per step; K and V fragments held
// in registers (kHoldKV) or re-read from shared memory every step.
template <int Warps, int MTiles, int Queries, bool HoldKV>
struct DkvConfig {
  static constexpr int kWarps = Warps, kMTiles = MTiles, kQueries = Queries;
  static constexpr bool kHoldKV = HoldKV;
};

template <int D>
struct FlashTuning;

template <>
struct FlashTuning<64> {
  using Forward = ForwardConfig<4, 2, 64>;
  using Dq = DqConfig<4, 2, 32>;
  using Dkv = DkvConfig<4, 1, 64, true>;
};

template <>
struct FlashTuning<128> {
  using Forward = ForwardConfig<8, 1, 64>;
  using Dq = DqConfig<4, 1, 32>;
  // 128 registers of dk/dv accumulators leave no room to hold K and V fragments.
  using Dkv = DkvConfig<4, 1, 64, false>;
};

}  // namespace troupe::cuda::flash
