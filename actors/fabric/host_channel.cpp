#include "actors/fabric/host_channel.hpp"

#include <atomic>

#include "base/check.hpp"

namespace troupe::actors {

namespace {

constexpr auto kDrain = std::chrono::seconds(10);

class HostSendChannel final : public Channel {
 public:
  HostSendChannel(std::shared_ptr<ProcessLinks> links, int comm, int dest, int tag, std::shared_ptr<SendReaper> reaper,
                  std::shared_ptr<void> owner)
      : links_(std::move(links)),
        comm_(comm),
        dest_(dest),
        tag_(tag),
        reaper_(std::move(reaper)),
        owner_(std::move(owner)) {}
  Parcel send(const Context& ctx, const Tensor& t) override {
    TROUPE_CHECK(!ctx.is_cuda() && t.defined() && !t.is_cuda(), links_->name(), " channel to process ", dest_, ": ",
                 t.defined() ? t.str() : "(undefined)", " is not a host tensor");
    TROUPE_CHECK(!aborted_, links_->name(), " channel to process ", dest_, ": aborted");
    reaper_->send(*links_, comm_, t, dest_, tag_);
    Parcel p;  // no tensor: the bytes travel by the links, the shape and dtype in the actor message
    p.shape = t.shape();
    p.dtype = t.dtype();
    return p;
  }
  Inbound receive(const Context&, Parcel&) override {
    TROUPE_FAIL(links_->name(), " channel to process ", dest_, ": receive() on the sending end");
  }
  void abort() override { aborted_ = true; }

 private:
  std::shared_ptr<ProcessLinks> links_;
  int comm_, dest_, tag_;
  std::shared_ptr<SendReaper> reaper_;
  std::shared_ptr<void> owner_;
  std::atomic<bool> aborted_{false};
};

class HostRecvChannel final : public Channel {
 public:
  HostRecvChannel(std::shared_ptr<ProcessLinks> links, int comm, int source, int tag, std::chrono::milliseconds timeout,
                  std::shared_ptr<void> owner)
      : links_(std::move(links)),
        comm_(comm),
        source_(source),
        tag_(tag),
        timeout_(timeout),
        owner_(std::move(owner)) {}
  Parcel send(const Context&, const Tensor&) override {
    TROUPE_FAIL(links_->name(), " channel from process ", source_, ": send() on the receiving end");
  }
  // Blocks this receiver's thread for the transfer itself: the sender posted it before the
  // announcement left, so it is under way (a CPU stage would copy the bytes just the same).
  Inbound receive(const Context& ctx, Parcel& p) override {
    TROUPE_CHECK(!ctx.is_cuda(), links_->name(), " channel from process ", source_,
                 ": a CUDA context on a CPU channel");
    TROUPE_CHECK(!p.tensor.defined(), links_->name(), " channel from process ", source_,
                 ": the parcel carries a tensor (a same-process parcel on a cross-process channel?)");
    Inbound in;
    in.tensor = Tensor::host(p.dtype, p.shape);
    std::unique_ptr<LinkRequests> rq = links_->requests();
    rq->recv(comm_, in.tensor.data(), p.bytes(), source_, tag_, source_);
    std::vector<int> late;
    const std::string what = str_cat(links_->name(), " channel from process ", source_, " (tag ", tag_,
                                     "): receive of ", dtype_name(p.dtype), shape_str(p.shape));
    bool done = false;
    try {
      done = rq->wait_until(
          std::chrono::steady_clock::now() + timeout_, [this] { return aborted_.load(); }, late);
    } catch (const Error& e) {
      TROUPE_FAIL(what, ": ", e.what());
    }
    if (!done) {
      // The buffer must outlive the abandoned receive (MPI may still write it).
      leaked_.push_back(in.tensor);
      rq->abandon();
      if (aborted_) TROUPE_FAIL(what, ": aborted");
      TROUPE_FAIL(what, ": nothing arrived within ", std::chrono::duration<double>(timeout_).count(), " s");
    }
    p = Parcel{};
    return in;
  }
  void abort() override { aborted_ = true; }

 private:
  std::shared_ptr<ProcessLinks> links_;
  int comm_, source_, tag_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<void> owner_;
  std::atomic<bool> aborted_{false};
  std::vector<Tensor> leaked_;
};

}  // namespace

SendReaper::SendReaper() {
  thread_ = std::thread([this] { loop(); });
}

SendReaper::~SendReaper() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void SendReaper::send(ProcessLinks& links, int comm, const Tensor& t, int dest, int tag) {
  std::unique_ptr<LinkRequests> requests = links.requests();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.empty()) throw Error(error_);
  }
  requests->send(comm, t.data(), int64_t(t.nbytes()), dest, tag, dest);
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_.push_back({t, std::move(requests)});
  }
  cv_.notify_one();
}

void SendReaper::give_up_at_end() {
  std::lock_guard<std::mutex> lock(mu_);
  give_up_at_once_ = true;
}

void SendReaper::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  std::chrono::steady_clock::time_point give_up{};
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !in_flight_.empty(); });
    if (in_flight_.empty()) return;  // stopping, all sent
    size_t kept = 0;
    for (size_t i = 0; i < in_flight_.size(); ++i) {
      bool done = true;
      try {
        done = in_flight_[i].requests->test();
      } catch (const Error& e) {
        // Reported by the next send (and to its receiver, as a length mismatch or a timeout).
        if (error_.empty()) error_ = str_cat("an earlier channel send to another process failed: ", e.what());
      }
      if (!done) in_flight_[kept++] = std::move(in_flight_[i]);
    }
    in_flight_.resize(kept);
    if (stop_ && !in_flight_.empty()) {
      if (give_up == std::chrono::steady_clock::time_point{})
        give_up = std::chrono::steady_clock::now() + (give_up_at_once_ ? std::chrono::seconds(0) : kDrain);
      if (std::chrono::steady_clock::now() >= give_up) {
        // Receivers that never came (a failed run). MPI may still read these buffers: keep them.
        auto* leaked = new std::vector<Tensor>();
        for (InFlight& f : in_flight_) {
          f.requests->abandon();
          leaked->push_back(std::move(f.tensor));
        }
        in_flight_.clear();
        return;
      }
    }
    // Sends in flight: poll again soon (each test also moves MPI's progress along).
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    lock.lock();
  }
}

std::unique_ptr<Channel> make_host_send_channel(std::shared_ptr<ProcessLinks> links, int comm, int dest, int tag,
                                                std::shared_ptr<SendReaper> reaper, std::shared_ptr<void> owner) {
  return std::make_unique<HostSendChannel>(std::move(links), comm, dest, tag, std::move(reaper), std::move(owner));
}

std::unique_ptr<Channel> make_host_recv_channel(std::shared_ptr<ProcessLinks> links, int comm, int source, int tag,
                                                std::chrono::milliseconds timeout, std::shared_ptr<void> owner) {
  return std::make_unique<HostRecvChannel>(std::move(links), comm, source, tag, timeout, std::move(owner));
}

}  // namespace troupe::actors
