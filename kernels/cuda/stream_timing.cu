#include "kernels/cuda/stream_timing.hpp"

#include <algorithm>

#include "kernels/cuda/common.cuh"

namespace troupe::cuda {

namespace {
struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  EventPair() {
    TROUPE_CUDA_CHECK(cudaEventCreate(&start));
    TROUPE_CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~EventPair() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
};
}  // namespace

std::vector<float> median_ms_on_stream(const Context& ctx, void* stream_handle,
                                       const std::vector<std::function<void()>>& calls, int reps) {
  TROUPE_CHECK(reps > 0, "median_ms_on_stream: reps must be positive, got ", reps);
  ctx.activate();
  const auto stream = static_cast<cudaStream_t>(stream_handle);
  for (const auto& call : calls) call();  // warm-up
  std::vector<EventPair> events(calls.size() * size_t(reps));
  for (int r = 0; r < reps; ++r)
    for (size_t c = 0; c < calls.size(); ++c) {
      const EventPair& e = events[size_t(r) * calls.size() + c];
      TROUPE_CUDA_CHECK(cudaEventRecord(e.start, stream));
      calls[c]();
      TROUPE_CUDA_CHECK(cudaEventRecord(e.stop, stream));
    }
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<float> medians;
  for (size_t c = 0; c < calls.size(); ++c) {
    std::vector<float> ms(static_cast<size_t>(reps));
    for (int r = 0; r < reps; ++r) {
      const EventPair& e = events[size_t(r) * calls.size() + c];
      TROUPE_CUDA_CHECK(cudaEventElapsedTime(&ms[size_t(r)], e.start, e.stop));
    }
    std::nth_element(ms.begin(), ms.begin() + reps / 2, ms.end());
    medians.push_back(ms[size_t(reps / 2)]);
  }
  return medians;
}

}  // namespace troupe::cuda
