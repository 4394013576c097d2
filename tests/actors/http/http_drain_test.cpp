// Stopping the HTTP server drains it: no new connections, idle ones closed, a streamed reply in
// flight runs to its end within the shutdown timeout; one longer than the timeout is cut at it
// (its writer returns false) and the server stops then; stop_now() cuts at once.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "actors/http/http_server.hpp"
#include "tests/actors/http/raw_http_connection.hpp"
#include "tests/http_client.hpp"
#include "tests/sse_client.hpp"

namespace troupe::test {
namespace {

using namespace std::chrono_literals;
using actors::ChunkWriter;
using actors::HttpReply;
using actors::HttpRoute;
using actors::HttpServer;
using actors::HttpServerOptions;
using Clock = std::chrono::steady_clock;

// POST /stream: `events` events 100 ms apart; remembers whether the writer refused one.
struct SlowStream {
  int events = 10;
  std::atomic<int> written{0};
  std::atomic<bool> refused{false}, finished{false};

  std::vector<HttpRoute> routes() {
    return {{"POST", "/stream",
             [this](const std::string&) {
               HttpReply r(200, "", "text/event-stream");
               r.stream = [this](const ChunkWriter& write) {
                 for (int i = 0; i < events; ++i) {
                   if (!write("data: " + std::to_string(i) + "\n\n")) {
                     refused = true;
                     break;
                   }
                   ++written;
                   std::this_thread::sleep_for(100ms);
                 }
                 finished = true;
               };
               return r;
             }},
            {"GET", "/ping", [](const std::string&) { return HttpReply(200, "pong", "text/plain"); }}};
  }
};

bool refuses_connections(int port) {
  try {
    RawHttpConnection c(port, 2);
    return !c.send("GET /ping HTTP/1.1\r\nHost: t\r\n\r\n") || c.closed_within(2s);
  } catch (const Error&) {
    return true;  // connection refused
  }
}

TEST(HttpDrain, AStreamInFlightRunsToItsEndWithinTheShutdownTimeout) {
  SlowStream s;
  HttpServerOptions o;
  o.shutdown_timeout = 30s;
  HttpServer http("127.0.0.1", 0, s.routes(), o);
  RawHttpConnection idle(http.port());
  SseClient c("127.0.0.1", http.port(), "/stream", "{}");
  ASSERT_EQ(c.head().status, 200);
  ASSERT_EQ(c.next(), std::optional<std::string>("0"));
  const auto stop_at = Clock::now();
  http.stop();
  EXPECT_TRUE(idle.closed_within(10s)) << "an idle connection stays open through the drain";
  EXPECT_TRUE(refuses_connections(http.port()));
  for (int i = 1; i < s.events; ++i) EXPECT_EQ(c.next(), std::optional<std::string>(std::to_string(i)));
  EXPECT_EQ(c.next(), std::nullopt);  // the stream's proper end (the last chunk)
  EXPECT_TRUE(http.wait_for(20s));
  EXPECT_LT(Clock::now() - stop_at, 20s);
  EXPECT_FALSE(s.refused);
  EXPECT_EQ(s.written, s.events);
}

TEST(HttpDrain, AStreamLongerThanTheShutdownTimeoutIsCutAtIt) {
  SlowStream s;
  s.events = 600;  // a minute
  HttpServerOptions o;
  o.shutdown_timeout = 500ms;
  HttpServer http("127.0.0.1", 0, s.routes(), o);
  SseClient c("127.0.0.1", http.port(), "/stream", "{}");
  ASSERT_EQ(c.next(), std::optional<std::string>("0"));
  const auto stop_at = Clock::now();
  http.stop();
  EXPECT_TRUE(http.wait_for(20s)) << "the server did not stop after its shutdown timeout";
  EXPECT_LT(Clock::now() - stop_at, 20s);
  EXPECT_GE(Clock::now() - stop_at, 400ms) << "cut before the shutdown timeout";
  int events = 1;
  try {
    while (c.next()) ++events;
  } catch (const Error&) {  // a reset: cut all the same
  }
  EXPECT_LT(events, s.events);
  ASSERT_TRUE([&] {
    for (auto end = Clock::now() + 20s; Clock::now() < end; std::this_thread::sleep_for(10ms))
      if (s.finished) return true;
    return false;
  }());
  EXPECT_TRUE(s.refused) << "the writer never said the client was gone";
}

TEST(HttpDrain, StopNowCutsAtOnce) {
  SlowStream s;
  s.events = 600;
  HttpServer http("127.0.0.1", 0, s.routes());  // a 30 s shutdown timeout
  SseClient c("127.0.0.1", http.port(), "/stream", "{}");
  ASSERT_EQ(c.next(), std::optional<std::string>("0"));
  http.stop();
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(http.wait_for(0ms)) << "stopped with a stream in flight";
  const auto cut_at = Clock::now();
  http.stop_now();
  EXPECT_TRUE(http.wait_for(20s));
  EXPECT_LT(Clock::now() - cut_at, 15s);
}

}  // namespace
}  // namespace troupe::test
