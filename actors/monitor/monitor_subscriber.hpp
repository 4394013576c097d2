// The reading end of the monitor: a ZeroMQ SUB socket connected to a run's --monitor-endpoint,
// yielding decoded messages (actors/monitor/monitor_schema.hpp). `troupe monitor` is built on it.
// Connecting never fails for a run that is not there (yet): ZeroMQ keeps retrying in the
// background, and receive() just times out.
//
//   MonitorSubscriber sub("tcp://127.0.0.1:5555");
//   while (auto m = sub.receive(std::chrono::milliseconds(250))) show(*m);   // nullopt: nothing came
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "actors/monitor/monitor_schema.hpp"

namespace troupe::actors {

// "host:port" -> "tcp://host:port"; an endpoint with a scheme is returned unchanged.
std::string normalize_monitor_endpoint(const std::string& endpoint);

class MonitorSubscriber {
 public:
  // Throws troupe::Error for an endpoint ZeroMQ cannot parse.
  explicit MonitorSubscriber(const std::string& endpoint);
  ~MonitorSubscriber();
  MonitorSubscriber(const MonitorSubscriber&) = delete;
  MonitorSubscriber& operator=(const MonitorSubscriber&) = delete;

  const std::string& endpoint() const;
  // The next message, or nullopt when none arrives within `timeout` (or a signal interrupts
  // the wait). Throws troupe::Error for a message that does not decode (another schema version).
  std::optional<MonitorMessage> receive(std::chrono::milliseconds timeout);
  // Messages of types this build does not know, skipped by receive().
  int64_t skipped() const { return skipped_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t skipped_ = 0;
};

}  // namespace troupe::actors
