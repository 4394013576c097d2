// Elapsed time and ETA at the end of `troupe train`'s log line (after Megatron's fields, which
// parsers match): the wall time since the training loop started, and the mean time of this
// run's iterations so far but the first (which warms up: allocations, caches) times the
// iterations left to --train-iters (with --train-samples: the samples' last whole iteration).
//
//   TrainProgress progress(o.train_iters);
//   progress.add(seconds);                      // each iteration's train_iteration() time
//   progress.stamp(window);                     // window.elapsed_seconds, window.eta_seconds
#pragma once

#include <chrono>
#include <cstdint>

#include "apps/train/train_log.hpp"

namespace troupe::apps {

class TrainProgress {
 public:
  explicit TrainProgress(int64_t train_iters,
                         std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now())
      : train_iters_(train_iters), start_(start) {}

  void add(double seconds);
  // Seconds left after `iteration` at the mean pace; NaN until two iterations have run here.
  double eta_seconds(int64_t iteration) const;
  // Sets w.elapsed_seconds (until `now`) and w.eta_seconds (after w.iteration).
  void stamp(LogWindow& w, std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now()) const;

 private:
  int64_t train_iters_;
  std::chrono::steady_clock::time_point start_;
  int64_t timed_ = 0;         // iterations added, the first included
  double after_first_s_ = 0;  // their seconds, the first's left out
};

}  // namespace troupe::apps
