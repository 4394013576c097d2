// GEMM throughput of the linear layer on CUDA, on GPT-2 124M's shapes: forward (with the bias
// epilogue), dx, dw (f32, accumulating), the bias gradient, and dw with cuBLASLt's BGRADB
// epilogue for comparison. CUDA-event timings, median of --reps after warm-up. With --tune,
// each GEMM is then autotuned (matmul_lt_tune) and timed again. --json writes the numbers for
// bench/gemm_torch_reference.py, which times the same GEMMs in PyTorch and prints the ratios.
//
// --square N times one N x N x N GEMM instead and prints its throughput as the device's matmul
// peak (the MFU denominator of bench/three_d_scaling.sh).
//
//   gemm_bench [--m 16384] [--dtype bf16] [--reps 20] [--tune] [--json out.json]
//   gemm_bench --square 8192   # "matmul peak: 812.3 TFLOP/s (bf16, 8192^3, best of fwd/dx/dw)"
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "kernels/linear.hpp"

#if TROUPE_HAVE_CUDA
#include "kernels/cuda/cuda_state.cuh"
#include "kernels/cuda/gemm_lt.hpp"
#endif

namespace {

// One linear layer of GPT-2 124M: x[M, K] -> y[M, N].
struct GemmShape {
  const char* name;
  int64_t k, n;
  bool bias;
  int per_step;  // how many a forward pass runs (12 layers; one output layer)
};

constexpr GemmShape kGpt2Shapes[] = {
    {"attn_qkv", 768, 2304, true, 12}, {"attn_proj", 768, 768, true, 12}, {"mlp_fc", 768, 3072, true, 12},
    {"mlp_proj", 3072, 768, true, 12}, {"lm_head", 768, 50304, false, 1},
};

#if TROUPE_HAVE_CUDA
using troupe::Context;
using troupe::DType;
using troupe::Tensor;
using troupe::cuda::MatmulEpilogue;
using troupe::cuda::MatmulProblem;

// Fills t with U(-scale, scale) values: a random host block copied over the whole tensor
// (random data, not zeros: GEMM clocks and power depend on the values).
void fill_random(const Context& ctx, const Tensor& t, uint64_t seed, float scale) {
  const int64_t n = t.numel(), block = std::min<int64_t>(n, int64_t(1) << 22);
  Tensor host = Tensor::host(DType::f32, {block});
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  for (int64_t i = 0; i < block; ++i) host.data_as<float>()[i] = u(rng);
  const Tensor dev = troupe::to_device(ctx, host, t.dtype());
  const Tensor flat = t.view({n});
  for (int64_t off = 0; off < n; off += block) {
    const int64_t len = std::min(block, n - off);
    troupe::copy(ctx, dev.slice(0, {len}), flat.slice(off, {len}));
  }
}

// Median milliseconds of `reps` runs of fn on ctx's stream, after 3 warm-up runs.
float median_ms(const Context& ctx, int reps, const std::function<void()>& fn) {
  cudaStream_t stream = troupe::cuda::stream_of(ctx);
  cudaEvent_t start, stop;
  TROUPE_CUDA_CHECK(cudaEventCreate(&start));
  TROUPE_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) fn();
  std::vector<float> ms(static_cast<size_t>(reps));
  for (float& t : ms) {
    TROUPE_CUDA_CHECK(cudaEventRecord(start, stream));
    fn();
    TROUPE_CUDA_CHECK(cudaEventRecord(stop, stream));
    TROUPE_CUDA_CHECK(cudaEventSynchronize(stop));
    TROUPE_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
  }
  TROUPE_CUDA_CHECK(cudaEventDestroy(start));
  TROUPE_CUDA_CHECK(cudaEventDestroy(stop));
  std::nth_element(ms.begin(), ms.begin() + reps / 2, ms.end());
  return ms[size_t(reps / 2)];
}

double tflops(int64_t m, int64_t k, int64_t n, float ms) { return 2.0 * double(m) * k * n / (ms * 1e-3) / 1e12; }

std::string candidates_str(const std::vector<float>& ms) {
  std::string s;
  for (float v : ms) s += troupe::str_cat(s.empty() ? "" : " ", v);
  return s;
}

nlohmann::json bench_shape(const Context& ctx, const GemmShape& shape, int64_t m, DType t, int reps, bool tune) {
  const int64_t k = shape.k, n = shape.n;
  Tensor x = Tensor::empty(ctx, t, {m, k}), w = Tensor::empty(ctx, t, {n, k}), b = Tensor::empty(ctx, t, {n});
  Tensor y = Tensor::empty(ctx, t, {m, n}), dy = Tensor::empty(ctx, t, {m, n}), dx = Tensor::empty(ctx, t, {m, k});
  Tensor dw = Tensor::zeros(ctx, DType::f32, {n, k}), db = Tensor::zeros(ctx, DType::f32, {n});
  Tensor db_scratch = Tensor::zeros(ctx, DType::f32, {n});
  fill_random(ctx, x, 1, 1.0f);
  fill_random(ctx, w, 2, 0.05f);
  fill_random(ctx, b, 3, 0.1f);
  fill_random(ctx, dy, 4, 1e-3f);
  const Tensor bias = shape.bias ? b : Tensor();

  // The same problems linear_forward / linear_backward hand to matmul_lt.
  MatmulProblem fwd{&x, false, &w, true, &y};
  if (shape.bias) {
    fwd.epilogue = MatmulEpilogue::bias;
    fwd.vec = &b;
  }
  const MatmulProblem dgrad{&dy, false, &w, false, &dx, 0.0f};
  const MatmulProblem wgrad{&dy, true, &x, false, &dw, 1.0f};
  const MatmulProblem wgrad_bgradb{&dy, true, &x, false, &dw, 1.0f, MatmulEpilogue::row_sums_of_a, &db_scratch};

  auto time_gemms = [&](nlohmann::json& out) {
    out["fwd_ms"] = median_ms(ctx, reps, [&] { troupe::linear_forward(ctx, x, w, bias, y); });
    out["dx_ms"] = median_ms(ctx, reps, [&] { troupe::cuda::matmul_lt(ctx, dgrad); });
    out["dw_ms"] = median_ms(ctx, reps, [&] { troupe::cuda::matmul_lt(ctx, wgrad); });
  };
  nlohmann::json r = {{"name", shape.name}, {"m", m}, {"k", k}, {"n", n}, {"bias", shape.bias},
                      {"per_step", shape.per_step}};
  time_gemms(r);
  if (shape.bias) {
    r["backward_ms"] = median_ms(ctx, reps, [&] { troupe::linear_backward(ctx, dy, x, w, dx, dw, db); });
    r["db_ms"] = r["backward_ms"].get<float>() - r["dx_ms"].get<float>() - r["dw_ms"].get<float>();
    try {
      r["dw_bgradb_ms"] = median_ms(ctx, reps, [&] { troupe::cuda::matmul_lt(ctx, wgrad_bgradb); });
    } catch (const troupe::Error& e) {  // not every cuBLASLt version has BGRADB for this case
      std::printf("%s: dw with BGRADB failed: %s\n", shape.name, e.what());
      r["dw_bgradb_ms"] = -1.0f;
    }
  }
  if (tune) {
    r["fwd_candidates_ms"] = troupe::cuda::matmul_lt_tune(ctx, fwd);
    r["dx_candidates_ms"] = troupe::cuda::matmul_lt_tune(ctx, dgrad);
    r["dw_candidates_ms"] = troupe::cuda::matmul_lt_tune(ctx, wgrad);
    nlohmann::json tuned;
    time_gemms(tuned);
    r["tuned"] = tuned;
  }
  return r;
}

void print_row(const char* label, const nlohmann::json& r, const nlohmann::json& times) {
  const int64_t m = r["m"], k = r["k"], n = r["n"];
  const float f = times["fwd_ms"], dx = times["dx_ms"], dw = times["dw_ms"];
  std::printf("%-10s %-6s M=%-6ld K=%-5ld N=%-6ld  fwd %7.3f ms %6.1f TF/s | dx %7.3f ms %6.1f TF/s | dw %7.3f ms %6.1f TF/s\n",
              r["name"].get<std::string>().c_str(), label, long(m), long(k), long(n), f, tflops(m, k, n, f), dx,
              tflops(m, k, n, dx), dw, tflops(m, k, n, dw));
}
#endif

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Linear-layer GEMM throughput on GPT-2 124M shapes (CUDA)"};
  int64_t m = 16384;
  std::string dtype_name = "bf16", json_path;
  int reps = 20;
  bool tune = false;
  int64_t square = 0;
  app.add_option("--m", m, "rows (tokens = batch x sequence)")->check(CLI::PositiveNumber);
  app.add_option("--square", square, "time one N x N x N GEMM and print the matmul peak instead")
      ->check(CLI::PositiveNumber);
  app.add_option("--dtype", dtype_name, "bf16 or f16");
  app.add_option("--reps", reps, "timed runs per GEMM (the median is reported)")->check(CLI::PositiveNumber);
  app.add_flag("--tune", tune, "also autotune each GEMM and time it again");
  app.add_option("--json", json_path, "write the results here");
  CLI11_PARSE(app, argc, argv);

#if TROUPE_HAVE_CUDA
  try {
    if (!troupe::cuda_available()) {
      std::printf("gemm_bench: no CUDA device visible\n");
      return 1;
    }
    const Context ctx = Context::cuda(0);
    const DType t = troupe::dtype_from_name(dtype_name);
    cudaDeviceProp prop;
    TROUPE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    if (square > 0) {
      const GemmShape shape{"square", square, square, false, 0};
      const nlohmann::json r = bench_shape(ctx, shape, square, t, reps, false);
      print_row("", r, r);
      const double peak = std::max({tflops(square, square, square, r["fwd_ms"].get<float>()),
                                    tflops(square, square, square, r["dx_ms"].get<float>()),
                                    tflops(square, square, square, r["dw_ms"].get<float>())});
      std::printf("matmul peak: %.1f TFLOP/s (%s, %ld^3, best of fwd/dx/dw, %s)\n", peak, dtype_name.c_str(),
                  long(square), prop.name);
      return 0;
    }
    nlohmann::json out = {{"device", prop.name}, {"dtype", dtype_name}, {"m", m}, {"reps", reps}};
    double step_ms = 0, step_tuned_ms = 0;
    for (const GemmShape& shape : kGpt2Shapes) {
      nlohmann::json r = bench_shape(ctx, shape, m, t, reps, tune);
      print_row("", r, r);
      if (shape.bias)
        std::printf("%-10s        db %.3f ms (column sums, from backward %.3f ms); dw with BGRADB epilogue %.3f ms\n",
                    shape.name, r["db_ms"].get<float>(), r["backward_ms"].get<float>(),
                    r["dw_bgradb_ms"].get<float>());
      const float gemm_ms = r["fwd_ms"].get<float>() + r["dx_ms"].get<float>() + r["dw_ms"].get<float>();
      step_ms += shape.per_step * gemm_ms;
      if (tune) {
        print_row("tuned", r, r["tuned"]);
        std::printf("%-10s        candidates ms: fwd [%s] dx [%s] dw [%s]\n", shape.name,
                    candidates_str(r["fwd_candidates_ms"]).c_str(), candidates_str(r["dx_candidates_ms"]).c_str(),
                    candidates_str(r["dw_candidates_ms"]).c_str());
        const auto& tt = r["tuned"];
        step_tuned_ms += shape.per_step * (tt["fwd_ms"].get<float>() + tt["dx_ms"].get<float>() +
                                           tt["dw_ms"].get<float>());
      }
      out["shapes"].push_back(r);
    }
    out["step_gemm_ms"] = step_ms;
    std::printf("GPT-2 124M step, all linear GEMMs (fwd+dx+dw, M=%ld): %.2f ms", long(m), step_ms);
    if (tune) {
      out["step_gemm_tuned_ms"] = step_tuned_ms;
      std::printf(", tuned %.2f ms", step_tuned_ms);
    }
    std::printf("\n");
    if (!json_path.empty()) {
      std::ofstream f(json_path);
      TROUPE_CHECK(bool(f), "gemm_bench: cannot write ", json_path);
      f << out.dump(2) << "\n";
    }
  } catch (const troupe::Error& e) {
    std::fprintf(stderr, "gemm_bench: %s\n", e.what());
    return 1;
  }
  return 0;
#else
  std::printf("gemm_bench: this build has no CUDA backend\n");
  return 1;
#endif
}
