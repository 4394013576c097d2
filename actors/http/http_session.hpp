// One connection of an HttpServer, on the server's event loop (a Beast TCP stream on a strand of
// its own): waits for a request (idle_timeout), reads its headers (header_timeout) and body
// (body_timeout) within their size limits, answers what the server answers itself (404, 405,
// 413, 431, 400) at once, and hands the rest to a worker thread; the reply (whole, or streamed
// chunk by chunk as the worker writes it) goes back through the strand. Keeps the connection
// alive between requests unless the client, an error or a drain says otherwise. While it waits
// or reads, a connection holds no thread.
//
//   auto s = std::make_shared<HttpSession>(std::move(socket), context);
//   s->start();
//   s->drain();      // at stop(): close now if no request is in flight, else after its reply
//   s->close_now();  // at the shutdown timeout
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "actors/http/http_routes.hpp"
#include "actors/http/http_server.hpp"
#include "actors/http/http_worker_pool.hpp"

namespace troupe::actors {

class HttpSession;

// What the connections of one server share; the server owns it and outlives them.
struct HttpConnectionContext {
  const HttpServerOptions& options;
  const HttpRoutes& routes;
  HttpWorkerPool& workers;
  const Logger& log;
  std::function<void(HttpSession*)> closed;  // called as a session is destroyed
  std::atomic<bool> draining{false};         // stop() began: no keep-alive, no new requests
  std::atomic<int> requests_in_flight{0};
};

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(boost::asio::ip::tcp::socket socket, HttpConnectionContext& context);
  ~HttpSession();
  HttpSession(const HttpSession&) = delete;
  HttpSession& operator=(const HttpSession&) = delete;

  // From any thread.
  void start();
  void drain();
  void close_now();

 private:
  enum class Phase { idle, header, body, handling, closing, closed };
  using Done = std::function<void(bool)>;

  // On the strand.
  void wait_request();
  void on_first_bytes(boost::beast::error_code ec, size_t n);
  void read_header();
  void on_header(boost::beast::error_code ec);
  void read_body();
  void on_body(boost::beast::error_code ec);
  void refuse(int status, const std::string& message);
  void dispatch();
  void write_reply(HttpReply reply);
  void after_reply(bool ok);
  void shutdown();
  void linger();
  void close();
  void end_request();
  void log_access(bool ok) const;
  std::string too_large() const;

  // On the handler's worker thread.
  void handle(const HttpRoute& route, HttpRequest& request, bool head);
  void stream_reply(HttpReply& reply);
  // Runs `op` on the strand and waits for it to call its Done: a streamed reply's writes.
  bool on_strand_wait(const std::function<void(Done)>& op);
  // On the strand, for stream_reply.
  void start_stream(const HttpReply& reply, const Done& done);
  void write_chunk(std::string_view piece, const Done& done);
  void end_stream(const Done& done);

  boost::beast::tcp_stream stream_;
  HttpConnectionContext& context_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  std::unique_ptr<std::array<char, 4096>> linger_buffer_;  // lingering close only
  std::string remote_;
  Phase phase_ = Phase::idle;
  const HttpRoute* route_ = nullptr;
  unsigned version_ = 11;     // the request's HTTP version (11: 1.1)
  bool keep_alive_ = false;   // after this reply
  bool body_unread_ = false;  // answered before the body was read: linger before closing
  bool in_flight_ = false;
  bool chunked_ = false;  // the stream's chunks are chunked-encoded (HTTP/1.1)
  // For the access log.
  std::string method_, target_;
  int status_ = 0;
  uint64_t bytes_ = 0;
  bool streamed_ = false;
  std::chrono::steady_clock::time_point started_;
};

}  // namespace troupe::actors
