// GEMM throughput of the linear layer on CUDA (cuBLASLt), on GPT-2's shapes (--hidden 768: 124M,
// 1024: 350M), as Google Benchmark cases. Per shape: the forward (with the bias epilogue), dx,
// dw (f32, accumulating), the whole linear_backward (dx + dw + the bias's column sums) and dw
// with cuBLASLt's BGRADB epilogue for comparison; then training's fused GEMMs where the model
// runs them (fwd_gelu_aux, dx_dgelu: both paths of the GELU's input gradient, fwd_residual,
// dw_db; see GemmOp). One iteration is one call timed with CUDA events on the context's
// stream (manual time, after 3 warm-up calls), --reps calls per case (default 20, as the
// reference script times them). A sustained run (--reps 0: as many as --benchmark_min_time
// needs) reads slower: under continuous GEMMs an H100 lowers its clocks at the power limit
// (lm_head ~15%). The counter FLOP is the throughput (2 M K N per GEMM). With --tune each fwd/dx/dw GEMM is then
// autotuned (matmul_lt_tune) and timed again
// (.../tuned, the candidates' medians in the label). After the run: the sum of one GPT-2 124M
// step's linear GEMMs (12 layers x 4 + the output layer, fwd + dx + dw).
//
// --square N times one N x N x N GEMM (fwd, dx, dw) instead and prints the best as the device's
// matmul peak, the MFU denominator of bench/three_d_scaling.sh (which greps this line):
//   matmul peak: 812.3 TFLOP/s (bf16, 8192^3, best of fwd/dx/dw, NVIDIA H200)
//
// The ratio to PyTorch comes from the reference script, on the GPU machine:
//   gemm_bench --benchmark_out=gemm.json --benchmark_out_format=json
//   python3 bench/gemm_torch_reference.py --troupe gemm.json
//
//   gemm_bench [--m 16384] [--dtype bf16] [--reps R] [--tune] [--benchmark_* flags]
//   gemm_bench --square 8192 --reps 30
// Without a GPU every case is skipped ("no GPU").
#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <benchmark/benchmark.h>
#include <unistd.h>

#include "base/check.hpp"
#include "bench/common/bench_main.hpp"
#include "bench/common/cuda_timing.hpp"
#include "kernels/activation.hpp"
#include "kernels/linear.hpp"
#include "kernels/linear_fused.hpp"

#if TROUPE_HAVE_CUDA
#include "kernels/cuda/gemm_lt.hpp"
#endif

namespace {

using troupe::Context;
using troupe::DType;
using troupe::Tensor;

// One linear layer of GPT-2: x[M, K] -> y[M, N].
struct GemmShape {
  const char* name;
  int64_t k, n;
  bool bias;
  int per_step;  // how many a forward pass runs (one a layer; one output layer)
};

// GPT-2's linear layers at hidden size C (12 layers: 124M at 768; 350M has 24 at 1024).
std::vector<GemmShape> gpt2_shapes(int64_t C) {
  const int layers = C == 768 ? 12 : 24;  // --hidden takes only these two
  return {{"attn_qkv", C, 3 * C, true, layers},
          {"attn_proj", C, C, true, layers},
          {"mlp_fc", C, 4 * C, true, layers},
          {"mlp_proj", 4 * C, C, true, layers},
          {"lm_head", C, 50304, false, 1}};
}

// What one case times. The fused ones are training's (kernels/linear_fused.hpp): fwd_gelu_aux
// (fc1 with the GELU and its pre-activation), dx_dgelu (fc2's input gradient times gelu'(x),
// and fc1's bias gradient: the column sums of that),
// fwd_residual (a branch's last GEMM adding the residual), dw_db (the weight and bias
// gradients of linear_backward without dx, as the model runs them).
// dx_dgelu takes the path linear_input_grad_dgelu picks (TROUPE_MLP_DGELU); dx_dgelu_epilogue
// and dx_gelu_apart force each of its two paths.
enum class GemmOp {
  fwd,
  dx,
  dw,
  backward,
  dw_bgradb,
  fwd_gelu_aux,
  dx_dgelu,
  dx_dgelu_epilogue,
  dx_gelu_apart,
  fwd_residual,
  dw_db
};
const char* op_name(GemmOp op) {
  constexpr const char* names[] = {"fwd",           "dx",           "dw",       "backward",
                                   "dw_bgradb",     "fwd_gelu_aux", "dx_dgelu", "dx_dgelu_epilogue",
                                   "dx_gelu_apart", "fwd_residual", "dw_db"};
  return names[int(op)];
}

// Case names: gemm/<shape>/<op>[/tuned], then Google Benchmark's M:../K:../N:.. and /manual_time.
std::string case_name(const char* shape, GemmOp op, bool tuned) {
  return std::string("gemm/") + shape + "/" + op_name(op) + (tuned ? "/tuned" : "");
}

#if TROUPE_HAVE_CUDA
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

// The tensors of one linear layer x[M, K] -> y[M, N], random values.
struct LinearTensors {
  LinearTensors(const Context& ctx, DType t, int64_t m, int64_t k, int64_t n)
      : x(Tensor::empty(ctx, t, {m, k})),
        w(Tensor::empty(ctx, t, {n, k})),
        b(Tensor::empty(ctx, t, {n})),
        y(Tensor::empty(ctx, t, {m, n})),
        y2(Tensor::empty(ctx, t, {m, n})),
        dy(Tensor::empty(ctx, t, {m, n})),
        dx(Tensor::empty(ctx, t, {m, k})),
        dw(Tensor::zeros(ctx, DType::f32, {n, k})),
        db(Tensor::zeros(ctx, DType::f32, {n})),
        db_scratch(Tensor::zeros(ctx, DType::f32, {n})),
        db_k(Tensor::zeros(ctx, DType::f32, {k})) {
    fill_random(ctx, x, 1, 1.0f);
    fill_random(ctx, w, 2, 0.05f);
    fill_random(ctx, b, 3, 0.1f);
    fill_random(ctx, dy, 4, 1e-3f);
    fill_random(ctx, y2, 5, 1.0f);
  }
  Tensor x, w, b;             // [M, K], [N, K], [N]
  Tensor y, y2, dy, dx;       // [M, N] x 3 (y2: the second output, or the residual), [M, K]
  Tensor dw, db, db_scratch;  // f32 [N, K], [N], [N]
  Tensor db_k;                // f32 [K]: the bias gradient dx_dgelu sums (fc1's, where x is fc1's output)
};
#endif

// Runs the cases on one GPU. The cases of a shape run one after another and share its tensors,
// kept until a case of another shape comes (or Google Benchmark enters a case again).
class GemmBench {
 public:
  GemmBench(const Context* ctx, DType dtype, bool search) : ctx_(ctx), dtype_(dtype), search_(search) {}

  void run(benchmark::State& state, const GemmShape& shape, GemmOp op, bool tuned) {
    if (ctx_ == nullptr) {
      state.SkipWithError("no GPU");
      return;
    }
#if TROUPE_HAVE_CUDA
    const Context& ctx = *ctx_;
    const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
    const LinearTensors* tensors_of_shape = nullptr;
    try {
      tensors_of_shape = &tensors(m, k, n);
    } catch (const troupe::Error& e) {  // out of memory, say
      state.SkipWithError(e.what());
      return;
    }
    const LinearTensors& t = *tensors_of_shape;
    const Tensor bias = shape.bias ? t.b : Tensor();
    // The same problems linear_forward / linear_backward hand to matmul_lt.
    MatmulProblem fwd{&t.x, false, &t.w, true, &t.y};
    if (shape.bias) {
      fwd.epilogue = MatmulEpilogue::bias;
      fwd.vec = &t.b;
    }
    const MatmulProblem dgrad{&t.dy, false, &t.w, false, &t.dx, 0.0f};
    const MatmulProblem wgrad{&t.dy, true, &t.x, false, &t.dw, 1.0f};
    MatmulProblem dgelu{&t.dy, false, &t.w, false, &t.dx, 0.0f, MatmulEpilogue::dgelu};
    dgelu.aux = &t.x;
    const MatmulProblem wgrad_bgradb{&t.dy,        true, &t.x, false, &t.dw, 1.0f, MatmulEpilogue::row_sums_of_a,
                                     &t.db_scratch};
    const std::map<GemmOp, std::function<void()>> calls = {
        {GemmOp::fwd, [&] { troupe::linear_forward(ctx, t.x, t.w, bias, t.y); }},
        {GemmOp::dx, [&] { troupe::cuda::matmul_lt(ctx, dgrad); }},
        {GemmOp::dw, [&] { troupe::cuda::matmul_lt(ctx, wgrad); }},
        {GemmOp::backward, [&] { troupe::linear_backward(ctx, t.dy, t.x, t.w, t.dx, t.dw, t.db); }},
        {GemmOp::dw_bgradb, [&] { troupe::cuda::matmul_lt(ctx, wgrad_bgradb); }},
        {GemmOp::fwd_gelu_aux, [&] { troupe::linear_gelu_aux_forward(ctx, t.x, t.w, bias, t.y, t.y2); }},
        {GemmOp::dx_dgelu, [&] { troupe::linear_input_grad_dgelu(ctx, t.dy, t.w, t.x, t.dx, t.db_k); }},
        {GemmOp::dx_dgelu_epilogue,
         [&] {
           troupe::cuda::matmul_lt(ctx, dgelu);
           troupe::cuda::bias_grad_accumulate(ctx, t.dx, t.db_k);
         }},
        {GemmOp::dx_gelu_apart,
         [&] {
           troupe::cuda::matmul_lt(ctx, dgrad);
           troupe::gelu_backward_bias_grad(ctx, t.dx, t.x, t.dx, t.db_k);
         }},
        {GemmOp::fwd_residual, [&] { troupe::linear_residual_forward(ctx, t.x, t.w, bias, t.y2, t.y); }},
        {GemmOp::dw_db, [&] { troupe::linear_backward(ctx, t.dy, t.x, t.w, Tensor(), t.dw, t.db); }},
    };
    const std::function<void()>& call = calls.at(op);
    try {
      if (tuned) {
        MatmulProblem gelu_aux{
            &t.x, false, &t.w, true, &t.y2, 0.0f, MatmulEpilogue::gelu_aux, shape.bias ? &t.b : nullptr};
        gelu_aux.aux = &t.y;
        MatmulProblem residual{&t.x, false, &t.w, true, &t.y, 0.0f, MatmulEpilogue::bias, &t.b};
        residual.c = &t.y2;
        const std::map<GemmOp, MatmulProblem> problems = {
            {GemmOp::fwd, fwd},  {GemmOp::fwd_residual, residual}, {GemmOp::dx, dgrad},
            {GemmOp::dw, wgrad}, {GemmOp::fwd_gelu_aux, gelu_aux}, {GemmOp::dx_dgelu_epilogue, dgelu}};
        state.SetLabel(tune(shape, op, problems.at(op)));
      }
      for (int i = 0; i < 3; ++i) call();  // warm-up; fails here if cuBLASLt lacks BGRADB for this case
      ctx.synchronize();
    } catch (const troupe::Error& e) {
      state.SkipWithError(e.what());
      return;
    }
    troupe::bench::time_on_stream(state, ctx, call, 1);  // a GEMM call is long enough to time alone
    // The bias's column sums are not a GEMM: backward counts the two GEMMs' FLOPs.
    const double gemms = op == GemmOp::backward ? 2.0 : 1.0;
    state.counters["FLOP"] = benchmark::Counter(gemms * 2.0 * double(m) * double(k) * double(n),
                                                benchmark::Counter::kIsIterationInvariantRate);
#else
    (void)shape, (void)op, (void)tuned;
#endif
  }

 private:
#if TROUPE_HAVE_CUDA
  const LinearTensors& tensors(int64_t m, int64_t k, int64_t n) {
    if (!tensors_ || tensors_->x.dim(0) != m || tensors_->x.dim(1) != k || tensors_->w.dim(0) != n) {
      tensors_.reset();  // free the last shape's first
      tensors_ = std::make_unique<LinearTensors>(*ctx_, dtype_, m, k, n);
    }
    return *tensors_;
  }

  // Autotunes the problem once (the choice is cached by matmul_lt); returns the candidates'
  // median milliseconds, for the label.
  std::string tune(const GemmShape& shape, GemmOp op, const MatmulProblem& problem) {
    std::string& label = tuned_[case_name(shape.name, op, true)];
    if (label.empty() && search_) {
      const troupe::cuda::MatmulSearch r = troupe::cuda::matmul_lt_search(*ctx_, problem);
      label = troupe::str_cat("searched ", r.timed, " of ", r.configs, ": heuristic ", r.heuristic_ms, " ms, best ",
                              r.best_ms, " ms (", r.best, "); listed in ", r.list_s, " s, timed in ", r.time_s, " s");
    } else if (label.empty()) {
      label = "candidates ms:";
      for (float ms : troupe::cuda::matmul_lt_tune(*ctx_, problem)) label += troupe::str_cat(" ", ms);
    }
    return label;
  }

  std::unique_ptr<LinearTensors> tensors_;
  std::map<std::string, std::string> tuned_;
#endif
  const Context* ctx_;
  DType dtype_;
  bool search_;
};

// Console output as usual; keeps each case's microseconds and FLOP/s for the summary lines.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  SummaryReporter() : ConsoleReporter(::isatty(STDOUT_FILENO) ? OO_Color : OO_None) {}
  struct Result {
    double us = 0, flops = 0;
  };
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs)
      if (r.run_type == Run::RT_Iteration && !r.error_occurred)
        results_[r.run_name.function_name] = {r.GetAdjustedRealTime(), r.counters.at("FLOP").value};
  }
  const Result* find(const std::string& name) const {
    const auto it = results_.find(name);
    return it == results_.end() ? nullptr : &it->second;
  }

 private:
  std::map<std::string, Result> results_;
};

benchmark::internal::Benchmark* add_case(GemmBench& bench, const GemmShape& shape, int64_t m, GemmOp op, bool tuned) {
  return benchmark::RegisterBenchmark(
             case_name(shape.name, op, tuned).c_str(),
             [&bench, shape, op, tuned](benchmark::State& s) { bench.run(s, shape, op, tuned); })
      ->Args({m, shape.k, shape.n})
      ->ArgNames({"M", "K", "N"})
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
}

// Per layer with a bias: the bias gradient's cost, backward - dx - dw (column sums of dy).
void print_bias_grads(const SummaryReporter& results, const std::vector<GemmShape>& shapes) {
  for (const GemmShape& shape : shapes) {
    const SummaryReporter::Result* backward = results.find(case_name(shape.name, GemmOp::backward, false));
    const SummaryReporter::Result* dx = results.find(case_name(shape.name, GemmOp::dx, false));
    const SummaryReporter::Result* dw = results.find(case_name(shape.name, GemmOp::dw, false));
    if (backward && dx && dw)
      std::printf("%-10s db %.3f ms (column sums: backward %.3f ms - dx - dw)\n", shape.name,
                  (backward->us - dx->us - dw->us) * 1e-3, backward->us * 1e-3);
  }
}

// Prints the sum of one GPT-2 step's linear GEMMs, when every case of it ran.
void print_step(const SummaryReporter& results, const std::vector<GemmShape>& shapes, int64_t m, bool tuned) {
  double step_ms = 0;
  for (const GemmShape& shape : shapes)
    for (GemmOp op : {GemmOp::fwd, GemmOp::dx, GemmOp::dw}) {
      const SummaryReporter::Result* r = results.find(case_name(shape.name, op, tuned));
      if (r == nullptr) return;
      step_ms += shape.per_step * r->us * 1e-3;
    }
  std::printf("GPT-2 step (%d layers, hidden %ld), all linear GEMMs (fwd+dx+dw, M=%ld%s): %.2f ms\n",
              shapes.front().per_step, long(shapes.front().k), long(m), tuned ? ", tuned" : "", step_ms);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Linear-layer GEMM throughput on GPT-2 124M shapes (CUDA), on Google Benchmark"};
  int64_t m = 16384, square = 0, reps = 20, hidden = 768;
  std::string dtype_name = "bf16";
  bool tune = false, search = false;
  app.add_option("--m", m, "rows (tokens = batch x sequence)")->check(CLI::PositiveNumber);
  app.add_option("--hidden", hidden, "GPT-2's hidden size (768: 124M, 1024: 350M)")
      ->check(CLI::IsMember({int64_t(768), int64_t(1024)}));
  app.add_option("--square", square, "time one N x N x N GEMM and print the matmul peak instead")
      ->check(CLI::PositiveNumber);
  app.add_option("--dtype", dtype_name, "bf16 or f16")->check(CLI::IsMember({"bf16", "f16"}));
  app.add_option("--reps", reps, "timed calls per case; 0: as many as --benchmark_min_time needs")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  CLI::Option* tune_flag = app.add_flag("--tune", tune, "also autotune each GEMM and time it again");
  app.add_flag("--search", search, "with --tune: search every configuration cuBLASLt takes, not the heuristic's 8")
      ->needs(tune_flag);
  return troupe::bench::bench_main(app, argc, argv, "gemm_bench", [&] {
    const troupe::bench::Gpu gpu = troupe::bench::gpu_open();
    benchmark::AddCustomContext("dtype", dtype_name);
    GemmBench bench(gpu.ctx.get(), troupe::dtype_from_name(dtype_name), search);
    const GemmShape square_shape{"square", square, square, false, 0};
    std::vector<benchmark::internal::Benchmark*> cases;
    const std::vector<GemmShape> shapes = gpt2_shapes(hidden);
    // The fused GEMMs where training runs them (kernels/linear_fused.hpp).
    const auto fused = [](const GemmShape& shape, GemmOp op) {
      const std::string name = shape.name;
      if (op == GemmOp::fwd_gelu_aux) return name == "mlp_fc";
      if (op == GemmOp::dx_dgelu || op == GemmOp::dx_dgelu_epilogue || op == GemmOp::dx_gelu_apart)
        return name == "mlp_proj";
      if (op == GemmOp::fwd_residual) return name == "mlp_proj" || name == "attn_proj";
      return op == GemmOp::dw_db && shape.bias;
    };
    if (square > 0) {
      for (GemmOp op : {GemmOp::fwd, GemmOp::dx, GemmOp::dw})
        cases.push_back(add_case(bench, square_shape, square, op, false));
    } else {
      for (const GemmShape& shape : shapes) {
        for (GemmOp op : {GemmOp::fwd, GemmOp::dx, GemmOp::dw, GemmOp::backward, GemmOp::dw_bgradb})
          if (shape.bias || (op != GemmOp::backward && op != GemmOp::dw_bgradb))
            cases.push_back(add_case(bench, shape, m, op, false));
        for (GemmOp op : {GemmOp::fwd_gelu_aux, GemmOp::dx_dgelu, GemmOp::dx_dgelu_epilogue, GemmOp::dx_gelu_apart,
                          GemmOp::fwd_residual, GemmOp::dw_db})
          if (fused(shape, op)) cases.push_back(add_case(bench, shape, m, op, false));
      }
      if (tune)  // after every untuned case: tuning changes what matmul_lt picks from then on
        for (const GemmShape& shape : shapes) {
          for (GemmOp op : {GemmOp::fwd, GemmOp::dx, GemmOp::dw}) cases.push_back(add_case(bench, shape, m, op, true));
          for (GemmOp op : {GemmOp::fwd_gelu_aux, GemmOp::dx_dgelu_epilogue, GemmOp::fwd_residual})
            if (fused(shape, op)) cases.push_back(add_case(bench, shape, m, op, true));
        }
    }
    if (reps > 0)
      for (benchmark::internal::Benchmark* c : cases) c->Iterations(reps);

    SummaryReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    benchmark::Shutdown();

    if (square > 0) {
      double peak = 0;
      for (GemmOp op : {GemmOp::fwd, GemmOp::dx, GemmOp::dw})
        if (const SummaryReporter::Result* r = reporter.find(case_name("square", op, false)))
          peak = std::max(peak, r->flops / 1e12);
      if (peak == 0) {
        std::printf("gemm_bench: no matmul peak measured (%s)\n", gpu.name.c_str());
        return 1;
      }
      std::printf("matmul peak: %.1f TFLOP/s (%s, %ld^3, best of fwd/dx/dw, %s)\n", peak, dtype_name.c_str(),
                  long(square), gpu.name.c_str());
      return 0;
    }
    print_bias_grads(reporter, shapes);
    print_step(reporter, shapes, m, false);
    if (tune) print_step(reporter, shapes, m, true);
    return 0;
  });
}
