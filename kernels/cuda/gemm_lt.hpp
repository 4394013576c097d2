// Row-major GEMM on cuBLASLt, the engine under linear_forward / linear_backward on CUDA.
//
//   D[M, N] = op(A)[M, K] · op(B)[K, N] + beta · D   (+ an epilogue)
//
// All matrices are contiguous row-major tensors. A is stored [M, K], or [K, M] when trans_a;
// B is stored [K, N], or [N, K] when trans_b. A and B are bf16 or f16 (the same type); D is
// the same 16-bit type or f32. Accumulation is f32 (CUBLAS_COMPUTE_32F). With `fp8` set, A and
// B are u8 tensors of fp8 bytes (kernels/fp8_gemm.hpp: the TN form only, bias epilogue at most).
//
//   matmul_lt(ctx, x, false, w, true, y, 0.0f, MatmulEpilogue::bias, b);  // y = x w^T + b
//
// The algorithm for each problem (device, handle, shape, types, transposes, epilogue, pointer
// alignment) is chosen once by cuBLASLt's heuristic and cached; matmul_lt_tune() replaces it
// with the fastest of the heuristic's candidates, measured, and matmul_lt_search() (run at first
// use by matmul_lt_searched()) with the fastest of every configuration cuBLASLt accepts. Plain
// C++ (no device code), so host code such as benchmarks can call it.
#pragma once

#include <string>
#include <vector>

#include "kernels/fp8.hpp"
#include "kernels/tensor.hpp"

namespace troupe {
struct StreamLane;  // a side stream of a context (kernels/cuda/cuda_state.cuh)
}  // namespace troupe

namespace troupe::cuda {

enum class MatmulEpilogue {
  none,
  // D[i, j] += vec[j]; vec: [N], D's type.
  bias,
  // D[i, j] = gelu(D[i, j] + vec[j]) (tanh approximation); vec: [N], D's type, or null (no bias).
  gelu,
  // vec[i] = sum over k of op(A)[i, k] (overwrites); vec: [M], D's type. cuBLASLt's BGRADB.
  // Not used by linear_backward: a separate column sum is faster (see kernels/cuda/linear.cu).
  row_sums_of_a,
  // Training's fc1: D = gelu(AB + vec) and aux = AB + vec (the GELU's input, which its backward
  // reads); vec optional. cuBLASLt's GELU_AUX(_BIAS).
  gelu_aux,
  // The GELU's backward fused into the GEMM that makes its output gradient: D = AB * gelu'(aux),
  // aux the forward's GELU input. cuBLASLt's DGELU.
  dgelu,
};

// FP8 operands: formats and dequantization scales (f32 [1] on the device); D = a_scale_inv *
// b_scale_inv * op(A) op(B). Hopper takes only trans_a false, trans_b true (K contiguous in both).
struct MatmulFp8 {
  Fp8Format a = Fp8Format::e4m3, b = Fp8Format::e4m3;
  const Tensor* a_scale_inv = nullptr;
  const Tensor* b_scale_inv = nullptr;
};

struct MatmulProblem {
  const Tensor* a = nullptr;
  bool trans_a = false;
  const Tensor* b = nullptr;
  bool trans_b = false;
  const Tensor* d = nullptr;
  float beta = 0.0f;  // 0: overwrite D; 1: accumulate into D
  MatmulEpilogue epilogue = MatmulEpilogue::none;
  const Tensor* vec = nullptr;  // bias or row-sum output (optional for gelu); see MatmulEpilogue
  const Tensor* aux = nullptr;  // gelu_aux (written), dgelu (read): [M, N], D's 16-bit type, N a multiple of 8
  // D = op(A) op(B) + C instead of + beta D (beta must be 0): C [M, N], D's type, may not alias D.
  // A residual add fused into the GEMM that makes the branch.
  const Tensor* c = nullptr;
  const MatmulFp8* fp8 = nullptr;  // FP8 inputs (a and b u8), or null
};

// Enqueues the GEMM on ctx's stream.
void matmul_lt(const Context& ctx, const MatmulProblem& p);
// Enqueues it on one of ctx's side streams instead (kernels/cuda/stream_fork.cuh), with the
// lane's own workspace: its size is ctx's, so the GEMM runs the algorithm it runs on ctx's stream
// and gives the same bits.
void matmul_lt(const Context& ctx, const MatmulProblem& p, const StreamLane& lane);

// Times the heuristic's first `candidates` algorithms for this problem (`reps` runs each,
// synchronizing ctx's stream) and caches the fastest for later matmul_lt calls. D (and vec)
// end up with unspecified contents. Returns the median milliseconds of each candidate in
// heuristic order (the first is the untuned choice).
std::vector<float> matmul_lt_tune(const Context& ctx, const MatmulProblem& p, int candidates = 8, int reps = 10);

// What matmul_lt_search found.
struct MatmulSearch {
  int configs = 0;         // configurations cuBLASLt accepted for the problem (algorithm, tile, stages, ...)
  int timed = 0;           // of them, how many were timed
  float heuristic_ms = 0;  // the heuristic's first choice
  float best_ms = 0;       // the fastest timed configuration (cached for later matmul_lt calls)
  std::string best;        // its description
  double list_s = 0;       // host seconds spent listing the configurations
  double time_s = 0;       // and timing them
};

// Like matmul_lt_tune, but beyond the heuristic's candidates: every algorithm cuBLASLt lists
// for the types, with each tile, cluster shape and swizzle it takes for the problem
// (cublasLtMatmulAlgoCheck) and the stage counts it sizes itself (the "x AUTO" ones, where it
// lists any), an even sample of up to `max_timed` timed (`reps` rounds of one call), then the
// fastest eight again beside the heuristic's choice (`reps` rounds of 8 calls back to back);
// the fastest of those is cached where it is at least 3% faster than the heuristic's. A second or
// two per problem on an H100; D, vec and aux end up with unspecified contents.
MatmulSearch matmul_lt_search(const Context& ctx, const MatmulProblem& p, int max_timed = 256, int reps = 2);

// matmul_lt, except that the first time a problem comes (matmul_lt's cache key) it is searched
// (matmul_lt_search) rather than taken from the heuristic, while searching is on: where the
// heuristic's first choice is known to be poor (training's DGELU epilogue: 0.71 ms searched
// down to 0.44 on an H100 at GPT-2 350M's fc2 input gradient). Only for problems whose every
// output the call overwrites (beta 0, no output aliasing an input): the search runs it in place.
// Off with TROUPE_GEMM_SEARCH=off, under a ScopedGemmSearch(false) (--deterministic-mode: the
// choice comes from a timing, so bits could differ between runs) and in stream capture.
void matmul_lt_searched(const Context& ctx, const MatmulProblem& p);

// Whether matmul_lt_searched searches: TROUPE_GEMM_SEARCH (on | off; unset: on) unless a
// ScopedGemmSearch lives. Refuses other values.
bool gemm_search_on();
// Turns matmul_lt_searched's search on or off for the process while it lives; restores the
// previous state.
class ScopedGemmSearch {
 public:
  explicit ScopedGemmSearch(bool on);
  ~ScopedGemmSearch();
  ScopedGemmSearch(const ScopedGemmSearch&) = delete;
  ScopedGemmSearch& operator=(const ScopedGemmSearch&) = delete;

 private:
  int previous_;
};

}  // namespace troupe::cuda
