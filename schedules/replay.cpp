// Replay analysis and its text report.
#include "schedules/replay.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <set>

#include "base/check.hpp"
#include "schedules/transfer_latency.hpp"

namespace troupe::schedules {

namespace {

std::string ms(double ns) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f ms", ns / 1e6);
  return buf;
}

std::string pct(double f) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f%%", 100 * f);
  return buf;
}

std::string shape_str(Schedule schedule, const PipelineShape& s) {
  return str_cat(schedule_name(schedule), " P=", s.stages, " V=", s.chunks, " M=", s.microbatches,
                 schedule == Schedule::interleaved_1f1b ? str_cat(" G=", group_size(s)) : std::string());
}

std::string points(double difference) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%+.1f points", 100 * difference);
  return buf;
}

std::string delta(double ratio) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%+.1f%%", 100 * (ratio - 1));
  return buf;
}

// Each stage's mean SM clock while the analysed iterations' ops ran (empty: no samples).
std::vector<double> analysed_clocks(const Trace& trace, const std::vector<int64_t>& iterations) {
  const std::set<int64_t> wanted(iterations.begin(), iterations.end());
  int64_t from = INT64_MAX, to = INT64_MIN;
  for (const TraceEvent& e : trace.events)
    if (e.stage >= 0 && is_op_kind(e.kind) && wanted.count(e.iteration) > 0)
      from = std::min(from, e.start_ns), to = std::max(to, e.end_ns);
  return from <= to ? stage_clocks(trace.events, trace.header.shape.stages, from, to) : std::vector<double>{};
}

}  // namespace

std::string theory_formula(Schedule schedule, const PipelineShape& s) {
  if (schedule == Schedule::interleaved_1f1b)
    return str_cat("(P-1)/(V*M+P-1) = ", s.stages - 1, "/", s.chunks * s.microbatches + s.stages - 1);
  if (schedule == Schedule::zb_h1)  // F = B = W
    return str_cat("(P-1)/(3M+P-1) = ", s.stages - 1, "/", 3 * s.microbatches + s.stages - 1);
  if (schedule == Schedule::zb_v)  // F = B = W per chunk, M >= 2P-1
    return str_cat("(P-1)/(6M+P-1) = ", s.stages - 1, "/", 6 * s.microbatches + s.stages - 1);
  return str_cat("(P-1)/(M+P-1) = ", s.stages - 1, "/", s.microbatches + s.stages - 1);
}

namespace {
int64_t median(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
}  // namespace

int64_t median_step_ns(const ReplayReport& r) { return r.step_ns.empty() ? r.stats.step_ns : median(r.step_ns); }

std::vector<int64_t> stalled_iterations(const std::vector<int64_t>& iterations, const std::vector<int64_t>& step_ns,
                                        double threshold) {
  TROUPE_CHECK(iterations.size() == step_ns.size(), "stalled_iterations: ", iterations.size(), " iterations, ",
               step_ns.size(), " step times");
  std::vector<int64_t> out;
  if (threshold <= 0 || step_ns.empty()) return out;
  const double limit = double(median(step_ns)) * (1 + threshold);
  for (size_t i = 0; i < step_ns.size(); ++i)
    if (double(step_ns[i]) > limit) out.push_back(iterations[i]);
  return out;
}

ReplayReport replay_trace(const Trace& trace, const ReplayOptions& options) {
  ReplayReport r;
  r.header = trace.header;
  validate(trace.header.schedule, trace.header.shape);
  std::vector<int64_t> all;
  for (int64_t it : trace_iterations(trace)) {
    const Trace one = trace_iteration(trace, it);
    if (std::any_of(one.events.begin(), one.events.end(),
                    [](const TraceEvent& e) { return e.stage >= 0 && is_op_kind(e.kind); }))
      all.push_back(it);
  }
  TROUPE_CHECK(!all.empty(), "the trace holds no forward or backward op");
  if (options.iteration) {
    TROUPE_CHECK(std::find(all.begin(), all.end(), *options.iteration) != all.end(), "--iteration ", *options.iteration,
                 ": the trace has pipeline ops of iterations ", all.front(), "..", all.back());
    r.iterations = {*options.iteration};
  } else {
    r.iterations.assign(all.size() > 1 ? all.begin() + 1 : all.begin(), all.end());
  }

  const int P = trace.header.shape.stages;
  std::vector<PipelineStats> per_iteration;
  for (int64_t it : r.iterations) {
    per_iteration.push_back(pipeline_stats(trace_iteration(trace, it)));
    TROUPE_CHECK(int(per_iteration.back().stages.size()) == P, "iteration ", it, " has ops of stage ",
                 per_iteration.back().stages.size() - 1, ", the header says P = ", P);
    r.step_ns.push_back(per_iteration.back().step_ns);
  }
  r.stalled = stalled_iterations(r.iterations, r.step_ns, options.stall_threshold);
  std::vector<int64_t> typical;  // the analysed iterations that did not stall
  r.stats.stages.resize(size_t(P));
  double bubble = 0, step = 0;
  std::vector<double> busy(size_t(P), 0.0);
  for (size_t i = 0; i < r.iterations.size(); ++i) {
    if (std::ranges::find(r.stalled, r.iterations[i]) != r.stalled.end()) continue;
    typical.push_back(r.iterations[i]);
    const PipelineStats& s = per_iteration[i];
    step += double(s.step_ns);
    bubble += s.bubble_fraction;
    for (int p = 0; p < P; ++p) {
      busy[size_t(p)] += double(s.stages[size_t(p)].busy_ns);
      r.stats.stages[size_t(p)].ops = s.stages[size_t(p)].ops;
      r.stats.stages[size_t(p)].peak_in_flight =
          std::max(r.stats.stages[size_t(p)].peak_in_flight, s.stages[size_t(p)].peak_in_flight);
    }
  }
  const double n = double(typical.size());
  r.stats.step_ns = int64_t(std::llround(step / n));
  r.stats.bubble_fraction = bubble / n;
  for (int p = 0; p < P; ++p) {
    r.stats.stages[size_t(p)].busy_ns = int64_t(std::llround(busy[size_t(p)] / n));
    r.stats.stages[size_t(p)].idle_ns = r.stats.step_ns - r.stats.stages[size_t(p)].busy_ns;
  }
  r.theory_bubble = theoretical_bubble(trace.header.schedule, trace.header.shape);
  r.path_iteration = typical.back();
  r.critical_path = critical_path(trace_iteration(trace, r.path_iteration));

  r.durations = measured_durations(trace, typical);
  r.layers = layer_time(trace.events, typical);
  r.speed = fit_speed_model(stage_layer_speed(r.layers, trace.header.shape.stages), busy_fractions(r.stats));
  r.clocks_mhz = analysed_clocks(trace, typical);
  r.cost_model = fit_op_cost_model(trace.header, r.durations, r.layers);
  r.smallest_gap_ns = measured_transfer_latencies(trace, typical).smallest_gap_ns;
  r.replayed = simulate(trace.header.schedule, trace.header.shape, r.durations);
  r.all_to_all = all_to_all_overlap(trace.events, typical);
  for (const std::string& spec : options.what_ifs) {
    WhatIfPrediction w;
    w.spec = spec;
    w.what_if = parse_what_if(spec, trace.header);
    w.simulation = predict_run(r.durations, trace.header, r.layers, r.speed, w.what_if.schedule, w.what_if.shape);
    const WhatIf& to = w.what_if;
    for (int k = 0; k + 1 < to.shape.stages * to.shape.chunks; ++k)  // zb_v's turn within a stage is none
      if (transfer_link(placement(to.schedule), to.shape, k, false).link >= 0) w.transfers += 2 * to.shape.microbatches;
    w.theory_bubble = theoretical_bubble(w.what_if.schedule, w.what_if.shape);
    r.what_ifs.push_back(std::move(w));
  }
  return r;
}

std::string format_replay_report(const ReplayReport& r) {
  std::string out;
  auto line = [&](const std::string& s) { out += s + "\n"; };
  const auto& h = r.header;
  line(str_cat("pipeline: ", shape_str(h.schedule, h.shape),
               h.num_layers > 0 ? str_cat(", ", h.num_layers, " layers") : std::string(), "; analysing ",
               r.iterations.size() == 1 ? str_cat("iteration ", r.iterations[0])
                                        : str_cat(r.iterations.size(), " iterations (", r.iterations.front(), "..",
                                                  r.iterations.back(), ")")));
  const double all_mean = r.step_ns.empty()
                              ? double(r.stats.step_ns)
                              : std::accumulate(r.step_ns.begin(), r.step_ns.end(), 0.0) / double(r.step_ns.size());
  line(str_cat("step time: ", ms(all_mean),
               r.step_ns.size() > 1
                   ? str_cat(" mean (median ", ms(double(median_step_ns(r))), ", min ",
                             ms(double(*std::min_element(r.step_ns.begin(), r.step_ns.end()))), ", max ",
                             ms(double(*std::max_element(r.step_ns.begin(), r.step_ns.end()))), ")")
                   : std::string(),
               ", forward/backward ops only"));
  if (!r.stalled.empty()) {
    const double median = double(median_step_ns(r));
    std::string which;
    for (size_t i = 0; i < r.iterations.size(); ++i)
      if (std::ranges::find(r.stalled, r.iterations[i]) != r.stalled.end())
        which += str_cat(which.empty() ? "" : ", ", r.iterations[i], " ", delta(double(r.step_ns[i]) / median));
    line(str_cat("stalled: ", r.stalled.size(), " of ", r.iterations.size(),
                 " iterations ran over the median step by more than the stall threshold (", which,
                 "); the rest of this report leaves them out (--stall-threshold 0 keeps them)"));
  }
  line("stage      busy          idle     idle  ops  peak in flight");
  for (size_t p = 0; p < r.stats.stages.size(); ++p) {
    const StageStats& s = r.stats.stages[p];
    char buf[160];
    std::snprintf(buf, sizeof(buf), "%5zu  %12s  %12s  %6s  %3d  %d", p, ms(double(s.busy_ns)).c_str(),
                  ms(double(s.idle_ns)).c_str(),
                  pct(r.stats.step_ns > 0 ? double(s.idle_ns) / double(r.stats.step_ns) : 0).c_str(), s.ops,
                  s.peak_in_flight);
    line(buf);
  }
  line(str_cat("bubble: ", pct(r.stats.bubble_fraction), " measured, ", pct(r.theory_bubble), " theory ",
               theory_formula(h.schedule, h.shape), " (idle share of P x step time)"));

  int64_t compute = 0;
  std::map<int, int> per_stage;
  for (const TraceEvent& e : r.critical_path) compute += e.end_ns - e.start_ns, per_stage[e.stage]++;
  if (!r.critical_path.empty()) {
    const int64_t span = r.critical_path.back().end_ns - r.critical_path.front().start_ns;
    std::string stages;
    for (const auto& [s, count] : per_stage) stages += str_cat(stages.empty() ? "" : ", ", "s", s, ": ", count);
    line(str_cat("critical path (iteration ", r.path_iteration, "): ", r.critical_path.size(), " ops, ",
                 ms(double(compute)), " computing, ", ms(double(span - compute)),
                 " waiting (transfers, gaps); ops per stage ", stages));
    std::string chain;
    const size_t n = r.critical_path.size(), keep = 24;
    for (size_t i = 0; i < n; ++i) {
      if (n > 2 * keep && i == keep) {
        chain += str_cat(" -> ... ", n - 2 * keep, " more ...");
        i = n - keep - 1;
        continue;
      }
      const TraceEvent& e = r.critical_path[i];
      chain += str_cat(i ? " -> " : "  ", "s", e.stage, ":", op_str({op_kind(e.kind), e.microbatch, e.chunk}));
    }
    line(chain);
  }
  if (r.clocks_disagree())
    line(str_cat("warning: an op starts ", ms(double(-r.smallest_gap_ns)),
                 " before the op it depends on ends: the trace's clocks disagree (files of processes merged "
                 "with an offset measured badly, or of different runs); transfers and the step are off by that much"));
  const double replay_step = double(r.replayed.stats.step_ns), measured = double(r.stats.step_ns);
  line(str_cat(
      "simulated with the measured mean op times",
      r.durations.p2p_ns > 0 ? str_cat(" and ", ms(double(r.durations.p2p_ns)), " per transfer (mean)") : std::string(),
      ": step ", ms(replay_step), " (", measured > 0 ? delta(replay_step / measured) : std::string("?"),
      " vs measured), bubble ", pct(r.replayed.stats.bubble_fraction), " (",
      points(r.replayed.stats.bubble_fraction - r.stats.bubble_fraction), " vs measured)"));
  if (const AllToAllOverlap& a = r.all_to_all; a.spans > 0) {
    const double per = double(a.iterations * a.stages);  // per iteration and stage
    line(str_cat("expert all-to-all: ", ms(double(a.total_ns()) / per), " per iteration and stage (dispatch ",
                 ms(double(a.dispatch_ns) / per), ", combine ", ms(double(a.combine_ns) / per), "), ",
                 pct(a.hidden_fraction()), " hidden under the shared expert's compute (",
                 ms(double(a.overlap_ns) / per), " of it ran beside them), ", pct(a.beside_fraction()),
                 " beside another op (another microbatch's work), ", pct(a.covered_fraction()), " under either"));
  }
  // One line per op kind: "layers, forward: 0.530 ms per layer; around them per op: s0c0 0.2 ms
  // s1c0 1.4 ms" (the embedding, the LM head and loss, the op's own set-up).
  for (const LayerTimeOfKind& k : r.layers.kinds) {
    std::string around;
    for (const auto& [where, sum] : k.around)
      around += str_cat(" s", where.first, "c", where.second, " ", ms(double(sum.second) / double(sum.first)));
    line(str_cat("layers, ", event_kind_name(k.kind), ": ", ms(double(k.layer_ns) / double(k.layers)),
                 " per layer; around them per op:", around));
  }
  const bool splits_backward = std::ranges::any_of(
      r.what_ifs, [](const WhatIfPrediction& w) { return schedules::splits_backward(w.what_if.schedule); });
  if (!r.what_ifs.empty()) line(format_op_cost_model(r.cost_model, splits_backward));
  if (const std::string speed = format_speed_model(r.speed, busy_fractions(r.stats), r.clocks_mhz); !speed.empty())
    line(speed);
  for (const WhatIfPrediction& w : r.what_ifs) {
    const double step = double(w.simulation.stats.step_ns);
    line(str_cat("what-if ", shape_str(w.what_if.schedule, w.what_if.shape), " [", w.spec, "]: predicted step ",
                 ms(step), " (", replay_step > 0 ? delta(step / replay_step) : std::string("?"),
                 " vs the simulated recorded run), bubble ", pct(w.simulation.stats.bubble_fraction), " (theory ",
                 pct(w.theory_bubble), "), ", w.transfers, " transfers per iteration, peak in flight on stage 0: ",
                 w.simulation.stats.stages.empty() ? 0 : w.simulation.stats.stages[0].peak_in_flight));
  }
  return out;
}

}  // namespace troupe::schedules
