#include "schedules/stage_speed.hpp"

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

SpeedModel fit_speed_model(const std::vector<double>& stage_speed, const std::vector<double>& busy_fraction) {
  SpeedModel m;
  if (stage_speed.empty() || std::ranges::any_of(stage_speed, [](double v) { return v <= 0; })) return m;
  TROUPE_CHECK(stage_speed.size() == busy_fraction.size(), "fit_speed_model: ", stage_speed.size(), " speeds for ",
               busy_fraction.size(), " stages");
  m.stage_speed = stage_speed;
  const double n = double(stage_speed.size());
  double mean_b = 0, mean_c = 0;
  for (size_t s = 0; s < stage_speed.size(); ++s) mean_b += busy_fraction[s] / n, mean_c += stage_speed[s] / n;
  m.reference_speed = mean_c;
  m.speed_at_idle = mean_c;
  const auto [lo, hi] = std::ranges::minmax(busy_fraction);
  if (hi - lo < kMinBusySpread) return m;
  double sbc = 0, sbb = 0;
  for (size_t s = 0; s < stage_speed.size(); ++s) {
    sbc += (busy_fraction[s] - mean_b) * (stage_speed[s] - mean_c);
    sbb += (busy_fraction[s] - mean_b) * (busy_fraction[s] - mean_b);
  }
  m.speed_per_busy = sbc / sbb;
  m.speed_at_idle = mean_c - m.speed_per_busy * mean_b;
  m.fitted = true;
  return m;
}

std::vector<double> stage_layer_speed(const LayerTime& layers, int stages) {
  std::vector<double> speed;
  for (int s = 0; s < stages; ++s) {
    const auto it = layers.stage_layers.find(s);
    if (it == layers.stage_layers.end() || it->second.second <= 0) return {};
    speed.push_back(1e9 * double(it->second.first) / double(it->second.second));
  }
  return speed;
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

OpDurations at_reference_speed(const SpeedModel& model, OpDurations measured) {
  if (!model.fitted) return measured;
  for (size_t s = 0; s < model.stage_speed.size(); ++s)
    scale_stage(measured, s, model.stage_speed[s] / model.reference_speed);
  return measured;
}

OpDurations at_busy_speed(const SpeedModel& model, OpDurations at_reference, const std::vector<double>& busy) {
  if (!model.fitted) return at_reference;
  for (size_t s = 0; s < busy.size(); ++s) {
    const double speed = model.speed_at(busy[s]);
    TROUPE_CHECK(speed > 0, "stage speed: ", speed, " layers/s predicted for stage ", s, " at ", busy[s] * 100,
                 "% busy");
    scale_stage(at_reference, s, model.reference_speed / speed);
  }
  return at_reference;
}

std::vector<double> busy_fractions(const PipelineStats& stats) {
  std::vector<double> out;
  for (const StageStats& s : stats.stages)
    out.push_back(stats.step_ns > 0 ? double(s.busy_ns) / double(stats.step_ns) : 0);
  return out;
}

std::string format_speed_model(const SpeedModel& m, const std::vector<double>& busy,
                               const std::vector<double>& clocks_mhz) {
  std::string s;
  char buf[128];
  if (!m.stage_speed.empty()) {
    s = "stage speed (layers/s of layer work):";
    for (size_t i = 0; i < m.stage_speed.size(); ++i) {
      std::snprintf(buf, sizeof(buf), "%s s%zu %.0f at %.1f%% busy", i ? "," : "", i, m.stage_speed[i],
                    i < busy.size() ? 100 * busy[i] : 0.0);
      s += buf;
    }
    if (m.fitted)
      std::snprintf(buf, sizeof(buf), "; what-ifs run each stage at %.0f %+.2f per busy point", m.speed_at_idle,
                    m.speed_per_busy / 100);
    else
      std::snprintf(buf, sizeof(buf), "; the stages' loads are too close to tell how speed follows load");
    s += buf;
  }
  if (!clocks_mhz.empty()) {
    s += s.empty() ? "SM clocks:" : "\nSM clocks:";
    for (size_t i = 0; i < clocks_mhz.size(); ++i) {
      std::snprintf(buf, sizeof(buf), "%s s%zu %.0f MHz", i ? "," : "", i, clocks_mhz[i]);
      s += buf;
    }
  }
  return s;
}

}  // namespace troupe::schedules
