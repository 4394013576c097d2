// Multi-tensor AdamW: every segment of the flat buffer in one launch.
//
// Blocks are mapped to (segment, chunk): segment s owns blocks [first_block[s], first_block[s+1]),
// each covering kChunk consecutive elements. The segment table travels as a __grid_constant__
// kernel parameter (CUDA >= 12.1 allows 32 KB of parameters), so a launch needs no upload, no
// staging buffer and no device allocation; a block finds its segment by binary search over
// first_block. Up to kMaxSegmentsPerLaunch segments go in one launch (GPT-3 175B has ~1200);
// a longer list, or a segment longer than kMaxPieceNumel (split into pieces), takes more launches.
#include <algorithm>
#include <cmath>

#include "kernels/adamw.hpp"
#include "kernels/cuda/common.cuh"

namespace troupe::cuda {

namespace {
constexpr int kThreads = 256;
constexpr int kItemsPerThread = 8;
constexpr int64_t kChunk = int64_t(kThreads) * kItemsPerThread;  // elements per block
constexpr int kMaxSegmentsPerLaunch = 1536;
constexpr int64_t kMaxPieceNumel = int64_t(1) << 30;

struct SegmentTable {
  int count;
  int64_t offset[kMaxSegmentsPerLaunch];
  int32_t numel[kMaxSegmentsPerLaunch];        // <= kMaxPieceNumel
  int32_t first_block[kMaxSegmentsPerLaunch];  // ascending
  uint32_t decay_bits[kMaxSegmentsPerLaunch / 32];
};
static_assert(sizeof(SegmentTable) < 30 * 1024, "the table must fit in the kernel parameter space");

// Step-wide scalars, computed in f64 on the host (as torch.optim.AdamW does) and passed as f32.
struct AdamWScalars {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps;
  float step_size;              // lr / (1 - beta1^step)
  float bias_correction2_sqrt;  // sqrt(1 - beta2^step)
  float decay_factor;           // 1 - lr * weight_decay
  float grad_scale;
};

// The last segment whose first block is <= block.
__device__ __forceinline__ int find_segment(const SegmentTable& table, int block) {
  return last_not_above(table.first_block, table.count, block);
}

// master, m, v, grad: f32 flat buffers; params: the model's copy in P, or null.
template <typename P>
__global__ void __launch_bounds__(kThreads)
    adamw_kernel(const __grid_constant__ SegmentTable table, float* __restrict__ master, float* __restrict__ m,
                 float* __restrict__ v, const float* __restrict__ grad, P* __restrict__ params, AdamWScalars s) {
  const int seg = find_segment(table, int(blockIdx.x));
  const int64_t begin = table.offset[seg] + int64_t(int(blockIdx.x) - table.first_block[seg]) * kChunk;
  const int64_t end = table.offset[seg] + table.numel[seg];
  const float decay_factor = (table.decay_bits[seg / 32] >> (seg % 32)) & 1u ? s.decay_factor : 1.0f;

  // All loads first, so each thread has 4 * kItemsPerThread of them in flight.
  float w[kItemsPerThread], mv[kItemsPerThread], vv[kItemsPerThread], g[kItemsPerThread];
#pragma unroll
  for (int k = 0; k < kItemsPerThread; ++k) {
    const int64_t i = begin + k * kThreads + threadIdx.x;
    if (i < end) {
      w[k] = master[i];
      mv[k] = m[i];
      vv[k] = v[i];
      g[k] = grad[i];
    }
  }
#pragma unroll
  for (int k = 0; k < kItemsPerThread; ++k) {
    const int64_t i = begin + k * kThreads + threadIdx.x;
    if (i >= end) continue;
    const float gk = g[k] * s.grad_scale;
    const float p = w[k] * decay_factor;
    const float mk = s.beta1 * mv[k] + s.one_minus_beta1 * gk;
    const float vk = s.beta2 * vv[k] + s.one_minus_beta2 * (gk * gk);
    const float denom = sqrtf(vk) / s.bias_correction2_sqrt + s.eps;
    const float updated = p - s.step_size * (mk / denom);
    master[i] = updated;
    m[i] = mk;
    v[i] = vk;
    if (params) params[i] = from_f32<P>(updated);
  }
}

AdamWScalars step_scalars(const AdamWConfig& cfg, int64_t step, float grad_scale) {
  AdamWScalars s{};
  s.beta1 = cfg.beta1;
  s.beta2 = cfg.beta2;
  s.one_minus_beta1 = float(1.0 - double(cfg.beta1));
  s.one_minus_beta2 = float(1.0 - double(cfg.beta2));
  s.eps = cfg.eps;
  s.step_size = float(double(cfg.lr) / (1.0 - std::pow(double(cfg.beta1), double(step))));
  s.bias_correction2_sqrt = float(std::sqrt(1.0 - std::pow(double(cfg.beta2), double(step))));
  s.decay_factor = float(1.0 - double(cfg.lr) * double(cfg.weight_decay));
  s.grad_scale = grad_scale;
  return s;
}

// Segments cut into pieces of at most kMaxPieceNumel elements (empty ones dropped).
std::vector<ParamSegment> split_into_pieces(const std::vector<ParamSegment>& segments) {
  std::vector<ParamSegment> pieces;
  for (const ParamSegment& seg : segments)
    for (int64_t done = 0; done < seg.numel; done += kMaxPieceNumel)
      pieces.push_back({seg.offset + done, std::min(kMaxPieceNumel, seg.numel - done), seg.decay});
  return pieces;
}
}  // namespace

void adamw_step(const Context& ctx, const Tensor& master, const Tensor& m, const Tensor& v, const Tensor& grad,
                const Tensor& params, const std::vector<ParamSegment>& segments, const AdamWConfig& cfg, int64_t step,
                float grad_scale) {
  const AdamWScalars scalars = step_scalars(cfg, step, grad_scale);
  const std::vector<ParamSegment> pieces = split_into_pieces(segments);
  auto launch_all = [&](auto* params_ptr) {
    using P = std::remove_pointer_t<decltype(params_ptr)>;
    for (size_t first = 0; first < pieces.size(); first += kMaxSegmentsPerLaunch) {
      SegmentTable table{};
      table.count = int(std::min<size_t>(kMaxSegmentsPerLaunch, pieces.size() - first));
      int64_t blocks = 0;
      for (int k = 0; k < table.count; ++k) {
        const ParamSegment& piece = pieces[first + k];
        table.offset[k] = piece.offset;
        table.numel[k] = int32_t(piece.numel);
        table.first_block[k] = int32_t(blocks);
        if (piece.decay) table.decay_bits[k / 32] |= 1u << (k % 32);
        blocks += (piece.numel + kChunk - 1) / kChunk;
        TROUPE_CHECK(blocks <= INT32_MAX, "adamw_step: too many elements for one launch");
      }
      adamw_kernel<P><<<unsigned(blocks), kThreads, 0, stream_of(ctx)>>>(table, master.data_as<float>(),
                                                                         m.data_as<float>(), v.data_as<float>(),
                                                                         grad.data_as<float>(), params_ptr, scalars);
      TROUPE_CUDA_CHECK_LAUNCH();
    }
  };
  if (!params.defined()) {
    launch_all(static_cast<float*>(nullptr));
    return;
  }
  dispatch_float(params.dtype(), "adamw_step", [&](auto tag) {
    using P = typename decltype(tag)::type;
    launch_all(params.data_as<P>());
  });
}

}  // namespace troupe::cuda
