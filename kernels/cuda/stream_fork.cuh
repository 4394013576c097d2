// Side streams of one CUDA context, for independent pieces of one op that may run at once (the
// experts' weight-gradient GEMMs, kernels/cuda/grouped_linear.cu). A StreamFork keeps them inside
// the order of ctx's stream: its lanes start after everything enqueued on ctx's stream before the
// fork, and ctx's stream's work enqueued after join() starts after everything enqueued on the
// lanes. To the rest of the program the op is still one piece of ctx's stream, so inputs made
// earlier on it are ready and stream-ordered memory freed on it afterwards waits for the lanes.
// (Fences between contexts are kernels/stream_fence.hpp; lanes are no contexts.)
//
//   StreamFork fork(ctx, 4);                          // 4 lanes wait for ctx's stream
//   for (size_t i = 0; i < gemms.size(); ++i) matmul_lt(ctx, gemms[i], fork.lane(int(i % 4)));
//   fork.join();                                      // ctx's stream waits for the 4 lanes
//
// The lanes (a stream, a cuBLASLt workspace as large as ctx's, an event each) are made on the
// first fork that asks for them and live in ctx's CudaState. One fork of a context at a time (ops
// on one context run one at a time): a second would share the lanes and grow their list.
#pragma once

#include "kernels/cuda/cuda_state.cuh"

namespace troupe::cuda {

class StreamFork {
 public:
  // Makes the lanes if ctx has fewer, and has them wait for ctx's stream.
  StreamFork(const Context& ctx, int lanes);
  // Joins if join() was not called (an exception left the op early); never throws.
  ~StreamFork();
  StreamFork(const StreamFork&) = delete;
  StreamFork& operator=(const StreamFork&) = delete;

  int size() const { return lanes_; }
  const StreamLane& lane(int i) const;
  // ctx's stream waits for everything enqueued on the lanes so far.
  void join();

 private:
  const Context& ctx_;
  int lanes_;
  bool joined_ = false;
};

}  // namespace troupe::cuda
