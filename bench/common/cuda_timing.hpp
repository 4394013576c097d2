// The GPU an op benchmark runs on, and the timing of its cases on that GPU's stream
// (bench/gemm_bench.cpp, attention_bench.cpp, norm_bench.cpp). Launches return before the
// kernels run, so a case's time comes from two CUDA events around its calls, handed to Google
// Benchmark as manual time (register the case with UseManualTime()).
//
//   const troupe::bench::Gpu gpu = troupe::bench::gpu_open();  // context "device": its name
//   ... in a case, after its warm-up calls:
//   troupe::bench::time_on_stream(state, *gpu.ctx, [&] { troupe::attention_forward(...); }, 10);
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <benchmark/benchmark.h>

#include "kernels/context.hpp"

namespace troupe::bench {

struct Gpu {
  std::unique_ptr<Context> ctx;  // CUDA device 0; null without a GPU or a CUDA build
  std::string name;              // cudaDeviceProp::name, or "no GPU"
};

// Opens GPU 0 when there is one and records its name as Google Benchmark's context "device".
Gpu gpu_open();

// Each iteration of state: calls_per_event calls of fn between two CUDA events recorded on ctx's
// stream, the iteration's time the elapsed time per call (several calls per event pair when one
// call of a few microseconds would mostly time its launch). Warm up before calling this. In a
// build without CUDA the case is skipped ("no CUDA backend in this build").
void time_on_stream(benchmark::State& state, const Context& ctx, const std::function<void()>& fn, int calls_per_event);

}  // namespace troupe::bench
