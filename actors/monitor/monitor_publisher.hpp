// The ZeroMQ side of the monitor actor: an XPUB socket bound to --monitor-endpoint. Sending
// never blocks the caller: ZeroMQ queues up to the high-water mark per subscriber and drops
// beyond it for that subscriber alone (a subscriber sees the gap in `seq`); with no subscriber
// a message is simply discarded. XPUB (rather than PUB) also tells us when someone subscribes,
// so the monitor can send that subscriber a snapshot at once.
//
//   MonitorPublisher pub("tcp://127.0.0.1:*", 256);     // throws troupe::Error naming the endpoint
//   std::printf("publishing on %s\n", pub.endpoint().c_str());
//   pub.send(monitor_encode(message));
//   if (pub.take_new_subscriptions() > 0) ...            // resend the snapshot
//
// One thread at a time: the monitor actor owns it (a detached actor, one fixed thread).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace troupe::actors {

class MonitorPublisher {
 public:
  // Binds `endpoint`; throws troupe::Error naming it when it cannot (port in use, bad address).
  MonitorPublisher(const std::string& endpoint, int send_high_water_mark);
  ~MonitorPublisher();  // waits at most ~0.5 s for queued messages (the `end`) to go out
  MonitorPublisher(const MonitorPublisher&) = delete;
  MonitorPublisher& operator=(const MonitorPublisher&) = delete;

  // The bound endpoint, with a wildcard port resolved (tcp://127.0.0.1:41234).
  const std::string& endpoint() const;
  // Hands one message to ZeroMQ without waiting; false if ZeroMQ refused it (counted).
  bool send(const std::string& bytes);
  // Subscriptions that arrived since the last call (drained without waiting).
  int take_new_subscriptions();

  uint64_t sent() const { return sent_; }
  uint64_t refused() const { return refused_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  uint64_t sent_ = 0, refused_ = 0;
};

}  // namespace troupe::actors
