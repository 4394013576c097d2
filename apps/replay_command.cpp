// `troupe replay FILE...`: per-stage busy/idle time, measured bubble against theory, the
// critical path, Chrome-trace and SVG exports, and what-if predictions for other schedules
// (schedules/replay.hpp does the work). Several files (or the PATH of PATH.rank0, PATH.rank1,
// ...) are the traces of one run's processes, merged onto process 0's clock.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "apps/commands.hpp"
#include "schedules/replay.hpp"
#include "schedules/trace.hpp"
#include "schedules/trace_merge.hpp"

namespace troupe::apps {
namespace {

struct ReplayFlags {
  std::vector<std::string> paths;
  std::string chrome_path;
  std::string svg_path;
  int64_t iteration = -1;
  std::vector<std::string> what_ifs;
  double stall_threshold_pct = 3;
};

int run_replay(const ReplayFlags& flags) {
  using namespace troupe::schedules;
  const Trace trace = trace_read_processes(trace_process_files(flags.paths));
  ReplayOptions options;
  if (flags.iteration >= 0) options.iteration = flags.iteration;
  options.what_ifs = flags.what_ifs;
  options.stall_threshold = flags.stall_threshold_pct / 100;
  const ReplayReport report = replay_trace(trace, options);
  std::fputs(format_replay_report(report).c_str(), stdout);
  if (!flags.chrome_path.empty()) {
    write_text_file(flags.chrome_path, trace_to_chrome_json(trace));
    std::printf("wrote %s (%zu events; open in ui.perfetto.dev or chrome://tracing)\n", flags.chrome_path.c_str(),
                trace.events.size());
  }
  if (!flags.svg_path.empty()) {
    write_text_file(flags.svg_path, trace_to_svg(trace_iteration(trace, report.path_iteration)));
    std::printf("wrote %s (iteration %lld)\n", flags.svg_path.c_str(), static_cast<long long>(report.path_iteration));
  }
  return 0;
}

}  // namespace

void add_replay_command(CLI::App& app, CommandRunner& run) {
  auto flags = std::make_shared<ReplayFlags>();
  CLI::App* cmd = app.add_subcommand(
      "replay",
      "Analyse a pipeline trace (troupe train --trace): busy/idle per stage, bubble vs theory, critical "
      "path; export Chrome-trace JSON or an SVG timeline; predict other schedules with --what-if");
  cmd->add_option("FILE", flags->paths,
                  "Trace file (msgpack, docs/replay-and-traces.md); several: the files of one run's processes "
                  "(PATH.rank0 PATH.rank1 ..., or just PATH), merged onto one clock")
      ->required();
  cmd->add_option("--chrome", flags->chrome_path, "Write Chrome-trace JSON (Perfetto, chrome://tracing)");
  cmd->add_option("--svg", flags->svg_path, "Write an SVG timeline of one iteration (the last analysed)");
  cmd->add_option("--iteration", flags->iteration,
                  "Analyse this iteration only (default: all but the first, when there are several)");
  cmd->add_option("--stall-threshold", flags->stall_threshold_pct,
                  "An iteration whose step exceeds the median step by more than this many percent stalled: it is "
                  "left out of the op times, the bubble and the what-ifs (0 keeps every iteration)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1000.0));
  cmd->add_option("--what-if", flags->what_ifs,
                  "Predict another schedule/shape from the measured op times, e.g. \"schedule=interleaved,v=2\", "
                  "\"p=8,m=16\", \"schedule=zb-h1\" (keys: schedule=gpipe|1f1b|interleaved|zb-h1|zb-v, p, v, m, g); "
                  "repeatable");
  cmd->callback([&run, flags] { run = [flags] { return run_replay(*flags); }; });
}

}  // namespace troupe::apps
