// What-if replays: parsing the request, measuring durations, rescaling them.
#include "schedules/what_if.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <set>

#include "base/check.hpp"
#include "schedules/transfer_latency.hpp"

namespace troupe::schedules {

namespace {

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

int parse_count(const std::string& key, const std::string& value, const std::string& spec) {
  int out = 0;
  const char* end = value.data() + value.size();
  const auto [ptr, ec] = std::from_chars(value.data(), end, out);
  TROUPE_CHECK(ec == std::errc() && ptr == end && !value.empty(), "--what-if \"", spec, "\": ", key, "=", value,
               " is not a whole number");
  TROUPE_CHECK(out >= (key == "g" ? 0 : 1), "--what-if \"", spec, "\": ", key, " must be >= ", key == "g" ? 0 : 1,
               ", got ", out);
  return out;
}

}  // namespace

WhatIf parse_what_if(const std::string& spec, const TraceHeader& recorded) {
  WhatIf w{recorded.schedule, recorded.shape};
  TROUPE_CHECK(!trim(spec).empty(), "--what-if: empty; expected e.g. \"schedule=interleaved,v=2\" ",
               "(keys: schedule, p, v, m, g)");
  std::set<std::string> seen;
  bool schedule_given = false, v_given = false;
  size_t pos = 0;
  while (pos <= spec.size()) {
    const size_t comma = std::min(spec.find(',', pos), spec.size());
    const std::string item = trim(spec.substr(pos, comma - pos));
    pos = comma + 1;
    TROUPE_CHECK(!item.empty(), "--what-if \"", spec, "\": empty item (stray comma?)");
    const size_t eq = item.find('=');
    TROUPE_CHECK(eq != std::string::npos, "--what-if \"", spec, "\": '", item,
                 "' is not key=value (keys: schedule, p, v, m, g)");
    std::string key = trim(item.substr(0, eq));
    const std::string value = trim(item.substr(eq + 1));
    std::transform(key.begin(), key.end(), key.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    TROUPE_CHECK(seen.insert(key).second, "--what-if \"", spec, "\": '", key, "' given twice");
    if (key == "schedule") {
      try {
        w.schedule = schedule_from_name(value);
      } catch (const Error&) {
        TROUPE_FAIL("--what-if \"", spec, "\": unknown schedule '", value,
                    "' (gpipe, 1f1b, interleaved, zb-h1 or zb-v)");
      }
      schedule_given = true;
    } else if (key == "p") {
      w.shape.stages = parse_count(key, value, spec);
    } else if (key == "v") {
      w.shape.chunks = parse_count(key, value, spec);
      v_given = true;
    } else if (key == "m") {
      w.shape.microbatches = parse_count(key, value, spec);
    } else if (key == "g") {
      w.shape.group_size = parse_count(key, value, spec);
    } else {
      TROUPE_FAIL("--what-if \"", spec, "\": unknown key '", key, "' (keys: schedule, p, v, m, g)");
    }
    if (comma == spec.size()) break;
  }
  if (v_given && !schedule_given && w.shape.chunks > 1) w.schedule = Schedule::interleaved_1f1b;
  if (schedule_given && !v_given && w.schedule != Schedule::interleaved_1f1b)
    w.shape.chunks = w.schedule == Schedule::zb_v ? 2 : 1;
  TROUPE_CHECK(!(schedule_given && !v_given && w.schedule == Schedule::interleaved_1f1b && w.shape.chunks == 1),
               "--what-if \"", spec, "\": schedule=interleaved needs v= (model chunks per stage), e.g. v=2");
  try {
    validate(w.schedule, w.shape);
  } catch (const Error& e) {
    TROUPE_FAIL("--what-if \"", spec, "\" asks for an impossible pipeline: ", e.what());
  }
  const int K = w.shape.stages * w.shape.chunks;
  // The recorded P and V keep the recorded chunks, uneven ones (chunk_layers) included.
  const bool recorded_chunks = w.shape.stages == recorded.shape.stages && w.shape.chunks == recorded.shape.chunks;
  TROUPE_CHECK(recorded.num_layers <= 0 || recorded_chunks || recorded.num_layers % K == 0, "--what-if \"", spec,
               "\": the model's ", recorded.num_layers, " layers (--num-layers) do not split into P*V = ", K,
               " equal chunks");
  return w;
}

OpDurations measured_durations(const Trace& trace, const std::vector<int64_t>& iterations) {
  const PipelineShape& shape = trace.header.shape;
  const size_t P = size_t(shape.stages), V = size_t(shape.chunks);
  // Per op kind: forward, fused backward, B, W (the OpKind values).
  constexpr int kOpKinds = 4;
  std::vector<std::vector<double>> sum[kOpKinds];
  std::vector<std::vector<int64_t>> count[kOpKinds];
  for (int k = 0; k < kOpKinds; ++k) {
    sum[k].assign(P, std::vector<double>(V, 0.0));
    count[k].assign(P, std::vector<int64_t>(V, 0));
  }
  // The weight-gradient part of the fused backwards that measured it (TraceEvent::weight_ns) and
  // those backwards' whole durations.
  std::vector<std::vector<double>> fused_weight_sum(P, std::vector<double>(V, 0.0));
  std::vector<std::vector<double>> fused_timed_sum(P, std::vector<double>(V, 0.0));
  const std::set<int64_t> wanted(iterations.begin(), iterations.end());
  double send_sum = 0;
  int64_t sends = 0;
  for (const TraceEvent& e : trace.events) {
    if (!wanted.empty() && !wanted.count(e.iteration)) continue;
    if (e.kind == EventKind::send) {
      send_sum += double(e.end_ns - e.start_ns);
      ++sends;
      continue;
    }
    if (!is_op_kind(e.kind)) continue;
    TROUPE_CHECK(e.stage >= 0 && size_t(e.stage) < P && e.chunk >= 0 && size_t(e.chunk) < V, "trace event of '",
                 e.actor, "' has stage ", e.stage, " chunk ", e.chunk, " outside the header's P=", P, " V=", V);
    const int k = int(op_kind(e.kind));
    sum[k][size_t(e.stage)][size_t(e.chunk)] += double(e.end_ns - e.start_ns);
    count[k][size_t(e.stage)][size_t(e.chunk)] += 1;
    if (e.kind == EventKind::backward && e.weight_ns > 0) {
      fused_weight_sum[size_t(e.stage)][size_t(e.chunk)] += double(e.weight_ns);
      fused_timed_sum[size_t(e.stage)][size_t(e.chunk)] += double(e.end_ns - e.start_ns);
    }
  }
  // A trace of a split backward (B and W events) gives backward = B + W and W itself; a fused
  // one gives the backward, and W as the share of it the backwards that measured their
  // weight-gradient part (weight_ns; a traced run measures each chunk's first microbatch) spent
  // there, where every stage and chunk has some; otherwise W defaults to half of it
  // (OpDurations::weight_ns).
  bool split = false;
  for (size_t s = 0; s < P; ++s)
    for (size_t c = 0; c < V; ++c) split = split || count[2][s][c] > 0 || count[3][s][c] > 0;
  auto mean_of = [&](int k, size_t s, size_t c) {
    static const char* names[] = {"forward", "backward", "backward_input (B)", "backward_weight (W)"};
    TROUPE_CHECK(count[k][s][c] > 0, "the trace has no ", names[k], " op of stage ", s, " chunk ", c,
                 " in the iterations analysed");
    return std::llround(sum[k][s][c] / double(count[k][s][c]));
  };
  bool fused_weight = !split;
  for (size_t s = 0; s < P; ++s)
    for (size_t c = 0; c < V; ++c) fused_weight = fused_weight && fused_timed_sum[s][c] > 0;
  OpDurations d = OpDurations::uniform(shape, 0, 0);
  if (split || fused_weight) d.weight_ns.assign(P, std::vector<int64_t>(V, 0));
  for (size_t s = 0; s < P; ++s)
    for (size_t c = 0; c < V; ++c) {
      d.forward_ns[s][c] = mean_of(0, s, c);
      if (!split) {
        d.backward_ns[s][c] = mean_of(1, s, c);
        if (fused_weight)
          d.weight_ns[s][c] =
              std::llround(double(d.backward_ns[s][c]) * fused_weight_sum[s][c] / fused_timed_sum[s][c]);
        continue;
      }
      d.weight_ns[s][c] = mean_of(3, s, c);
      d.backward_ns[s][c] = mean_of(2, s, c) + d.weight_ns[s][c];
    }
  d.p2p_ns = sends > 0 ? std::llround(send_sum / double(sends)) : 0;
  const TransferLatencies t = measured_transfer_latencies(trace, iterations);
  d.dispatch_ns = t.dispatch_ns;
  double edge_sum = 0;
  int seen = 0;
  for (const auto* edges : {&t.activation_ns, &t.gradient_ns})
    for (int64_t ns : *edges)
      if (ns >= 0) edge_sum += double(ns), ++seen;
  if (seen > 0) {
    d.p2p_ns = std::llround(edge_sum / seen);
    d.activation_p2p_ns = t.activation_ns;
    d.gradient_p2p_ns = t.gradient_ns;
    for (auto* edges : {&d.activation_p2p_ns, &d.gradient_p2p_ns})
      for (int64_t& ns : *edges)
        if (ns < 0) ns = d.p2p_ns;
  }
  return d;
}

OpDurations predict_durations(const OpDurations& measured, const TraceHeader& recorded, Schedule schedule,
                              const PipelineShape& to, const LayerTime& layers) {
  const PipelineShape& from = recorded.shape;
  const Placement where = placement(schedule);
  const OpCostModel model = fit_op_cost_model(recorded, measured, layers);
  if (to.stages == from.stages && to.chunks == from.chunks && where == placement(recorded.schedule))
    return with_weight_ops(model, measured, splits_backward(schedule));  // the same chunks: as measured
  return model_durations(model, to, {}, where, splits_backward(schedule));
}

Simulation predict_run(const OpDurations& measured, const TraceHeader& recorded, const LayerTime& layers,
                       const SpeedModel& speed, Schedule schedule, const PipelineShape& to) {
  const OpDurations at_reference =
      predict_durations(at_reference_speed(speed, measured), recorded, schedule, to, layers);
  Simulation run = simulate(schedule, to, at_reference);
  if (!speed.fitted) return run;
  constexpr int kRounds = 4;  // each round moves the loads by a fraction of the last one's change
  for (int round = 0; round < kRounds; ++round)
    run = simulate(schedule, to, at_busy_speed(speed, at_reference, busy_fractions(run.stats)));
  return run;
}

}  // namespace troupe::schedules
