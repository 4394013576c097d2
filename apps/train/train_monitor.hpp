// What `troupe train` tells its monitor (actors/monitor/monitor_schema.hpp), kept out of the training
// loop: the hello from the run's configuration, and one record per log line built from the
// very LogWindow the line was printed from, so the monitor's numbers are the log's.
//
//   start_train_monitor(run, options, train_monitor_hello(cfg, "gpt2-124m", ...));
//   std::printf("%s\n", iteration_line(window).c_str());
//   publish_log_line(run, window, tokens_per_iteration, peak_tflops);
#pragma once

#include <cstdint>
#include <string>

#include "actors/train/training_run.hpp"
#include "apps/train/train_log.hpp"

namespace troupe::apps {

struct TrainMonitorInfo {
  std::string model;  // --model preset
  int devices = 1;
  int64_t log_interval = 0, eval_interval = 0, start_iteration = 0;
  double peak_tflops = 0;  // --peak-tflops; 0: unknown
};

actors::MonitorHello train_monitor_hello(const actors::TrainingConfig& cfg, const TrainMonitorInfo& info);
// Starts the run's monitor and prints where it listens (and how to attach).
void start_train_monitor(actors::TrainingRun& run, const actors::MonitorOptions& options,
                         const actors::MonitorHello& hello);

// The log window as an iteration record; tokens/s and MFU follow from the window's time.
actors::MonitorIteration monitor_iteration(const LogWindow& w, int64_t tokens_per_iteration, double peak_tflops,
                                           std::vector<int64_t> memory_bytes);

// The hooks in the training loop: nothing happens without a monitor.
void publish_log_line(actors::TrainingRun& run, const LogWindow& w, int64_t tokens_per_iteration, double peak_tflops);
void publish_validation(actors::TrainingRun& run, int64_t iteration, double loss);
// signal 0: the run completed; else it was stopped by that signal.
void publish_end(actors::TrainingRun& run, int signal);

}  // namespace troupe::apps
