#include "actors/fabric/host_exchange.hpp"

#include <cmath>
#include <cstring>
#include <functional>

#include "base/check.hpp"

namespace troupe::actors {

namespace {

// One tag per kind of message: messages of one tag arrive in order, and every process runs the
// helpers in the same order, so a message always meets the receive meant for it.
enum Tag : int {
  kLengthTag = 1,
  kDataTag = 2,
  kBroadcastSizeTag = 3,
  kBroadcastDataTag = 4,
  kBarrierTag = 5,
  kClockPingTag = 6,
  kClockPongTag = 7
};

void wait_all(LinkRequests& rq, const char* what, const PeerWatch& watch) {
  std::vector<int> unfinished;
  std::string gone;
  const auto stop = [&] {
    if (watch) gone = watch();
    return !gone.empty();
  };
  bool done = false;
  try {
    done =
        rq.wait_until(std::chrono::steady_clock::time_point::max(), watch ? stop : std::function<bool()>(), unfinished);
  } catch (const Error& e) {
    TROUPE_FAIL(what, ": ", e.what());
  }
  if (!done) {
    rq.abandon();
    TROUPE_FAIL(what, ": ", gone);
  }
}

void combine(double& acc, double x, ReduceOp op) {
  if (op == ReduceOp::sum)
    acc += x;
  else if (x > acc || std::isnan(x))
    acc = x;  // max; NaN wins
}

}  // namespace

std::vector<std::string> host_all_gather(ProcessLinks& links, int comm, const std::string& mine,
                                         const PeerWatch& watch) {
  const int me = links.process(), P = links.processes();
  std::vector<uint64_t> lengths(size_t(P), 0);
  lengths[size_t(me)] = mine.size();
  {
    std::unique_ptr<LinkRequests> rq = links.requests();
    for (int p = 0; p < P; ++p) {
      if (p == me) continue;
      rq->recv(comm, &lengths[size_t(p)], sizeof(uint64_t), p, kLengthTag, p);
      rq->send(comm, &lengths[size_t(me)], sizeof(uint64_t), p, kLengthTag, p);
    }
    wait_all(*rq, "Fabric::all_gather: the lengths", watch);
  }
  std::vector<std::string> out(static_cast<size_t>(P));
  std::unique_ptr<LinkRequests> rq = links.requests();
  for (int p = 0; p < P; ++p) {
    if (p == me) {
      out[size_t(p)] = mine;
      continue;
    }
    out[size_t(p)].resize(size_t(lengths[size_t(p)]));
    rq->recv(comm, out[size_t(p)].data(), int64_t(lengths[size_t(p)]), p, kDataTag, p);
    rq->send(comm, mine.data(), int64_t(mine.size()), p, kDataTag, p);
  }
  wait_all(*rq, "Fabric::all_gather", watch);
  return out;
}

void host_all_reduce(ProcessLinks& links, int comm, std::vector<double>& values, ReduceOp op, const PeerWatch& watch) {
  const int P = links.processes();
  std::string mine(values.size() * sizeof(double), '\0');
  if (!values.empty()) std::memcpy(mine.data(), values.data(), mine.size());
  const std::vector<std::string> all = host_all_gather(links, comm, mine, watch);
  for (int p = 0; p < P; ++p)
    TROUPE_CHECK(all[size_t(p)].size() == mine.size(), "Fabric::all_reduce: process ", p, " reduces ",
                 all[size_t(p)].size() / sizeof(double), " values, process ", links.process(), " ", values.size());
  // Reduced in process order: the same bits everywhere.
  for (size_t e = 0; e < values.size(); ++e) {
    double acc = 0;
    std::memcpy(&acc, all[0].data() + e * sizeof(double), sizeof(double));
    for (int p = 1; p < P; ++p) {
      double x = 0;
      std::memcpy(&x, all[size_t(p)].data() + e * sizeof(double), sizeof(double));
      combine(acc, x, op);
    }
    values[e] = acc;
  }
}

void host_barrier(ProcessLinks& links, int comm, const PeerWatch& watch) {
  const int me = links.process(), P = links.processes();
  std::unique_ptr<LinkRequests> rq = links.requests();
  char none = 0;
  for (int p = 0; p < P; ++p) {
    if (p == me) continue;
    rq->recv(comm, &none, 0, p, kBarrierTag, p);
    rq->send(comm, &none, 0, p, kBarrierTag, p);
  }
  wait_all(*rq, "Fabric::barrier", watch);
}

void host_broadcast(ProcessLinks& links, int comm, std::vector<uint8_t>& bytes, int root, const PeerWatch& watch) {
  const int me = links.process(), P = links.processes();
  uint64_t n = bytes.size();
  std::unique_ptr<LinkRequests> rq = links.requests();
  if (me != root) {
    rq->recv(comm, &n, sizeof n, root, kBroadcastSizeTag, root);
    wait_all(*rq, "Fabric::broadcast: the size", watch);
    bytes.resize(size_t(n));
    rq->recv(comm, bytes.data(), int64_t(n), root, kBroadcastDataTag, root);
  } else {
    for (int p = 0; p < P; ++p) {
      if (p == me) continue;
      rq->send(comm, &n, sizeof n, p, kBroadcastSizeTag, p);
      rq->send(comm, bytes.data(), int64_t(n), p, kBroadcastDataTag, p);
    }
  }
  wait_all(*rq, str_cat("Fabric::broadcast of ", n, " bytes from process ", root).c_str(), watch);
}

ClockOffset clock_offset_estimate(const std::vector<ClockSample>& samples) {
  TROUPE_CHECK(!samples.empty(), "clock_offset_estimate: no sample");
  const ClockSample* best = &samples[0];
  for (const ClockSample& s : samples)
    if (s.recv_ns - s.send_ns < best->recv_ns - best->send_ns) best = &s;
  const int64_t rtt = best->recv_ns - best->send_ns;
  return {best->peer_ns - (best->send_ns + rtt / 2), rtt};
}

ClockOffset host_clock_offset(ProcessLinks& links, int comm, const std::function<int64_t()>& now_ns, int rounds,
                              const PeerWatch& watch) {
  const int me = links.process(), P = links.processes();
  TROUPE_CHECK(rounds >= 1, "host_clock_offset: ", rounds, " rounds");
  if (me == 0) {
    // Answers every other process in turn, reading the clock as late as possible before the answer.
    for (int p = 1; p < P; ++p)
      for (int i = 0; i < rounds; ++i) {
        int32_t ping = 0;
        {
          std::unique_ptr<LinkRequests> rq = links.requests();
          rq->recv(comm, &ping, sizeof ping, p, kClockPingTag, p);
          wait_all(*rq, "the clock exchange", watch);
        }
        const int64_t t0 = now_ns();
        std::unique_ptr<LinkRequests> rq = links.requests();
        rq->send(comm, &t0, sizeof t0, p, kClockPongTag, p);
        wait_all(*rq, "the clock exchange", watch);
      }
    return {};
  }
  std::vector<ClockSample> samples;
  for (int i = 0; i < rounds; ++i) {
    int32_t ping = i;
    int64_t t0 = 0;
    std::unique_ptr<LinkRequests> rq = links.requests();
    rq->recv(comm, &t0, sizeof t0, 0, kClockPongTag, 0);  // posted first: the answer never waits for it
    const int64_t sent = now_ns();
    rq->send(comm, &ping, sizeof ping, 0, kClockPingTag, 0);
    wait_all(*rq, "the clock exchange", watch);
    samples.push_back({sent, t0, now_ns()});
  }
  return clock_offset_estimate(samples);
}

}  // namespace troupe::actors
