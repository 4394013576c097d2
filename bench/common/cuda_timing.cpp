// The op benchmarks' GPU and CUDA-event timing (cuda_timing.hpp).
#include "bench/common/cuda_timing.hpp"

#if TROUPE_HAVE_CUDA
#include "kernels/cuda/cuda_state.cuh"
#include "kernels/cuda/runtime.hpp"
#endif

namespace troupe::bench {

Gpu gpu_open() {
  Gpu gpu{nullptr, "no GPU"};
#if TROUPE_HAVE_CUDA
  if (cuda_available()) {
    gpu.ctx = std::make_unique<Context>(Context::cuda(0));
    cudaDeviceProp prop;
    TROUPE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    gpu.name = prop.name;
  }
#endif
  benchmark::AddCustomContext("device", gpu.name);
  return gpu;
}

void time_on_stream(benchmark::State& state, const Context& ctx, const std::function<void()>& fn, int calls_per_event) {
#if TROUPE_HAVE_CUDA
  void* start = cuda::event_create();
  void* stop = cuda::event_create();
  for (auto _ : state) {
    cuda::event_record(ctx, start);
    for (int i = 0; i < calls_per_event; ++i) fn();
    cuda::event_record(ctx, stop);
    state.SetIterationTime(double(cuda::event_elapsed_ms(start, stop)) * 1e-3 / calls_per_event);
  }
  cuda::event_destroy(start);
  cuda::event_destroy(stop);
#else
  (void)ctx, (void)fn, (void)calls_per_event;
  state.SkipWithError("no CUDA backend in this build");
#endif
}

}  // namespace troupe::bench
