// `troupe monitor ENDPOINT`: attach to a live `troupe train --monitor-endpoint ENDPOINT` (or
// `troupe serve`) from any process that can reach it, without disturbing the run. On a
// terminal it redraws a view in place (progress and ETA, the latest log values, a loss chart;
// for a server its requests, queue, batch and latencies); otherwise it prints a line per
// record. --once prints one JSON snapshot and exits (for scripts). The run's `end`, Ctrl-C
// (detach) or --timeout seconds of silence (a dead run: the run sends a heartbeat every 2 s)
// end it.
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "actors/monitor/monitor_subscriber.hpp"
#include "apps/commands.hpp"
#include "apps/monitor/monitor_view.hpp"
#include "apps/monitor/trace_recorder.hpp"
#include "base/check.hpp"

namespace troupe::apps {
namespace {

std::atomic<int> g_detach{0};  // SIGINT/SIGTERM: detach
extern "C" void on_detach_signal(int sig) { g_detach = sig; }

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kPoll{100};        // how often a wait checks for Ctrl-C
constexpr std::chrono::milliseconds kRedraw{250};      // at most 4 redraws a second
constexpr std::chrono::milliseconds kOnceSettle{300};  // --once: let the rest of the snapshot arrive

struct MonitorFlags {
  std::string endpoint;
  bool once = false;
  double timeout_s = 30;
  std::string record;  // --record FILE: the run's trace, for troupe replay
};

// The subscriber's next message, also handed to the recorder (--record).
std::optional<actors::MonitorMessage> receive(actors::MonitorSubscriber& sub, TraceRecorder* recorder) {
  std::optional<actors::MonitorMessage> m = sub.receive(kPoll);
  if (m && recorder) recorder->apply(*m);
  return m;
}

int terminal_width() {
  winsize ws{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20) return ws.ws_col;
  return 100;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Redraws the view in place: back up over the lines drawn last time, clear, draw.
class TerminalView {
 public:
  void draw(const MonitorView& view, const std::string& endpoint, double since) {
    const std::string text = render_terminal(view, endpoint, terminal_width() - 1, since);
    if (lines_ > 0) std::printf("\033[%dF\033[J", lines_);
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
    lines_ = int(std::count(text.begin(), text.end(), '\n'));
    last_ = Clock::now();
  }
  bool due() const { return Clock::now() - last_ >= kRedraw; }

 private:
  int lines_ = 0;
  Clock::time_point last_{};
};

void print_line(const std::string& line) {
  if (line.empty()) return;
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// The hello, then the latest records, one line each (non-terminal output).
void print_state(const MonitorView& view) {
  auto at = [](auto body) { return actors::MonitorMessage{.seq = 0, .repeat = true, .unix_ms = 0, .body = body}; };
  print_line(render_line(view, at(*view.hello)));
  if (view.iteration) print_line(render_line(view, at(*view.iteration)));
  if (view.serving) print_line(render_line(view, at(*view.serving)));
  if (view.validation) print_line(render_line(view, at(*view.validation)));
  if (view.end) print_line(render_line(view, at(*view.end)));
}

int monitor_once(actors::MonitorSubscriber& sub, const MonitorFlags& f, TraceRecorder* recorder) {
  MonitorView view;
  const auto start = Clock::now();
  std::optional<Clock::time_point> complete_at;
  while (g_detach == 0) {
    if (complete_at && Clock::now() - *complete_at >= kOnceSettle) break;
    if (!complete_at && seconds_since(start) > f.timeout_s) {
      std::fprintf(stderr,
                   "troupe monitor: %s within %.0f s from %s: is `troupe train` or `troupe serve` with "
                   "--monitor-endpoint running there?\n",
                   !view.hello    ? "nothing"
                   : view.serve() ? "no serving record"
                                  : "no log line",
                   f.timeout_s, sub.endpoint().c_str());
      return 1;
    }
    if (auto m = receive(sub, recorder)) view.apply(*m);
    if (!complete_at && view.complete()) complete_at = Clock::now();
  }
  if (!view.complete()) return 130;  // interrupted before there was anything to print
  std::fputs(snapshot_json(view, sub.endpoint()).c_str(), stdout);
  return 0;
}

int monitor_live(actors::MonitorSubscriber& sub, const MonitorFlags& f, TraceRecorder* recorder) {
  const bool tty = isatty(STDOUT_FILENO) != 0;
  MonitorView view;
  TerminalView screen;
  const auto start = Clock::now();
  auto last_message = start;
  if (!tty) std::printf("troupe monitor: attaching to %s\n", sub.endpoint().c_str());
  while (g_detach == 0) {
    if (auto m = receive(sub, recorder)) {
      last_message = Clock::now();
      const bool had_hello = view.hello.has_value();
      if (view.apply(*m) && !tty && view.hello) {
        // Lines start with the run's hello; what came before it (fresh records can overtake
        // the first snapshot) follows it as the current state.
        if (!had_hello || std::holds_alternative<actors::MonitorHello>(m->body))
          print_state(view);
        else
          print_line(render_line(view, *m));
      }
    } else if (seconds_since(last_message) > f.timeout_s) {
      if (tty) screen.draw(view, sub.endpoint(), seconds_since(last_message));
      if (!view.hello)
        std::fprintf(stderr,
                     "troupe monitor: nothing from %s within %.0f s: is `troupe train` or `troupe serve` "
                     "with --monitor-endpoint running there?\n",
                     sub.endpoint().c_str(), f.timeout_s);
      else
        std::fprintf(stderr,
                     "troupe monitor: no message from %s for %.0f s (the run sends one every 2 s): the run is "
                     "gone or unreachable; last seen at iteration %ld\n",
                     sub.endpoint().c_str(), f.timeout_s, long(view.iteration ? view.iteration->iteration : 0));
      return 1;
    }
    // Redrawn on a clock, not per message: "last message ... ago" moves, and a fast run
    // (a log line per millisecond) does not flood the terminal.
    if (tty && (view.end || screen.due())) screen.draw(view, sub.endpoint(), seconds_since(last_message));
    if (view.end) {
      if (tty) std::printf("troupe monitor: the run ended (%s)\n", view.end->reason.c_str());
      return 0;
    }
  }
  if (tty) screen.draw(view, sub.endpoint(), seconds_since(last_message));
  std::printf("troupe monitor: detached from %s\n", sub.endpoint().c_str());
  return 0;
}

int run_monitor(const MonitorFlags& f) {
  TROUPE_CHECK(f.timeout_s > 0, "--timeout must be positive, got ", f.timeout_s);
  actors::MonitorSubscriber sub(f.endpoint);
  g_detach = 0;
  std::signal(SIGINT, on_detach_signal);
  std::signal(SIGTERM, on_detach_signal);
  std::unique_ptr<TraceRecorder> recorder;
  if (!f.record.empty()) recorder = std::make_unique<TraceRecorder>(f.record);
  const int code = f.once ? monitor_once(sub, f, recorder.get()) : monitor_live(sub, f, recorder.get());
  if (!recorder) return code;
  if (!recorder->close()) {
    std::fprintf(stderr, "troupe monitor: --record %s: no trace came from the run, so no file was written\n",
                 f.record.c_str());
    return code != 0 ? code : 1;
  }
  std::fprintf(stderr,
               "troupe monitor: recorded %ld trace events of %zu iterations to %s (troupe replay %s), the other "
               "records to %s\n",
               long(recorder->events()), recorder->iterations(), f.record.c_str(), f.record.c_str(),
               recorder->records_path().c_str());
  return code;
}

}  // namespace

void add_monitor_command(CLI::App& app, CommandRunner& run) {
  auto flags = std::make_shared<MonitorFlags>();
  CLI::App* cmd = app.add_subcommand(
      "monitor",
      "Attach to a live troupe train or troupe serve (--monitor-endpoint): progress, ETA, the latest log "
      "values, a loss chart; for serve requests/s, tokens/s, queue, batch, TTFT/TPOT; --once prints one JSON "
      "snapshot");
  cmd->add_option("ENDPOINT", flags->endpoint, "the run's --monitor-endpoint, e.g. tcp://host:5555 (or host:5555)")
      ->required();
  cmd->add_flag("--once", flags->once, "print one JSON snapshot (the run's hello and latest records) and exit");
  cmd->add_option("--record", flags->record,
                  "write the run's trace as it arrives to this file, for troupe replay (the latest iterations "
                  "when attaching mid-run, then every one), and its other records to FILE.records.jsonl");
  cmd->add_option(
      "--timeout", flags->timeout_s,
      "seconds to wait for the run (--once), or of silence after which the run counts as gone (default 30)");
  cmd->callback([&run, flags] { run = [flags] { return run_monitor(*flags); }; });
}

}  // namespace troupe::apps
