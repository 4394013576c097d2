#include "apps/common/monitor_flags.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "base/check.hpp"
#include "base/log.hpp"

namespace troupe::apps {

void add_monitor_flags(CLI::App* cmd, actors::MonitorOptions& o) {
  cmd->add_option("--monitor-endpoint", o.endpoint,
                  "publish live metrics for `troupe monitor` on this ZeroMQ endpoint, e.g. tcp://127.0.0.1:5555 "
                  "(port * picks a free one)");
  cmd->add_option("--metrics-port", o.metrics_port,
                  "serve Prometheus /metrics and /health over HTTP on this port (0: a free one; default off)");
  cmd->add_option("--metrics-host", o.metrics_host, "address the metrics server binds (default 127.0.0.1)");
}

void print_monitor_addresses(const actors::MonitorAddresses& at) {
  const Logger& log = logger("monitor");
  if (!at.endpoint.empty()) log.info("publishing on ", at.endpoint, " (attach with: troupe monitor ", at.endpoint, ")");
  if (!at.metrics_url.empty()) log.info("Prometheus metrics on ", at.metrics_url);
}

void stamp_monitor_hello(actors::MonitorHello& h) {
  char host[256] = {};
  TROUPE_SYSCALL(gethostname(host, sizeof(host) - 1), "the host name for the monitor's hello");
  h.host = host;
  h.pid = int64_t(getpid());
  h.start_unix_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  h.run_id = str_cat(h.host, "-", h.pid, "-", h.start_unix_ms);
}

}  // namespace troupe::apps
