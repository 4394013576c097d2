// Causal attention as cuDNN fused-attention graphs (see attention_cudnn.hpp), built on the backend
// API the way cuDNN's frontend lowers its "composite" SDPA node for cuDNN 9.x: matmul, scale,
// diagonal-band masks made of GEN_INDEX / CMP / BINARY_SELECT, a softmax made of reductions and
// pointwise ops (emitting stats = max + log sum exp), matmul. cuDNN recognizes the pattern and
// runs one fused flash-attention kernel; a graph it does not recognize finds no engine.
//
// Shapes (4-D, cuDNN's [batch, heads, rows, cols] with strides into our buffers, C3 = (H + 2G) D):
//   Q  [B, H, T, D]  strides [T C3, D, C3, 1]        at qkv
//   Kt [B, G, D, T]  strides [T C3, D, 1, C3]        at qkv + H D   (K transposed by strides)
//   V  [B, G, T, D]  strides [T C3, D, C3, 1]        at qkv + (H + G) D   (backward: Vt, like Kt)
//   O  [B, H, T, D]  strides [T H D, D, H D, 1]      at out (and dout)
//   stats [B, H, T, 1] f32, strides [H T, T, 1, 1]  at lse
// dq, dk, dv are written like Q, K, V into dqkv. The intermediates (scores [B, H, T, T], ...) are
// virtual: they live in the fused kernel's registers and shared memory, never in device memory.
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

struct SdpaShape {
  int64_t B, T, H, G, D;
  cudnnDataType_t io;  // bf16 or f16
  bool window;         // a sliding window W < T (its value is a by-value scalar)
  int64_t c3() const { return (H + 2 * G) * D; }
};

cudnnDataType_t io_type(DType t) { return t == DType::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF; }

std::string describe(const SdpaShape& s, const char* direction) {
  return str_cat("causal attention ", direction, " (B=", s.B, " T=", s.T, " H=", s.H, " G=", s.G, " D=", s.D,
                 s.io == CUDNN_DATA_BFLOAT16 ? " bf16" : " f16", s.window ? ", sliding window" : "", ")");
}

// --- the graphs -------------------------------------------------------------------------------

CudnnDims scores_dims(const SdpaShape& s) { return {s.B, s.H, s.T, s.T}; }
CudnnDims scores_strides(const SdpaShape& s) { return {s.H * s.T * s.T, s.T * s.T, s.T, 1}; }
CudnnDims row_dims(const SdpaShape& s) { return {s.B, s.H, s.T, 1}; }
CudnnDims row_strides(const SdpaShape& s) { return {s.H * s.T, s.T, 1, 1}; }

// Views into qkv (or dqkv): one query head [B, H, T, D] or kv head [B, G, T, D] per row, and a
// kv head transposed [B, G, D, T].
void declare_heads(CudnnGraph& g, const SdpaShape& s, int64_t uid, int64_t heads) {
  const int64_t c3 = s.c3();
  g.tensor(uid, s.io, {s.B, heads, s.T, s.D}, {s.T * c3, s.D, c3, 1});
}
void declare_heads_transposed(CudnnGraph& g, const SdpaShape& s, int64_t uid) {
  const int64_t c3 = s.c3();
  g.tensor(uid, s.io, {s.B, s.G, s.D, s.T}, {s.T * c3, s.D, 1, c3});
}
// out or dout [B, H, T, D].
void declare_out(CudnnGraph& g, const SdpaShape& s, int64_t uid) {
  g.tensor(uid, s.io, {s.B, s.H, s.T, s.D}, {s.T * s.H * s.D, s.D, s.H * s.D, 1});
}

// Keeps scores where keep(row, col) holds, -inf elsewhere; returns the masked scores.
//   causal:  row >= col                     (frontend: right bound 0, top-left diagonal)
//   window:  col + W > row, i.e. i - W < j  (frontend: left bound W, top-left diagonal)
int64_t causal_mask(CudnnGraph& g, const SdpaShape& s, int64_t scores) {
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

void declare_scalars(CudnnGraph& g, const SdpaShape& s) {
  g.scalar(kScale);
  g.scalar(kNegInf);
  if (s.window) g.scalar(kWindow);
}

// O = softmax(mask(Q K^T * scale)) V, stats = max + log(sum exp(scores - max)).
std::unique_ptr<CudnnGraph> forward_graph(const SdpaShape& s) {
  auto g = std::make_unique<CudnnGraph>();
  declare_heads(*g, s, kQ, s.H);
  declare_heads_transposed(*g, s, kK);  // K^T
  declare_heads(*g, s, kV, s.G);
  declare_out(*g, s, kO);
  g->tensor(kStats, CUDNN_DATA_FLOAT, row_dims(s), row_strides(s));
  declare_scalars(*g, s);

  const CudnnDims sd = scores_dims(s), ss = scores_strides(s), rd = row_dims(s), rs = row_strides(s);
  const int64_t scores = g->virtual_tensor(CUDNN_DATA_FLOAT, sd, ss);
  g->matmul(kQ, kK, scores);
  const int64_t scaled = g->virtual_tensor(CUDNN_DATA_FLOAT, sd, ss);
  g->pointwise(CUDNN_POINTWISE_MUL, scores, scaled, kScale);
  const int64_t masked = causal_mask(*g, s, scaled);

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

// a [B, H, T, D] (virtual, io type) summed over the H / G query heads of each kv head into `out`
// [B, G, T, D]; with H == G the matmul writes `out` directly.
void matmul_into_kv_heads(CudnnGraph& g, const SdpaShape& s, int64_t a, int64_t b, int64_t out) {
  if (s.H == s.G) {
    g.matmul(a, b, out);
    return;
  }
  const int64_t full = g.virtual_tensor(s.io, {s.B, s.H, s.T, s.D}, {s.H * s.T * s.D, s.T * s.D, s.D, 1});
  g.matmul(a, b, full);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, full, out);
}

// dq, dk, dv from dO, Q, K, V, O and stats:
//   P = exp(mask(Q K^T scale) - stats),  dV = P^T dO,  dP = dO V^T,
//   dS = P (dP - rowsum(dO O)) scale,    dK = dS^T Q,  dQ = dS K.
std::unique_ptr<CudnnGraph> backward_graph(const SdpaShape& s, bool deterministic) {
  auto g = std::make_unique<CudnnGraph>();
  const int64_t c3 = s.c3();
  declare_heads(*g, s, kQ, s.H);
  declare_heads_transposed(*g, s, kK);  // K^T
  declare_heads_transposed(*g, s, kV);  // V^T: the backward only reads V transposed
  declare_out(*g, s, kO);
  declare_out(*g, s, kDO);
  g->tensor(kStats, CUDNN_DATA_FLOAT, row_dims(s), row_strides(s));
  declare_heads(*g, s, kDQ, s.H);
  declare_heads(*g, s, kDK, s.G);
  declare_heads(*g, s, kDV, s.G);
  g->tensor(kSoftmaxSum, CUDNN_DATA_FLOAT, row_dims(s), row_strides(s));
  declare_scalars(*g, s);
  g->scalar(kOne);

  const CudnnDims sd = scores_dims(s), ss = scores_strides(s), rd = row_dims(s), rs = row_strides(s);
  const CudnnDims transposed = {s.H * s.T * s.T, s.T * s.T, 1, s.T};

  // rowsum(dO * O), kept in the workspace for the dS step. (The frontend gives the virtual
  // product these [b, h, s, d] strides; only its shape matters.)
  const int64_t d_o_o =
      g->virtual_tensor(CUDNN_DATA_FLOAT, {s.B, s.H, s.T, s.D}, {s.H * s.T * s.D, s.T * s.D, s.H * s.D, 1});
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
  const int64_t masked = causal_mask(*g, s, centered);
  const int64_t probs = g->virtual_tensor(CUDNN_DATA_FLOAT, sd, ss);
  g->pointwise(CUDNN_POINTWISE_EXP, masked, probs);

  // dV = P^T dO (summed over each kv head's query heads).
  const int64_t probs_t = g->virtual_tensor(s.io, sd, transposed);
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
  const int64_t ds_t = g->virtual_tensor(s.io, sd, transposed);
  g->reshape(ds, ds_t);
  matmul_into_kv_heads(*g, s, ds_t, kQ, kDK);

  // dQ = dS K, K seen again untransposed.
  const int64_t k = g->virtual_tensor(CUDNN_DATA_FLOAT, {s.B, s.G, s.T, s.D}, {s.T * c3, s.D, c3, 1});
  g->reshape(kK, k);
  if (deterministic) {
    g->matmul(ds, k, kDQ);
  } else {
    g->tensor(kDQAccum, CUDNN_DATA_FLOAT, {s.B, s.H, s.T, s.D}, {s.H * s.T * s.D, s.T * s.D, s.D, 1});
    g->matmul(ds, k, kDQAccum);
    g->pointwise(CUDNN_POINTWISE_IDENTITY, kDQAccum, kDQ);
  }
  return g;
}

// --- per-context state --------------------------------------------------------------------------

struct PlanKey {
  int64_t B, T, H, G, D, io, direction, window, deterministic;
  auto tie() const { return std::tie(B, T, H, G, D, io, direction, window, deterministic); }
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

SdpaShape shape_of(const Tensor& qkv, const AttentionConfig& cfg) {
  const int64_t T = qkv.dim(1);
  return {
      qkv.dim(0), T, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, io_type(qkv.dtype()), cfg.window > 0 && cfg.window < T};
}

float scale_of(const AttentionConfig& cfg) {
  return cfg.scale != 0.0f ? cfg.scale : 1.0f / std::sqrt(float(cfg.head_dim));
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
  if (bytes > cs.workspace_bytes) {
    device_free(cs.device, cs.workspace);  // cudaFree waits for work still using it
    cs.workspace = nullptr;
    cs.workspace_bytes = 0;
    cs.workspace = device_alloc(cs.device, bytes);
    cs.workspace_bytes = bytes;
  }
  return cs.workspace;
}

char* at_elements(const Tensor& t, int64_t offset) {
  return static_cast<char*>(t.data()) + offset * int64_t(dtype_size(t.dtype()));
}

bool aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data()) % 16 == 0; }

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
  return cudnn_state(ctx).sm_major >= 8;  // cuDNN's fused attention starts at Ampere
}

void cudnn_attention_forward(const Context& ctx, const Tensor& qkv, const AttentionConfig& cfg, const Tensor& out,
                             const Tensor& lse) {
  check_version();
  const SdpaShape s = shape_of(qkv, cfg);
  CudnnState& cs = cudnn_state(ctx);
  const PlanKey key{s.B, s.T, s.H, s.G, s.D, int64_t(s.io), 0, s.window, 0};
  float scale = scale_of(cfg), neg_inf = -std::numeric_limits<float>::infinity(), window = float(cfg.window);

  std::vector<int64_t> uids = {kQ, kK, kV, kO, kStats, kScale, kNegInf};
  std::vector<void*> ptrs = {at_elements(qkv, 0),
                             at_elements(qkv, s.H * s.D),
                             at_elements(qkv, (s.H + s.G) * s.D),
                             out.data(),
                             lse.data(),
                             &scale,
                             &neg_inf};
  if (s.window) {
    uids.push_back(kWindow);
    ptrs.push_back(&window);
  }
  std::lock_guard<std::mutex> lock(cs.mutex);
  const CudnnGraph& g = plan_for(cs, key, s, "forward", false);
  void* ws = workspace_of(cs, round_up(size_t(g.workspace_bytes())));
  g.execute(cs.handle, uids, ptrs, ws);
}

void cudnn_attention_backward(const Context& ctx, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                              const Tensor& lse, const AttentionConfig& cfg, const Tensor& dqkv, bool deterministic) {
  check_version();
  const SdpaShape s = shape_of(qkv, cfg);
  CudnnState& cs = cudnn_state(ctx);
  const PlanKey key{s.B, s.T, s.H, s.G, s.D, int64_t(s.io), 1, s.window, deterministic};
  float scale = scale_of(cfg), neg_inf = -std::numeric_limits<float>::infinity(), window = float(cfg.window),
        one = 1.0f;
  const int64_t k_at = s.H * s.D, v_at = (s.H + s.G) * s.D;

  std::lock_guard<std::mutex> lock(cs.mutex);
  const CudnnGraph& g = plan_for(cs, key, s, "backward", deterministic);
  // Workspace: the plan's, then rowsum(dO O) [B, H, T] f32, then (non-deterministic) dq in f32.
  const size_t plan_bytes = round_up(size_t(g.workspace_bytes()));
  const size_t sum_bytes = round_up(size_t(s.B * s.H * s.T) * sizeof(float));
  const size_t dq_bytes = deterministic ? 0 : round_up(size_t(s.B * s.H * s.T * s.D) * sizeof(float));
  char* ws = static_cast<char*>(workspace_of(cs, plan_bytes + sum_bytes + dq_bytes));

  std::vector<int64_t> uids = {kQ, kK, kV, kO, kDO, kStats, kDQ, kDK, kDV, kSoftmaxSum, kScale, kNegInf, kOne};
  std::vector<void*> ptrs = {at_elements(qkv, 0),
                             at_elements(qkv, k_at),
                             at_elements(qkv, v_at),
                             out.data(),
                             dout.data(),
                             lse.data(),
                             at_elements(dqkv, 0),
                             at_elements(dqkv, k_at),
                             at_elements(dqkv, v_at),
                             ws + plan_bytes,
                             &scale,
                             &neg_inf,
                             &one};
  if (!deterministic) {
    uids.push_back(kDQAccum);
    ptrs.push_back(ws + plan_bytes + sum_bytes);
  }
  if (s.window) {
    uids.push_back(kWindow);
    ptrs.push_back(&window);
  }
  g.execute(cs.handle, uids, ptrs, ws);
}

}  // namespace cuda
}  // namespace troupe
