#include "actors/fabric/tcp_links.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/check.hpp"
#include "base/log.hpp"

namespace troupe::actors {

namespace {

// What precedes every message on a link (both ends run the same build on the same kind of
// machine: native byte order).
struct FrameHeader {
  int32_t comm = 0;
  int32_t tag = 0;
  int64_t bytes = 0;
};
static_assert(sizeof(FrameHeader) == 16);

constexpr int64_t kBurst = int64_t(4) << 20;       // bytes moved per peer before the lock is let go
constexpr auto kLinger = std::chrono::seconds(5);  // at the end: how long to wait for the peers to finish

bool again(int err) { return err == EAGAIN || err == EWOULDBLOCK || err == EINTR; }

}  // namespace

struct TcpLinks::Transfer {
  enum class State { posted, active, done, failed, abandoned };
  bool send = false;
  int peer = 0, comm = 0, tag = 0, label = 0;
  std::byte* data = nullptr;
  int64_t bytes = 0;
  std::vector<std::byte> owned;  // an abandoned send goes on from this copy (the stream stays whole)
  State state = State::posted;
  std::string error;
};

// A frame that arrived before its receive was posted.
struct TcpLinks::Incoming {
  std::vector<std::byte> data;
  bool complete = false;
  std::shared_ptr<Transfer> claimed;  // a receive posted while it was still arriving
};

struct TcpLinks::Peer {
  UniqueFd fd;
  bool open = true;      // false once the connection failed or closed during the run
  bool eof = false;      // while stopping: it is done sending
  bool shut_wr = false;  // while stopping: we told it we are done
  std::string gone;      // why it is closed, naming the process
  // Sending: the front frame is being written, `sent` bytes of header and body so far.
  std::deque<std::shared_ptr<Transfer>> sends;
  int64_t sent = 0;
  // Receiving: the header, then the body into `into` (a posted receive), `early` (kept for a
  // receive to come) or nowhere (a receive that failed or was abandoned).
  FrameHeader in;
  int64_t header_got = 0;
  bool in_body = false;
  int64_t body_got = 0;
  std::shared_ptr<Transfer> into;
  std::shared_ptr<Incoming> early;
  std::map<Key, std::deque<std::shared_ptr<Transfer>>> posted;
  std::map<Key, std::deque<std::shared_ptr<Incoming>>> arrived;
};

namespace {

std::string length_mismatch(const TcpLinks::Transfer& t, int64_t got) {
  return str_cat("received ", got, " bytes from process ", t.peer, " (peer ", t.label, "), expected ", t.bytes,
                 ": the two sides disagree on the transfer");
}

}  // namespace

class TcpRequests final : public LinkRequests {
 public:
  explicit TcpRequests(TcpLinks& links) : links_(links) {}
  ~TcpRequests() override { abandon(); }
  TcpRequests(const TcpRequests&) = delete;
  TcpRequests& operator=(const TcpRequests&) = delete;

  void send(int comm, const void* data, int64_t bytes, int dest, int tag, int label) override {
    post(true, comm, const_cast<void*>(data), bytes, dest, tag, label);
  }
  void recv(int comm, void* data, int64_t bytes, int source, int tag, int label) override {
    post(false, comm, data, bytes, source, tag, label);
  }
  bool empty() const override { return transfers_.empty(); }
  bool test() override {
    std::lock_guard<std::mutex> lock(links_.mu_);
    return reap_locked();
  }
  bool wait_until(std::chrono::steady_clock::time_point deadline, const std::function<bool()>& stop,
                  std::vector<int>& unfinished) override {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(links_.mu_);
        if (reap_locked()) return true;
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) break;
        // Woken by every completion; a stop predicate is looked at every few milliseconds.
        const uint64_t seen = links_.completions_;
        const auto step = std::min<std::chrono::steady_clock::duration>(deadline - now, std::chrono::milliseconds(5));
        links_.done_cv_.wait_for(lock, step, [&] { return links_.completions_ != seen; });
      }
      if (stop && stop()) break;
    }
    unfinished.clear();
    for (const auto& t : transfers_) unfinished.push_back(t->label);
    std::sort(unfinished.begin(), unfinished.end());
    unfinished.erase(std::unique(unfinished.begin(), unfinished.end()), unfinished.end());
    return false;
  }
  void abandon() override {
    std::lock_guard<std::mutex> lock(links_.mu_);
    for (const auto& t : transfers_) links_.abandon_locked(*t);
    transfers_.clear();
  }

 private:
  void post(bool is_send, int comm, void* data, int64_t bytes, int peer, int tag, int label) {
    TROUPE_CHECK(peer >= 0 && peer < links_.processes() && peer != links_.process(), "TCP links: a ",
                 is_send ? "send to" : "receive from", " process ", peer, " in process ", links_.process(), " of ",
                 links_.processes());
    TROUPE_CHECK(bytes >= 0 && (bytes == 0 || data), "TCP links: a transfer of ", bytes, " bytes");
    auto t = std::make_shared<TcpLinks::Transfer>();
    t->send = is_send;
    t->peer = peer;
    t->comm = comm;
    t->tag = tag;
    t->label = label;
    t->data = static_cast<std::byte*>(data);
    t->bytes = bytes;
    std::lock_guard<std::mutex> lock(links_.mu_);
    links_.post_locked(t);
    transfers_.push_back(std::move(t));
  }
  // Drops the completed transfers; true when none is left. The first failed one throws.
  bool reap_locked() {
    std::string error;
    size_t kept = 0;
    for (auto& t : transfers_) {
      if (t->state == TcpLinks::Transfer::State::done) continue;
      if (t->state == TcpLinks::Transfer::State::failed) {
        if (error.empty()) error = t->error;
        continue;
      }
      transfers_[kept++] = std::move(t);
    }
    transfers_.resize(kept);
    if (!error.empty()) throw Error(error);
    return transfers_.empty();
  }

  TcpLinks& links_;
  std::vector<std::shared_ptr<TcpLinks::Transfer>> transfers_;
};

TcpLinks::TcpLinks(int process, int node_process, std::vector<UniqueFd> peers)
    : process_(process), node_process_(node_process) {
  TROUPE_CHECK(process >= 0 && size_t(process) < peers.size(), "TCP links: process ", process, " of ", peers.size());
  for (size_t p = 0; p < peers.size(); ++p) {
    if (int(p) == process) {
      peers_.push_back(nullptr);
      continue;
    }
    TROUPE_CHECK(bool(peers[p]), "TCP links: no connection to process ", p);
    tcp_set_streaming(peers[p].get());
    auto peer = std::make_unique<Peer>();
    peer->fd = std::move(peers[p]);
    peers_.push_back(std::move(peer));
  }
  wake_fd_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  TROUPE_SYSCALL(wake_fd_.get(), "TCP links: the progress thread's wake-up event");
  thread_ = std::thread([this] { loop(); });
}

TcpLinks::~TcpLinks() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake();
  thread_.join();
}

std::unique_ptr<LinkRequests> TcpLinks::requests() { return std::make_unique<TcpRequests>(*this); }

void TcpLinks::wake() const {
  const uint64_t one = 1;
  // Can only fail when the counter is full, and then the thread is being woken anyway.
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_.get(), &one, sizeof one);
}

void TcpLinks::complete(Transfer& t) {
  if (t.state != Transfer::State::posted && t.state != Transfer::State::active) return;
  t.state = Transfer::State::done;
  ++completions_;
  done_cv_.notify_all();
}

void TcpLinks::fail(Transfer& t, const std::string& why) {
  if (t.state != Transfer::State::posted && t.state != Transfer::State::active) return;
  t.state = Transfer::State::failed;
  t.error = why;
  ++completions_;
  done_cv_.notify_all();
}

void TcpLinks::post_locked(const std::shared_ptr<Transfer>& t) {
  Peer& peer = *peers_[size_t(t->peer)];
  if (t->send) {
    if (!peer.open) return fail(*t, str_cat("a send to process ", t->peer, " failed: ", peer.gone));
    peer.sends.push_back(t);
    wake();
    return;
  }
  // A frame that came first takes the receive (in arrival order), even from a process gone since.
  auto& arrived = peer.arrived[{t->comm, t->tag}];
  if (!arrived.empty()) {
    std::shared_ptr<Incoming> in = std::move(arrived.front());
    arrived.pop_front();
    if (int64_t(in->data.size()) != t->bytes) return fail(*t, length_mismatch(*t, int64_t(in->data.size())));
    if (!in->complete) {
      t->state = Transfer::State::active;
      in->claimed = t;
      return;
    }
    if (t->bytes > 0) std::memcpy(t->data, in->data.data(), size_t(t->bytes));
    return complete(*t);
  }
  if (!peer.open) return fail(*t, str_cat("a receive from process ", t->peer, " failed: ", peer.gone));
  peer.posted[{t->comm, t->tag}].push_back(t);
}

void TcpLinks::abandon_locked(Transfer& t) {
  if (t.state != Transfer::State::posted && t.state != Transfer::State::active) return;
  Peer& peer = *peers_[size_t(t.peer)];
  if (t.send) {
    // Still queued or half written: it goes from a copy, so the peer's stream stays whole.
    t.owned.assign(t.data, t.data + t.bytes);
    t.data = t.owned.data();
  } else if (peer.into.get() == &t) {
    peer.into = nullptr;  // the rest of the frame is read and dropped
  } else if (peer.early && peer.early->claimed.get() == &t) {
    peer.early->claimed = nullptr;
  } else {
    auto& posted = peer.posted[{t.comm, t.tag}];
    posted.erase(std::remove_if(posted.begin(), posted.end(), [&](const auto& x) { return x.get() == &t; }),
                 posted.end());
  }
  t.state = Transfer::State::abandoned;
}

void TcpLinks::close_peer(int p, const std::string& why) {
  Peer& peer = *peers_[size_t(p)];
  if (!peer.open) return;
  peer.open = false;
  peer.gone = str_cat("process ", p, " went away (its connection ", why, ": it exited or was killed)");
  logger("fabric").debug("process ", process_, ": ", peer.gone);
  for (auto& t : peer.sends) fail(*t, str_cat("a send to process ", p, " failed: ", peer.gone));
  peer.sends.clear();
  const std::string receive = str_cat("a receive from process ", p, " failed: ", peer.gone);
  for (auto& [key, queue] : peer.posted)
    for (auto& t : queue) fail(*t, receive);
  peer.posted.clear();
  if (peer.into) fail(*peer.into, receive);
  if (peer.early && peer.early->claimed) fail(*peer.early->claimed, receive);
  // Frames that arrived whole still meet their receives; the one cut off does not.
  if (peer.early && !peer.early->complete)
    for (auto& [key, queue] : peer.arrived)
      queue.erase(std::remove(queue.begin(), queue.end(), peer.early), queue.end());
  peer.into = nullptr;
  peer.early = nullptr;
  peer.fd = UniqueFd();
}

void TcpLinks::read_peer(int p) {
  Peer& peer = *peers_[size_t(p)];
  std::vector<std::byte> scratch;
  for (int64_t moved = 0; peer.open && !peer.eof && moved < kBurst;) {
    std::byte* dst = nullptr;
    int64_t want = 0;
    if (!peer.in_body) {
      dst = reinterpret_cast<std::byte*>(&peer.in) + peer.header_got;
      want = int64_t(sizeof(FrameHeader)) - peer.header_got;
    } else {
      want = peer.in.bytes - peer.body_got;
      if (peer.into) {
        dst = peer.into->data + peer.body_got;
      } else if (peer.early) {
        dst = peer.early->data.data() + peer.body_got;
      } else {
        want = std::min<int64_t>(want, 1 << 16);
        scratch.resize(size_t(want));
        dst = scratch.data();
      }
    }
    if (want > 0) {
      const ssize_t n = ::recv(peer.fd.get(), dst, size_t(want), 0);
      if (n == -1 && again(errno)) return;
      if (n == -1) return close_peer(p, str_cat("failed: ", std::strerror(errno)));
      if (n == 0) {
        if (stopping_) {
          peer.eof = true;
        } else {
          close_peer(p, "closed");
        }
        return;
      }
      moved += n;
      if (!peer.in_body) {
        peer.header_got += n;
        if (peer.header_got < int64_t(sizeof(FrameHeader))) continue;
      } else {
        peer.body_got += n;
      }
    }
    if (!peer.in_body) {  // a whole header: find the frame's receive
      if (peer.in.bytes < 0) return close_peer(p, "sent a garbled frame");
      peer.header_got = 0;
      peer.in_body = true;
      peer.body_got = 0;
      auto& posted = peer.posted[{peer.in.comm, peer.in.tag}];
      if (!posted.empty()) {
        std::shared_ptr<Transfer> t = std::move(posted.front());
        posted.pop_front();
        if (t->bytes == peer.in.bytes) {
          t->state = Transfer::State::active;
          peer.into = std::move(t);
        } else {
          fail(*t, length_mismatch(*t, peer.in.bytes));
        }
      } else {
        peer.early = std::make_shared<Incoming>();
        peer.early->data.resize(size_t(peer.in.bytes));
        peer.arrived[{peer.in.comm, peer.in.tag}].push_back(peer.early);
      }
    }
    if (peer.body_got < peer.in.bytes) continue;
    // A whole frame.
    if (peer.into) complete(*peer.into);
    if (peer.early) {
      peer.early->complete = true;
      if (std::shared_ptr<Transfer> t = std::move(peer.early->claimed)) {
        if (t->bytes > 0) std::memcpy(t->data, peer.early->data.data(), size_t(t->bytes));
        complete(*t);
      }
    }
    peer.into = nullptr;
    peer.early = nullptr;
    peer.in_body = false;
  }
}

void TcpLinks::write_peer(int p) {
  Peer& peer = *peers_[size_t(p)];
  for (int64_t moved = 0; peer.open && !peer.sends.empty() && moved < kBurst;) {
    Transfer& t = *peer.sends.front();
    const FrameHeader header{t.comm, t.tag, t.bytes};
    iovec iov[2];
    int parts = 0;
    const int64_t head = int64_t(sizeof header);
    if (peer.sent < head) {
      iov[parts++] = {const_cast<char*>(reinterpret_cast<const char*>(&header)) + peer.sent, size_t(head - peer.sent)};
      if (t.bytes > 0) iov[parts++] = {t.data, size_t(t.bytes)};
    } else {
      iov[parts++] = {t.data + (peer.sent - head), size_t(t.bytes - (peer.sent - head))};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = size_t(parts);
    const ssize_t n = ::sendmsg(peer.fd.get(), &msg, MSG_NOSIGNAL);
    if (n == -1 && again(errno)) return;
    if (n == -1) return close_peer(p, str_cat("failed: ", std::strerror(errno)));
    peer.sent += n;
    moved += n;
    if (peer.sent < head + t.bytes) continue;
    peer.sent = 0;
    complete(t);
    peer.sends.pop_front();
  }
}

void TcpLinks::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  std::chrono::steady_clock::time_point linger{};
  std::vector<pollfd> fds;
  std::vector<int> who;  // fds[i] is process who[i]'s (-1: the wake-up event)
  try {
    for (;;) {
      if (stopping_) {
        const auto now = std::chrono::steady_clock::now();
        if (linger == std::chrono::steady_clock::time_point{})
          linger = now + (hurry_ ? std::chrono::seconds(0) : kLinger);
        bool finished = true;
        for (auto& peer : peers_) {
          if (!peer || !peer->open) continue;
          if (peer->sends.empty() && !peer->shut_wr) {
            // Nothing more from us; it may still send (we read on until it is done too).
            TROUPE_SYSCALL(::shutdown(peer->fd.get(), SHUT_WR), "TCP links: finishing a connection");
            peer->shut_wr = true;
          }
          finished &= peer->shut_wr && peer->eof;
        }
        if (finished || now >= linger) break;
      }
      fds.clear();
      who.clear();
      fds.push_back({wake_fd_.get(), POLLIN, 0});
      who.push_back(-1);
      for (size_t p = 0; p < peers_.size(); ++p) {
        const Peer* peer = peers_[p].get();
        if (!peer || !peer->open || (peer->eof && peer->sends.empty())) continue;
        const short events = short((peer->eof ? 0 : POLLIN) | (peer->sends.empty() ? 0 : POLLOUT));
        fds.push_back({peer->fd.get(), events, 0});
        who.push_back(int(p));
      }
      const int timeout_ms = stopping_ ? 50 : -1;
      lock.unlock();
      int n = ::poll(fds.data(), fds.size(), timeout_ms);
      lock.lock();
      if (n == -1 && errno == EINTR) continue;
      TROUPE_SYSCALL(n, "TCP links: poll");
      for (size_t i = 0; i < fds.size(); ++i) {
        const short got = fds[i].revents;
        if (got == 0) continue;
        if (who[i] < 0) {
          uint64_t count = 0;
          const ssize_t r = ::read(wake_fd_.get(), &count, sizeof count);
          if (r == -1 && !again(errno)) TROUPE_SYSCALL(r, "TCP links: the wake-up event");
          continue;
        }
        if (got & (POLLIN | POLLHUP | POLLERR)) read_peer(who[i]);
        if (got & (POLLOUT | POLLHUP | POLLERR)) write_peer(who[i]);
      }
    }
  } catch (const Error& e) {
    // The links cannot go on: every transfer fails with the reason.
    for (size_t p = 0; p < peers_.size(); ++p)
      if (peers_[p]) close_peer(int(p), str_cat("was given up: ", e.what()));
  }
}

}  // namespace troupe::actors
