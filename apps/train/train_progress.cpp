#include "apps/train/train_progress.hpp"

#include <algorithm>
#include <cmath>

namespace troupe::apps {

void TrainProgress::add(double seconds) {
  if (timed_++ > 0) after_first_s_ += seconds;
}

double TrainProgress::eta_seconds(int64_t iteration) const {
  if (timed_ < 2) return NAN;
  return after_first_s_ / double(timed_ - 1) * double(std::max<int64_t>(train_iters_ - iteration, 0));
}

void TrainProgress::stamp(LogWindow& w, std::chrono::steady_clock::time_point now) const {
  w.elapsed_seconds = std::chrono::duration<double>(now - start_).count();
  w.eta_seconds = eta_seconds(w.iteration);
}

}  // namespace troupe::apps
