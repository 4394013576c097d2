// LayerNorm and RMSNorm (kernels/norm.hpp), forward and backward, on the CPU (f32) and on CUDA
// (bf16), as Google Benchmark cases over [N, C] rows: N = batch x sequence tokens, C = hidden
// size of GPT-2 124M, GPT-2 350M (at the micro batches they train best at, and smaller) and a
// Llama-style 4096-wide model, and a decode step's 64 rows. Names are
// <norm>/<pass>/<device>/N:../C:.. .
//
// Norms are memory-bound, so the counter is bytes moved per second: forward reads x and writes
// y (2 N C elements), backward reads dy and x and updates dx in place (4 N C); the [C] weights
// and the f32 [N] mean/rstd are left out. Compare `bytes` with the device's memory bandwidth
// (H100 SXM 3.35 TB/s, H200 4.8 TB/s), and CUDA with the CPU. The CPU cases use wall time; on
// CUDA an iteration is the mean of kCallsPerEvent back-to-back calls between two CUDA events
// (manual time; a single call of a few microseconds would mostly time its launch).
//
//   norm_bench [--benchmark_filter=cpu] [--benchmark_* flags]
// Without a GPU the CUDA cases are skipped ("no GPU").
#include <functional>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <benchmark/benchmark.h>

#include "base/check.hpp"
#include "bench/common/bench_main.hpp"
#include "bench/common/cuda_timing.hpp"
#include "bench/common/random_tensor.hpp"
#include "kernels/norm.hpp"

namespace {

using troupe::Context;
using troupe::DType;
using troupe::Tensor;
using troupe::bench::random_normal;

struct NormShape {
  int64_t n, c;  // rows (tokens), channels
};

constexpr NormShape kShapes[] = {
    {64 * 1024, 768},   // GPT-2 124M, micro-batch 64 x 1024 (its best in training)
    {32 * 1024, 1024},  // GPT-2 350M, 32 x 1024 (likewise)
    {16 * 1024, 768},   // GPT-2 124M, micro-batch 16
    {4 * 2048, 4096},   // Llama-style, 4 x 2048
    {64, 768},          // a decode step of GPT-2 124M at batch 64
};

enum class Norm { layernorm, rmsnorm };
enum class Pass { forward, backward };

constexpr int kCallsPerEvent = 10;
constexpr float kEps = 1e-5f;

// One norm layer's tensors on ctx: x, y, dy, dx [N, C]; w, b [C]; mean, rstd f32 [N]; dw, db f32 [C].
struct NormTensors {
  NormTensors(const Context& ctx, DType t, const NormShape& s)
      : x(random_normal(ctx, t, {s.n, s.c}, 1, 0.0f, 1.0f)),
        y(Tensor::empty(ctx, t, {s.n, s.c})),
        dy(random_normal(ctx, t, {s.n, s.c}, 2, 0.0f, 1e-2f)),
        dx(Tensor::zeros(ctx, t, {s.n, s.c})),
        w(random_normal(ctx, t, {s.c}, 3, 1.0f, 0.1f)),
        b(random_normal(ctx, t, {s.c}, 4, 0.0f, 0.1f)),
        mean(Tensor::empty(ctx, DType::f32, {s.n})),
        rstd(Tensor::empty(ctx, DType::f32, {s.n})),
        dw(Tensor::zeros(ctx, DType::f32, {s.c})),
        db(Tensor::zeros(ctx, DType::f32, {s.c})) {}
  Tensor x, y, dy, dx, w, b, mean, rstd, dw, db;
};

// The call a case times. Backward accumulates into dx, dw and db, as in the model.
std::function<void()> norm_call(const Context& ctx, const NormTensors& t, Norm norm, Pass pass) {
  if (norm == Norm::layernorm && pass == Pass::forward)
    return [&] { troupe::layernorm_forward(ctx, t.x, t.w, t.b, kEps, t.y, t.mean, t.rstd); };
  if (norm == Norm::layernorm)
    return [&] { troupe::layernorm_backward(ctx, t.dy, t.x, t.w, t.mean, t.rstd, t.dx, t.dw, t.db); };
  if (pass == Pass::forward) return [&] { troupe::rmsnorm_forward(ctx, t.x, t.w, kEps, t.y, t.rstd); };
  return [&] { troupe::rmsnorm_backward(ctx, t.dy, t.x, t.w, t.rstd, t.dx, t.dw); };
}

// Runs the cases of one device. The four cases of a shape share its tensors, kept until a
// case of another shape comes; Google Benchmark enters a case several times (growing
// iteration counts) and finds them there.
class NormBench {
 public:
  NormBench(const Context* ctx, DType dtype) : ctx_(ctx), dtype_(dtype) {}

  void run(benchmark::State& state, Norm norm, Pass pass) {
    if (ctx_ == nullptr) {
      state.SkipWithError("no GPU");
      return;
    }
    const Context& ctx = *ctx_;
    const NormShape shape{state.range(0), state.range(1)};
    std::function<void()> call;
    try {
      if (!tensors_ || tensors_->x.shape() != troupe::Shape{shape.n, shape.c}) {
        tensors_.reset();  // free the last shape's first
        tensors_ = std::make_unique<NormTensors>(ctx, dtype_, shape);
        troupe::layernorm_forward(ctx, tensors_->x, tensors_->w, tensors_->b, kEps, tensors_->y, tensors_->mean,
                                  tensors_->rstd);  // backward's saved statistics
      }
      call = norm_call(ctx, *tensors_, norm, pass);
      call();  // warm-up (Google Benchmark's growing runs before the reported one warm up too)
      ctx.synchronize();
    } catch (const troupe::Error& e) {
      state.SkipWithError(e.what());
      return;
    }
    if (ctx.is_cuda()) {
      troupe::bench::time_on_stream(state, ctx, call, kCallsPerEvent);
    } else {
      for (auto _ : state) call();
    }
    const double elements = (pass == Pass::forward ? 2.0 : 4.0) * double(shape.n) * double(shape.c);
    state.counters["bytes"] = benchmark::Counter(elements * double(troupe::dtype_size(dtype_)),
                                                 benchmark::Counter::kIsIterationInvariantRate);
  }

 private:
  const Context* ctx_;
  DType dtype_;
  std::unique_ptr<NormTensors> tensors_;
};

void add_cases(NormBench& bench, const char* device, bool cuda) {
  for (const NormShape& s : kShapes)
    for (const Norm norm : {Norm::layernorm, Norm::rmsnorm})
      for (const Pass pass : {Pass::forward, Pass::backward}) {
        const std::string name = std::string(norm == Norm::layernorm ? "layernorm/" : "rmsnorm/") +
                                 (pass == Pass::forward ? "forward/" : "backward/") + device;
        benchmark::internal::Benchmark* b = benchmark::RegisterBenchmark(
            name.c_str(), [&bench, norm, pass](benchmark::State& state) { bench.run(state, norm, pass); });
        b->Args({s.n, s.c})->ArgNames({"N", "C"});
        if (cuda)
          b->UseManualTime()->Unit(benchmark::kMicrosecond);
        else
          b->UseRealTime()->Unit(benchmark::kMillisecond);
      }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"LayerNorm and RMSNorm forward/backward (CPU f32, CUDA bf16), on Google Benchmark"};
  return troupe::bench::bench_main(app, argc, argv, "norm_bench", [&] {
    const Context cpu = Context::cpu();
    const troupe::bench::Gpu gpu = troupe::bench::gpu_open();
    NormBench cpu_bench(&cpu, DType::f32), cuda_bench(gpu.ctx.get(), DType::bf16);
    add_cases(cpu_bench, "cpu", false);
    add_cases(cuda_bench, "cuda", true);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
  });
}
