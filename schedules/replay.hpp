// `troupe replay`: what a recorded trace says about the pipeline, and what it predicts for
// other schedules. The command line (apps/replay_command.cpp) only parses flags and prints
// format_replay_report().
//
//   ReplayReport r = replay_trace(trace_read("run.trace"), {.what_ifs = {"schedule=interleaved,v=2"}});
//   std::fputs(format_replay_report(r).c_str(), stdout);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "schedules/all_to_all_overlap.hpp"
#include "schedules/layer_time.hpp"
#include "schedules/analysis.hpp"
#include "schedules/simulator.hpp"
#include "schedules/trace.hpp"
#include "schedules/what_if.hpp"

namespace troupe::schedules {

struct ReplayOptions {
  // Iteration to analyse; none: every iteration but the first when there are several (the
  // first pays one-time costs: allocation, kernel selection).
  std::optional<int64_t> iteration;
  std::vector<std::string> what_ifs;  // parse_what_if() strings
  // An analysed iteration whose step exceeds the median step by more than this share stalled
  // (a process descheduled, a slow exchange): no schedule predicts it, so its ops stay out of
  // the op times, the stage table and the bubble. 0 keeps every iteration.
  double stall_threshold = 0.03;
};

struct WhatIfPrediction {
  std::string spec;
  WhatIf what_if;
  Simulation simulation;  // predict_run() under the new shape
  int transfers = 0;      // tensors sent between stages per iteration: 2 (K-1) M (zb-v: 2 (K-2) M)
  double theory_bubble = 0;
};

struct ReplayReport {
  TraceHeader header;
  std::vector<int64_t> iterations;  // analysed
  std::vector<int64_t> step_ns;     // per analysed iteration (first forward/backward start to last end)
  std::vector<int64_t> stalled;     // analysed iterations left out of everything below (stall_threshold)
  PipelineStats stats;              // mean over the analysed iterations that did not stall (peak in flight: max)
  double theory_bubble = 0;         // theoretical_bubble() of the recorded schedule and shape
  int64_t path_iteration = 0;       // the iteration critical_path comes from (the last that did not stall)
  std::vector<TraceEvent> critical_path;
  OpDurations durations;           // measured means over the iterations that did not stall (the simulator's input)
  OpCostModel cost_model;          // fitted to `durations`: what the what-ifs use for other chunks
  SpeedModel speed;                // each stage's layer speed against its load, where the trace has layer spans
  std::vector<double> clocks_mhz;  // each stage's mean SM clock, where the trace sampled it
  // The least (consumer start - producer end) over the data dependencies of the analysed
  // iterations: below 0 only when the clocks of merged processes' traces disagree.
  int64_t smallest_gap_ns = 0;
  // True when smallest_gap_ns is further below 0 than the merged clocks' offsets can be wrong
  // (half the largest offset exchange's round trip, header.clock_rtt_ns / 2; 0 for one clock).
  bool clocks_disagree() const { return smallest_gap_ns < -(header.clock_rtt_ns / 2); }
  Simulation replayed;         // the recorded shape under the measured mean durations
  AllToAllOverlap all_to_all;  // MoE expert-parallel runs: the all-to-alls and how much is hidden
  LayerTime layers;            // the layers' time inside the ops that marked them, and the rest
  std::vector<WhatIfPrediction> what_ifs;
};

ReplayReport replay_trace(const Trace& trace, const ReplayOptions& options);

// The median of the analysed iterations' step times (stalled ones included): a stall of one
// iteration moves the mean, not it.
int64_t median_step_ns(const ReplayReport& report);
// The iterations of `step_ns` (parallel to `iterations`) whose step exceeds their median by more
// than `threshold` (a share; 0: none).
std::vector<int64_t> stalled_iterations(const std::vector<int64_t>& iterations, const std::vector<int64_t>& step_ns,
                                        double threshold);
std::string format_replay_report(const ReplayReport& report);

// "(P-1)/(M+P-1)" or "(P-1)/(V*M+P-1)" with the numbers filled in.
std::string theory_formula(Schedule schedule, const PipelineShape& shape);

}  // namespace troupe::schedules
