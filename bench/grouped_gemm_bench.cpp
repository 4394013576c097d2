// Our grouped GEMM (kernels/grouped_linear.hpp: the MoE experts' GEMMs) against ONE dense cuBLAS
// GEMM of the same total work, on the expert GEMMs of bench/moe_train.sh's two models (issue 20).
// A microbatch there is 8 x 512 = 4096 tokens:
//   mixtral:  8 experts, top-2 -> R = 8192 routed rows, C = 512, expert FFN 1024 (SwiGLU fc1: 2048)
//   deepseek: 64 experts, top-6 -> R = 24576 routed rows, C = 512, expert FFN 256 (fc1: 512)
// For each model's fc1 ([R, C] -> [R, F1]) and fc2 ([R, F] -> [R, C]), with the rows split
// evenly over the experts and unevenly (expert g gets rows in proportion to g: expert 0 none, the
// last about twice the mean), it times the forward (grouped_linear_forward against
// linear_forward of [R, K] x [N, K]^T) and the backward (grouped_linear_backward: dx and the f32
// accumulating dw, against linear_backward without a bias) and prints one line per case:
//   grouped deepseek fc1 uneven fwd R=24576 G=64 K=512 N=512: grouped 0.081 ms 79.5 TFLOP/s | dense 0.052 ms ... |
//   grouped/dense 0.64
// The backward "bwd" makes dw the way training does (TROUPE_GROUPED_DW, else the default; the first
// line names it), then once in each way (kernels/grouped_dw_path.hpp), ops bwd-loop, bwd-streams,
// bwd-tf32 and bwd-kernel, so one run compares them; these lines end with the host's enqueue time per call
// (close to the GPU time per call: the launches, not the GPU, set the pace of that way).
// The forward also runs with the offsets on the device (the fixed-grid kernel MoE inference uses
// under CUDA graphs), op "fwd-dev"; and the decode cases (Mixtral 8x7B's expert shapes at 1 and
// 64 tokens, top-2: R = 2 and 128 rows) print, for both forward kernels, the bandwidth of the
// used experts' weights, what bounds a decode step:
//   decode  mixtral  fc1 R=2 G=8 K=4096 N=28672: host offsets T ms B GB/s | device offsets T ms B GB/s
// Time per call: the mean of --reps calls between two CUDA events on the context's stream, after
// 3 warm-up calls. FLOPs: 2 R K N forward, twice that backward.
//
//   grouped_gemm_bench [--reps 20] [--dtype bf16]
// Without a GPU it prints "grouped_gemm_bench: no GPU" and exits 0.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "base/check.hpp"
#include "bench/common/random_tensor.hpp"
#include "kernels/context.hpp"
#include "kernels/grouped_dw_path.hpp"
#include "kernels/grouped_linear.hpp"
#include "kernels/linear.hpp"

#if TROUPE_HAVE_CUDA
#include "kernels/cuda/runtime.hpp"
#endif

namespace {

using troupe::Context;
using troupe::DType;
using troupe::Tensor;

struct ExpertGemm {
  const char* model;
  const char* layer;  // fc1 or fc2
  int64_t groups, rows, k, n;
};

// Decode: routed rows of 1 and 64 tokens, top-2 (Mixtral 8x7B: C 4096, expert FFN 14336).
constexpr ExpertGemm kDecodeCases[] = {
    {"mixtral", "fc1", 8, 2, 4096, 28672},
    {"mixtral", "fc1", 8, 128, 4096, 28672},
    {"mixtral", "fc2", 8, 2, 14336, 4096},
    {"mixtral", "fc2", 8, 128, 14336, 4096},
};

constexpr ExpertGemm kCases[] = {
    {"mixtral", "fc1", 8, 8192, 512, 2048},
    {"mixtral", "fc2", 8, 8192, 1024, 512},
    {"deepseek", "fc1", 64, 24576, 512, 512},
    {"deepseek", "fc2", 64, 24576, 256, 512},
};

// G + 1 row offsets from 0 to rows: even, or expert g's share in proportion to g.
std::vector<int64_t> split_rows(int64_t groups, int64_t rows, bool even) {
  std::vector<int64_t> offsets(size_t(groups) + 1, 0);
  const int64_t total_weight = even ? groups : groups * (groups - 1) / 2;
  int64_t weight = 0;
  for (int64_t g = 0; g < groups; ++g) {
    weight += even ? 1 : g;
    offsets[size_t(g) + 1] = rows * weight / total_weight;
  }
  return offsets;
}

#if TROUPE_HAVE_CUDA
// Mean milliseconds per call of fn over `reps` calls: on ctx's stream (between two events), and
// on the host, the time the calls take to enqueue (about the device's when that is what bounds
// them). After 3 warm-up calls.
struct CallTimes {
  double device_ms, host_ms;
};
CallTimes time_calls(const Context& ctx, const std::function<void()>& fn, int reps) {
  for (int i = 0; i < 3; ++i) fn();
  void* start = troupe::cuda::event_create();
  void* stop = troupe::cuda::event_create();
  troupe::cuda::event_record(ctx, start);
  const auto host_start = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) fn();
  const std::chrono::duration<double, std::milli> host = std::chrono::steady_clock::now() - host_start;
  troupe::cuda::event_record(ctx, stop);
  const double ms = double(troupe::cuda::event_elapsed_ms(start, stop)) / reps;
  troupe::cuda::event_destroy(start);
  troupe::cuda::event_destroy(stop);
  return {ms, host.count() / reps};
}

double time_ms(const Context& ctx, const std::function<void()>& fn, int reps) {
  return time_calls(ctx, fn, reps).device_ms;
}

// host_ms: the grouped calls' enqueue time, printed when given (the bwd-<way> lines).
void print_case(const ExpertGemm& c, bool even, const char* op, double flop, double grouped_ms, double dense_ms,
                double host_ms = -1) {
  std::printf(
      "grouped %-8s %s %-6s %s R=%ld G=%ld K=%ld N=%ld: grouped %.3f ms %.1f TFLOP/s | dense %.3f ms %.1f TFLOP/s | "
      "grouped/dense %.2f",
      c.model, c.layer, even ? "even" : "uneven", op, long(c.rows), long(c.groups), long(c.k), long(c.n), grouped_ms,
      flop / grouped_ms / 1e9, dense_ms, flop / dense_ms / 1e9, dense_ms / grouped_ms);
  if (host_ms >= 0) std::printf(" | host enqueue %.3f ms", host_ms);
  std::printf("\n");
  std::fflush(stdout);
}

// The offsets as an i32 tensor on ctx's device.
Tensor device_offsets(const Context& ctx, const std::vector<int64_t>& offsets) {
  Tensor host = Tensor::host(DType::i32, {int64_t(offsets.size())});
  for (size_t i = 0; i < offsets.size(); ++i) host.data_as<int32_t>()[i] = int32_t(offsets[i]);
  Tensor dev = Tensor::empty(ctx, DType::i32, host.shape());
  troupe::copy(ctx, host, dev);
  ctx.synchronize();
  return dev;
}

// A decode-sized expert GEMM, rows spread evenly (every expert used): both forwards, with the
// used experts' weight bytes per second.
void run_decode_case(const Context& ctx, DType dtype, const ExpertGemm& c, int reps) {
  using troupe::bench::random_normal;
  const Tensor x = random_normal(ctx, dtype, {c.rows, c.k}, 1);
  const Tensor w = random_normal(ctx, dtype, {c.groups, c.n, c.k}, 2, 0.0f, 0.02f);
  const Tensor y = Tensor::empty(ctx, dtype, {c.rows, c.n});
  const std::vector<int64_t> offsets = split_rows(c.groups, c.rows, true);
  const Tensor offsets_dev = device_offsets(ctx, offsets);
  int64_t used = 0;
  for (size_t g = 0; g + 1 < offsets.size(); ++g) used += offsets[g + 1] > offsets[g];
  const double bytes = double(used) * double(c.n) * double(c.k) * double(troupe::dtype_size(dtype));
  const double host_ms = time_ms(
      ctx, [&] { troupe::grouped_linear_forward(ctx, x, w, offsets, y); }, reps);
  const double dev_ms = time_ms(
      ctx, [&] { troupe::grouped_linear_forward(ctx, x, w, offsets_dev, y); }, reps);
  std::printf(
      "decode  %-8s %s R=%ld G=%ld K=%ld N=%ld: host offsets %.3f ms %.0f GB/s | device offsets %.3f ms %.0f GB/s\n",
      c.model, c.layer, long(c.rows), long(c.groups), long(c.k), long(c.n), host_ms, bytes / host_ms / 1e6, dev_ms,
      bytes / dev_ms / 1e6);
  std::fflush(stdout);
}

// Both splits of one expert GEMM, forward and backward, each against the dense GEMM.
void run_case(const Context& ctx, DType dtype, const ExpertGemm& c, int reps) {
  using troupe::bench::random_normal;
  const Tensor x = random_normal(ctx, dtype, {c.rows, c.k}, 1);
  const Tensor w = random_normal(ctx, dtype, {c.groups, c.n, c.k}, 2, 0.0f, 0.02f);
  const Tensor dense_w = random_normal(ctx, dtype, {c.n, c.k}, 3, 0.0f, 0.02f);
  const Tensor dy = random_normal(ctx, dtype, {c.rows, c.n}, 4, 0.0f, 1e-3f);
  const Tensor y = Tensor::empty(ctx, dtype, {c.rows, c.n});
  const Tensor dx = Tensor::empty(ctx, dtype, {c.rows, c.k});
  const Tensor dw = Tensor::zeros(ctx, DType::f32, {c.groups, c.n, c.k});
  const Tensor dense_dw = Tensor::zeros(ctx, DType::f32, {c.n, c.k});
  const double flop = 2.0 * double(c.rows) * double(c.k) * double(c.n);
  const double dense_fwd = time_ms(
      ctx, [&] { troupe::linear_forward(ctx, x, dense_w, Tensor(), y); }, reps);
  const double dense_bwd = time_ms(
      ctx, [&] { troupe::linear_backward(ctx, dy, x, dense_w, dx, dense_dw, Tensor()); }, reps);
  for (bool even : {true, false}) {
    const std::vector<int64_t> offsets = split_rows(c.groups, c.rows, even);
    const double fwd = time_ms(
        ctx, [&] { troupe::grouped_linear_forward(ctx, x, w, offsets, y); }, reps);
    print_case(c, even, "fwd", flop, fwd, dense_fwd);
    const Tensor offsets_dev = device_offsets(ctx, offsets);
    const double fwd_dev = time_ms(
        ctx, [&] { troupe::grouped_linear_forward(ctx, x, w, offsets_dev, y); }, reps);
    print_case(c, even, "fwd-dev", flop, fwd_dev, dense_fwd);
    const double bwd = time_ms(
        ctx, [&] { troupe::grouped_linear_backward(ctx, dy, x, w, offsets, dx, dw); }, reps);
    print_case(c, even, "bwd", 2 * flop, bwd, dense_bwd);
    for (troupe::GroupedDw path :
         {troupe::GroupedDw::loop, troupe::GroupedDw::streams, troupe::GroupedDw::tf32, troupe::GroupedDw::kernel}) {
      const troupe::ScopedGroupedDw use(path);
      const CallTimes t = time_calls(
          ctx, [&] { troupe::grouped_linear_backward(ctx, dy, x, w, offsets, dx, dw); }, reps);
      const std::string op = std::string("bwd-") + troupe::grouped_dw_name(path);
      print_case(c, even, op.c_str(), 2 * flop, t.device_ms, dense_bwd, t.host_ms);
    }
  }
}
#endif

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Grouped GEMM (MoE experts) against one dense cuBLAS GEMM of the same work (CUDA)"};
  int reps = 20;
  std::string dtype_name = "bf16";
  app.add_option("--reps", reps, "timed calls per case")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--dtype", dtype_name, "bf16 or f16")->check(CLI::IsMember({"bf16", "f16"}))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
#if TROUPE_HAVE_CUDA
  if (troupe::cuda_available()) {
    try {
      const Context ctx = Context::cuda(0);
      std::printf("grouped dw (bwd lines; TROUPE_GROUPED_DW or the default): %s for 8 groups, %s for 64\n",
                  troupe::grouped_dw_name(troupe::grouped_dw(8)), troupe::grouped_dw_name(troupe::grouped_dw(64)));
      for (const ExpertGemm& c : kCases) run_case(ctx, troupe::dtype_from_name(dtype_name), c, reps);
      for (const ExpertGemm& c : kDecodeCases) run_decode_case(ctx, troupe::dtype_from_name(dtype_name), c, reps);
      return 0;
    } catch (const troupe::Error& e) {
      std::fprintf(stderr, "grouped_gemm_bench: %s\n", e.what());
      return 1;
    }
  }
#endif
  (void)reps;
  std::printf("grouped_gemm_bench: no GPU\n");
  return 0;
}
