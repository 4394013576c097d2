// Where an FP8 linear's time goes on CUDA (issue 21), as Google Benchmark cases on GPT-2 124M's
// linear shapes (M = 16 x 1024 tokens): the pieces Fp8Linears runs (amax, cast, transpose, the
// FP8 GEMMs of the forward, input gradient and weight gradient) and the whole FP8 forward and
// backward, beside the bf16 linear_forward / linear_backward of the same shape. One iteration is
// one call timed with CUDA events on the context's stream (manual time, after a warm-up call).
//
//   fp8_ops_bench [--m 16384] [--benchmark_* flags]
// Without a GPU every case is skipped ("no GPU").
#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <benchmark/benchmark.h>

#include "bench/common/bench_main.hpp"
#include "bench/common/cuda_timing.hpp"
#include "bench/common/random_tensor.hpp"
#include "kernels/fp8.hpp"
#include "kernels/fp8_gemm.hpp"
#include "kernels/linear.hpp"
#include "model/fp8/fp8_linears.hpp"

namespace {

using troupe::Context;
using troupe::DType;
using troupe::Fp8Format;
using troupe::Tensor;

struct Shape {
  const char* name;
  int64_t k, n;
};

constexpr Shape kShapes[] = {
    {"attn_qkv", 768, 2304}, {"attn_proj", 768, 768}, {"mlp_fc", 768, 3072}, {"mlp_proj", 3072, 768}};

// One linear x[M, K] -> y[M, N] in bf16 with its FP8 state (hybrid, delayed: the scales of a
// first step's amaxes), and byte buffers for the pieces.
struct Linear {
  Linear(const Context& ctx, int64_t m, int64_t k, int64_t n)
      : x(troupe::bench::random_normal(ctx, DType::bf16, {m, k}, 1)),
        w(troupe::bench::random_normal(ctx, DType::bf16, {n, k}, 2, 0.0f, 0.02f)),
        b(troupe::bench::random_normal(ctx, DType::bf16, {n}, 3, 0.0f, 0.1f)),
        dy(troupe::bench::random_normal(ctx, DType::bf16, {m, n}, 4, 0.0f, 1e-3f)),
        y(Tensor::empty(ctx, DType::bf16, {m, n})),
        dx(Tensor::empty(ctx, DType::bf16, {m, k})),
        dw(Tensor::zeros(ctx, DType::f32, {n, k})),
        db(Tensor::zeros(ctx, DType::f32, {n})),
        qx(Tensor::empty(ctx, DType::u8, {m, k})),
        qxt(Tensor::empty(ctx, DType::u8, {k, m})),
        qw(Tensor::empty(ctx, DType::u8, {n, k})),
        qwt(Tensor::empty(ctx, DType::u8, {k, n})),
        qdy(Tensor::empty(ctx, DType::u8, {m, n})),
        qdyt(Tensor::empty(ctx, DType::u8, {n, m})),
        amax(Tensor::zeros(ctx, DType::f32, {1})),
        scales(Tensor::zeros(ctx, DType::f32, {3, troupe::kFp8ScaleRow})),
        fp8(ctx, troupe::fp8_recipe_from_flags({.format = "hybrid", .recipe = "delayed"}), 1, {}) {
    const Tensor ones = Tensor::host_f32({3, troupe::kFp8ScaleRow}, std::vector<float>(12, 1.0f));
    troupe::copy(ctx, ones, scales);
    fp8.forward(0, x, w, b, y);
    fp8.backward(0, dy, x, w, dx, dw, db);
    fp8.update_scales({});
  }
  Tensor scale(int i) const { return scales.slice(i * troupe::kFp8ScaleRow, {1}); }
  Tensor x, w, b, dy, y, dx, dw, db;
  Tensor qx, qxt, qw, qwt, qdy, qdyt, amax, scales;
  troupe::Fp8Linears fp8;
};

void register_cases(const Context& ctx, int64_t m) {
  for (const Shape& s : kShapes) {
    auto lin = std::make_shared<Linear>(ctx, m, s.k, s.n);
    const auto add = [&](const std::string& what, std::function<void()> call) {
      const std::string name = std::string("fp8/") + s.name + "/" + what;
      benchmark::RegisterBenchmark(name.c_str(),
                                   [&ctx, call](benchmark::State& state) {
                                     call();
                                     troupe::bench::time_on_stream(state, ctx, call, 1);
                                   })
          ->Args({m, s.k, s.n})
          ->ArgNames({"M", "K", "N"})
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    };
    Linear& l = *lin;
    add("amax_x", [&ctx, lin, &l] { troupe::fp8_amax(ctx, l.x, l.amax); });
    add("cast_x", [&ctx, lin, &l] { troupe::fp8_cast(ctx, l.x, l.scale(0), Fp8Format::e4m3, l.qx); });
    add("transpose_x", [&ctx, lin, &l] { troupe::fp8_transpose(ctx, l.qx, l.qxt); });
    add("cast_transpose_x",
        [&ctx, lin, &l] { troupe::fp8_cast_transpose(ctx, l.x, l.scale(0), Fp8Format::e4m3, Tensor(), l.qxt); });
    add("cast_dy", [&ctx, lin, &l] { troupe::fp8_cast(ctx, l.dy, l.scale(2), Fp8Format::e5m2, l.qdy); });
    add("gemm_fwd", [&ctx, lin, &l] {
      troupe::fp8_gemm(ctx, {l.qx, Fp8Format::e4m3, l.scale(0)}, {l.qw, Fp8Format::e4m3, l.scale(1)}, l.y, 0.0f, l.b);
    });
    add("gemm_dx", [&ctx, lin, &l] {
      troupe::fp8_gemm(ctx, {l.qdy, Fp8Format::e5m2, l.scale(2)}, {l.qwt, Fp8Format::e4m3, l.scale(1)}, l.dx);
    });
    add("gemm_dw", [&ctx, lin, &l] {
      troupe::fp8_gemm(ctx, {l.qdyt, Fp8Format::e5m2, l.scale(2)}, {l.qxt, Fp8Format::e4m3, l.scale(0)}, l.dw, 1.0f);
    });
    add("fp8_forward", [lin, &l] { l.fp8.forward(0, l.x, l.w, l.b, l.y); });
    add("fp8_backward", [lin, &l] { l.fp8.backward(0, l.dy, l.x, l.w, l.dx, l.dw, l.db); });
    add("bf16_forward", [&ctx, lin, &l] { troupe::linear_forward(ctx, l.x, l.w, l.b, l.y); });
    add("bf16_backward", [&ctx, lin, &l] { troupe::linear_backward(ctx, l.dy, l.x, l.w, l.dx, l.dw, l.db); });
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"FP8 linear pieces against bf16 on GPT-2 124M's shapes (CUDA), on Google Benchmark"};
  int64_t m = 16384;
  app.add_option("--m", m, "tokens per GEMM (micro-batch x sequence)");
  return troupe::bench::bench_main(app, argc, argv, "fp8_ops_bench", [&] {
    const troupe::bench::Gpu gpu = troupe::bench::gpu_open();
    if (gpu.ctx) register_cases(*gpu.ctx, m);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
  });
}
