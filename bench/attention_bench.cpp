// Times the CUDA causal attention forward and backward (bf16) and prints ms and TFLOP/s.
// Causal FLOPs: forward 2 B H T^2 D (half of the full 4 B H T^2 D), backward 2.5x that.
// bench/attention_torch_reference.py times torch's SDPA flash kernel on the same shapes.
//
//   attention_bench [--iters 50]
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <random>

#include "kernels/attention.hpp"

namespace {

using troupe::Context;
using troupe::DType;
using troupe::Tensor;

struct BenchCase {
  int64_t B, T;
  int H, G, D;
};

Tensor random_device(const Context& ctx, troupe::Shape shape, uint64_t seed) {
  Tensor h = Tensor::host(DType::f32, std::move(shape));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < h.numel(); ++i) h.data_as<float>()[i] = normal(rng);
  return troupe::to_device(ctx, h, DType::bf16);
}

// Mean milliseconds per call of f over `iters` calls, after a few warm-up calls.
template <typename F>
double time_ms(const Context& ctx, int iters, F&& f) {
  for (int i = 0; i < 3; ++i) f();
  ctx.synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) f();
  ctx.synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / iters;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Causal attention forward/backward timings (bf16)"};
  int iters = 50;
  app.add_option("--iters", iters, "timed calls per measurement");
  CLI11_PARSE(app, argc, argv);
  if (!troupe::cuda_available()) {
    std::printf("attention_bench: no CUDA device\n");
    return 77;
  }
  const Context ctx = Context::cuda(0);
  const BenchCase cases[] = {
      {16, 1024, 12, 12, 64},  // GPT-2 124M
      {8, 1024, 16, 16, 64},   // GPT-2 350M
      {4, 2048, 32, 8, 128},   // Llama-style GQA
  };
  for (const BenchCase& c : cases) {
    const troupe::AttentionConfig cfg{c.H, c.G, c.D};
    const Tensor qkv = random_device(ctx, {c.B, c.T, int64_t(c.H + 2 * c.G) * c.D}, 1);
    const Tensor dout = random_device(ctx, {c.B, c.T, int64_t(c.H) * c.D}, 2);
    const Tensor out = Tensor::empty(ctx, DType::bf16, dout.shape());
    const Tensor lse = Tensor::empty(ctx, DType::f32, {c.B, c.H, c.T});
    const Tensor dqkv = Tensor::empty(ctx, DType::bf16, qkv.shape());
    const double fwd = time_ms(ctx, iters, [&] { troupe::attention_forward(ctx, qkv, cfg, out, lse); });
    const double bwd = time_ms(ctx, iters, [&] { troupe::attention_backward(ctx, dout, qkv, out, lse, cfg, dqkv); });
    const double fwd_flop = 2.0 * c.B * c.H * double(c.T) * c.T * c.D;
    std::printf("B=%-3lld T=%-5lld H=%-3d G=%-3d D=%-4d fwd %7.3f ms %6.1f TFLOP/s   bwd %7.3f ms %6.1f TFLOP/s\n",
                (long long)c.B, (long long)c.T, c.H, c.G, c.D, fwd, fwd_flop / fwd * 1e-9, bwd,
                2.5 * fwd_flop / bwd * 1e-9);
  }
  return 0;
}
