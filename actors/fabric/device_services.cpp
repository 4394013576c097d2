// CPU devices: everything in-process. CUDA contexts go to actors/fabric/cuda/.
#include "actors/fabric/device_services.hpp"

#include <algorithm>
#include <mutex>

#include "base/check.hpp"
#include "kernels/elementwise.hpp"
#if TROUPE_HAVE_CUDA
#include "actors/fabric/cuda/cuda_services.hpp"
#endif

namespace troupe::actors {

namespace {

#if !TROUPE_HAVE_CUDA
[[noreturn]] void no_cuda() { TROUPE_FAIL("a CUDA context in a build without the CUDA backend"); }
#endif

// Between CPU devices: the receiver copies the sender's buffer into its own memory.
class HostChannel final : public Channel {
 public:
  Parcel send(const Context&, const Tensor& t) override {
    Parcel p;
    p.tensor = t;
    p.shape = t.shape();
    p.dtype = t.dtype();
    return p;
  }
  Inbound receive(const Context& ctx, Parcel& p) override {
    TROUPE_CHECK(p.tensor.defined(), "HostChannel: an empty parcel");
    Inbound in;
    in.tensor = Tensor::host(p.dtype, p.shape);
    copy(ctx, p.tensor, in.tensor);
    p.tensor = Tensor();
    return in;
  }
};

// Both copies on one device (CPU devices, or two stages sharing a GPU): whichever holder
// comes second waits for the first one's device work, adds, and writes the sum into both.
class LocalPairReducer final : public PairReducer {
 public:
  void reduce(int rank, const Context& ctx, const Tensor& grad, std::function<void()> done) override {
    TROUPE_CHECK(rank == 0 || rank == 1, "PairReducer: rank ", rank);
    std::unique_lock<std::mutex> lock(mu_);
    TROUPE_CHECK(!slots_[rank].waiting, "PairReducer: rank ", rank, " reduced twice");
    slots_[rank] = {&ctx, grad, std::move(done), true};
    if (!slots_[1 - rank].waiting) return;
    Slot a = std::move(slots_[0]), b = std::move(slots_[1]);
    slots_[0] = Slot{};
    slots_[1] = Slot{};
    lock.unlock();
    const Slot& other = rank == 0 ? b : a;
    other.ctx->synchronize();
    TROUPE_CHECK(a.grad.numel() == b.grad.numel(), "PairReducer: ", a.grad.str(), " vs ", b.grad.str());
    add(ctx, a.grad, b.grad, a.grad);
    copy(ctx, a.grad, b.grad);
    ctx.synchronize();
    a.done();
    b.done();
  }

 private:
  struct Slot {
    const Context* ctx = nullptr;
    Tensor grad;
    std::function<void()> done;
    bool waiting = false;
  };
  std::mutex mu_;
  Slot slots_[2];
};

}  // namespace

namespace {

// CPU devices: the work has run when its call returns, so the clock marks ops and spans.
class HostCompletionQueue final : public CompletionQueue, private StreamSpans {
 public:
  HostCompletionQueue(bool timing, std::chrono::steady_clock::time_point epoch) : timing_(timing), epoch_(epoch) {}
  void op_begin() override {
    start_ns_ = now_ns();
    spans_.clear();
  }
  void op_end(std::function<void(OpTimes)> done) override {
    OpTimes t{start_ns_, now_ns(), std::move(spans_)};
    spans_.clear();
    done(std::move(t));
  }
  StreamSpans* spans() override { return timing_ ? this : nullptr; }

 private:
  void begin(const Context& ctx, SpanKind kind) override {
    (void)ctx;
    spans_.push_back({kind, now_ns(), 0});
  }
  void end(const Context& ctx, SpanKind kind) override {
    (void)ctx;
    for (auto it = spans_.rbegin(); it != spans_.rend(); ++it)
      if (it->kind == kind && it->end_ns == 0) {
        it->end_ns = std::max(now_ns(), it->start_ns + 1);
        return;
      }
  }
  int64_t now_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - epoch_).count();
  }
  bool timing_;
  std::chrono::steady_clock::time_point epoch_;
  int64_t start_ns_ = 0;
  std::vector<MarkedSpan> spans_;
};

}  // namespace

std::unique_ptr<CompletionQueue> make_completion_queue(const Context& ctx, bool timing,
                                                       std::chrono::steady_clock::time_point epoch) {
  if (!ctx.is_cuda()) return std::make_unique<HostCompletionQueue>(timing, epoch);
#if TROUPE_HAVE_CUDA
  return cuda::make_completion_queue(ctx, timing, epoch);
#else
  (void)timing;
  no_cuda();
#endif
}

Tensor buffer_alloc(const Context& ctx, DType dtype, Shape shape) {
  if (!ctx.is_cuda()) return Tensor::host(dtype, std::move(shape));
#if TROUPE_HAVE_CUDA
  return cuda::buffer_alloc(ctx, dtype, std::move(shape));
#else
  no_cuda();
#endif
}

void buffer_free(const Context& ctx, const Tensor& t) {
  if (!ctx.is_cuda() || !t.defined()) return;
#if TROUPE_HAVE_CUDA
  cuda::buffer_free(ctx, t);
#else
  no_cuda();
#endif
}

Tensor buffer_upload(const Context& ctx, const Tensor& host) {
  if (!ctx.is_cuda()) return host;
#if TROUPE_HAVE_CUDA
  return cuda::buffer_upload(ctx, host);
#else
  no_cuda();
#endif
}

void inbound_wait(const Context& ctx, Inbound& in) {
  if (!in.ready) return;
#if TROUPE_HAVE_CUDA
  cuda::stream_wait(ctx, in.ready);
  in.ready.reset();
#else
  (void)ctx;
  no_cuda();
#endif
}

std::unique_ptr<Channel> make_channel(const Context& from, const Context& to, bool timing) {
  TROUPE_CHECK(from.is_cuda() == to.is_cuda(), "a channel between a CPU device and a GPU");
  if (!from.is_cuda()) return std::make_unique<HostChannel>();
#if TROUPE_HAVE_CUDA
  return cuda::make_channel(from, to, timing);
#else
  (void)timing;
  no_cuda();
#endif
}

std::unique_ptr<PairReducer> make_pair_reducer(const Context& rank0, const Context& rank1) {
  TROUPE_CHECK(rank0.is_cuda() == rank1.is_cuda(), "a reduction between a CPU device and a GPU");
  if (!rank0.is_cuda() || rank0.device_index() == rank1.device_index()) return std::make_unique<LocalPairReducer>();
#if TROUPE_HAVE_CUDA
  return cuda::make_nccl_pair_reducer(rank0, rank1);
#else
  no_cuda();
#endif
}

}  // namespace troupe::actors
