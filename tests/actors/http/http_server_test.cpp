// The HTTP server's protocol, through plain sockets: routes by exact path and method (HEAD with
// GET), keep-alive and pipelining, JSON 400/404/405/413/431/500 in OpenAI's error shape, the body limit
// for Content-Length and chunked bodies, Expect: 100-continue, handlers that read headers, the
// admit hook, and the access log line.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <string>
#include <thread>

#include "actors/http/http_server.hpp"
#include "tests/actors/http/raw_http_connection.hpp"
#include "tests/http_client.hpp"

namespace troupe::test {
namespace {

using json = nlohmann::json;
using actors::HttpReply;
using actors::HttpRequest;
using actors::HttpRoute;
using actors::HttpServer;
using actors::HttpServerOptions;

std::vector<HttpRoute> echo_routes() {
  return {{"GET", "/ping", [](const std::string& body) { return HttpReply(200, "pong" + body, "text/plain"); }},
          {"POST", "/echo", [](const std::string& body) { return HttpReply(200, body, "text/plain"); }},
          {"PUT", "/echo", [](const std::string& body) { return HttpReply(201, "put " + body, "text/plain"); }},
          {"GET", "/fail", [](const std::string&) -> HttpReply { throw std::runtime_error("the handler broke"); }}};
}

// The error object of an answer, checked for OpenAI's shape.
json error_of(const HttpResponse& r) {
  EXPECT_EQ(r.headers.at("content-type"), "application/json");
  const json j = json::parse(r.body);
  EXPECT_TRUE(j.contains("error")) << r.body;
  const json& e = j.at("error");
  EXPECT_TRUE(e.at("message").is_string()) << r.body;
  EXPECT_TRUE(e.at("type").is_string()) << r.body;
  EXPECT_TRUE(e.contains("param")) << r.body;
  EXPECT_EQ(e.at("code"), r.status) << r.body;
  return e;
}

TEST(HttpServer, AnswersItsRoutesByExactPathAndMethod) {
  HttpServer http("127.0.0.1", 0, echo_routes());
  const HttpResponse ping = http_get("127.0.0.1", http.port(), "/ping");
  EXPECT_EQ(ping.status, 200);
  EXPECT_EQ(ping.body, "pong");  // a GET handler gets no body
  EXPECT_EQ(ping.headers.at("content-type"), "text/plain");
  EXPECT_EQ(http_get("127.0.0.1", http.port(), "/ping?x=1").body, "pong");  // the query is not the path
  EXPECT_EQ(http_request("POST", "127.0.0.1", http.port(), "/echo", "hello").body, "hello");
  const HttpResponse put = http_request("PUT", "127.0.0.1", http.port(), "/echo", "there");
  EXPECT_EQ(put.status, 201);
  EXPECT_EQ(put.body, "put there");
}

TEST(HttpServer, UnknownPathIsAJson404AndAnotherMethodAJson405WithAllow) {
  HttpServer http("127.0.0.1", 0, echo_routes());
  const HttpResponse missing = http_get("127.0.0.1", http.port(), "/v2/nothing");
  EXPECT_EQ(missing.status, 404);
  EXPECT_NE(error_of(missing).at("message").get<std::string>().find("/v2/nothing"), std::string::npos);
  EXPECT_EQ(http_get("127.0.0.1", http.port(), "/pin").status, 404);  // exact paths, no prefixes
  EXPECT_EQ(http_get("127.0.0.1", http.port(), "/pingg").status, 404);

  const HttpResponse wrong = http_request("POST", "127.0.0.1", http.port(), "/ping", R"({"a": 1})");
  EXPECT_EQ(wrong.status, 405);
  EXPECT_EQ(wrong.headers.at("allow"), "GET, HEAD");
  EXPECT_NE(error_of(wrong).at("message").get<std::string>().find("POST"), std::string::npos);
  const HttpResponse get_echo = http_get("127.0.0.1", http.port(), "/echo");
  EXPECT_EQ(get_echo.status, 405);
  EXPECT_EQ(get_echo.headers.at("allow"), "POST, PUT");
  EXPECT_EQ(http_request("DELETE", "127.0.0.1", http.port(), "/echo", "").status, 405);
}

TEST(HttpServer, AHandlerThatThrowsIsAJson500) {
  HttpServer http("127.0.0.1", 0, echo_routes());
  const HttpResponse r = http_get("127.0.0.1", http.port(), "/fail");
  EXPECT_EQ(r.status, 500);
  const json e = error_of(r);
  EXPECT_EQ(e.at("message"), "the handler broke");
  EXPECT_EQ(e.at("type"), "server_error");
}

TEST(HttpServer, HeadAnswersAsGetWithoutTheBody) {
  HttpServer http("127.0.0.1", 0, echo_routes());
  RawHttpConnection c(http.port());
  ASSERT_TRUE(c.send("HEAD /ping HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"));
  const std::string all = c.read_to_end();
  ASSERT_NE(all.find("\r\n\r\n"), std::string::npos) << all;
  const HttpResponse head = parse_http_head(all.substr(0, all.find("\r\n\r\n") + 2));
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.headers.at("content-length"), "4");
  EXPECT_EQ(all.substr(all.find("\r\n\r\n") + 4), "");  // no body follows
}

TEST(HttpServer, KeepsConnectionsAliveAndAnswersPipelinedRequestsInOrder) {
  HttpServer http("127.0.0.1", 0, echo_routes());
  RawHttpConnection c(http.port());
  ASSERT_TRUE(c.send("GET /ping HTTP/1.1\r\nHost: t\r\n\r\n"));
  EXPECT_EQ(c.read_response().body, "pong");
  ASSERT_TRUE(c.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc"));
  EXPECT_EQ(c.read_response().body, "abc");
  // Two at once, then one that asks to close.
  ASSERT_TRUE(
      c.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\n1"
             "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\n2"
             "GET /nowhere HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"));
  EXPECT_EQ(c.read_response().body, "1");
  EXPECT_EQ(c.read_response().body, "2");
  const HttpResponse last = c.read_response();
  EXPECT_EQ(last.status, 404);
  EXPECT_EQ(last.headers.at("connection"), "close");
  EXPECT_TRUE(c.closed_within(std::chrono::seconds(10)));
}

TEST(HttpServer, ABodyOverTheLimitIsAJson413) {
  HttpServerOptions o;
  o.max_request_bytes = 1024;
  HttpServer http("127.0.0.1", 0, echo_routes(), o);
  EXPECT_EQ(http_request("POST", "127.0.0.1", http.port(), "/echo", std::string(1024, 'a')).body.size(), 1024u);

  const HttpResponse over = http_request("POST", "127.0.0.1", http.port(), "/echo", std::string(1025, 'a'));
  EXPECT_EQ(over.status, 413);
  const std::string message = error_of(over).at("message");
  EXPECT_NE(message.find("1 KiB"), std::string::npos) << message;
  EXPECT_NE(message.find("--max-request-bytes"), std::string::npos) << message;

  // Far over it: the answer comes before the body is read, and still reaches the client.
  const HttpResponse huge = http_request("POST", "127.0.0.1", http.port(), "/echo", std::string(8 << 20, 'a'));
  EXPECT_EQ(huge.status, 413);
  error_of(huge);

  // A chunked body has no length up front: refused once it grows over the limit.
  RawHttpConnection c(http.port());
  ASSERT_TRUE(c.send("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"));
  for (int i = 0; i < 3; ++i) c.send("200\r\n" + std::string(512, 'b') + "\r\n");
  c.send("0\r\n\r\n");
  const HttpResponse chunked = c.read_response();
  EXPECT_EQ(chunked.status, 413);
  error_of(chunked);
}

TEST(HttpServer, HeadersOverTheLimitAreAJson431) {
  HttpServerOptions o;
  o.max_header_bytes = 2048;
  HttpServer http("127.0.0.1", 0, echo_routes(), o);
  RawHttpConnection c(http.port());
  ASSERT_TRUE(c.send("GET /ping HTTP/1.1\r\nHost: t\r\nX-Big: " + std::string(4096, 'h') + "\r\n\r\n"));
  const HttpResponse r = c.read_response();
  EXPECT_EQ(r.status, 431);
  error_of(r);
}

TEST(HttpServer, AMalformedRequestIsAJson400) {
  HttpServer http("127.0.0.1", 0, echo_routes());
  RawHttpConnection c(http.port());
  ASSERT_TRUE(c.send("GET /ping HTTP/9.x\r\nHost: t\r\n\r\n"));
  const HttpResponse r = c.read_response();
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(error_of(r).at("message").get<std::string>().find("malformed"), std::string::npos);
  EXPECT_TRUE(c.closed_within(std::chrono::seconds(10)));
}

TEST(HttpServer, AnswersExpect100ContinueBeforeTheBody) {
  HttpServer http("127.0.0.1", 0, echo_routes());
  RawHttpConnection c(http.port());
  ASSERT_TRUE(c.send("POST /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"));
  EXPECT_EQ(c.read_response().status, 100);
  ASSERT_TRUE(c.send("later"));
  const HttpResponse r = c.read_response();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "later");
}

TEST(HttpServer, RequestHandlersSeeHeadersAndAdmitCanRefuse) {
  HttpServerOptions o;
  o.admit = [](const HttpRequest& r) -> std::optional<HttpReply> {
    if (r.header("authorization") == "Bearer secret") return std::nullopt;
    return HttpReply(401, R"({"error": {"message": "no key"}})");
  };
  std::vector<HttpRoute> routes{{"POST", "/who", nullptr, [](const HttpRequest& r) {
                                   return HttpReply(200,
                                                    r.method + " " + r.target + " " + r.header("X-Name") + " " +
                                                        r.body + " " + (r.remote.empty() ? "?" : "remote"),
                                                    "text/plain");
                                 }}};
  HttpServer http("127.0.0.1", 0, std::move(routes), o);
  RawHttpConnection c(http.port());
  ASSERT_TRUE(
      c.send("POST /who?q=1 HTTP/1.1\r\nHost: t\r\nx-name: ann\r\nAuthorization: Bearer secret\r\n"
             "Content-Length: 2\r\n\r\nhi"));
  EXPECT_EQ(c.read_response().body, "POST /who?q=1 ann hi remote");
  ASSERT_TRUE(c.send("POST /who HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi"));
  EXPECT_EQ(c.read_response().status, 401);
}

TEST(HttpServer, LogsALinePerRequestAtTheAccessLogLevel) {
  HttpServerOptions o;
  o.access_log = LogLevel::info;
  HttpServer http("127.0.0.1", 0, echo_routes(), o);
  testing::internal::CaptureStdout();
  http_request("POST", "127.0.0.1", http.port(), "/echo", "12345");
  http_get("127.0.0.1", http.port(), "/missing");
  // The line is written as the answer leaves: wait for the server to finish the request.
  for (int i = 0; i < 500 && http.requests_in_flight() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("\"POST /echo\" 200 5 B "), std::string::npos) << out;
  EXPECT_NE(out.find("\"GET /missing\" 404 "), std::string::npos) << out;
  EXPECT_NE(out.find(" ms"), std::string::npos) << out;

  HttpServer quiet("127.0.0.1", 0, echo_routes());  // debug by default: not at info
  testing::internal::CaptureStdout();
  http_get("127.0.0.1", quiet.port(), "/ping");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "");
}

TEST(HttpServer, ATakenPortIsAnErrorNamingTheFlags) {
  HttpServer first("127.0.0.1", 0, echo_routes());
  try {
    HttpServer second("127.0.0.1", first.port(), echo_routes());
    FAIL() << "bound port " << first.port() << " twice";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(str_cat("cannot serve on 127.0.0.1:", first.port())), std::string::npos) << what;
    EXPECT_NE(what.find("--host/--port"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace troupe::test
