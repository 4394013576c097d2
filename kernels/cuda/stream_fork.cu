// Side streams of a CUDA context, forked from and joined back into its stream with events
// (kernels/cuda/stream_fork.cuh). The events are reused: a wait takes the event's last record at
// the time it is enqueued, so a later fork's record does not move an earlier wait.
#include "kernels/cuda/stream_fork.cuh"

namespace troupe::cuda {

namespace {

void add_lane(CudaState& st) {
  // The CudaState owns the lane from here on, so a failure below leaks nothing (~CudaState frees
  // whatever was made).
  StreamLane& l = st.lanes.emplace_back();
  TROUPE_CUDA_CHECK(cudaStreamCreateWithFlags(&l.stream, cudaStreamNonBlocking));
  TROUPE_CUDA_CHECK(cudaEventCreateWithFlags(&l.done, cudaEventDisableTiming));
  l.workspace_bytes = st.workspace_bytes;
  TROUPE_CUDA_CHECK(cudaMalloc(&l.workspace, l.workspace_bytes));
}

}  // namespace

StreamFork::StreamFork(const Context& ctx, int lanes) : ctx_(ctx), lanes_(lanes) {
  TROUPE_CHECK(lanes > 0, "StreamFork: needs at least one lane, got ", lanes);
  CudaState& st = ctx.cuda_state();
  if (int(st.lanes.size()) < lanes) {
    TROUPE_CUDA_CHECK(cudaSetDevice(st.device));  // the streams, events and workspaces are ctx's device's
    if (!st.fork) TROUPE_CUDA_CHECK(cudaEventCreateWithFlags(&st.fork, cudaEventDisableTiming));
    while (int(st.lanes.size()) < lanes) add_lane(st);
  }
  TROUPE_CUDA_CHECK(cudaEventRecord(st.fork, st.stream));
  for (int i = 0; i < lanes; ++i) TROUPE_CUDA_CHECK(cudaStreamWaitEvent(st.lanes[size_t(i)].stream, st.fork, 0));
}

StreamFork::~StreamFork() {
  if (joined_) return;
  const CudaState& st = ctx_.cuda_state();
  for (int i = 0; i < lanes_; ++i) {  // unchecked: the op already failed, and destructors do not throw
    const StreamLane& l = st.lanes[size_t(i)];
    if (cudaEventRecord(l.done, l.stream) == cudaSuccess) cudaStreamWaitEvent(st.stream, l.done, 0);
  }
}

const StreamLane& StreamFork::lane(int i) const {
  TROUPE_CHECK(i >= 0 && i < lanes_, "StreamFork: lane ", i, " of ", lanes_);
  return ctx_.cuda_state().lanes[size_t(i)];
}

void StreamFork::join() {
  TROUPE_CHECK(!joined_, "StreamFork: joined twice");
  const CudaState& st = ctx_.cuda_state();
  for (int i = 0; i < lanes_; ++i) {
    const StreamLane& l = st.lanes[size_t(i)];
    TROUPE_CUDA_CHECK(cudaEventRecord(l.done, l.stream));
    TROUPE_CUDA_CHECK(cudaStreamWaitEvent(st.stream, l.done, 0));
  }
  joined_ = true;  // after the waits: a failure above leaves the destructor to join again
}

}  // namespace troupe::cuda
