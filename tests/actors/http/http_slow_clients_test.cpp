// Slow and idle clients against the HTTP server: a connection that sends nothing is closed after
// the idle timeout, one that trickles its headers after the header timeout; hundreds of idle and
// trickling connections hold no handler thread, so a normal request is still answered at once;
// beyond max_connections a new connection waits until one closes. (bench/http_slow_clients.cpp
// measures the same against `troupe serve` with 2,000 connections.)
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "actors/http/http_server.hpp"
#include "tests/actors/http/raw_http_connection.hpp"
#include "tests/http_client.hpp"

namespace troupe::test {
namespace {

using namespace std::chrono_literals;
using actors::HttpReply;
using actors::HttpRoute;
using actors::HttpServer;
using actors::HttpServerOptions;
using Clock = std::chrono::steady_clock;

std::vector<HttpRoute> ping_route() {
  return {{"GET", "/ping", [](const std::string&) { return HttpReply(200, "pong", "text/plain"); }}};
}

// Polls until `done` holds or `limit` passes.
bool eventually(const std::function<bool()>& done, std::chrono::milliseconds limit) {
  for (auto end = Clock::now() + limit; Clock::now() < end; std::this_thread::sleep_for(10ms))
    if (done()) return true;
  return done();
}

TEST(HttpSlowClients, AConnectionThatSendsNothingIsClosedAfterTheIdleTimeout) {
  HttpServerOptions o;
  o.idle_timeout = 300ms;
  HttpServer http("127.0.0.1", 0, ping_route(), o);
  RawHttpConnection idle(http.port());
  EXPECT_TRUE(idle.closed_within(10s));
  // Kept alive after an answer, the same.
  RawHttpConnection kept(http.port());
  ASSERT_TRUE(kept.send("GET /ping HTTP/1.1\r\nHost: t\r\n\r\n"));
  EXPECT_EQ(kept.read_response().body, "pong");
  EXPECT_TRUE(kept.closed_within(10s));
  EXPECT_TRUE(eventually([&] { return http.connections() == 0; }, 10s)) << http.connections();
}

TEST(HttpSlowClients, AConnectionTricklingItsHeadersIsClosedAtTheHeaderTimeout) {
  HttpServerOptions o;
  o.header_timeout = 500ms;
  o.idle_timeout = 60s;
  HttpServer http("127.0.0.1", 0, ping_route(), o);
  RawHttpConnection c(http.port());
  ASSERT_TRUE(c.send("GET /ping HTTP/1.1\r\n"));
  // A header line every 100 ms resets no read timeout: the whole head has 500 ms.
  const auto start = Clock::now();
  bool closed = false;
  while (!closed && Clock::now() - start < 20s) {
    closed = !c.send("X-Slow: 1\r\n") || c.closed_within(100ms);
  }
  EXPECT_TRUE(closed) << "still open after 20 s of trickling";
  EXPECT_LT(Clock::now() - start, 15s);
}

TEST(HttpSlowClients, IdleAndTricklingConnectionsDoNotDelayANormalRequest) {
  HttpServerOptions o;
  o.threads = 2;  // far fewer than the connections: they must hold none
  HttpServer http("127.0.0.1", 0, ping_route(), o);
  constexpr int kIdle = 300, kTrickling = 100;
  std::vector<std::unique_ptr<RawHttpConnection>> idle, trickling;
  for (int i = 0; i < kIdle; ++i) idle.push_back(std::make_unique<RawHttpConnection>(http.port()));
  for (int i = 0; i < kTrickling; ++i) {
    trickling.push_back(std::make_unique<RawHttpConnection>(http.port()));
    trickling.back()->send("GET /ping HTTP/1.1\r\n");
  }
  std::atomic<bool> done{false};
  std::thread trickle([&] {
    while (!done) {
      for (auto& c : trickling) c->send("X-Slow: 1\r\n");
      std::this_thread::sleep_for(200ms);
    }
  });
  ASSERT_TRUE(eventually([&] { return http.connections() >= kIdle + kTrickling; }, 30s)) << http.connections();
  for (int i = 0; i < 5; ++i) {
    const auto start = Clock::now();
    const HttpResponse r = http_get("127.0.0.1", http.port(), "/ping");
    const auto took = Clock::now() - start;
    EXPECT_EQ(r.status, 200);
    // Prompt: milliseconds when it works; a server whose threads wait on the idle connections
    // answers after their read timeouts (seconds each).
    EXPECT_LT(took, 3s) << std::chrono::duration<double>(took).count() << " s";
  }
  done = true;
  trickle.join();
}

TEST(HttpSlowClients, BeyondMaxConnectionsANewOneWaitsUntilOneCloses) {
  HttpServerOptions o;
  o.max_connections = 4;
  HttpServer http("127.0.0.1", 0, ping_route(), o);
  std::vector<std::unique_ptr<RawHttpConnection>> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(std::make_unique<RawHttpConnection>(http.port()));
  ASSERT_TRUE(eventually([&] { return http.connections() == 4; }, 10s)) << http.connections();
  RawHttpConnection fifth(http.port());  // the kernel completes the handshake; the server does not accept it yet
  ASSERT_TRUE(fifth.send("GET /ping HTTP/1.1\r\nHost: t\r\n\r\n"));
  EXPECT_FALSE(fifth.closed_within(500ms));
  EXPECT_EQ(fifth.pending_bytes(), 0u) << "answered beyond max_connections";
  EXPECT_EQ(http.connections(), 4);
  idle[0]->close();
  const HttpResponse r = fifth.read_response();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "pong");
}

}  // namespace
}  // namespace troupe::test
