// Two streams behind one context, so that a stage can have a forward and a backward in flight on
// its device at once (--overlap-moe-expert-parallel-comm): while the host waits on one op's
// expert counts, the other op's work keeps the device busy.
//
//   ContextLanes lanes(ctx);   // lane 0: ctx's own stream; lane 1: a second one, made here
//   lanes.use(1);              // from here on ctx enqueues on lane 1 ...
//   chunk.backward(...);       // ... kernels, collectives, stream-ordered memory, fences, spans
//   lanes.use(0);              // back to ctx's own stream
//
// A lane is a stream with its own cuBLAS/cuDNN handles, workspaces and side streams (StreamFork),
// so two ops in flight never share a workspace. use() points the context at the lane's; code
// that holds the context sees no difference. Nothing orders the lanes: the caller fences
// (kernels/stream_fence.hpp) where one lane's work reads what the other wrote, and frees memory
// only once the other lane is past its last use. One thread drives the context, as always. On a
// CPU context, where work has run when its call returns, use() only records the lane.
#pragma once

#include <memory>

#include "kernels/context.hpp"

namespace troupe {

class ContextLanes {
 public:
  explicit ContextLanes(const Context& ctx);
  ~ContextLanes();  // back on lane 0
  ContextLanes(const ContextLanes&) = delete;
  ContextLanes& operator=(const ContextLanes&) = delete;

  void use(int lane);  // 0 or 1
  int lane() const { return lane_; }
  const Context& context() const { return ctx_; }

 private:
  const Context& ctx_;
  std::unique_ptr<Context> other_;  // CUDA: holds the lane not in use
  int lane_ = 0;
};

namespace cuda {
// Trades the stream and everything bound to it (handles, workspaces, side streams) between two
// contexts of one device.
void trade_streams(const Context& a, const Context& b);
}  // namespace cuda

}  // namespace troupe
