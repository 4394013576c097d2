#include "actors/http/http_session.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include <cstdio>
#include <future>

#include "actors/http/http_error_reply.hpp"

namespace troupe::actors {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

namespace {

constexpr size_t kFirstRead = 1024;         // bytes read while waiting for a request
constexpr std::chrono::seconds kLinger{2};  // reading what a refused client still sends
constexpr size_t kLoggedTarget = 200;       // characters of the target in the access log

// A parse error of the request itself (answered 400), not of the connection (closed quietly).
bool is_malformed(const beast::error_code& ec) {
  return ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category() &&
         ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message && ec != bhttp::error::need_more &&
         ec != bhttp::error::need_buffer;
}

std::string bytes_text(int64_t n) {
  if (n % (int64_t(1) << 20) == 0) return str_cat(n >> 20, " MiB");
  if (n % 1024 == 0) return str_cat(n >> 10, " KiB");
  return str_cat(n, " bytes");
}

}  // namespace

HttpSession::HttpSession(net::ip::tcp::socket socket, HttpConnectionContext& context)
    : stream_(std::move(socket)), context_(context) {
  beast::error_code ec;
  const net::ip::tcp::endpoint peer = stream_.socket().remote_endpoint(ec);
  remote_ = ec ? "?" : str_cat(peer.address().to_string(), ":", peer.port());
}

HttpSession::~HttpSession() { context_.closed(this); }

void HttpSession::start() {
  net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->wait_request(); });
}

void HttpSession::drain() {
  net::post(stream_.get_executor(), [self = shared_from_this()] {
    // A connection between requests, or one still sending headers, has nothing in flight.
    if (self->phase_ == Phase::idle || self->phase_ == Phase::header) self->close();
  });
}

void HttpSession::close_now() {
  net::post(stream_.get_executor(), [self = shared_from_this()] { self->close(); });
}

void HttpSession::wait_request() {
  if (context_.draining) return close();
  phase_ = Phase::idle;
  route_ = nullptr;
  status_ = 0;
  bytes_ = 0;
  streamed_ = false;
  parser_.emplace();
  parser_->header_limit(uint32_t(context_.options.max_header_bytes));
  parser_->body_limit(uint64_t(context_.options.max_request_bytes));
  if (buffer_.size() > 0) return read_header();  // a pipelined request
  stream_.expires_after(context_.options.idle_timeout);
  stream_.async_read_some(buffer_.prepare(kFirstRead),
                          [self = shared_from_this()](beast::error_code ec, size_t n) { self->on_first_bytes(ec, n); });
}

void HttpSession::on_first_bytes(beast::error_code ec, size_t n) {
  if (ec) return close();  // idle too long, the client left, or a drain
  buffer_.commit(n);
  read_header();
}

void HttpSession::read_header() {
  phase_ = Phase::header;
  started_ = std::chrono::steady_clock::now();
  stream_.expires_after(context_.options.header_timeout);
  bhttp::async_read_header(stream_, buffer_, *parser_,
                           [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
}

void HttpSession::on_header(beast::error_code ec) {
  if (ec == beast::error::timeout)
    context_.log.debug(remote_, ": closed, its request headers took over ", context_.options.header_timeout.count(),
                       " ms");
  if (ec == bhttp::error::header_limit)
    return refuse(431, str_cat("the request's headers are over ", bytes_text(context_.options.max_header_bytes)));
  if (ec == bhttp::error::body_limit) return refuse(413, too_large());  // its Content-Length says so
  if (ec && is_malformed(ec)) return refuse(400, str_cat("malformed HTTP request: ", ec.message()));
  if (ec) return close();

  const auto& req = parser_->get();
  method_ = std::string(req.method_string());
  target_ = std::string(req.target());
  version_ = req.version();
  keep_alive_ = req.keep_alive();
  body_unread_ = !parser_->is_done();
  in_flight_ = true;
  ++context_.requests_in_flight;
  const std::string path = target_.substr(0, target_.find('?'));
  const HttpRoutes::Match m = context_.routes.find(method_, path);
  if (m.route == nullptr && !m.path_known)
    return write_reply(http_error_reply(404, str_cat("no route ", method_, " ", path)));
  if (m.route == nullptr) {
    const std::string allowed = context_.routes.allowed(path);
    HttpReply r = http_error_reply(405, str_cat(method_, " is not allowed on ", path, ": it answers ", allowed));
    r.headers.emplace_back("Allow", allowed);
    return write_reply(std::move(r));
  }
  route_ = m.route;
  if (!body_unread_) return dispatch();
  if (!beast::iequals(req[bhttp::field::expect], "100-continue")) return read_body();
  // The client waits for this before it sends the body (curl does for large ones).
  auto go_on = std::make_shared<bhttp::response<bhttp::empty_body>>(bhttp::status::continue_, version_);
  stream_.expires_after(context_.options.write_timeout);
  bhttp::async_write(stream_, *go_on, [self = shared_from_this(), go_on](beast::error_code e, size_t) {
    if (e) return self->close();
    self->read_body();
  });
}

void HttpSession::read_body() {
  phase_ = Phase::body;
  stream_.expires_after(context_.options.body_timeout);
  bhttp::async_read(stream_, buffer_, *parser_,
                    [self = shared_from_this()](beast::error_code ec, size_t) { self->on_body(ec); });
}

void HttpSession::on_body(beast::error_code ec) {
  if (ec == beast::error::timeout)
    context_.log.debug(remote_, ": closed, its request body took over ", context_.options.body_timeout.count(), " ms");
  if (ec == bhttp::error::body_limit) return refuse(413, too_large());  // a chunked body grew over it
  if (ec && is_malformed(ec)) return refuse(400, str_cat("malformed HTTP request body: ", ec.message()));
  if (ec) return close();
  body_unread_ = false;
  dispatch();
}

std::string HttpSession::too_large() const {
  const int64_t limit = context_.options.max_request_bytes;
  return str_cat("the request body is over ", bytes_text(limit),
                 context_.options.flag_prefix.empty() ? " (--max-request-bytes)" : "");
}

void HttpSession::refuse(int status, const std::string& message) {
  // What was parsed of the request, for the access log; the rest of it is not read.
  if (parser_ && parser_->is_header_done()) {
    method_ = std::string(parser_->get().method_string());
    target_ = std::string(parser_->get().target());
    version_ = parser_->get().version();
  } else {
    method_ = target_ = "-";
  }
  keep_alive_ = false;
  body_unread_ = true;
  if (!in_flight_) {
    in_flight_ = true;
    ++context_.requests_in_flight;
  }
  write_reply(http_error_reply(status, message));
}

void HttpSession::dispatch() {
  phase_ = Phase::handling;
  stream_.expires_never();  // the handler may take long; the reply's writes have their own deadline
  auto& req = parser_->get();
  auto request = std::make_shared<HttpRequest>();
  request->method = method_;
  request->target = target_;
  request->path = target_.substr(0, target_.find('?'));
  for (const auto& field : req)
    request->headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  request->body = std::move(req.body());
  request->remote = remote_;
  const bool head = req.method() == bhttp::verb::head;
  context_.workers.post(
      [self = shared_from_this(), route = route_, request, head] { self->handle(*route, *request, head); });
}

void HttpSession::handle(const HttpRoute& route, HttpRequest& request, bool head) {
  HttpReply reply;
  try {
    std::optional<HttpReply> refused;
    if (context_.options.admit) refused = context_.options.admit(request);
    if (refused)
      reply = std::move(*refused);
    else if (route.handle)
      reply = route.handle(request);
    else
      reply = route.handler(route.method == "GET" ? std::string() : std::move(request.body));
  } catch (const std::exception& e) {
    reply = http_error_reply(500, e.what());
  }
  if (!reply.stream || head) {
    reply.stream = nullptr;
    net::post(stream_.get_executor(),
              [self = shared_from_this(), reply = std::move(reply)]() mutable { self->write_reply(std::move(reply)); });
    return;
  }
  stream_reply(reply);
}

void HttpSession::write_reply(HttpReply reply) {
  status_ = reply.status;
  if (phase_ == Phase::closed) return after_reply(false);  // closed while the handler ran
  phase_ = Phase::handling;
  keep_alive_ = keep_alive_ && !body_unread_ && !context_.draining;
  auto res = std::make_shared<bhttp::response<bhttp::string_body>>();
  res->version(version_);
  res->result(unsigned(reply.status));
  res->set(bhttp::field::server, "troupe");
  res->set(bhttp::field::content_type, reply.content_type);
  for (const auto& [name, value] : reply.headers) res->set(name, value);
  res->keep_alive(keep_alive_);
  bytes_ = reply.body.size();
  const bool head = parser_ && parser_->is_header_done() && parser_->get().method() == bhttp::verb::head;
  if (head) {
    res->content_length(reply.body.size());  // what a GET would send, and no body
  } else {
    res->body() = std::move(reply.body);
    res->prepare_payload();
  }
  stream_.expires_after(context_.options.write_timeout);
  bhttp::async_write(stream_, *res,
                     [self = shared_from_this(), res](beast::error_code ec, size_t) { self->after_reply(!ec); });
}

bool HttpSession::on_strand_wait(const std::function<void(Done)>& op) {
  auto result = std::make_shared<std::promise<bool>>();  // shared: set_value may still run as get() returns
  std::future<bool> ok = result->get_future();
  net::post(stream_.get_executor(), [op, result] { op([result](bool r) { result->set_value(r); }); });
  return ok.get();
}

void HttpSession::stream_reply(HttpReply& reply) {
  // Each write waits for the bytes to leave: a slow client slows its own stream (up to
  // write_timeout a chunk), and one that has gone makes the writer return false.
  bool ok = on_strand_wait([&](const Done& done) { start_stream(reply, done); });
  const ChunkWriter write = [&](std::string_view piece) {
    if (!ok) return false;
    if (piece.empty()) return true;  // an empty chunk would end the body
    ok = on_strand_wait([&](const Done& done) { write_chunk(piece, done); });
    return ok;
  };
  if (ok) {
    try {
      reply.stream(write);
    } catch (const std::exception& e) {  // too late for an error status: the client sees the body cut
      context_.log.warning("the streamed reply to ", method_, " ", target_, " failed: ", e.what());
      ok = false;
    }
  }
  if (ok) ok = on_strand_wait([&](const Done& done) { end_stream(done); });
  net::post(stream_.get_executor(), [self = shared_from_this(), ok] { self->after_reply(ok); });
}

void HttpSession::start_stream(const HttpReply& reply, const Done& done) {
  if (phase_ == Phase::closed) return done(false);
  status_ = reply.status;
  streamed_ = true;
  chunked_ = version_ >= 11;
  keep_alive_ = keep_alive_ && chunked_ && !context_.draining;  // HTTP/1.0: the end of the body is the close
  auto res = std::make_shared<bhttp::response<bhttp::empty_body>>();
  res->version(version_);
  res->result(unsigned(reply.status));
  res->set(bhttp::field::server, "troupe");
  res->set(bhttp::field::content_type, reply.content_type);
  for (const auto& [name, value] : reply.headers) res->set(name, value);
  res->keep_alive(keep_alive_);
  if (chunked_) res->chunked(true);
  auto sr = std::make_shared<bhttp::response_serializer<bhttp::empty_body>>(*res);
  stream_.expires_after(context_.options.write_timeout);
  bhttp::async_write_header(stream_, *sr, [res, sr, done](beast::error_code ec, size_t) { done(!ec); });
}

void HttpSession::write_chunk(std::string_view piece, const Done& done) {
  if (phase_ == Phase::closed) return done(false);
  bytes_ += piece.size();
  stream_.expires_after(context_.options.write_timeout);
  auto written = [done](beast::error_code ec, size_t) { done(!ec); };
  const net::const_buffer data(piece.data(), piece.size());
  if (chunked_)
    net::async_write(stream_, bhttp::make_chunk(data), written);
  else
    net::async_write(stream_, data, written);
}

void HttpSession::end_stream(const Done& done) {
  if (phase_ == Phase::closed) return done(false);
  if (!chunked_) return done(true);
  stream_.expires_after(context_.options.write_timeout);
  net::async_write(stream_, bhttp::make_chunk_last(), [done](beast::error_code ec, size_t) { done(!ec); });
}

void HttpSession::after_reply(bool ok) {
  log_access(ok);
  end_request();
  if (!ok || phase_ == Phase::closed) return close();
  if (!keep_alive_) return shutdown();
  wait_request();
}

void HttpSession::end_request() {
  if (!in_flight_) return;
  in_flight_ = false;
  --context_.requests_in_flight;
}

void HttpSession::log_access(bool ok) const {
  const Logger& log = context_.log;
  const LogLevel level = context_.options.access_log;
  if (!log.enabled(level)) return;
  char ms[32];
  std::snprintf(ms, sizeof(ms), "%.1f",
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started_).count());
  const std::string target = target_.size() > kLoggedTarget ? target_.substr(0, kLoggedTarget) + "..." : target_;
  const std::string line = str_cat(remote_, " \"", method_, " ", target, "\" ", status_, " ", bytes_, " B ", ms, " ms",
                                   streamed_ ? " stream" : "", ok ? "" : " (cut: the connection closed)");
  switch (level) {
    case LogLevel::trace:
      return log.trace(line);
    case LogLevel::debug:
      return log.debug(line);
    case LogLevel::info:
      return log.info(line);
    case LogLevel::warning:
      return log.warning(line);
    case LogLevel::error:
      return log.error(line);
  }
}

void HttpSession::shutdown() {
  phase_ = Phase::closing;
  beast::error_code ec;
  stream_.socket().shutdown(net::ip::tcp::socket::shutdown_send, ec);
  if (!body_unread_) return close();
  // The client may still be sending the body we refused: closing with unread bytes would reset
  // the connection, and the client could lose our answer. Read and drop them for a moment.
  linger_buffer_ = std::make_unique<std::array<char, 4096>>();
  stream_.expires_after(kLinger);
  linger();
}

void HttpSession::linger() {
  stream_.async_read_some(net::buffer(*linger_buffer_), [self = shared_from_this()](beast::error_code ec, size_t) {
    if (ec || self->phase_ == Phase::closed) return self->close();
    self->linger();
  });
}

void HttpSession::close() {
  if (phase_ == Phase::closed) return;
  phase_ = Phase::closed;
  end_request();
  beast::error_code ec;
  stream_.socket().shutdown(net::ip::tcp::socket::shutdown_both, ec);
  stream_.close();
}

}  // namespace troupe::actors
