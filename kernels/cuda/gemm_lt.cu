// cuBLASLt behind the row-major matmul_lt(): descriptors, heuristic cache, tuning.
//
// Row-major D = op(A) op(B) is column-major D^T = op(B)^T op(A)^T, and a row-major buffer read
// column-major is its transpose; so cuBLASLt sees (m, n, k) = (N, M, K) with our B as its A and
// our A as its B, each keeping its own transpose flag.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <string_view>

#include "base/log.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_state.cuh"
#include "kernels/cuda/gemm_lt.hpp"
#include "kernels/cuda/stream_timing.hpp"

namespace troupe::cuda {

namespace {

constexpr const char* kOp = "matmul_lt";

// Largest power of two up to 256 that divides the address: what cuBLASLt's MIN_ALIGNMENT
// preferences describe. Views into flat buffers can be less aligned than cudaMalloc's 256.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 1;
  while (align < 256 && a % (2 * align) == 0) align *= 2;
  return align;
}

// The problem in cuBLASLt's column-major terms.
struct LtShape {
  int64_t m, n, k;         // of the column-major product (N, M, K of the row-major one)
  int64_t a_rows, a_cols;  // cuBLASLt's A = our B buffer, read column-major
  int64_t b_rows, b_cols;  // cuBLASLt's B = our A buffer, read column-major
  cublasOperation_t trans_a, trans_b;
};

LtShape lt_shape(const MatmulProblem& p) {
  const Tensor &a = *p.a, &b = *p.b;
  LtShape s;
  s.m = p.d->dim(1);
  s.n = p.d->dim(0);
  s.k = p.trans_a ? a.dim(0) : a.dim(1);
  // A column-major view of a row-major [r, c] buffer is c x r with leading dimension c.
  s.a_rows = b.dim(1);
  s.a_cols = b.dim(0);
  s.b_rows = a.dim(1);
  s.b_cols = a.dim(0);
  s.trans_a = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  s.trans_b = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  return s;
}

// cuBLASLt's FP8 rules on Hopper: the TN form, 16-byte aligned leading dimensions (multiples of
// 16 elements here), no e5m2 x e5m2, and of the epilogues only the bias.
void check_fp8_problem(const MatmulProblem& p, int64_t m, int64_t n, int64_t k) {
  const MatmulFp8& f = *p.fp8;
  TROUPE_CHECK(p.a->dtype() == DType::u8 && p.b->dtype() == DType::u8, kOp, ": fp8 operands are u8 tensors, got ",
               p.a->str(), " and ", p.b->str());
  TROUPE_CHECK(!p.trans_a && p.trans_b, kOp, ": fp8 GEMMs take only d = a b^T (cuBLASLt's TN form)");
  TROUPE_CHECK(!(f.a == Fp8Format::e5m2 && f.b == Fp8Format::e5m2), kOp, ": e5m2 x e5m2 has no fp8 GEMM");
  TROUPE_CHECK(is_float(p.d->dtype()), kOp, ": d must be bf16, f16 or f32, got ", p.d->str());
  TROUPE_CHECK(m % 16 == 0 && n % 16 == 0 && k % 16 == 0, kOp, ": fp8 GEMMs need M, N, K multiples of 16, got M=", m,
               " N=", n, " K=", k);
  TROUPE_CHECK(p.epilogue == MatmulEpilogue::none || p.epilogue == MatmulEpilogue::bias, kOp,
               ": fp8 GEMMs take no epilogue but the bias");
  TROUPE_CHECK(!p.c && !p.aux, kOp, ": fp8 GEMMs take no C tensor and no aux");
  for (const Tensor* s : {f.a_scale_inv, f.b_scale_inv})
    TROUPE_CHECK(s && s->is_cuda() && s->dtype() == DType::f32 && s->numel() == 1, kOp,
                 ": fp8 GEMMs need f32 [1] scale_inv tensors on CUDA");
}

cudaDataType_t fp8_data_type(Fp8Format f) { return f == Fp8Format::e4m3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; }

void check_problem(const MatmulProblem& p) {
  TROUPE_CHECK(p.a && p.b && p.d, kOp, ": a, b and d are required");
  const Tensor &a = *p.a, &b = *p.b, &d = *p.d;
  TROUPE_CHECK(a.ndim() == 2 && b.ndim() == 2 && d.ndim() == 2, kOp, ": a, b, d must be 2-D, got ", a.str(), ", ",
               b.str(), ", ", d.str());
  const int64_t m = p.trans_a ? a.dim(1) : a.dim(0), k = p.trans_a ? a.dim(0) : a.dim(1);
  const int64_t kb = p.trans_b ? b.dim(1) : b.dim(0), n = p.trans_b ? b.dim(0) : b.dim(1);
  TROUPE_CHECK(k == kb && d.dim(0) == m && d.dim(1) == n, kOp, ": shapes do not chain: op(a) ", m, "x", k, ", op(b) ",
               kb, "x", n, ", d ", d.str());
  if (p.fp8) {
    check_fp8_problem(p, m, n, k);
  } else {
    TROUPE_CHECK(a.dtype() == b.dtype() && is_float(a.dtype()), kOp, ": a and b must share a float type, got ", a.str(),
                 " and ", b.str());
    TROUPE_CHECK(d.dtype() == a.dtype() || d.dtype() == DType::f32, kOp, ": d must be ", dtype_name(a.dtype()),
                 " or f32, got ", d.str());
  }
  TROUPE_CHECK(a.is_cuda() && b.is_cuda() && d.is_cuda(), kOp, ": tensors must be on CUDA");
  const bool uses_aux = p.epilogue == MatmulEpilogue::gelu_aux || p.epilogue == MatmulEpilogue::dgelu;
  if (uses_aux) {
    TROUPE_CHECK(p.aux && p.aux->is_cuda() && p.aux->dtype() == d.dtype() && d.dtype() != DType::f32, kOp,
                 ": the GELU epilogues need an aux tensor of d's 16-bit type, got d ", d.str());
    TROUPE_CHECK(p.aux->ndim() == 2 && p.aux->dim(0) == m && p.aux->dim(1) == n && n % 8 == 0, kOp, ": aux must be [",
                 m, ", ", n, "] with ", n, " a multiple of 8, got ", p.aux->str());
  }
  if (p.c) {
    TROUPE_CHECK(p.beta == 0.0f, kOp, ": c replaces beta * d: give beta 0");
    TROUPE_CHECK(p.c->is_cuda() && p.c->dtype() == d.dtype() && p.c->ndim() == 2 && p.c->dim(0) == m &&
                     p.c->dim(1) == n && p.c->data() != d.data(),
                 kOp, ": c must be a CUDA [", m, ", ", n, "] tensor of d's type apart from d, got ", p.c->str());
  }
  const bool vector_optional = p.epilogue == MatmulEpilogue::gelu || p.epilogue == MatmulEpilogue::gelu_aux;
  if (p.epilogue == MatmulEpilogue::dgelu) {
    TROUPE_CHECK(!p.vec, kOp, ": the dgelu epilogue takes no vector");
  } else if (p.epilogue != MatmulEpilogue::none && (!vector_optional || p.vec)) {
    TROUPE_CHECK(p.vec && p.vec->is_cuda() && p.vec->dtype() == d.dtype(), kOp,
                 ": the epilogue needs a CUDA vector of d's type ", dtype_name(d.dtype()));
    const int64_t len = p.epilogue == MatmulEpilogue::row_sums_of_a ? m : n;
    TROUPE_CHECK(p.vec->numel() == len, kOp, ": epilogue vector must have ", len, " elements, got ", p.vec->str());
  }
}

// Descriptors are plain structs, initialized per call on the stack (host-only and cheap);
// only the heuristic's answer, which costs tens of microseconds, is cached.
struct LtDescriptors {
  cublasLtMatmulDescOpaque_t op;
  cublasLtMatrixLayoutOpaque_t a, b, d;
};

void set_desc(cublasLtMatmulDescOpaque_t& op, cublasLtMatmulDescAttributes_t attr, const void* value, size_t size) {
  TROUPE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(&op, attr, value, size));
}

// cuBLASLt's A, B and D types: its A is our b, its B our a.
struct LtTypes {
  cudaDataType_t a, b, d;
};

LtTypes lt_types(const MatmulProblem& p) {
  return {p.fp8 ? fp8_data_type(p.fp8->b) : blas_data_type(p.b->dtype(), kOp),
          p.fp8 ? fp8_data_type(p.fp8->a) : blas_data_type(p.a->dtype(), kOp), blas_data_type(p.d->dtype(), kOp)};
}

void init_descriptors(const MatmulProblem& p, const LtShape& s, LtDescriptors& desc) {
  const auto [lt_a, lt_b, dt] = lt_types(p);
  TROUPE_CUBLAS_CHECK(cublasLtMatmulDescInit(&desc.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_desc(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, &s.trans_a, sizeof(s.trans_a));
  set_desc(desc.op, CUBLASLT_MATMUL_DESC_TRANSB, &s.trans_b, sizeof(s.trans_b));
  if (p.fp8) {
    const void* a_scale = p.fp8->b_scale_inv->data();
    const void* b_scale = p.fp8->a_scale_inv->data();
    set_desc(desc.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof(a_scale));
    set_desc(desc.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof(b_scale));
  }
  if (p.aux) {  // column-major aux is D's shape: m rows (our N) with leading dimension m
    const void* aux = p.aux->data();
    const int64_t ld = s.m;
    const int32_t aux_type = dt;
    set_desc(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux));
    set_desc(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld));
    set_desc(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &aux_type, sizeof(aux_type));
  }
  if (!p.vec && p.epilogue != MatmulEpilogue::none) {
    const cublasLtEpilogue_t ep = p.epilogue == MatmulEpilogue::gelu       ? CUBLASLT_EPILOGUE_GELU
                                  : p.epilogue == MatmulEpilogue::gelu_aux ? CUBLASLT_EPILOGUE_GELU_AUX
                                                                           : CUBLASLT_EPILOGUE_DGELU;
    set_desc(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep));
  } else if (p.epilogue != MatmulEpilogue::none) {
    const cublasLtEpilogue_t ep = p.epilogue == MatmulEpilogue::bias       ? CUBLASLT_EPILOGUE_BIAS
                                  : p.epilogue == MatmulEpilogue::gelu     ? CUBLASLT_EPILOGUE_GELU_BIAS
                                  : p.epilogue == MatmulEpilogue::gelu_aux ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                                                           : CUBLASLT_EPILOGUE_BGRADB;
    const void* vec = p.vec->data();
    const int32_t vec_type = dt;
    set_desc(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep));
    set_desc(desc.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vec, sizeof(vec));
    set_desc(desc.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &vec_type, sizeof(vec_type));
  }
  TROUPE_CUBLAS_CHECK(cublasLtMatrixLayoutInit(&desc.a, lt_a, s.a_rows, s.a_cols, s.a_rows));
  TROUPE_CUBLAS_CHECK(cublasLtMatrixLayoutInit(&desc.b, lt_b, s.b_rows, s.b_cols, s.b_rows));
  TROUPE_CUBLAS_CHECK(cublasLtMatrixLayoutInit(&desc.d, dt, s.m, s.n, s.m));
}

// Where a GEMM runs: a stream and the workspace that goes with it (ctx's own, or a side lane's).
struct LtTarget {
  cudaStream_t stream;
  void* workspace;
  size_t workspace_bytes;
};

LtTarget context_target(const CudaState& st) { return {st.stream, st.workspace, st.workspace_bytes}; }

// Everything the heuristic's answer depends on. The workspace's size, not its address: a lane's
// workspace as large as ctx's shares ctx's plan.
using PlanKey = std::array<int64_t, 16>;

PlanKey plan_key(const Context& ctx, const MatmulProblem& p, const LtShape& s, const LtTarget& t) {
  const CudaState& st = ctx.cuda_state();
  return {st.device,
          int64_t(reinterpret_cast<uintptr_t>(st.lt)),
          s.m,
          s.n,
          s.k,
          int64_t(p.trans_a),
          int64_t(p.trans_b),
          int64_t(p.a->dtype()) * 8 + (p.fp8 ? 1 + 2 * int64_t(p.fp8->a) + 4 * int64_t(p.fp8->b) : 0),
          int64_t(p.d->dtype()),
          int64_t(p.epilogue) * 2 + (p.vec != nullptr),
          alignment_of(p.a->data()),
          alignment_of(p.b->data()),
          alignment_of(p.d->data()),
          p.aux ? alignment_of(p.aux->data()) : 0,
          p.c ? alignment_of(p.c->data()) : 0,
          int64_t(t.workspace_bytes)};
}

std::mutex plan_mutex;
std::map<PlanKey, cublasLtMatmulAlgo_t> plan_cache;  // guarded by plan_mutex
std::set<PlanKey> searched;                          // problems matmul_lt_searched searched; plan_mutex

constexpr const char* kSearchVariable = "TROUPE_GEMM_SEARCH";
constexpr int kSearchUnset = -1;
std::atomic<int> search_override{kSearchUnset};  // ScopedGemmSearch's: 0 off, 1 on

std::string describe(const MatmulProblem& p) {
  const std::string types = p.fp8 ? str_cat(fp8_format_name(p.fp8->a), " x ", fp8_format_name(p.fp8->b))
                                  : std::string(dtype_name(p.a->dtype()));
  return str_cat("M=", p.d->dim(0), " N=", p.d->dim(1), " K=", p.trans_a ? p.a->dim(0) : p.a->dim(1),
                 " trans_a=", p.trans_a, " trans_b=", p.trans_b, " ", types, "->", dtype_name(p.d->dtype()),
                 " beta=", p.beta, " epilogue=", int(p.epilogue), p.vec ? str_cat(" vec ", p.vec->str()) : "",
                 " alignments a ", alignment_of(p.a->data()), " b ", alignment_of(p.b->data()), " d ",
                 alignment_of(p.d->data()));
}

// A failed cuBLASLt call names the problem it was given: its status alone does not say which
// GEMM of a step cuBLASLt refused.
void check_lt(cublasStatus_t st, const char* call, const MatmulProblem& p) {
  if (st != CUBLAS_STATUS_SUCCESS)
    TROUPE_FAIL(kOp, ": ", call, " failed with ", cublasGetStatusName(st), " for ", describe(p));
}

std::vector<cublasLtMatmulHeuristicResult_t> heuristic(const Context& ctx, const MatmulProblem& p, LtDescriptors& desc,
                                                       const LtTarget& t, int requested) {
  const CudaState& st = ctx.cuda_state();
  cublasLtMatmulPreferenceOpaque_t pref;
  TROUPE_CUBLAS_CHECK(cublasLtMatmulPreferenceInit(&pref));
  const uint64_t ws = t.workspace_bytes;
  // cuBLASLt's A and B are our B and A.
  const uint32_t align_a = alignment_of(p.b->data()), align_b = alignment_of(p.a->data()),
                 align_d = alignment_of(p.d->data()), align_c = p.c ? alignment_of(p.c->data()) : align_d;
  TROUPE_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  TROUPE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                           sizeof(align_a)));
  TROUPE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                           sizeof(align_b)));
  TROUPE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                                           sizeof(align_c)));
  TROUPE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                                           sizeof(align_d)));
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(requested));
  int returned = 0;
  check_lt(cublasLtMatmulAlgoGetHeuristic(st.lt, &desc.op, &desc.a, &desc.b, &desc.d, &desc.d, &pref, requested,
                                          results.data(), &returned),
           "cublasLtMatmulAlgoGetHeuristic", p);
  TROUPE_CHECK(returned > 0, kOp, ": cuBLASLt has no algorithm for ", describe(p));
  results.resize(size_t(returned));
  return results;
}

void run(const Context& ctx, const MatmulProblem& p, LtDescriptors& desc, const LtTarget& t,
         const cublasLtMatmulAlgo_t& algo) {
  const CudaState& st = ctx.cuda_state();
  const float alpha = 1.0f, beta = p.c ? 1.0f : p.beta;
  void* d = p.d->data();
  const void* c = p.c ? p.c->data() : d;  // C has D's layout
  check_lt(cublasLtMatmul(st.lt, &desc.op, &alpha, p.b->data(), &desc.a, p.a->data(), &desc.b, &beta, c, &desc.d, d,
                          &desc.d, &algo, t.workspace, t.workspace_bytes, t.stream),
           "cublasLtMatmul", p);
}

bool is_empty(const MatmulProblem& p) { return p.d->numel() == 0; }

void matmul_on(const Context& ctx, const MatmulProblem& p, const LtTarget& t) {
  check_problem(p);
  if (is_empty(p)) return;
  const LtShape s = lt_shape(p);
  TROUPE_CHECK(s.k > 0, kOp, ": K = 0 is not supported (", describe(p), ")");
  LtDescriptors desc;
  init_descriptors(p, s, desc);
  const PlanKey key = plan_key(ctx, p, s, t);
  cublasLtMatmulAlgo_t algo;
  {
    std::lock_guard<std::mutex> lock(plan_mutex);
    auto it = plan_cache.find(key);
    if (it == plan_cache.end()) it = plan_cache.emplace(key, heuristic(ctx, p, desc, t, 1)[0].algo).first;
    algo = it->second;
  }
  run(ctx, p, desc, t, algo);
}

// Every configuration cuBLASLt accepts for the problem: each listed algorithm whose epilogue
// mask covers the problem's, with each tile, stage count, cluster shape and swizzle it offers.
std::vector<cublasLtMatmulAlgo_t> all_configs(const Context& ctx, const MatmulProblem& p, LtDescriptors& desc,
                                              const LtTarget& t) {
  const CudaState& st = ctx.cuda_state();
  const auto [lt_a, lt_b, dt] = lt_types(p);
  std::array<int, 256> ids{};
  int n_ids = 0;
  TROUPE_CUBLAS_CHECK(cublasLtMatmulAlgoGetIds(st.lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, lt_a, lt_b, dt, dt,
                                               int(ids.size()), ids.data(), &n_ids));
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  TROUPE_CUBLAS_CHECK(
      cublasLtMatmulDescGetAttribute(&desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue), nullptr));
  const auto cap_list = [](const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoCapAttributes_t attr) {
    size_t bytes = 0;
    TROUPE_CUBLAS_CHECK(cublasLtMatmulAlgoCapGetAttribute(&algo, attr, nullptr, 0, &bytes));
    std::vector<uint32_t> v(bytes / sizeof(uint32_t));
    if (!v.empty()) TROUPE_CUBLAS_CHECK(cublasLtMatmulAlgoCapGetAttribute(&algo, attr, v.data(), bytes, &bytes));
    if (v.empty()) v.push_back(0);  // undefined: the algorithm picks
    return v;
  };
  const std::array<uint32_t, 7> clusters = {CUBLASLT_CLUSTER_SHAPE_AUTO,  CUBLASLT_CLUSTER_SHAPE_1x1x1,
                                            CUBLASLT_CLUSTER_SHAPE_2x1x1, CUBLASLT_CLUSTER_SHAPE_1x2x1,
                                            CUBLASLT_CLUSTER_SHAPE_2x2x1, CUBLASLT_CLUSTER_SHAPE_4x1x1,
                                            CUBLASLT_CLUSTER_SHAPE_1x4x1};
  std::vector<cublasLtMatmulAlgo_t> out;
  for (int i = 0; i < n_ids; ++i) {
    cublasLtMatmulAlgo_t algo;
    if (cublasLtMatmulAlgoInit(st.lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, lt_a, lt_b, dt, dt, ids[size_t(i)], &algo) !=
        CUBLAS_STATUS_SUCCESS)
      continue;
    uint32_t epilogues = 0;
    TROUPE_CUBLAS_CHECK(cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_EPILOGUE_MASK, &epilogues,
                                                          sizeof(epilogues), nullptr));
    if ((epilogues & uint32_t(epilogue)) != uint32_t(epilogue)) continue;
    int32_t swizzle = 0;
    TROUPE_CUBLAS_CHECK(cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, &swizzle,
                                                          sizeof(swizzle), nullptr));
    std::vector<uint32_t> stage_ids = cap_list(algo, CUBLASLT_ALGO_CAP_STAGES_IDS);
    std::vector<uint32_t> auto_stages;  // K tile fixed, stage count sized by cuBLASLt: 8xAUTO .. 768xAUTO
    std::copy_if(stage_ids.begin(), stage_ids.end(), std::back_inserter(auto_stages), [](uint32_t id) {
      return id >= CUBLASLT_MATMUL_STAGES_8xAUTO && id <= CUBLASLT_MATMUL_STAGES_768xAUTO;
    });
    if (!auto_stages.empty()) stage_ids = auto_stages;
    for (uint32_t tile : cap_list(algo, CUBLASLT_ALGO_CAP_TILE_IDS))
      for (uint32_t stages : stage_ids)
        for (uint32_t cluster : clusters)
          for (uint32_t swz = 0; swz <= uint32_t(swizzle != 0); ++swz) {
            cublasLtMatmulAlgo_t c = algo;
            const auto set = [&](cublasLtMatmulAlgoConfigAttributes_t attr, uint32_t v) {
              return cublasLtMatmulAlgoConfigSetAttribute(&c, attr, &v, sizeof(v)) == CUBLAS_STATUS_SUCCESS;
            };
            const uint16_t cluster16 = uint16_t(cluster);  // this attribute is 16-bit
            if (!set(CUBLASLT_ALGO_CONFIG_TILE_ID, tile) || !set(CUBLASLT_ALGO_CONFIG_STAGES_ID, stages) ||
                !set(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, swz) ||
                cublasLtMatmulAlgoConfigSetAttribute(&c, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster16,
                                                     sizeof(cluster16)) != CUBLAS_STATUS_SUCCESS)
              continue;
            cublasLtMatmulHeuristicResult_t check{};
            if (cublasLtMatmulAlgoCheck(st.lt, &desc.op, &desc.a, &desc.b, &desc.d, &desc.d, &c, &check) !=
                    CUBLAS_STATUS_SUCCESS ||
                check.workspaceSize > t.workspace_bytes)
              continue;
            out.push_back(c);
          }
  }
  return out;
}

std::string describe_config(const cublasLtMatmulAlgo_t& algo) {
  const auto get = [&](cublasLtMatmulAlgoConfigAttributes_t attr) {
    uint32_t v = 0;
    if (attr == CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID) {
      uint16_t v16 = 0;
      cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v16, sizeof(v16), nullptr);
      return uint32_t(v16);
    }
    cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof(v), nullptr);
    return v;
  };
  return str_cat("algo ", get(CUBLASLT_ALGO_CONFIG_ID), " tile ", get(CUBLASLT_ALGO_CONFIG_TILE_ID), " stages ",
                 get(CUBLASLT_ALGO_CONFIG_STAGES_ID), " cluster ", get(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
                 " swizzle ", get(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING), " splitk ",
                 get(CUBLASLT_ALGO_CONFIG_SPLITK_NUM));
}

}  // namespace

void matmul_lt(const Context& ctx, const MatmulProblem& p) { matmul_on(ctx, p, context_target(ctx.cuda_state())); }

void matmul_lt(const Context& ctx, const MatmulProblem& p, const StreamLane& lane) {
  matmul_on(ctx, p, {lane.stream, lane.workspace, lane.workspace_bytes});
}

std::vector<float> matmul_lt_tune(const Context& ctx, const MatmulProblem& p, int candidates, int reps) {
  check_problem(p);
  TROUPE_CHECK(candidates > 0 && reps > 0, kOp, ": tune needs candidates > 0 and reps > 0");
  if (is_empty(p)) return {};
  const LtShape s = lt_shape(p);
  TROUPE_CHECK(s.k > 0, kOp, ": K = 0 is not supported (", describe(p), ")");
  LtDescriptors desc;
  init_descriptors(p, s, desc);
  const LtTarget target = context_target(ctx.cuda_state());
  const auto results = heuristic(ctx, p, desc, target, candidates);

  std::vector<std::function<void()>> calls;
  for (const auto& r : results) calls.push_back([&, algo = r.algo] { run(ctx, p, desc, target, algo); });
  const std::vector<float> medians = median_ms_on_stream(ctx, target.stream, calls, reps);

  const size_t best = size_t(std::min_element(medians.begin(), medians.end()) - medians.begin());
  std::lock_guard<std::mutex> lock(plan_mutex);
  plan_cache[plan_key(ctx, p, s, target)] = results[best].algo;
  return medians;
}

MatmulSearch matmul_lt_search(const Context& ctx, const MatmulProblem& p, int max_timed, int reps) {
  check_problem(p);
  TROUPE_CHECK(max_timed > 0 && reps > 0, kOp, ": search needs max_timed > 0 and reps > 0");
  MatmulSearch out;
  if (is_empty(p)) return out;
  const LtShape s = lt_shape(p);
  LtDescriptors desc;
  init_descriptors(p, s, desc);
  const LtTarget target = context_target(ctx.cuda_state());
  const auto start = std::chrono::steady_clock::now();
  std::vector<cublasLtMatmulAlgo_t> configs = {heuristic(ctx, p, desc, target, 1)[0].algo};
  const std::vector<cublasLtMatmulAlgo_t> all = all_configs(ctx, p, desc, target);
  out.configs = int(all.size());
  const auto listed = std::chrono::steady_clock::now();
  // An even sample where there are more than max_timed.
  const size_t take = std::min(all.size(), size_t(max_timed));
  for (size_t i = 0; i < take; ++i) configs.push_back(all[i * all.size() / take]);
  // Each timed call runs the GEMM `runs` times back to back.
  const auto time_configs = [&](const std::vector<cublasLtMatmulAlgo_t>& list, int runs, int r) {
    std::vector<std::function<void()>> calls;
    for (const cublasLtMatmulAlgo_t& algo : list)
      calls.push_back([&, algo, runs] {
        for (int i = 0; i < runs; ++i) run(ctx, p, desc, target, algo);
      });
    return median_ms_on_stream(ctx, target.stream, calls, r);
  };
  // A short pass over all, then the fastest eight again beside the heuristic's choice, each
  // timed over runs back to back (sustained clocks, not one call's: a config that wins single
  // calls can lose in a step), keeping the heuristic's unless another is kMargin faster.
  const std::vector<float> first = time_configs(configs, 1, reps);
  std::vector<size_t> order(configs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return first[a] < first[b]; });
  std::vector<cublasLtMatmulAlgo_t> finalists = {configs[0]};
  for (size_t i = 0; i < order.size() && finalists.size() < 9; ++i)
    if (order[i] != 0) finalists.push_back(configs[order[i]]);
  constexpr int kRuns = 8;
  constexpr float kMargin = 0.97f;
  std::vector<float> medians = time_configs(finalists, kRuns, reps);
  for (float& ms : medians) ms /= float(kRuns);
  size_t best = size_t(std::min_element(medians.begin(), medians.end()) - medians.begin());
  if (medians[best] > kMargin * medians[0]) best = 0;
  out.timed = int(take);
  out.heuristic_ms = medians[0];
  out.best_ms = medians[best];
  out.best = (best == 0 ? "the heuristic's: " : "") + describe_config(finalists[best]);
  out.list_s = std::chrono::duration<double>(listed - start).count();
  out.time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - listed).count();
  logger("gemm").debug("searched ", out.timed, " of ", out.configs, " cuBLASLt configurations for ", describe(p),
                       " in ", out.list_s, " + ", out.time_s, " s: heuristic ", out.heuristic_ms, " ms, best ",
                       out.best_ms, " ms (", out.best, ")");
  const PlanKey key = plan_key(ctx, p, s, target);
  std::lock_guard<std::mutex> lock(plan_mutex);
  plan_cache[key] = finalists[best];
  searched.insert(key);
  return out;
}

// Whether two tensors' bytes overlap.
bool overlaps(const Tensor& a, const Tensor& b) {
  const auto a0 = reinterpret_cast<uintptr_t>(a.data()), b0 = reinterpret_cast<uintptr_t>(b.data());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

bool gemm_search_on() {
  const int forced = search_override.load(std::memory_order_relaxed);
  if (forced != kSearchUnset) return forced != 0;
  const char* env = std::getenv(kSearchVariable);  // read each call: cheap next to the GEMM
  if (env == nullptr || env[0] == '\0' || std::string_view(env) == "on") return true;
  if (std::string_view(env) == "off") return false;
  TROUPE_FAIL(kSearchVariable, "=", env, " is neither on nor off");
}

ScopedGemmSearch::ScopedGemmSearch(bool on) : previous_(search_override.exchange(on ? 1 : 0)) {}

ScopedGemmSearch::~ScopedGemmSearch() { search_override.store(previous_); }

void matmul_lt_searched(const Context& ctx, const MatmulProblem& p) {
  const CudaState& st = ctx.cuda_state();
  bool search = gemm_search_on() && !is_empty(p);
  if (search) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    TROUPE_CUDA_CHECK(cudaStreamIsCapturing(st.stream, &capture));
    search = capture == cudaStreamCaptureStatusNone;
  }
  if (search) {
    check_problem(p);
    TROUPE_CHECK(p.beta == 0.0f, kOp, ": a searched GEMM must overwrite D (beta 0), got beta ", p.beta);
    // The search runs the GEMM many times in place: no output may feed an input.
    std::vector<const Tensor*> inputs = {p.a, p.b};
    if (p.c) inputs.push_back(p.c);
    if (p.epilogue == MatmulEpilogue::dgelu) inputs.push_back(p.aux);
    if (p.vec && p.epilogue != MatmulEpilogue::row_sums_of_a) inputs.push_back(p.vec);  // a bias
    std::vector<const Tensor*> outputs = {p.d};
    if (p.epilogue == MatmulEpilogue::gelu_aux) outputs.push_back(p.aux);
    if (p.epilogue == MatmulEpilogue::row_sums_of_a) outputs.push_back(p.vec);
    for (const Tensor* out : outputs)
      for (const Tensor* in : inputs)
        TROUPE_CHECK(!overlaps(*out, *in), kOp, ": a searched GEMM's output ", out->str(), " overlaps its input ",
                     in->str());
    const PlanKey key = plan_key(ctx, p, lt_shape(p), context_target(st));
    bool done;
    {
      std::lock_guard<std::mutex> lock(plan_mutex);
      done = searched.count(key) != 0;
    }
    if (!done) matmul_lt_search(ctx, p);
  }
  matmul_lt(ctx, p);
}

}  // namespace troupe::cuda
