#include "actors/fabric/host_exchange.hpp"

#include <cmath>
#include <cstring>
#include <functional>

#include "base/check.hpp"

namespace troupe::actors {

namespace {

// One tag per kind of message: messages of one tag arrive in order, and every process runs the
// helpers in the same order, so a message always meets the receive meant for it.
enum Tag : int { kLengthTag = 1, kDataTag = 2, kBroadcastSizeTag = 3, kBroadcastDataTag = 4, kBarrierTag = 5 };

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

}  // namespace troupe::actors
