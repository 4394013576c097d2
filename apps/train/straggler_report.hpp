// The straggler report of `troupe train` (issue 23; Megatron's --log-straggler): at each log
// line, every device's busy time per iteration (its forward and backward ops, as the stage
// actors time them: IterationStats::busy_ms, a mean over the log window) is compared with the
// median of its peers doing the same work: the other devices of its pipeline stage (its data-
// and tensor-parallel replicas; different stages legitimately differ). A device more than
// `factor` times that median (and at least kMinExcessMs more, so that the jitter of tiny ops is
// not reported) is named in the log and the monitor record.
//
//   StragglerWindow stragglers(layout, 1.5);
//   stragglers.add(stats);                                 // every iteration
//   stragglers.stamp(window);                              // at each log line: window.stragglers
//   // "straggler: device 3 (stage 1, data rank 1) 2.4x the median busy time of its 3 peers ..."
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "apps/train/train_log.hpp"
#include "model/rank_layout.hpp"
#include "model/train/trainer.hpp"

namespace troupe::apps {

// A device over the factor is reported only when it is also at least this many milliseconds
// per iteration slower than its peers' median: the jitter of tiny ops makes no straggler.
inline constexpr double kMinExcessMs = 1.0;

struct Straggler {
  int rank = 0;               // the device's global rank
  double busy_ms = 0;         // its busy time per iteration
  double peer_median_ms = 0;  // the median of its peers' busy time per iteration
  int peers = 0;              // the other devices of its stage
  double ratio() const { return busy_ms / peer_median_ms; }
};

// The devices (by global rank, `busy_ms` indexed by it) over `factor` times the median of their
// stage's other devices, slowest first; none when factor <= 0 (the report is off) or a stage
// has one device.
std::vector<Straggler> find_stragglers(const std::vector<double>& busy_ms, const RankLayout& layout, double factor);

// "straggler: device 3 (stage 1, data rank 1) 2.4x the median busy time of its 3 peers (12.0 ms
// vs 5.0 ms per iteration)"; the tensor and data ranks are named when there are several.
std::string straggler_text(const Straggler& s, const RankLayout& layout);

// The busy times of the iterations since the last log line.
class StragglerWindow {
 public:
  StragglerWindow(RankLayout layout, double factor) : layout_(layout), factor_(factor) {}
  void add(const IterationStats& s);
  // The window's stragglers, then a fresh window.
  std::vector<Straggler> close();
  // close(), into the log line's w.stragglers (the sentences) and w.straggler_devices.
  void stamp(LogWindow& w);

 private:
  RankLayout layout_;
  double factor_;
  std::vector<double> sum_ms_;  // per device
  int64_t iterations_ = 0;
};

}  // namespace troupe::apps
