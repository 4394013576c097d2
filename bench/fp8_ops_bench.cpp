// Where an FP8 linear's time goes on CUDA (issue 21), as Google Benchmark cases on GPT-2 124M's
// linear shapes (M = 16 x 1024 tokens): the pieces Fp8Linears runs (amax, cast, transpose, the
// FP8 GEMMs of the forward, input gradient and weight gradient; the casts folding the amax) and
// the whole FP8 forward and backward with fused casts and without (Fp8Recipe::fuse_casts), and
// for the linears a LayerNorm feeds (qkv, fc1) the norm and forward together, the norm writing
// the input cast or not, beside the bf16 linear_forward / linear_backward of the same shape. One iteration is
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
#include "kernels/norm.hpp"
#include "model/fp8/fp8_linears.hpp"

namespace {

using troupe::Context;
using troupe::DType;
using troupe::Fp8Format;
using troupe::Tensor;

struct Shape {
  const char* name;
  int64_t k, n;
  bool after_norm;  // the layer's input is a LayerNorm's output
};

constexpr Shape kShapes[] = {{"attn_qkv", 768, 2304, true},
                             {"attn_proj", 768, 768, false},
                             {"mlp_fc", 768, 3072, true},
                             {"mlp_proj", 3072, 768, false}};

troupe::Fp8Recipe hybrid_delayed(bool fused) {
  troupe::Fp8Recipe r = troupe::fp8_recipe_from_flags({.format = "hybrid", .recipe = "delayed"});
  r.fuse_casts = fused;
  return r;
}

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
        ln_w(troupe::bench::random_normal(ctx, DType::bf16, {k}, 5, 1.0f, 0.1f)),
        ln_b(troupe::bench::random_normal(ctx, DType::bf16, {k}, 6, 0.0f, 0.1f)),
        mean(Tensor::empty(ctx, DType::f32, {m})),
        rstd(Tensor::empty(ctx, DType::f32, {m})),
        fp8(ctx, hybrid_delayed(true), 1, {}),
        fp8_unfused(ctx, hybrid_delayed(false), 1, {}) {
    const Tensor ones = Tensor::host_f32({3, troupe::kFp8ScaleRow}, std::vector<float>(12, 1.0f));
    troupe::copy(ctx, ones, scales);
    for (troupe::Fp8Linears* f : {&fp8, &fp8_unfused}) {
      f->forward(0, x, w, b, y);
      f->backward(0, dy, x, w, dx, dw, db);
      f->update_scales({});
    }
  }
  Tensor scale(int i) const { return scales.slice(i * troupe::kFp8ScaleRow, {1}); }
  // x = LayerNorm(x) (in place: x's values stay normalized-looking), its cast for the forward
  // written in the norm's pass when `fused`.
  void norm_then_forward(const Context& ctx, bool fused) {
    troupe::Fp8Linears& f = fused ? fp8 : fp8_unfused;
    const troupe::Fp8SideOutput cast = f.input_cast(0, x.shape(), true);
    troupe::layernorm_forward(ctx, x, ln_w, ln_b, 1e-5f, x, mean, rstd, cast);
    f.forward(0, x, w, b, y, true, cast);
  }
  Tensor x, w, b, dy, y, dx, dw, db;
  Tensor qx, qxt, qw, qwt, qdy, qdyt, amax, scales;
  Tensor ln_w, ln_b, mean, rstd;  // a LayerNorm in front (after_norm shapes)
  troupe::Fp8Linears fp8, fp8_unfused;
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
    add("cast_amax_x", [&ctx, lin, &l] { troupe::fp8_cast(ctx, l.x, l.scale(0), Fp8Format::e4m3, l.qx, l.amax); });
    add("cast_transpose_amax_dy",
        [&ctx, lin, &l] { troupe::fp8_cast_transpose(ctx, l.dy, l.scale(2), Fp8Format::e5m2, l.qdy, l.qdyt, l.amax); });
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
    add("fp8_forward_unfused", [lin, &l] { l.fp8_unfused.forward(0, l.x, l.w, l.b, l.y); });
    add("fp8_backward", [lin, &l] { l.fp8.backward(0, l.dy, l.x, l.w, l.dx, l.dw, l.db); });
    add("fp8_backward_unfused", [lin, &l] { l.fp8_unfused.backward(0, l.dy, l.x, l.w, l.dx, l.dw, l.db); });
    if (s.after_norm) {
      add("layernorm_fp8_forward", [&ctx, lin, &l] { l.norm_then_forward(ctx, true); });
      add("layernorm_fp8_forward_unfused", [&ctx, lin, &l] { l.norm_then_forward(ctx, false); });
    }
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
