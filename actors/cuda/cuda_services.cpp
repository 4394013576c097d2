// GPU side of the stage services: op completion through events and a waiting thread, the
// stream-ordered allocator for transfer buffers, and NCCL point-to-point channels / pair
// all-reduce.
// Compiled by the host compiler against the CUDA runtime and NCCL headers; every CUDA and
// NCCL call is checked.
#include "actors/cuda/cuda_services.hpp"

#include <nccl.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "kernels/cuda/cuda_state.cuh"

#define TROUPE_NCCL_CHECK(call)                                                                        \
  do {                                                                                                 \
    ncclResult_t troupe_nccl_ = (call);                                                                \
    if (troupe_nccl_ != ncclSuccess)                                                                   \
      ::troupe::fail("nccl", #call, __FILE__, __LINE__,                                                \
                     ::troupe::str_cat(ncclGetErrorString(troupe_nccl_), ": ", ncclGetLastError(nullptr))); \
  } while (0)

namespace troupe::actors::cuda {

using troupe::cuda::stream_of;

namespace {

// NCCL connects a pair of ranks on their first transfer, and that handshake blocks the host
// until both sides have called in. Our two ends are driven by two stage threads that only
// post a receive after the sender's message arrives, so connect them here, from one thread
// (a group call), before any stage runs.
void connect_pair(ncclComm_t comms[2], int d0, int d1, bool all_reduce) {
  void* buf[2] = {nullptr, nullptr};
  cudaStream_t streams[2] = {nullptr, nullptr};
  const int devices[2] = {d0, d1};
  for (int r = 0; r < 2; ++r) {
    TROUPE_CUDA_CHECK(cudaSetDevice(devices[r]));
    TROUPE_CUDA_CHECK(cudaMalloc(&buf[r], 64));
    TROUPE_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
  }
  TROUPE_NCCL_CHECK(ncclGroupStart());
  if (all_reduce) {
    for (int r = 0; r < 2; ++r)
      TROUPE_NCCL_CHECK(ncclAllReduce(buf[r], buf[r], 1, ncclFloat32, ncclSum, comms[r], streams[r]));
  } else {
    TROUPE_NCCL_CHECK(ncclSend(buf[0], 4, ncclInt8, 1, comms[0], streams[0]));
    TROUPE_NCCL_CHECK(ncclRecv(buf[1], 4, ncclInt8, 0, comms[1], streams[1]));
  }
  TROUPE_NCCL_CHECK(ncclGroupEnd());
  for (int r = 0; r < 2; ++r) {
    TROUPE_CUDA_CHECK(cudaSetDevice(devices[r]));
    TROUPE_CUDA_CHECK(cudaStreamSynchronize(streams[r]));
    TROUPE_CUDA_CHECK(cudaStreamDestroy(streams[r]));
    TROUPE_CUDA_CHECK(cudaFree(buf[r]));
  }
}

// An event on the current device, owned by a shared_ptr<void> so that it can travel in a
// Parcel or an Inbound (destroying it while work still waits for it is fine).
std::shared_ptr<void> make_event(bool timing) {
  cudaEvent_t e = nullptr;
  TROUPE_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  return std::shared_ptr<void>(e, [](void* p) { cudaEventDestroy(static_cast<cudaEvent_t>(p)); });
}

cudaEvent_t event_of(const std::shared_ptr<void>& p) { return static_cast<cudaEvent_t>(p.get()); }

// An Inbound's `timing`: events around one transfer on the receiving device.
struct TransferEvents {
  std::shared_ptr<void> start, end;
};

// A stream for transfers: highest priority, so that the block scheduler starts a NCCL kernel
// as soon as SMs free up instead of behind the queued compute blocks.
cudaStream_t make_transfer_stream() {
  int least = 0, greatest = 0;
  TROUPE_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t s = nullptr;
  TROUPE_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest));
  return s;
}

// Runs fn with `device` current, restoring the caller's device.
template <typename F>
void on_device(int device, F&& fn) {
  int previous = 0;
  TROUPE_CUDA_CHECK(cudaGetDevice(&previous));
  TROUPE_CUDA_CHECK(cudaSetDevice(device));
  fn();
  TROUPE_CUDA_CHECK(cudaSetDevice(previous));
}

// One thread per stage waits for the events recorded after its ops, in order, and calls back.
class EventCompletionQueue final : public CompletionQueue {
 public:
  EventCompletionQueue(const Context& ctx, bool timing, std::chrono::steady_clock::time_point epoch)
      : device_(ctx.device_index()), stream_(stream_of(ctx)), timing_(timing), epoch_(epoch) {
    if (timing_) {
      // The reference point that maps event times onto the trace clock.
      ref_ = take_event();
      TROUPE_CUDA_CHECK(cudaEventRecord(ref_, stream_));
      TROUPE_CUDA_CHECK(cudaEventSynchronize(ref_));
      ref_ns_ = now_ns();
    }
    thread_ = std::thread([this] { wait_loop(); });
  }
  ~EventCompletionQueue() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    for (cudaEvent_t e : free_) cudaEventDestroy(e);
    if (ref_) cudaEventDestroy(ref_);
  }
  void op_begin() override {
    if (!timing_) return;
    start_ = take_event();
    TROUPE_CUDA_CHECK(cudaEventRecord(start_, stream_));
  }
  void op_end(std::function<void(OpTimes)> done) override {
    cudaEvent_t end = take_event();
    TROUPE_CUDA_CHECK(cudaEventRecord(end, stream_));
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.push_back({start_, end, std::move(done)});
    }
    start_ = nullptr;
    cv_.notify_one();
  }
  OpTimes transfer_times(const std::shared_ptr<void>& timing) const override {
    if (!timing_ || !timing) return {};
    const auto* t = static_cast<const TransferEvents*>(timing.get());
    return {event_ns(event_of(t->start)), event_ns(event_of(t->end))};
  }

 private:
  struct Item {
    cudaEvent_t start, end;
    std::function<void(OpTimes)> done;
  };

  int64_t now_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - epoch_).count();
  }
  int64_t event_ns(cudaEvent_t e) const {
    float ms = 0;
    const cudaError_t err = cudaEventElapsedTime(&ms, ref_, e);
    if (err == cudaSuccess) return ref_ns_ + int64_t(double(ms) * 1e6);
    if (err == cudaErrorNotReady) (void)cudaGetLastError();  // not an error for the next launch check
    return 0;
  }

  cudaEvent_t take_event() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        cudaEvent_t e = free_.back();
        free_.pop_back();
        return e;
      }
    }
    cudaEvent_t e = nullptr;
    // Blocking sync: the waiting thread sleeps instead of spinning a core per stage.
    const unsigned flags = cudaEventBlockingSync | (timing_ ? 0u : unsigned(cudaEventDisableTiming));
    TROUPE_CUDA_CHECK(cudaEventCreateWithFlags(&e, flags));
    return e;
  }

  void wait_loop() {
    cudaSetDevice(device_);
    for (;;) {
      Item item;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !pending_.empty(); });
        if (pending_.empty()) return;  // stopping, nothing left
        item = std::move(pending_.front());
        pending_.pop_front();
      }
      // An error here (a failed kernel, an aborted communicator) surfaces in the stage's next
      // CUDA call; the callback still runs so the stage hears of the op.
      cudaEventSynchronize(item.end);
      OpTimes t;
      if (timing_) {
        t.end_ns = event_ns(item.end);
        t.start_ns = item.start ? event_ns(item.start) : 0;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        free_.push_back(item.end);
        if (item.start) free_.push_back(item.start);
      }
      try {
        item.done(t);
      } catch (...) {
        // Callbacks only send messages.
      }
    }
  }

  int device_;
  cudaStream_t stream_;
  bool timing_;
  std::chrono::steady_clock::time_point epoch_;
  cudaEvent_t ref_ = nullptr, start_ = nullptr;
  int64_t ref_ns_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> pending_;
  std::vector<cudaEvent_t> free_;
  bool stop_ = false;
  std::thread thread_;
};

// Freed transfer buffers stay in the device's pool (the default threshold hands memory back
// to the driver at every synchronization, and the next allocation pays for it again).
// A block freed on one stream is reused on another only once its free has run, never by
// making the allocating stream wait for the freeing one: transfer buffers are allocated on
// one stream (compute, receive) and freed on another (send, compute), and such a hidden wait
// would tie a stage's compute to its transfers and, through NCCL, to the other stages.
void keep_pool_memory(int device) {
  static std::mutex mu;
  static std::vector<int> done;
  std::lock_guard<std::mutex> lock(mu);
  for (int d : done)
    if (d == device) return;
  cudaMemPool_t pool = nullptr;
  TROUPE_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  uint64_t threshold = UINT64_MAX;
  TROUPE_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  int no_internal_dependencies = 0;
  TROUPE_CUDA_CHECK(
      cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &no_internal_dependencies));
  done.push_back(device);
}

// Two stages on one GPU: the receiver's stream waits for an event after the producing work
// (just before the op that reads it), then reads the sender's buffer in place.
class SameDeviceChannel final : public Channel {
 public:
  Parcel send(const Context& ctx, const Tensor& t) override {
    Parcel p;
    p.ready = make_event(false);
    TROUPE_CUDA_CHECK(cudaEventRecord(event_of(p.ready), stream_of(ctx)));
    p.tensor = t;
    p.shape = t.shape();
    p.dtype = t.dtype();
    return p;
  }
  Inbound receive(const Context&, Parcel& p) override {
    TROUPE_CHECK(p.tensor.defined() && p.ready, "SameDeviceChannel: an empty parcel");
    Inbound in;
    in.tensor = std::move(p.tensor);
    in.ready = std::move(p.ready);
    p = Parcel{};
    return in;
  }
};

// Two GPUs: a two-rank communicator of its own (rank 0 sends, rank 1 receives), so the
// order of one channel's transfers never interleaves with another's, and a stream per end
// so a send waiting for its receiver never holds up compute or other channels.
// Both NCCL kernels are launched only once the producing work has finished (the send stream
// and, across devices, the receive stream wait for an event recorded after it): a NCCL
// kernel spins on its SMs until its peer arrives, and a receive posted when the message
// arrives (the sender runs a few ops ahead of its GPU) would spin for whole ops, taking SMs
// from the receiver's compute.
class NcclChannel final : public Channel {
 public:
  NcclChannel(int src, int dst, bool timing) : src_(src), dst_(dst), timing_(timing) {
    const int devices[2] = {src, dst};
    TROUPE_NCCL_CHECK(ncclCommInitAll(comms_, 2, devices));
    on_device(src, [&] { connect_pair(comms_, src, dst, false); });
    on_device(src, [&] { send_stream_ = make_transfer_stream(); });
    on_device(dst, [&] { recv_stream_ = make_transfer_stream(); });
    keep_pool_memory(src);
    keep_pool_memory(dst);
  }
  ~NcclChannel() override {
    if (!aborted_) {
      cudaStreamSynchronize(send_stream_);
      cudaStreamSynchronize(recv_stream_);
      for (ncclComm_t c : comms_) ncclCommDestroy(c);
    }
    cudaStreamDestroy(send_stream_);
    cudaStreamDestroy(recv_stream_);
  }
  Parcel send(const Context& ctx, const Tensor& t) override {
    TROUPE_CHECK(ctx.device_index() == src_, "NcclChannel: send from cuda:", ctx.device_index(), ", expected cuda:", src_);
    Parcel p;
    p.ready = make_event(false);  // the tensor is complete: both ends may start
    TROUPE_CUDA_CHECK(cudaEventRecord(event_of(p.ready), stream_of(ctx)));
    TROUPE_CUDA_CHECK(cudaStreamWaitEvent(send_stream_, event_of(p.ready), 0));
    TROUPE_NCCL_CHECK(ncclSend(t.data(), t.nbytes(), ncclInt8, 1, comms_[0], send_stream_));
    TROUPE_CUDA_CHECK(cudaFreeAsync(t.data(), send_stream_));  // after the send, in stream order
    p.shape = t.shape();
    p.dtype = t.dtype();
    return p;
  }
  Inbound receive(const Context& ctx, Parcel& p) override {
    TROUPE_CHECK(ctx.device_index() == dst_, "NcclChannel: receive on cuda:", ctx.device_index(), ", expected cuda:",
                 dst_);
    TROUPE_CHECK(p.ready, "NcclChannel: a parcel without its ready event");
    const size_t bytes = size_t(p.bytes());
    void* data = nullptr;
    TROUPE_CUDA_CHECK(cudaMallocAsync(&data, bytes, recv_stream_));
    TROUPE_CUDA_CHECK(cudaStreamWaitEvent(recv_stream_, event_of(p.ready), 0));  // the sender's device
    p.ready.reset();
    Inbound in;
    std::shared_ptr<TransferEvents> timing;
    if (timing_) {
      timing = std::make_shared<TransferEvents>();
      timing->start = make_event(true);
      TROUPE_CUDA_CHECK(cudaEventRecord(event_of(timing->start), recv_stream_));
    }
    TROUPE_NCCL_CHECK(ncclRecv(data, bytes, ncclInt8, 0, comms_[1], recv_stream_));
    in.ready = make_event(timing_);
    TROUPE_CUDA_CHECK(cudaEventRecord(event_of(in.ready), recv_stream_));
    if (timing) {
      timing->end = in.ready;
      in.timing = std::move(timing);
    }
    in.tensor = Tensor::wrap(data, p.dtype, p.shape, DeviceKind::cuda, dst_);
    return in;
  }
  void abort() override {
    if (aborted_) return;
    aborted_ = true;
    for (ncclComm_t c : comms_) ncclCommAbort(c);
  }

 private:
  int src_, dst_;
  bool timing_;
  ncclComm_t comms_[2] = {nullptr, nullptr};
  cudaStream_t send_stream_ = nullptr, recv_stream_ = nullptr;
  bool aborted_ = false;
};

// Tied embeddings on two GPUs: an in-place sum over a two-rank communicator, each rank
// enqueued on its own compute stream by its own stage thread.
class NcclPairReducer final : public PairReducer {
 public:
  NcclPairReducer(int d0, int d1) {
    const int devices[2] = {d0, d1};
    TROUPE_NCCL_CHECK(ncclCommInitAll(comms_, 2, devices));
    on_device(d0, [&] { connect_pair(comms_, d0, d1, true); });
  }
  ~NcclPairReducer() override {
    if (!aborted_)
      for (ncclComm_t c : comms_) ncclCommDestroy(c);
  }
  void reduce(int rank, const Context& ctx, const Tensor& grad, std::function<void()> done) override {
    TROUPE_CHECK(rank == 0 || rank == 1, "NcclPairReducer: rank ", rank);
    TROUPE_CHECK(grad.dtype() == DType::f32, "NcclPairReducer: f32 gradients expected, got ", grad.str());
    TROUPE_NCCL_CHECK(ncclAllReduce(grad.data(), grad.data(), size_t(grad.numel()), ncclFloat32, ncclSum,
                                    comms_[rank], stream_of(ctx)));
    done();  // the sum is in stream order before anything the holder enqueues next
  }
  void abort() override {
    if (aborted_) return;
    aborted_ = true;
    for (ncclComm_t c : comms_) ncclCommAbort(c);
  }

 private:
  ncclComm_t comms_[2] = {nullptr, nullptr};
  bool aborted_ = false;
};

}  // namespace

std::unique_ptr<CompletionQueue> make_completion_queue(const Context& ctx, bool timing,
                                                       std::chrono::steady_clock::time_point epoch) {
  return std::make_unique<EventCompletionQueue>(ctx, timing, epoch);
}

Tensor buffer_alloc(const Context& ctx, DType dtype, Shape shape) {
  keep_pool_memory(ctx.device_index());
  const size_t bytes = size_t(shape_numel(shape)) * dtype_size(dtype);
  void* data = nullptr;
  TROUPE_CUDA_CHECK(cudaMallocAsync(&data, bytes > 0 ? bytes : 1, stream_of(ctx)));
  return Tensor::wrap(data, dtype, std::move(shape), DeviceKind::cuda, ctx.device_index());
}

void buffer_free(const Context& ctx, const Tensor& t) { TROUPE_CUDA_CHECK(cudaFreeAsync(t.data(), stream_of(ctx))); }

Tensor buffer_upload(const Context& ctx, const Tensor& host) {
  TROUPE_CHECK(!host.is_cuda(), "buffer_upload: ", host.str(), " is not a host tensor");
  Tensor t = buffer_alloc(ctx, host.dtype(), host.shape());
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(t.data(), host.data(), host.nbytes(), cudaMemcpyHostToDevice, stream_of(ctx)));
  return t;
}

std::unique_ptr<Channel> make_channel(const Context& from, const Context& to, bool timing) {
  if (from.device_index() == to.device_index()) return std::make_unique<SameDeviceChannel>();
  return std::make_unique<NcclChannel>(from.device_index(), to.device_index(), timing);
}

std::shared_ptr<void> record_event(const Context& ctx) {
  std::shared_ptr<void> e = make_event(false);
  TROUPE_CUDA_CHECK(cudaEventRecord(event_of(e), stream_of(ctx)));
  return e;
}

void stream_wait(const Context& ctx, const std::shared_ptr<void>& event) {
  TROUPE_CUDA_CHECK(cudaStreamWaitEvent(stream_of(ctx), event_of(event), 0));
}

std::unique_ptr<PairReducer> make_nccl_pair_reducer(const Context& rank0, const Context& rank1) {
  return std::make_unique<NcclPairReducer>(rank0.device_index(), rank1.device_index());
}

}  // namespace troupe::actors::cuda
