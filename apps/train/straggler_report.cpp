#include "apps/train/straggler_report.hpp"

#include <algorithm>
#include <cstdio>

namespace troupe::apps {

namespace {

double median(std::vector<double> v) {
  const size_t n = v.size(), mid = n / 2;
  std::nth_element(v.begin(), v.begin() + long(mid), v.end());
  if (n % 2 == 1) return v[mid];
  const double upper = v[mid];
  return (*std::max_element(v.begin(), v.begin() + long(mid)) + upper) / 2;
}

}  // namespace

std::vector<Straggler> find_stragglers(const std::vector<double>& busy_ms, const RankLayout& layout, double factor) {
  std::vector<Straggler> found;
  if (factor <= 0 || int(busy_ms.size()) != layout.world()) return found;
  for (int rank = 0; rank < layout.world(); ++rank) {
    std::vector<double> peers;  // the other devices of its stage: the same work
    for (int other = 0; other < layout.world(); ++other)
      if (other != rank && layout.coord(other).pp == layout.coord(rank).pp) peers.push_back(busy_ms[size_t(other)]);
    if (peers.empty()) continue;
    const double m = median(peers), busy = busy_ms[size_t(rank)];
    if (m > 0 && busy > factor * m && busy - m >= kMinExcessMs)
      found.push_back({.rank = rank, .busy_ms = busy, .peer_median_ms = m, .peers = int(peers.size())});
  }
  std::sort(found.begin(), found.end(), [](const Straggler& a, const Straggler& b) { return a.ratio() > b.ratio(); });
  return found;
}

std::string straggler_text(const Straggler& s, const RankLayout& layout) {
  const RankCoord c = layout.coord(s.rank);
  std::string where = "stage " + std::to_string(c.pp);
  if (layout.tensor > 1) where += ", tensor rank " + std::to_string(c.tp);
  if (layout.data > 1) where += ", data rank " + std::to_string(c.dp);
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "straggler: device %d (%s) %.1fx the median busy time of its %d peer%s (%.1f ms vs %.1f ms per "
                "iteration)",
                s.rank, where.c_str(), s.ratio(), s.peers, s.peers == 1 ? "" : "s", s.busy_ms, s.peer_median_ms);
  return buf;
}

void StragglerWindow::add(const IterationStats& s) {
  if (s.busy_ms.empty()) return;  // no per-device times (the single-device trainer)
  if (sum_ms_.size() != s.busy_ms.size()) sum_ms_.assign(s.busy_ms.size(), 0.0);
  for (size_t i = 0; i < s.busy_ms.size(); ++i) sum_ms_[i] += s.busy_ms[i];
  ++iterations_;
}

std::vector<Straggler> StragglerWindow::close() {
  std::vector<double> mean = sum_ms_;
  for (double& x : mean) x /= double(std::max<int64_t>(iterations_, 1));
  std::fill(sum_ms_.begin(), sum_ms_.end(), 0.0);
  const bool any = iterations_ > 0;
  iterations_ = 0;
  return any ? find_stragglers(mean, layout_, factor_) : std::vector<Straggler>{};
}

void StragglerWindow::stamp(LogWindow& w) {
  w.stragglers.clear();
  w.straggler_devices.clear();
  for (const Straggler& s : close()) {
    w.stragglers.push_back(straggler_text(s, layout_));
    w.straggler_devices.push_back(s.rank);
  }
}

}  // namespace troupe::apps
