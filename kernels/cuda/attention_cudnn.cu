// Attention as cuDNN fused-attention graphs (attention_cudnn_sdpa.cuh), built on the backend API
// the way cuDNN's frontend lowers its "composite" SDPA node for cuDNN 9.x: matmul, scale, an
// optional diagonal-band mask made of GEN_INDEX / CMP / BINARY_SELECT, a softmax made of
// reductions and pointwise ops (emitting stats = max + log sum exp), matmul. cuDNN recognizes the
// pattern and runs one fused flash-attention kernel; a graph it does not recognize finds no engine.
//
// The views are SdpaShape's (K and, in the backward, V read transposed through strides); the
// intermediates (scores [B, H, Tq, Tk], ...) are virtual: they live in the fused kernel's
// registers and shared memory, never in device memory. Whole-sequence attention reads Q, K, V out
// of the fused qkv [B, T, (H + 2G) D] (row stride (H + 2G) D) and writes dq, dk, dv into dqkv
// the same way; this file also holds its entry points (attention_cudnn.hpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cuda/attention_cudnn.hpp"
#include "kernels/cuda/attention_cudnn_graph.cuh"
#include "kernels/cuda/attention_cudnn_sdpa.cuh"
#include "kernels/cuda/cuda_state.cuh"
#include "kernels/cuda/runtime.hpp"

namespace troupe {

namespace cuda {
namespace {

// Older cuDNN 9 releases need a padding-mask workaround in the backward graph when T is not a
// multiple of 128 (cuDNN's frontend adds one up to 9.15.0); these graphs do not build it.
constexpr int kMinCudnnVersion = 91501;

// Variant-pack ids of the non-virtual tensors and host scalars.
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kDO,
  kDQ,
  kDK,
  kDV,
  kSoftmaxSum,  // backward workspace: rowsum(dO * O) [B, H, T, 1] f32
  kDQAccum,     // backward workspace: dq in f32 [B, H, T, D] (non-deterministic graph)
  kScale,       // scalars, passed by value
  kNegInf,
  kWindow,
  kOne,
};

std::string describe(const SdpaShape& s, const char* direction) {
  return str_cat(s.causal ? "causal" : "unmasked", " attention ", direction, " (B=", s.B, " Tq=", s.Tq, " Tk=", s.Tk,
                 " H=", s.H, " G=", s.G, " D=", s.D, s.io == CUDNN_DATA_BFLOAT16 ? " bf16" : " f16",
                 s.window ? ", sliding window" : "", ")");
}

// --- the graphs -------------------------------------------------------------------------------

CudnnDims scores_dims(const SdpaShape& s) { return {s.B, s.H, s.Tq, s.Tk}; }
CudnnDims scores_strides(const SdpaShape& s) { return {s.H * s.Tq * s.Tk, s.Tq * s.Tk, s.Tk, 1}; }
CudnnDims row_dims(const SdpaShape& s) { return {s.B, s.H, s.Tq, 1}; }
CudnnDims row_strides(const SdpaShape& s) { return {s.H * s.Tq, s.Tq, 1, 1}; }

// Q or dQ [B, H, Tq, D]; K, V, dK or dV [B, G, Tk, D]; K or V transposed [B, G, D, Tk].
void declare_q(CudnnGraph& g, const SdpaShape& s, int64_t uid) {
  g.tensor(uid, s.io, {s.B, s.H, s.Tq, s.D}, {s.Tq * s.q_row, s.D, s.q_row, 1});
}
void declare_kv(CudnnGraph& g, const SdpaShape& s, int64_t uid) {
  g.tensor(uid, s.io, {s.B, s.G, s.Tk, s.D}, {s.Tk * s.kv_row, s.D, s.kv_row, 1});
}
void declare_kv_transposed(CudnnGraph& g, const SdpaShape& s, int64_t uid) {
  g.tensor(uid, s.io, {s.B, s.G, s.D, s.Tk}, {s.Tk * s.kv_row, s.D, 1, s.kv_row});
}
// out or dout [B, H, Tq, D].
void declare_out(CudnnGraph& g, const SdpaShape& s, int64_t uid) {
  g.tensor(uid, s.io, {s.B, s.H, s.Tq, s.D}, {s.Tq * s.H * s.D, s.D, s.H * s.D, 1});
}

// Keeps scores where keep(row, col) holds, -inf elsewhere; returns the masked scores (the
// scores themselves when the shape has no mask).
//   causal:  row >= col                     (frontend: right bound 0, top-left diagonal)
//   window:  col + W > row, i.e. i - W < j  (frontend: left bound W, top-left diagonal)
int64_t apply_mask(CudnnGraph& g, const SdpaShape& s, int64_t scores) {
  if (!s.causal) return scores;
  const CudnnDims dims = scores_dims(s), strides = scores_strides(s);
  const int64_t row = g.virtual_tensor(CUDNN_DATA_INT32, dims, strides);
  const int64_t col = g.virtual_tensor(CUDNN_DATA_INT32, dims, strides);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, row, -1, -1, CUDNN_DATA_FLOAT, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, col, -1, -1, CUDNN_DATA_FLOAT, 3);
  const int64_t keep = g.virtual_tensor(CUDNN_DATA_BOOLEAN, dims, strides);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, keep, col, -1, CUDNN_DATA_BOOLEAN);
  const int64_t masked = g.virtual_tensor(CUDNN_DATA_FLOAT, dims, strides);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, scores, masked, kNegInf, keep);
  if (!s.window) return masked;

  const int64_t row2 = g.virtual_tensor(CUDNN_DATA_INT32, dims, strides);
  const int64_t col2 = g.virtual_tensor(CUDNN_DATA_INT32, dims, strides);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, masked, row2, -1, -1, CUDNN_DATA_FLOAT, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, masked, col2, -1, -1, CUDNN_DATA_FLOAT, 3);
  const int64_t col_plus_w = g.virtual_tensor(CUDNN_DATA_FLOAT, dims, strides);
  g.pointwise(CUDNN_POINTWISE_ADD, col2, col_plus_w, kWindow, -1, CUDNN_DATA_FLOAT);
  const int64_t keep2 = g.virtual_tensor(CUDNN_DATA_BOOLEAN, dims, strides);
  g.pointwise(CUDNN_POINTWISE_CMP_GT, col_plus_w, keep2, row2, -1, CUDNN_DATA_BOOLEAN);
  const int64_t banded = g.virtual_tensor(CUDNN_DATA_FLOAT, dims, strides);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, masked, banded, kNegInf, keep2);
  return banded;
}

// The by-value scalars a shape's graph uses: cuDNN refuses a variant pack that binds a tensor
// its graph does not have (CUDNN_STATUS_BAD_PARAM_NULL_POINTER), so an unmasked graph has no -inf.
void declare_scalars(CudnnGraph& g, const SdpaShape& s) {
  g.scalar(kScale);
  if (s.causal) g.scalar(kNegInf);
  if (s.window) g.scalar(kWindow);
}

// Host values of those scalars, bound by pointer in a call's variant pack.
struct SdpaScalars {
  float scale, window;
  float neg_inf = -std::numeric_limits<float>::infinity();
  void bind(const SdpaShape& s, std::vector<int64_t>& uids, std::vector<void*>& ptrs) {
    uids.push_back(kScale);
    ptrs.push_back(&scale);
    if (s.causal) {
      uids.push_back(kNegInf);
      ptrs.push_back(&neg_inf);
    }
    if (s.window) {
      uids.push_back(kWindow);
      ptrs.push_back(&window);
    }
  }
};

// O = softmax(mask(Q K^T * scale)) V, stats = max + log(sum exp(scores - max)).
std::unique_ptr<CudnnGraph> forward_graph(const SdpaShape& s) {
  auto g = std::make_unique<CudnnGraph>();
  declare_q(*g, s, kQ);
  declare_kv_transposed(*g, s, kK);  // K^T
  declare_kv(*g, s, kV);
  declare_out(*g, s, kO);
  g->tensor(kStats, CUDNN_DATA_FLOAT, row_dims(s), row_strides(s));
  declare_scalars(*g, s);

  const CudnnDims sd = scores_dims(s), ss = scores_strides(s), rd = row_dims(s), rs = row_strides(s);
  const int64_t scores = g->virtual_tensor(CUDNN_DATA_FLOAT, sd, ss);
  g->matmul(kQ, kK, scores);
  const int64_t scaled = g->virtual_tensor(CUDNN_DATA_FLOAT, sd, ss);
  g->pointwise(CUDNN_POINTWISE_MUL, scores, scaled, kScale);
  const int64_t masked = apply_mask(*g, s, scaled);

  const int64_t row_max = g->virtual_tensor(CUDNN_DATA_FLOAT, rd, rs);
  g->reduction(CUDNN_REDUCE_TENSOR_MAX, masked, row_max);
  const int64_t shifted = g->virtual_tensor(CUDNN_DATA_FLOAT, sd, ss);
  g->pointwise(CUDNN_POINTWISE_SUB, masked, shifted, row_max);
  const int64_t exps = g->virtual_tensor(CUDNN_DATA_FLOAT, sd, ss);
  g->pointwise(CUDNN_POINTWISE_EXP, shifted, exps);
  const int64_t row_sum = g->virtual_tensor(CUDNN_DATA_FLOAT, rd, rs);
  g->reduction(CUDNN_REDUCE_TENSOR_ADD, exps, row_sum);
  const int64_t log_sum = g->virtual_tensor(CUDNN_DATA_FLOAT, rd, rs);
  g->pointwise(CUDNN_POINTWISE_LOG, row_sum, log_sum);
  g->pointwise(CUDNN_POINTWISE_ADD, row_max, kStats, log_sum);
  const int64_t probs = g->virtual_tensor(s.io, sd, ss);  // the second matmul reads P in the io type
  g->pointwise(CUDNN_POINTWISE_DIV, exps, probs, row_sum);
  g->matmul(probs, kV, kO);
  return g;
}

// a b [B, H, Tk, D] (virtual, io type) summed over the H / G query heads of each kv head into
// `out` [B, G, Tk, D]; with H == G the matmul writes `out` directly.
void matmul_into_kv_heads(CudnnGraph& g, const SdpaShape& s, int64_t a, int64_t b, int64_t out) {
  if (s.H == s.G) {
    g.matmul(a, b, out);
    return;
  }
  const int64_t full = g.virtual_tensor(s.io, {s.B, s.H, s.Tk, s.D}, {s.H * s.Tk * s.D, s.Tk * s.D, s.D, 1});
  g.matmul(a, b, full);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, full, out);
}

// dq, dk, dv from dO, Q, K, V, O and stats:
//   P = exp(mask(Q K^T scale) - stats),  dV = P^T dO,  dP = dO V^T,
//   dS = P (dP - rowsum(dO O)) scale,    dK = dS^T Q,  dQ = dS K.
std::unique_ptr<CudnnGraph> backward_graph(const SdpaShape& s, bool deterministic) {
  auto g = std::make_unique<CudnnGraph>();
  declare_q(*g, s, kQ);
  declare_kv_transposed(*g, s, kK);  // K^T
  declare_kv_transposed(*g, s, kV);  // V^T: the backward only reads V transposed
  declare_out(*g, s, kO);
  declare_out(*g, s, kDO);
  g->tensor(kStats, CUDNN_DATA_FLOAT, row_dims(s), row_strides(s));
  declare_q(*g, s, kDQ);
  declare_kv(*g, s, kDK);
  declare_kv(*g, s, kDV);
  g->tensor(kSoftmaxSum, CUDNN_DATA_FLOAT, row_dims(s), row_strides(s));
  declare_scalars(*g, s);
  g->scalar(kOne);

  const CudnnDims sd = scores_dims(s), ss = scores_strides(s), rd = row_dims(s), rs = row_strides(s);
  // P and dS seen transposed, [B, H, Tk, Tq].
  const CudnnDims transposed_dims = {s.B, s.H, s.Tk, s.Tq}, transposed = {s.H * s.Tq * s.Tk, s.Tq * s.Tk, 1, s.Tk};

  // rowsum(dO * O), kept in the workspace for the dS step. (The frontend gives the virtual
  // product these [b, h, s, d] strides; only its shape matters.)
  const int64_t d_o_o =
      g->virtual_tensor(CUDNN_DATA_FLOAT, {s.B, s.H, s.Tq, s.D}, {s.H * s.Tq * s.D, s.Tq * s.D, s.H * s.D, 1});
  g->pointwise(CUDNN_POINTWISE_MUL, kDO, d_o_o, kO);
  const int64_t d_o_o_sum = g->virtual_tensor(CUDNN_DATA_FLOAT, rd, rs);
  g->reduction(CUDNN_REDUCE_TENSOR_ADD, d_o_o, d_o_o_sum);
  g->pointwise(CUDNN_POINTWISE_MUL, d_o_o_sum, kSoftmaxSum, kOne);

  // P, rebuilt from the stats.
  const int64_t scores = g->virtual_tensor(CUDNN_DATA_FLOAT, sd, ss);
  g->matmul(kQ, kK, scores);
  const int64_t scaled = g->virtual_tensor(CUDNN_DATA_FLOAT, sd, ss);
  g->pointwise(CUDNN_POINTWISE_MUL, scores, scaled, kScale);
  const int64_t centered = g->virtual_tensor(CUDNN_DATA_FLOAT, sd, ss);
  g->pointwise(CUDNN_POINTWISE_SUB, scaled, centered, kStats);
  const int64_t masked = apply_mask(*g, s, centered);
  const int64_t probs = g->virtual_tensor(CUDNN_DATA_FLOAT, sd, ss);
  g->pointwise(CUDNN_POINTWISE_EXP, masked, probs);

  // dV = P^T dO (summed over each kv head's query heads).
  const int64_t probs_t = g->virtual_tensor(s.io, transposed_dims, transposed);
  g->reshape(probs, probs_t);
  matmul_into_kv_heads(*g, s, probs_t, kDO, kDV);

  // dS = P (dO V^T - rowsum(dO O)) scale.
  const int64_t dp = g->virtual_tensor(CUDNN_DATA_FLOAT, sd, ss);
  g->matmul(kDO, kV, dp);
  const int64_t dp_centered = g->virtual_tensor(CUDNN_DATA_FLOAT, sd, ss);
  g->pointwise(CUDNN_POINTWISE_SUB, dp, dp_centered, kSoftmaxSum);
  const int64_t ds_unscaled = g->virtual_tensor(CUDNN_DATA_FLOAT, sd, ss);
  g->pointwise(CUDNN_POINTWISE_MUL, dp_centered, ds_unscaled, probs);
  const int64_t ds = g->virtual_tensor(CUDNN_DATA_FLOAT, sd, ss);
  g->pointwise(CUDNN_POINTWISE_MUL, ds_unscaled, ds, kScale);

  // dK = dS^T Q (summed over each kv head's query heads).
  const int64_t ds_t = g->virtual_tensor(s.io, transposed_dims, transposed);
  g->reshape(ds, ds_t);
  matmul_into_kv_heads(*g, s, ds_t, kQ, kDK);

  // dQ = dS K, K seen again untransposed.
  const int64_t k = g->virtual_tensor(CUDNN_DATA_FLOAT, {s.B, s.G, s.Tk, s.D}, {s.Tk * s.kv_row, s.D, s.kv_row, 1});
  g->reshape(kK, k);
  if (deterministic) {
    g->matmul(ds, k, kDQ);
  } else {
    g->tensor(kDQAccum, CUDNN_DATA_FLOAT, {s.B, s.H, s.Tq, s.D}, {s.H * s.Tq * s.D, s.Tq * s.D, s.D, 1});
    g->matmul(ds, k, kDQAccum);
    g->pointwise(CUDNN_POINTWISE_IDENTITY, kDQAccum, kDQ);
  }
  return g;
}

// --- per-context state --------------------------------------------------------------------------

struct PlanKey {
  int64_t B, Tq, Tk, H, G, D, q_row, kv_row, io, causal, window, direction, deterministic;
  auto tie() const { return std::tie(B, Tq, Tk, H, G, D, q_row, kv_row, io, causal, window, direction, deterministic); }
  bool operator<(const PlanKey& o) const { return tie() < o.tie(); }
};

}  // namespace
}  // namespace cuda

// One per CUDA context: its cuDNN handle (on the context's stream), the plans built for it, and
// a grow-only workspace for plans and the backward's f32 scratch.
struct CudnnState {
  int device = 0;
  int sm_major = 0;
  cudnnHandle_t handle = nullptr;
  std::mutex mutex;  // guards plans and workspace
  std::map<cuda::PlanKey, std::unique_ptr<cuda::CudnnGraph>> plans;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;

  ~CudnnState() {
    plans.clear();  // plans reference the handle
    if (handle) cudnnDestroy(handle);
    cuda::device_free(device, workspace);
  }
};

void CudnnStateDeleter::operator()(CudnnState* s) const noexcept { delete s; }

namespace cuda {
namespace {

CudnnState& cudnn_state(const Context& ctx) {
  CudaState& st = ctx.cuda_state();
  if (!st.cudnn) {  // a context is driven by one thread at a time (its actor)
    std::unique_ptr<CudnnState, CudnnStateDeleter> s(new CudnnState());
    s->device = st.device;
    TROUPE_CUDA_CHECK(cudaSetDevice(st.device));
    TROUPE_CUDA_CHECK(cudaDeviceGetAttribute(&s->sm_major, cudaDevAttrComputeCapabilityMajor, st.device));
    TROUPE_CUDNN_CHECK(cudnnCreate(&s->handle));
    TROUPE_CUDNN_CHECK(cudnnSetStream(s->handle, st.stream));
    st.cudnn = std::move(s);
  }
  return *st.cudnn;
}

void check_version() {
  const int v = cudnn_runtime_version();
  // The backend API's enums are stable within a major version: built against 9, run on 9.
  TROUPE_CHECK(v >= kMinCudnnVersion && v / 10000 == CUDNN_MAJOR, "TROUPE_ATTENTION_BACKEND=cudnn needs cuDNN ",
               CUDNN_MAJOR, ".x from ", kMinCudnnVersion / 10000, ".", kMinCudnnVersion / 100 % 100, ".",
               kMinCudnnVersion % 100, " on, but cuDNN ", v / 10000, ".", v / 100 % 100, ".", v % 100,
               " is loaded; install a matching cuDNN or set TROUPE_ATTENTION_BACKEND=flash");
}

}  // namespace

float sdpa_scale(const AttentionConfig& cfg) {
  return cfg.scale != 0.0f ? cfg.scale : 1.0f / std::sqrt(float(cfg.head_dim));
}

namespace {

PlanKey key_of(const SdpaShape& s, int64_t direction, bool deterministic) {
  return {s.B,      s.Tq,          s.Tk,     s.H,      s.G,       s.D,          s.q_row,
          s.kv_row, int64_t(s.io), s.causal, s.window, direction, deterministic};
}

// The plan for `key`, built (operation graph, heuristics, plan) on first use.
const CudnnGraph& plan_for(CudnnState& cs, const PlanKey& key, const SdpaShape& s, const char* direction,
                           bool deterministic) {
  auto it = cs.plans.find(key);
  if (it != cs.plans.end()) return *it->second;
  const std::string what = describe(s, direction);
  std::unique_ptr<CudnnGraph> g;
  try {
    g = key.direction == 0 ? forward_graph(s) : backward_graph(s, deterministic);
    g->build(cs.handle, what);
  } catch (const Error& e) {
    TROUPE_FAIL("the cuDNN attention backend cannot run ", what, ": ", e.what(),
                "; set TROUPE_ATTENTION_BACKEND=flash to use Troupe's kernels");
  }
  return *cs.plans.emplace(key, std::move(g)).first->second;
}

size_t round_up(size_t n) { return (n + 255) / 256 * 256; }

void* workspace_of(CudnnState& cs, size_t bytes) {
  // Never null: a plan that needs no workspace still gets a valid pointer in its variant pack.
  bytes = std::max(bytes, size_t(256));
  if (bytes > cs.workspace_bytes) {
    device_free(cs.device, cs.workspace);  // cudaFree waits for work still using it
    cs.workspace = nullptr;
    cs.workspace_bytes = 0;
    cs.workspace = device_alloc(cs.device, bytes);
    cs.workspace_bytes = bytes;
  }
  return cs.workspace;
}

}  // namespace

cudnnDataType_t cudnn_io_type(DType t) { return t == DType::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF; }

bool cudnn_sdpa_device_supported(const Context& ctx) {
  return cudnn_state(ctx).sm_major >= 8;  // cuDNN's fused attention starts at Ampere
}

void cudnn_sdpa_forward(const Context& ctx, const SdpaShape& s, const SdpaBuffers& b, float scale, float window) {
  check_version();
  CudnnState& cs = cudnn_state(ctx);
  SdpaScalars scalars{scale, window};
  std::vector<int64_t> uids = {kQ, kK, kV, kO, kStats};
  std::vector<void*> ptrs = {const_cast<void*>(b.q), const_cast<void*>(b.k), const_cast<void*>(b.v), b.o, b.stats};
  scalars.bind(s, uids, ptrs);
  std::lock_guard<std::mutex> lock(cs.mutex);
  const CudnnGraph& g = plan_for(cs, key_of(s, 0, false), s, "forward", false);
  void* ws = workspace_of(cs, round_up(size_t(g.workspace_bytes())));
  g.execute(cs.handle, uids, ptrs, ws);
}

void cudnn_sdpa_backward(const Context& ctx, const SdpaShape& s, const SdpaBuffers& b, float scale, float window,
                         bool deterministic) {
  check_version();
  CudnnState& cs = cudnn_state(ctx);
  float one = 1.0f;
  SdpaScalars scalars{scale, window};
  std::lock_guard<std::mutex> lock(cs.mutex);
  const CudnnGraph& g = plan_for(cs, key_of(s, 1, deterministic), s, "backward", deterministic);
  // Workspace: the plan's, then rowsum(dO O) [B, H, Tq] f32, then (non-deterministic) dq in f32.
  const size_t plan_bytes = round_up(size_t(g.workspace_bytes()));
  const size_t sum_bytes = round_up(size_t(s.B * s.H * s.Tq) * sizeof(float));
  const size_t dq_bytes = deterministic ? 0 : round_up(size_t(s.B * s.H * s.Tq * s.D) * sizeof(float));
  char* ws = static_cast<char*>(workspace_of(cs, plan_bytes + sum_bytes + dq_bytes));

  std::vector<int64_t> uids = {kQ, kK, kV, kO, kDO, kStats, kDQ, kDK, kDV, kSoftmaxSum, kOne};
  std::vector<void*> ptrs = {const_cast<void*>(b.q),
                             const_cast<void*>(b.k),
                             const_cast<void*>(b.v),
                             b.o,
                             const_cast<void*>(b.dout),
                             b.stats,
                             b.dq,
                             b.dk,
                             b.dv,
                             ws + plan_bytes,
                             &one};
  scalars.bind(s, uids, ptrs);
  if (!deterministic) {
    uids.push_back(kDQAccum);
    ptrs.push_back(ws + plan_bytes + sum_bytes);
  }
  g.execute(cs.handle, uids, ptrs, ws);
}

// --- whole-sequence attention on a fused qkv (attention_cudnn.hpp) -----------------------------

namespace {

SdpaShape shape_of(const Tensor& qkv, const AttentionConfig& cfg) {
  const int64_t T = qkv.dim(1), c3 = int64_t(cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim;
  return {qkv.dim(0),
          T,
          T,
          cfg.n_heads,
          cfg.n_kv_heads,
          cfg.head_dim,
          c3,
          c3,
          cudnn_io_type(qkv.dtype()),
          true,
          cfg.window > 0 && cfg.window < T};
}

// Q, K and V inside qkv (and dq, dk, dv inside dqkv).
void point_into_qkv(const SdpaShape& s, const Tensor& qkv, const void** q, const void** k, const void** v) {
  *q = at_elements(qkv, 0);
  *k = at_elements(qkv, s.H * s.D);
  *v = at_elements(qkv, (s.H + s.G) * s.D);
}

}  // namespace

int cudnn_runtime_version() { return int(cudnnGetVersion()); }
int cudnn_min_attention_version() { return kMinCudnnVersion; }

bool cudnn_attention_supports(const Context& ctx, const Tensor& qkv, const AttentionConfig& cfg,
                              std::initializer_list<const Tensor*> others, bool backward) {
  if (qkv.dtype() != DType::bf16 && qkv.dtype() != DType::f16) return false;
  if (cfg.head_dim != 64 && cfg.head_dim != 128) return false;
  if (backward && qkv.dim(1) < 2) return false;  // cuDNN refuses T = 1 backward
  if (!aligned16(qkv)) return false;
  for (const Tensor* t : others)
    if (!aligned16(*t)) return false;
  return cudnn_sdpa_device_supported(ctx);
}

void cudnn_attention_forward(const Context& ctx, const Tensor& qkv, const AttentionConfig& cfg, const Tensor& out,
                             const Tensor& lse) {
  const SdpaShape s = shape_of(qkv, cfg);
  SdpaBuffers b;
  point_into_qkv(s, qkv, &b.q, &b.k, &b.v);
  b.o = out.data();
  b.stats = lse.data_as<float>();
  cudnn_sdpa_forward(ctx, s, b, sdpa_scale(cfg), float(cfg.window));
}

void cudnn_attention_backward(const Context& ctx, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                              const Tensor& lse, const AttentionConfig& cfg, const Tensor& dqkv, bool deterministic) {
  const SdpaShape s = shape_of(qkv, cfg);
  SdpaBuffers b;
  point_into_qkv(s, qkv, &b.q, &b.k, &b.v);
  const void *dq = nullptr, *dk = nullptr, *dv = nullptr;
  point_into_qkv(s, dqkv, &dq, &dk, &dv);
  b.dq = const_cast<void*>(dq);
  b.dk = const_cast<void*>(dk);
  b.dv = const_cast<void*>(dv);
  b.o = out.data();
  b.dout = dout.data();
  b.stats = lse.data_as<float>();
  cudnn_sdpa_backward(ctx, s, b, sdpa_scale(cfg), float(cfg.window), deterministic);
}

}  // namespace cuda
}  // namespace troupe
