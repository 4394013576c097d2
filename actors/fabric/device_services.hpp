// What a stage actor needs from its device beyond the model's ops, behind a plain C++
// interface (no CAF, no CUDA types): completion callbacks, stream-ordered transfer buffers,
// channels that move a tensor to another stage, and the tied-embedding gradient reduction.
// CPU devices implement all of it in-process; CUDA devices in actors/fabric/cuda/ (events, the
// stream-ordered allocator, NCCL).
//
//   Tensor out = buffer_alloc(ctx, DType::bf16, {B, T, C});   // freed by the receiver
//   chunk.forward(x, {}, out, options);                        // enqueued on ctx
//   Parcel p = channel.send(ctx, out);                         // travels in an actor message
//   ...receiver thread, when the message arrives:  Inbound in = channel.receive(peer_ctx, p);
//   ...later, just before the op that reads it:     inbound_wait(peer_ctx, in);  run(in.tensor);
//                                                    buffer_free(peer_ctx, in.tensor);
//   queue.op_begin(); run(op); queue.op_end([=](OpTimes t) { anon_send(self, done_atom::value, id); });
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "kernels/context.hpp"
#include "kernels/stream_fence.hpp"  // fence_record / fence_wait order the side streams
#include "kernels/stream_spans.hpp"
#include "kernels/tensor.hpp"

namespace troupe::actors {

// A span marked inside an op (kernels/stream_spans.hpp), on the trace clock.
struct MarkedSpan {
  SpanKind kind = SpanKind::moe_dispatch;
  int64_t start_ns = 0, end_ns = 0;
};

// Start and end of one op on the trace clock (ns since the run's epoch); 0: not measured.
// With timing, the spans marked inside it through CompletionQueue::spans().
struct OpTimes {
  int64_t start_ns = 0, end_ns = 0;
  std::vector<MarkedSpan> spans;
};

// Learns when the work of an op has finished without ever holding up the stream: on a GPU an
// event is recorded after the op and a helper thread waits for it, then calls back (the
// stream keeps running; a cudaLaunchHostFunc callback would stall it). On a CPU device the
// work already ran and the callback runs at once. With timing, GPU events around each op give
// its start and end as the device saw them.
class CompletionQueue {
 public:
  virtual ~CompletionQueue() = default;  // waits for the callbacks of work already finished
  virtual void op_begin() = 0;           // before enqueuing an op
  // After enqueuing it: `done` runs (on any thread; it must not call CUDA) once it has finished.
  virtual void op_end(std::function<void(OpTimes)> done) = 0;
  // When an inbound transfer ran (its `timing`), on the trace clock; valid once an op that
  // waited for it has finished. {0, 0}: not measured.
  virtual OpTimes transfer_times(const std::shared_ptr<void>& timing) const {
    (void)timing;
    return {};
  }
  // With timing: where the model marks spans inside the op between op_begin and op_end (on
  // any context of this device); they come back in op_end's OpTimes. Null without timing.
  virtual StreamSpans* spans() { return nullptr; }
};

std::unique_ptr<CompletionQueue> make_completion_queue(const Context& ctx, bool timing,
                                                       std::chrono::steady_clock::time_point epoch);

// A buffer for a tensor that outlives one op (sent to another stage, or an uploaded
// input): host memory on a CPU device; on a GPU the stream-ordered pool (no device-wide
// synchronization, unlike cudaMalloc/cudaFree). buffer_free releases it after the work
// enqueued on ctx so far (a no-op on the CPU, where the tensor's reference count frees it).
Tensor buffer_alloc(const Context& ctx, DType dtype, Shape shape);
void buffer_free(const Context& ctx, const Tensor& t);
// A host tensor's copy in a buffer_alloc'd tensor on ctx's device (the host tensor itself on a CPU).
Tensor buffer_upload(const Context& ctx, const Tensor& host);

// One tensor on its way from one stage to another: what an actor message carries.
struct Parcel {
  Tensor tensor;  // CPU device or same GPU: the sender's buffer (ownership moves)
  Shape shape;
  DType dtype = DType::f32;
  std::shared_ptr<void> ready;  // GPU: an event recorded after the producing work
  int64_t bytes() const { return shape_numel(shape) * int64_t(dtype_size(dtype)); }
};

// A tensor received from another stage: on the receiver's device, readable by work enqueued
// after inbound_wait(). The wait belongs right before the op that reads it, not where the
// message arrived: a wait enqueued early would hold up every op after it on the stream,
// including ops that never read this tensor (a chain of false dependencies across stages).
struct Inbound {
  Tensor tensor;
  std::shared_ptr<void> ready;   // GPU: an event after the transfer; null: readable now
  std::shared_ptr<void> timing;  // with timing: the transfer's events (CompletionQueue::transfer_times)
};
// Makes work enqueued on ctx from now on wait for the inbound tensor (a no-op once waited for).
void inbound_wait(const Context& ctx, Inbound& in);

// A one-way link between the devices of two stages. send() runs on the sender's thread,
// receive() on the receiver's, in the same order (actor messages between two actors keep
// their order; NCCL needs exactly that).
class Channel {
 public:
  virtual ~Channel() = default;
  // `t` was buffer_alloc'd on ctx and the work producing it is enqueued on ctx; the channel
  // takes the buffer over.
  virtual Parcel send(const Context& ctx, const Tensor& t) = 0;
  // Posts the transfer of the parcel's tensor to ctx's device; the receiver inbound_wait()s
  // before the first read and buffer_free()s the tensor after its last use.
  virtual Inbound receive(const Context& ctx, Parcel& parcel) = 0;
  // Tears down without waiting for transfers that will never complete (a failed run).
  virtual void abort() {}
};

// CPU devices: an in-process copy. Same GPU: the buffer is handed over behind an event.
// Different GPUs: NCCL send/recv on a two-rank communicator with a stream per endpoint,
// both launched only once the producing work has finished. `timing`: record when each
// transfer ran (for the trace).
std::unique_ptr<Channel> make_channel(const Context& from, const Context& to, bool timing = false);

// Sums the gradient of a parameter held by two stages (tied input/output embeddings):
// each holder calls reduce() from its own thread with its copy; once both have, both copies
// hold a + b (a: rank 0's) and each holder's `done` runs (from any thread). Work enqueued on
// a holder's context after its `done` ran sees the sum.
class PairReducer {
 public:
  virtual ~PairReducer() = default;
  virtual void reduce(int rank, const Context& ctx, const Tensor& grad, std::function<void()> done) = 0;
  virtual void abort() {}
};

std::unique_ptr<PairReducer> make_pair_reducer(const Context& rank0, const Context& rank1);

}  // namespace troupe::actors
