#include "actors/monitor/monitor_subscriber.hpp"

#include <algorithm>
#include <cerrno>

#include "actors/monitor/zmq_check.hpp"

namespace troupe::actors {

std::string normalize_monitor_endpoint(const std::string& endpoint) {
  return endpoint.find("://") == std::string::npos ? "tcp://" + endpoint : endpoint;
}

struct MonitorSubscriber::Impl {
  zmq::context_t context{1};
  zmq::socket_t socket{context, zmq::socket_type::sub};
  std::string endpoint;
};

MonitorSubscriber::MonitorSubscriber(const std::string& endpoint) {
  TROUPE_CHECK(!endpoint.empty(), "no monitor endpoint given (the run's --monitor-endpoint, e.g. tcp://host:5555)");
  impl_ = TROUPE_ZMQ(std::make_unique<Impl>(), "cannot create a ZeroMQ socket");
  impl_->endpoint = normalize_monitor_endpoint(endpoint);
  zmq::socket_t& s = impl_->socket;
  TROUPE_ZMQ(s.set(zmq::sockopt::linger, 0), "subscriber linger");  // nothing to flush on exit
  TROUPE_ZMQ(s.set(zmq::sockopt::subscribe, ""), "subscribing to every message");
  TROUPE_ZMQ(s.connect(impl_->endpoint), "cannot connect to the monitor endpoint ", impl_->endpoint,
             " (expected tcp://HOST:PORT)");
}

MonitorSubscriber::~MonitorSubscriber() = default;

const std::string& MonitorSubscriber::endpoint() const { return impl_->endpoint; }

std::optional<MonitorMessage> MonitorSubscriber::receive(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    zmq::pollitem_t item{static_cast<void*>(impl_->socket), 0, ZMQ_POLLIN, 0};
    try {
      if (zmq::poll(&item, 1, std::max(left, std::chrono::milliseconds(0))) == 0) return std::nullopt;
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) return std::nullopt;  // a signal (Ctrl-C): the caller decides
      fail_zmq(e, "zmq::poll", __FILE__, __LINE__, str_cat("waiting for messages from ", impl_->endpoint));
    }
    zmq::message_t msg;
    if (!TROUPE_ZMQ(impl_->socket.recv(msg, zmq::recv_flags::dontwait), "receiving from ", impl_->endpoint))
      return std::nullopt;
    try {
      return monitor_decode(std::string_view(static_cast<const char*>(msg.data()), msg.size()));
    } catch (const UnknownMonitorType&) {
      ++skipped_;  // a newer run's message type: skip it, as the schema says readers do
    }
  }
}

}  // namespace troupe::actors
