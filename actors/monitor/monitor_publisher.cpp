#include "actors/monitor/monitor_publisher.hpp"

#include "actors/monitor/zmq_check.hpp"

namespace troupe::actors {

namespace {
// How long closing the socket may wait for queued messages (the run's `end`) to leave.
constexpr int kLingerMs = 500;
}  // namespace

struct MonitorPublisher::Impl {
  zmq::context_t context{1};  // one I/O thread; destroyed last (it waits for the socket's linger)
  zmq::socket_t socket{context, zmq::socket_type::xpub};
  std::string endpoint;
};

MonitorPublisher::MonitorPublisher(const std::string& endpoint, int send_high_water_mark) {
  TROUPE_CHECK(!endpoint.empty(), "the monitor needs an endpoint to publish on (--monitor-endpoint)");
  TROUPE_CHECK(send_high_water_mark > 0, "the monitor's high-water mark must be positive, got ", send_high_water_mark);
  impl_ = TROUPE_ZMQ(std::make_unique<Impl>(), "cannot create the monitor's ZeroMQ socket");
  zmq::socket_t& s = impl_->socket;
  TROUPE_ZMQ(s.set(zmq::sockopt::sndhwm, send_high_water_mark), "monitor socket high-water mark");
  TROUPE_ZMQ(s.set(zmq::sockopt::linger, kLingerMs), "monitor socket linger");
  // Pass every subscription up, repeated ones too: each attaching subscriber gets a snapshot.
  TROUPE_ZMQ(s.set(zmq::sockopt::xpub_verbose, 1), "monitor socket verbose subscriptions");
  TROUPE_ZMQ(s.bind(endpoint), "cannot bind the monitor's ZeroMQ socket to ", endpoint,
             " (--monitor-endpoint: is another process using that port, or is the address not this machine's?)");
  impl_->endpoint = TROUPE_ZMQ(s.get(zmq::sockopt::last_endpoint), "the monitor socket's bound endpoint");
}

MonitorPublisher::~MonitorPublisher() = default;

const std::string& MonitorPublisher::endpoint() const { return impl_->endpoint; }

bool MonitorPublisher::send(const std::string& bytes) {
  // Monitoring must never stop training: a refusal is counted, not thrown.
  try {
    if (impl_->socket.send(zmq::buffer(bytes), zmq::send_flags::dontwait)) {
      ++sent_;
      return true;
    }
  } catch (const zmq::error_t&) {}
  ++refused_;
  return false;
}

int MonitorPublisher::take_new_subscriptions() {
  int n = 0;
  try {
    zmq::message_t msg;
    // XPUB delivers (un)subscriptions as messages: 1 or 0, then the topic.
    while (impl_->socket.recv(msg, zmq::recv_flags::dontwait))
      if (msg.size() > 0 && static_cast<const unsigned char*>(msg.data())[0] == 1) ++n;
  } catch (const zmq::error_t&) {}
  return n;
}

}  // namespace troupe::actors
