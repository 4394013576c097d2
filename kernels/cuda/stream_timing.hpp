// Which of several ways to do the same work is fastest on a stream, measured: each candidate
// runs once to warm up, then `reps` rounds run every candidate in turn (interleaved, so a
// drift of the GPU's clocks favours none), timed with CUDA events. Synchronizes the stream.
// The choices made at first use (a GEMM's algorithm, a fusion's path) are measured here.
#pragma once

#include <functional>
#include <vector>

#include "kernels/tensor.hpp"

namespace troupe::cuda {

// The median milliseconds of each candidate, in order.
std::vector<float> median_ms_on_stream(const Context& ctx, void* stream,
                                       const std::vector<std::function<void()>>& calls, int reps);

}  // namespace troupe::cuda
