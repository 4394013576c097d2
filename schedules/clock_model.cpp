#include "schedules/clock_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/check.hpp"

namespace troupe::schedules {

namespace {

void scale_stage(OpDurations& d, size_t s, double factor) {
  auto scale = [&](std::vector<std::vector<int64_t>>& t) {
    if (s >= t.size()) return;
    for (int64_t& ns : t[s]) ns = std::llround(double(ns) * factor);
  };
  scale(d.forward_ns);
  scale(d.backward_ns);
  scale(d.weight_ns);
}

}  // namespace

ClockModel fit_clock_model(const std::vector<double>& stage_mhz, const std::vector<double>& busy_fraction) {
  ClockModel m;
  if (stage_mhz.empty() || std::ranges::any_of(stage_mhz, [](double v) { return v <= 0; })) return m;
  TROUPE_CHECK(stage_mhz.size() == busy_fraction.size(), "fit_clock_model: ", stage_mhz.size(), " clocks for ",
               busy_fraction.size(), " stages");
  m.stage_mhz = stage_mhz;
  const double n = double(stage_mhz.size());
  double mean_b = 0, mean_c = 0;
  for (size_t s = 0; s < stage_mhz.size(); ++s) mean_b += busy_fraction[s] / n, mean_c += stage_mhz[s] / n;
  m.reference_mhz = mean_c;
  m.at_idle_mhz = mean_c;
  const auto [lo, hi] = std::ranges::minmax(busy_fraction);
  if (hi - lo < kMinBusySpread) return m;
  double sbc = 0, sbb = 0;
  for (size_t s = 0; s < stage_mhz.size(); ++s) {
    sbc += (busy_fraction[s] - mean_b) * (stage_mhz[s] - mean_c);
    sbb += (busy_fraction[s] - mean_b) * (busy_fraction[s] - mean_b);
  }
  m.per_busy_mhz = sbc / sbb;
  m.at_idle_mhz = mean_c - m.per_busy_mhz * mean_b;
  m.fitted = true;
  return m;
}

std::vector<double> stage_clocks(const std::vector<TraceEvent>& events, int stages, int64_t from_ns, int64_t to_ns) {
  std::vector<double> sum(size_t(stages), 0), count(size_t(stages), 0);
  bool any = false;
  for (const TraceEvent& e : events) {
    if (e.kind != EventKind::clock || e.stage < 0 || e.stage >= stages || e.start_ns < from_ns || e.start_ns > to_ns)
      continue;
    sum[size_t(e.stage)] += double(e.sm_clock_mhz);
    count[size_t(e.stage)] += 1;
    any = true;
  }
  if (!any) return {};
  for (size_t s = 0; s < sum.size(); ++s) sum[s] = count[s] > 0 ? sum[s] / count[s] : 0;
  return sum;
}

OpDurations at_reference_clock(const ClockModel& model, OpDurations measured) {
  if (!model.fitted) return measured;
  for (size_t s = 0; s < model.stage_mhz.size(); ++s)
    scale_stage(measured, s, model.stage_mhz[s] / model.reference_mhz);
  return measured;
}

OpDurations at_busy_clock(const ClockModel& model, OpDurations at_reference, const std::vector<double>& busy) {
  if (!model.fitted) return at_reference;
  for (size_t s = 0; s < busy.size(); ++s) {
    const double mhz = model.clock_at(busy[s]);
    TROUPE_CHECK(mhz > 0, "clock model: ", mhz, " MHz predicted for stage ", s, " at ", busy[s] * 100, "% busy");
    scale_stage(at_reference, s, model.reference_mhz / mhz);
  }
  return at_reference;
}

std::vector<double> busy_fractions(const PipelineStats& stats) {
  std::vector<double> out;
  for (const StageStats& s : stats.stages)
    out.push_back(stats.step_ns > 0 ? double(s.busy_ns) / double(stats.step_ns) : 0);
  return out;
}

std::string format_clock_model(const ClockModel& m, const std::vector<double>& busy) {
  if (m.stage_mhz.empty()) return {};
  std::string s = "clocks:";
  char buf[96];
  for (size_t i = 0; i < m.stage_mhz.size(); ++i) {
    std::snprintf(buf, sizeof(buf), "%s s%zu %.0f MHz at %.1f%% busy", i ? "," : "", i, m.stage_mhz[i],
                  i < busy.size() ? 100 * busy[i] : 0.0);
    s += buf;
  }
  if (m.fitted) {
    std::snprintf(buf, sizeof(buf), "; what-ifs run each stage at %.0f MHz %+.1f MHz per busy point", m.at_idle_mhz,
                  m.per_busy_mhz / 100);
  } else {
    std::snprintf(buf, sizeof(buf), "; the stages' loads are too close to tell how the clock follows load");
  }
  return s + buf;
}

}  // namespace troupe::schedules
