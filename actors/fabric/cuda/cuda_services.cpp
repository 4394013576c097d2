// GPU side of the stage services: op completion through events and a waiting thread, the
// stream-ordered allocator for transfer buffers, channels (the NCCL ones in nccl_channel.cpp)
// and the NCCL pair all-reduce.
// Compiled by the host compiler against the CUDA runtime and NCCL headers; every CUDA and
// NCCL call is checked.
#include "actors/fabric/cuda/cuda_services.hpp"

#include <nccl.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "actors/fabric/cuda/cuda_helpers.hpp"
#include "actors/fabric/cuda/nccl_channel.hpp"

namespace troupe::actors::cuda {

using troupe::cuda::stream_of;

namespace {

// One thread per stage waits for the events recorded after its ops, in order, and calls back.
class EventCompletionQueue final : public CompletionQueue, private StreamSpans {
 public:
  EventCompletionQueue(const Context& ctx, bool timing, std::chrono::steady_clock::time_point epoch)
      : device_(ctx.device_index()), ctx_(ctx), timing_(timing), epoch_(epoch) {
    if (timing_) {
      // The reference point that maps event times onto the trace clock.
      ref_ = take_event();
      TROUPE_CUDA_CHECK(cudaEventRecord(ref_, stream_of(ctx_)));
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
  // On the stream the context enqueues on now: with two lanes (kernels/context_lanes.hpp), the op's.
  void op_begin() override {
    if (!timing_) return;
    start_ = take_event();
    TROUPE_CUDA_CHECK(cudaEventRecord(start_, stream_of(ctx_)));
  }
  void op_end(std::function<void(OpTimes)> done) override {
    cudaEvent_t end = take_event();
    TROUPE_CUDA_CHECK(cudaEventRecord(end, stream_of(ctx_)));
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.push_back({start_, end, std::move(done), std::move(marks_)});
    }
    marks_.clear();
    start_ = nullptr;
    cv_.notify_one();
  }
  StreamSpans* spans() override { return timing_ ? this : nullptr; }
  OpTimes transfer_times(const std::shared_ptr<void>& timing) const override {
    if (!timing_ || !timing) return {};
    const auto* t = static_cast<const TransferEvents*>(timing.get());
    return {event_ns(event_of(t->start)), event_ns(event_of(t->end)), {}};
  }

 private:
  // A span's events. A side stream's span ends before the op's end event: the op's stream
  // waits for the side stream's work (its fences) before the op ends.
  struct Mark {
    SpanKind kind;
    cudaEvent_t start, end;
  };
  struct Item {
    cudaEvent_t start, end;
    std::function<void(OpTimes)> done;
    std::vector<Mark> marks;
  };

  void begin(const Context& ctx, SpanKind kind) override {
    cudaEvent_t e = take_event();
    TROUPE_CUDA_CHECK(cudaEventRecord(e, stream_of(ctx)));
    marks_.push_back({kind, e, nullptr});
  }
  void end(const Context& ctx, SpanKind kind) override {
    for (auto it = marks_.rbegin(); it != marks_.rend(); ++it)
      if (it->kind == kind && it->end == nullptr) {
        it->end = take_event();
        TROUPE_CUDA_CHECK(cudaEventRecord(it->end, stream_of(ctx)));
        return;
      }
  }

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
        for (const Mark& m : item.marks) {
          if (m.end == nullptr) continue;
          cudaEventSynchronize(m.end);  // ordered before the op's end; returns at once
          const int64_t s = event_ns(m.start), e = event_ns(m.end);
          if (s > 0 && e > 0) t.spans.push_back({m.kind, s, std::max(e, s + 1)});
        }
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        free_.push_back(item.end);
        if (item.start) free_.push_back(item.start);
        for (const Mark& m : item.marks)
          for (cudaEvent_t e : {m.start, m.end})
            if (e) free_.push_back(e);
      }
      try {
        item.done(t);
      } catch (...) {
        // Callbacks only send messages.
      }
    }
  }

  int device_;
  const Context& ctx_;  // the stage's; outlives the queue
  bool timing_;
  std::chrono::steady_clock::time_point epoch_;
  cudaEvent_t ref_ = nullptr, start_ = nullptr;
  std::vector<Mark> marks_;  // the spans of the op being enqueued
  int64_t ref_ns_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> pending_;
  std::vector<cudaEvent_t> free_;
  bool stop_ = false;
  std::thread thread_;
};

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
    TROUPE_NCCL_CHECK(ncclAllReduce(grad.data(), grad.data(), size_t(grad.numel()), ncclFloat32, ncclSum, comms_[rank],
                                    stream_of(ctx)));
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
  return make_nccl_channel(from.device_index(), to.device_index(), timing);
}

void stream_wait(const Context& ctx, const std::shared_ptr<void>& event) {
  TROUPE_CUDA_CHECK(cudaStreamWaitEvent(stream_of(ctx), event_of(event), 0));
}

std::unique_ptr<PairReducer> make_nccl_pair_reducer(const Context& rank0, const Context& rank1) {
  return std::make_unique<NcclPairReducer>(rank0.device_index(), rank1.device_index());
}

}  // namespace troupe::actors::cuda
