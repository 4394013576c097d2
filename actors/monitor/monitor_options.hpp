// How `troupe train` exposes its monitor (actors/monitor/monitor_actor.hpp): where it publishes for
// `troupe monitor` and where it serves Prometheus metrics. No CAF here: apps/ fills it in.
#pragma once

#include <chrono>
#include <string>

namespace troupe::actors {

struct MonitorOptions {
  // --monitor-endpoint: a ZeroMQ endpoint to bind, e.g. tcp://127.0.0.1:5555 (tcp://*:5555 on
  // every interface; port * picks a free one). Empty: no publishing.
  std::string endpoint;
  // --metrics-port / --metrics-host: HTTP /metrics and /health. -1: off; 0: a free port.
  int metrics_port = -1;
  std::string metrics_host = "127.0.0.1";
  // The hello (and the latest records) are re-sent this often, for late subscribers; it is also
  // the heartbeat by which `troupe monitor` tells a silent run from a dead one.
  std::chrono::milliseconds hello_interval{2000};
  // Messages ZeroMQ queues per subscriber before it drops for that subscriber (ZMQ_SNDHWM).
  int send_high_water_mark = 256;

  bool enabled() const { return !endpoint.empty() || metrics_port >= 0; }
};

// Where the monitor actually listens (ports resolved when 0 or * was asked for).
struct MonitorAddresses {
  std::string endpoint;     // empty: not publishing
  std::string metrics_url;  // http://host:port/metrics; empty: no HTTP
};

}  // namespace troupe::actors
