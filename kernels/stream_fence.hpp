// Order between the streams of contexts on one device: a fence is a point in one context's
// stream that work enqueued on another context may wait for, without the host waiting. The
// runtime's side streams (gradient reduction, snapshots) and context parallelism's ring (its
// passes on a communication stream beside the attention) are ordered with it.
//
//   std::shared_ptr<void> f = fence_record(compute);   // after the producing work
//   fence_wait(comm, f);                                // comm's later work runs after it
//   cp.comm->all_to_all_v(comm, ...);
//
// On a CPU device the work has already run when its call returns: fences are null, and
// waiting for null does nothing.
#pragma once

#include <memory>

#include "kernels/context.hpp"

namespace troupe {

// A point in ctx's stream: work enqueued on any context after fence_wait(other, f) runs after
// everything enqueued on ctx before fence_record(ctx). Null on a CPU device.
std::shared_ptr<void> fence_record(const Context& ctx);
// Work enqueued on ctx from now on waits for the fence (nothing to wait for when null).
void fence_wait(const Context& ctx, const std::shared_ptr<void>& fence);
// Blocks the calling thread until the work before the fence has run.
void fence_host_wait(const std::shared_ptr<void>& fence);

namespace cuda {
std::shared_ptr<void> fence_record(const Context& ctx);
void fence_wait(const Context& ctx, const std::shared_ptr<void>& fence);
void fence_host_wait(const std::shared_ptr<void>& fence);
}  // namespace cuda

}  // namespace troupe
