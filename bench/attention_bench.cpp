// CUDA causal attention forward and backward (bf16) as Google Benchmark cases, on the shapes of
// GPT-2 124M, GPT-2 350M, a Llama-style GQA layer and a Mistral-style long sequence with and
// without a sliding window (Args B, T, H, G, D, W: batch, sequence, query heads, key/value
// heads, head size, window; W = 0 is unbounded). One iteration is kCallsPerEvent (10) back-to-back
// calls between two CUDA events on the context's stream, reported per call (manual time), after
// 3 warm-up calls; a lone call would also time its ~5 us launch. --iters N calls in all
// (default 50, as the reference script times them; 0: as many as --benchmark_min_time needs).
// The counter FLOP is the throughput: causal forward 2 B H T^2 D (half of the full
// 4 B H T^2 D), backward 2.5x that; under a window W < T, 4 B H D times the visible
// (query, key) pairs, W (W + 1) / 2 + (T - W) W.
//
// The ratio to PyTorch comes from bench/attention_torch_reference.py (torch's SDPA flash kernel
// on the same shapes, flex_attention for the windowed one, printed in the same units) run
// beside this on the GPU machine:
//   attention_bench --benchmark_out=attention.json --benchmark_out_format=json
//   python3 bench/attention_torch_reference.py
//
// --backend picks the CUDA attention backend (kernels/cuda/attention_cudnn.hpp): flash (ours),
// cudnn, cudnn-deterministic, or both (flash then cudnn on each shape); cases are named
// attention/<backend>/{forward,backward}. --shapes sdpa runs issue 21's set instead (MHA, causal,
// B16 H12 T1024 D64; B8 H16 T2048 D128; B2 H32 T4096 D128; B1 H32 T8192 D128).
// bench/attention_compare.sh prints ours, cuDNN and PyTorch side by side on it.
//
//   attention_bench [--iters 50] [--backend flash|cudnn|cudnn-deterministic|both]
//                   [--shapes default|sdpa] [--benchmark_* flags]
// Without a GPU every case is skipped ("no GPU").
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <benchmark/benchmark.h>

#include "base/check.hpp"
#include "bench/common/attention_flop.hpp"
#include "bench/common/bench_main.hpp"
#include "bench/common/cuda_timing.hpp"
#include "bench/common/random_tensor.hpp"
#include "kernels/attention.hpp"

#if TROUPE_HAVE_CUDA
#include "kernels/cuda/attention_cudnn.hpp"
#endif

namespace {

using troupe::Context;
using troupe::DType;
using troupe::Tensor;

struct AttentionShape {
  int64_t B, T, H, G, D;
  int64_t W = 0;  // sliding window, 0: unbounded
};

double forward_flop(const AttentionShape& s) {
  return troupe::bench::causal_attention_forward_flop(s.B, s.T, s.H, s.D, s.W);
}

constexpr int kCallsPerEvent = 10;

constexpr AttentionShape kShapes[] = {
    {16, 1024, 12, 12, 64},  // GPT-2 124M
    {8, 1024, 16, 16, 64},   // GPT-2 350M
    {4, 2048, 32, 8, 128},   // Llama-style GQA
    // Mistral-style GQA on a long sequence, unbounded and with a sliding window: with W = T / 8
    // the window does ~1/4 of the causal work, so it should take about a quarter of the time.
    {1, 8192, 32, 8, 128},
    {1, 8192, 32, 8, 128, 1024},
};

// Issue 21's comparison with cuDNN and PyTorch: MHA, causal, T from 1024 to 8192.
constexpr AttentionShape kSdpaShapes[] = {
    {16, 1024, 12, 12, 64},
    {8, 2048, 16, 16, 128},
    {2, 4096, 32, 32, 128},
    {1, 8192, 32, 32, 128},
};

// The CUDA attention backend for the scope of one case (a no-op in builds without CUDA, where
// every case is skipped anyway).
class UseBackend {
 public:
  explicit UseBackend(const std::string& name) {
#if TROUPE_HAVE_CUDA
    scope_.emplace(troupe::cuda::parse_attention_backend(name));
#else
    (void)name;
#endif
  }

 private:
#if TROUPE_HAVE_CUDA
  std::optional<troupe::cuda::ScopedAttentionBackend> scope_;
#endif
};

// The inputs of one case: qkv [B, T, (H + 2G) D] and dout [B, T, H D] random; out [B, T, H D],
// lse f32 [B, H, T] and dqkv like qkv. Forward runs once, so backward sees real out and lse.
struct AttentionTensors {
  AttentionTensors(const Context& ctx, const AttentionShape& s, const troupe::AttentionConfig& cfg)
      : qkv(troupe::bench::random_normal(ctx, DType::bf16, {s.B, s.T, (s.H + 2 * s.G) * s.D}, 1)),
        dout(troupe::bench::random_normal(ctx, DType::bf16, {s.B, s.T, s.H * s.D}, 2)),
        out(Tensor::empty(ctx, DType::bf16, dout.shape())),
        lse(Tensor::empty(ctx, DType::f32, {s.B, s.H, s.T})),
        dqkv(Tensor::empty(ctx, DType::bf16, qkv.shape())),
        window(cfg.window) {
    troupe::attention_forward(ctx, qkv, cfg, out, lse);
  }
  Tensor qkv, dout, out, lse, dqkv;
  int window = 0;  // the window out and lse were computed with
};

// Runs the cases on one GPU. A shape's forward and backward share its tensors, kept until a
// case of another shape comes (or Google Benchmark enters a case again).
class AttentionBench {
 public:
  explicit AttentionBench(const Context* ctx) : ctx_(ctx) {}

  void run(benchmark::State& state, const std::string& backend, bool backward) {
    if (ctx_ == nullptr) {
      state.SkipWithError("no GPU");
      return;
    }
    const Context& ctx = *ctx_;
    const UseBackend use(backend);  // also for the forward that fills out and lse
    const AttentionShape s{state.range(0), state.range(1), state.range(2),
                           state.range(3), state.range(4), state.range(5)};
    const troupe::AttentionConfig cfg{int(s.H), int(s.G), int(s.D), 0.0f, int(s.W)};
    try {
      if (!tensors_ || tensors_->qkv.shape() != troupe::Shape{s.B, s.T, (s.H + 2 * s.G) * s.D} ||
          tensors_->lse.dim(1) != s.H || tensors_->window != cfg.window || tensors_backend_ != backend) {
        tensors_.reset();  // free the last shape's first
        tensors_ = std::make_unique<AttentionTensors>(ctx, s, cfg);
        tensors_backend_ = backend;
      }
    } catch (const troupe::Error& e) {
      state.SkipWithError(e.what());
      return;
    }
    const AttentionTensors& t = *tensors_;
    std::function<void()> call = [&] { troupe::attention_forward(ctx, t.qkv, cfg, t.out, t.lse); };
    if (backward) call = [&] { troupe::attention_backward(ctx, t.dout, t.qkv, t.out, t.lse, cfg, t.dqkv); };
    try {
      for (int i = 0; i < 3; ++i) call();  // warm-up (the cuDNN backend builds its plan here)
      ctx.synchronize();
    } catch (const troupe::Error& e) {
      state.SkipWithError(e.what());
      return;
    }
    troupe::bench::time_on_stream(state, ctx, call, kCallsPerEvent);
    state.counters["FLOP"] =
        benchmark::Counter((backward ? 2.5 : 1.0) * forward_flop(s), benchmark::Counter::kIsIterationInvariantRate);
  }

 private:
  const Context* ctx_;
  std::unique_ptr<AttentionTensors> tensors_;
  std::string tensors_backend_;  // the backend whose forward filled tensors_->out and lse
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Causal (and sliding-window) attention forward/backward (CUDA, bf16), on Google Benchmark"};
  int iters = 50;
  std::string backend = "flash", shape_set = "default";
  app.add_option("--iters", iters, "timed calls per case; 0: as many as --benchmark_min_time needs")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--backend", backend, "CUDA attention backend: flash (ours), cudnn, cudnn-deterministic, or both")
      ->check(CLI::IsMember({"flash", "cudnn", "cudnn-deterministic", "both"}))
      ->capture_default_str();
  app.add_option("--shapes", shape_set, "default (GPT-2, Llama, Mistral) or sdpa (issue 21: MHA, T 1024 to 8192)")
      ->check(CLI::IsMember({"default", "sdpa"}))
      ->capture_default_str();
  return troupe::bench::bench_main(app, argc, argv, "attention_bench", [&] {
    const troupe::bench::Gpu gpu = troupe::bench::gpu_open();
    AttentionBench bench(gpu.ctx.get());
    const std::vector<std::string> backends =
        backend == "both" ? std::vector<std::string>{"flash", "cudnn"} : std::vector<std::string>{backend};
    std::vector<AttentionShape> shapes(std::begin(kShapes), std::end(kShapes));
    if (shape_set == "sdpa") shapes.assign(std::begin(kSdpaShapes), std::end(kSdpaShapes));
    for (const AttentionShape& s : shapes)
      for (const std::string& name : backends)  // forward then backward of a shape, on the same tensors
        for (const bool backward : {false, true}) {
          const std::string label = "attention/" + name + (backward ? "/backward" : "/forward");
          benchmark::internal::Benchmark* b = benchmark::RegisterBenchmark(
              label.c_str(), [&bench, name, backward](benchmark::State& state) { bench.run(state, name, backward); });
          b->Args({s.B, s.T, s.H, s.G, s.D, s.W})->ArgNames({"B", "T", "H", "G", "D", "W"});
          b->UseManualTime()->Unit(benchmark::kMicrosecond);
          if (iters > 0) b->Iterations((iters + kCallsPerEvent - 1) / kCallsPerEvent);
        }
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
  });
}
