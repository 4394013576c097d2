// The TCP backend of the process links (actors/fabric/tcp_links.hpp) between two or three
// "processes" in this one, over loopback connections: messages meet their receives in order per
// (communicator, tag) whether they arrive before or after the receive is posted; large messages
// both ways at once; length mismatches; and a peer whose connection closes failing every
// transfer with it at once, naming the process.
#include "actors/fabric/tcp_links.hpp"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>

#include "base/check.hpp"

namespace troupe::test {
namespace {

using actors::LinkRequests;
using actors::TcpLinks;
using actors::UniqueFd;
using namespace std::chrono_literals;

std::chrono::steady_clock::time_point in(std::chrono::milliseconds d) { return std::chrono::steady_clock::now() + d; }

// Two connected loopback sockets.
std::pair<UniqueFd, UniqueFd> connected_pair() {
  UniqueFd server = actors::tcp_listen(AF_INET, 0, "test server");
  const int port = actors::tcp_local_port(server.get());
  UniqueFd a = actors::tcp_connect("127.0.0.1", port, in(10s), "test connect");
  UniqueFd b = actors::tcp_accept(server.get(), in(10s), "test accept");
  return {std::move(a), std::move(b)};
}

// P processes' links, fully connected.
std::vector<std::unique_ptr<TcpLinks>> mesh(int P) {
  std::vector<std::vector<UniqueFd>> fds(static_cast<size_t>(P));
  for (auto& f : fds) f.resize(size_t(P));
  for (int p = 0; p < P; ++p)
    for (int q = p + 1; q < P; ++q) {
      auto [a, b] = connected_pair();
      fds[size_t(p)][size_t(q)] = std::move(a);
      fds[size_t(q)][size_t(p)] = std::move(b);
    }
  std::vector<std::unique_ptr<TcpLinks>> links;
  for (int p = 0; p < P; ++p) links.push_back(std::make_unique<TcpLinks>(p, p, std::move(fds[size_t(p)])));
  return links;
}

void wait_all(LinkRequests& rq) {
  std::vector<int> late;
  ASSERT_TRUE(rq.wait_until(in(20s), nullptr, late)) << late.size() << " transfers late";
}

std::vector<int32_t> iota(size_t n, int32_t from) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

TEST(TcpLinks, MessagesMeetTheirReceivesInOrderPerCommunicatorAndTag) {
  auto links = mesh(2);
  EXPECT_EQ(links[0]->processes(), 2);
  EXPECT_EQ(links[1]->process(), 1);
  const int comm = links[0]->new_communicator();
  EXPECT_EQ(links[1]->new_communicator(), comm);
  EXPECT_GE(comm, 2);
  // Sent: tag 7 [a], tag 9 [b], tag 7 [c], comm 0 tag 7 [d]; received in another order.
  const auto a = iota(3, 100), b = iota(5, 200), c = iota(2, 300), d = iota(4, 400);
  auto send = links[0]->requests();
  send->send(comm, a.data(), 12, 1, 7, 1);
  send->send(comm, b.data(), 20, 1, 9, 1);
  send->send(comm, c.data(), 8, 1, 7, 1);
  send->send(0, d.data(), 16, 1, 7, 1);
  std::vector<int32_t> ra(3), rb(5), rc(2), rd(4);
  auto recv = links[1]->requests();
  recv->recv(0, rd.data(), 16, 0, 7, 0);
  recv->recv(comm, rb.data(), 20, 0, 9, 0);
  recv->recv(comm, ra.data(), 12, 0, 7, 0);
  recv->recv(comm, rc.data(), 8, 0, 7, 0);
  wait_all(*send);
  wait_all(*recv);
  EXPECT_TRUE(recv->empty());
  EXPECT_EQ(ra, a);
  EXPECT_EQ(rb, b);
  EXPECT_EQ(rc, c);
  EXPECT_EQ(rd, d);
}

// Receives posted before the data comes, after it came, and a zero-byte message; 24 MB each
// way at once (far beyond the sockets' buffers: neither side may block the other).
TEST(TcpLinks, BothWaysAtOnceEarlyAndLate) {
  auto links = mesh(2);
  const size_t n = size_t(6) << 20;
  std::vector<std::vector<int32_t>> out = {iota(n, 1), iota(n, 7)}, got(2, std::vector<int32_t>(n));
  std::vector<std::thread> threads;
  for (int p = 0; p < 2; ++p)
    threads.emplace_back([&, p] {
      const int q = 1 - p;
      auto rq = links[size_t(p)]->requests();
      char none = 0;
      if (p == 0) rq->recv(0, got[0].data(), int64_t(n * 4), q, 1, q);  // posted first
      rq->send(0, out[size_t(p)].data(), int64_t(n * 4), q, 1, q);
      rq->send(0, &none, 0, q, 2, q);
      std::this_thread::sleep_for(50ms);
      if (p == 1) rq->recv(0, got[1].data(), int64_t(n * 4), q, 1, q);  // the data is (partly) here
      rq->recv(0, &none, 0, q, 2, q);
      wait_all(*rq);
    });
  for (auto& t : threads) t.join();
  EXPECT_TRUE(got[0] == out[1]);
  EXPECT_TRUE(got[1] == out[0]);
}

TEST(TcpLinks, ALengthMismatchFailsTheReceive) {
  auto links = mesh(2);
  const auto a = iota(2, 0);
  auto send = links[0]->requests();
  send->send(0, a.data(), 8, 1, 3, 1);
  wait_all(*send);
  std::vector<int32_t> r(1);
  auto recv = links[1]->requests();
  recv->recv(0, r.data(), 4, 0, 3, 5);
  std::vector<int> late;
  try {
    recv->wait_until(in(10s), nullptr, late);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("received 8 bytes from process 0 (peer 5), expected 4"), std::string::npos)
        << e.what();
  }
}

// Unfinished transfers at the deadline or at a stop are reported by label; an abandoned receive
// is never written, and the message it waited for meets the next receive.
TEST(TcpLinks, DeadlineStopAndAbandon) {
  auto links = mesh(3);
  int32_t x = 0, y = 0;
  auto rq = links[0]->requests();
  rq->recv(0, &x, 4, 1, 1, 11);
  rq->recv(0, &y, 4, 2, 1, 22);
  std::vector<int> late;
  EXPECT_FALSE(rq->wait_until(in(50ms), nullptr, late));
  EXPECT_EQ(late, (std::vector<int>{11, 22}));
  EXPECT_FALSE(rq->wait_until(
      in(10s), [] { return true; }, late));
  EXPECT_EQ(late, (std::vector<int>{11, 22}));
  rq->abandon();
  EXPECT_TRUE(rq->empty());
  const int32_t v = 42;
  auto send = links[1]->requests();
  send->send(0, &v, 4, 0, 1, 0);
  wait_all(*send);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(x, 0);  // not written
  int32_t z = 0;
  rq->recv(0, &z, 4, 1, 1, 11);
  wait_all(*rq);
  EXPECT_EQ(z, 42);
}

// The other end closes (its process was killed: the kernel closes its sockets). A receive
// waiting on it fails at once naming process 1, a send to it too, and so does anything later.
TEST(TcpLinks, APeerThatGoesAwayFailsItsTransfersAtOnce) {
  auto [mine, theirs] = connected_pair();
  std::vector<UniqueFd> fds(2);
  fds[1] = std::move(mine);
  TcpLinks links(0, 0, std::move(fds));
  int32_t x = 0;
  auto rq = links.requests();
  rq->recv(0, &x, 4, 1, 1, 1);
  std::thread killer([fd = std::move(theirs)]() mutable {
    std::this_thread::sleep_for(200ms);
    fd = UniqueFd();
  });
  const auto t0 = std::chrono::steady_clock::now();
  std::string error;
  try {
    std::vector<int> late;
    rq->wait_until(in(60s), nullptr, late);
  } catch (const Error& e) {
    error = e.what();
  }
  killer.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 5.0);
  EXPECT_NE(error.find("a receive from process 1 failed: process 1 went away"), std::string::npos) << error;
  auto later = links.requests();
  later->send(0, &x, 4, 1, 1, 1);
  EXPECT_THROW(later->test(), Error);
  later->recv(0, &x, 4, 1, 2, 1);
  try {
    later->test();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("process 1 went away"), std::string::npos) << e.what();
  }
}

TEST(TcpLinks, BadPeersAreErrors) {
  auto links = mesh(2);
  int32_t x = 0;
  auto rq = links[0]->requests();
  EXPECT_THROW(rq->recv(0, &x, 4, 0, 1, 0), Error);  // itself
  EXPECT_THROW(rq->send(0, &x, 4, 2, 1, 0), Error);  // no such process
}

}  // namespace
}  // namespace troupe::test
