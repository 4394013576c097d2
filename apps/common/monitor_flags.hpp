// What `troupe train` and `troupe serve` share about their monitor: the flags that turn it on
// (--monitor-endpoint, --metrics-port, --metrics-host), the lines that say where it listens,
// and the hello's identity of the process (host, pid, start time, run id).
//
//   add_monitor_flags(cmd, options.monitor);
//   actors::MonitorHello hello;  stamp_monitor_hello(hello);  ...
//   print_monitor_addresses(run.start_monitor(options.monitor, hello));
#pragma once

#include <CLI/CLI.hpp>

#include "actors/monitor/monitor_options.hpp"
#include "actors/monitor/monitor_schema.hpp"

namespace troupe::apps {

void add_monitor_flags(CLI::App* cmd, actors::MonitorOptions& o);
// "monitor: publishing on ENDPOINT (attach with: troupe monitor ENDPOINT)" and
// "monitor: Prometheus metrics on URL", for what is on; flushed.
void print_monitor_addresses(const actors::MonitorAddresses& at);
// Sets run_id, host, pid and start_unix_ms for this process.
void stamp_monitor_hello(actors::MonitorHello& h);

}  // namespace troupe::apps
