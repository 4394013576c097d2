#include "apps/monitor/monitor_view.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "actors/monitor/monitor_json.hpp"
#include "base/check.hpp"

namespace troupe::apps {

using actors::MonitorEnd;
using actors::MonitorHello;
using actors::MonitorIteration;
using actors::MonitorMessage;
using actors::MonitorServing;
using actors::MonitorStages;
using actors::MonitorTrace;
using actors::MonitorValidation;

namespace {

template <typename... Args>
std::string format(const char* fmt, Args... args) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), fmt, args...);
  return buf;
}

std::string truncate(const std::string& line, int width) {
  return int(line.size()) > width ? line.substr(0, size_t(std::max(width, 1))) : line;
}

std::string progress_bar(double fraction, int width) {
  const int filled = std::isnan(fraction) ? 0 : int(std::lround(std::clamp(fraction, 0.0, 1.0) * width));
  std::string bar(size_t(width) + 2, '-');  // built in place: GCC 12 misreads the concatenation (-Wrestrict)
  bar.front() = '[', bar.back() = ']';
  std::fill_n(bar.begin() + 1, filled, '#');
  return bar;
}

template <class Record>
nlohmann::ordered_json record_json(const std::optional<Record>& r) {
  if (!r) return nullptr;
  return actors::monitor_json(*r);
}

double finite_or_nan(double v) { return std::isfinite(v) ? v : NAN; }

// "run ended at iteration N: stopped: stopped by signal 15"; a server has no iteration.
std::string format_end(const MonitorView& v, const MonitorEnd& e) {
  const std::string how = e.reason + (e.detail.empty() ? "" : ": ") + e.detail;
  return v.serve() ? "server ended: " + how : format("run ended at iteration %ld: %s", long(e.iteration), how.c_str());
}

}  // namespace

bool MonitorView::apply(const MonitorMessage& m) {
  ++messages;
  if (const auto* h = std::get_if<MonitorHello>(&m.body); h && hello && hello->run_id != h->run_id) {
    const uint64_t seen = messages;
    *this = MonitorView{};  // another run on the same endpoint: forget the old one
    messages = seen;
  }
  if (!m.repeat) {
    if (last_seq > 0 && m.seq > last_seq + 1) missed += m.seq - last_seq - 1;
    last_seq = std::max(last_seq, m.seq);
  }
  bool changed = false;
  if (const auto* h = std::get_if<MonitorHello>(&m.body)) {
    changed = !hello;
    hello = *h;
  } else if (const auto* it = std::get_if<MonitorIteration>(&m.body)) {
    if (!iteration || it->iteration > iteration->iteration) {
      iteration = *it;
      changed = true;
    }
    if (losses.emplace(it->iteration, it->lm_loss).second) {
      changed = true;
      while (losses.size() > kHistory) losses.erase(losses.begin());
    }
  } else if (const auto* v = std::get_if<MonitorValidation>(&m.body)) {
    if (!validation || v->iteration > validation->iteration) {
      validation = *v;
      changed = true;
    }
  } else if (const auto* e = std::get_if<MonitorEnd>(&m.body)) {
    changed = !end;
    end = *e;
  } else if (const auto* sv = std::get_if<MonitorServing>(&m.body)) {
    // The newest state: a repeat (of the latest when it was sent) may arrive after a fresher one.
    if (!serving || m.seq >= serving_seq) {
      serving = *sv;
      serving_seq = m.seq;
      changed = true;
    }
  } else if (const auto* st = std::get_if<MonitorStages>(&m.body)) {
    if (!stages || st->iteration > stages->iteration) {
      stages = *st;
      changed = true;
    }
  } else if (const auto* t = std::get_if<MonitorTrace>(&m.body); t && !m.repeat) {
    trace_events += t->events.size();
    dropped_events = std::max(dropped_events, t->dropped_events);
  }
  return changed;
}

double MonitorView::progress() const {
  if (!iteration || iteration->train_iters <= 0) return NAN;
  return double(iteration->iteration) / double(iteration->train_iters);
}

double MonitorView::eta_seconds() const {
  if (end) return 0;
  if (!iteration || iteration->elapsed_ms_per_iteration <= 0) return NAN;
  return double(std::max<int64_t>(iteration->train_iters - iteration->iteration, 0)) *
         iteration->elapsed_ms_per_iteration / 1e3;
}

std::string format_values(const MonitorIteration& it) {
  // The log line's formats and labels (apps/train/train_log.cpp), so the same numbers read the same;
  // a few fields a line, so the view fits an 80-column terminal.
  std::string out = format("lm loss: %E | learning rate: %E\n", it.lm_loss, it.learning_rate);
  out += format("grad norm: %.3f | loss scale: %.1f | skipped iterations: %ld | nan iterations: %ld\n", it.grad_norm,
                it.loss_scale, long(it.skipped_iterations), long(it.nan_iterations));
  out += format("elapsed time per iteration (ms): %.1f | tokens/s: %.0f | consumed samples: %ld\n",
                it.elapsed_ms_per_iteration, it.tokens_per_second, long(it.consumed_samples));
  out += format("throughput per GPU (TFLOP/s/GPU): %.1f | MFU: ", it.tflops_per_device);
  out += std::isnan(it.mfu) ? std::string("n/a\n") : format("%.1f%%\n", it.mfu * 100);
  if (!it.memory_bytes.empty()) {
    out += "memory in use (GiB):";
    for (int64_t b : it.memory_bytes) out += format(" %.1f", double(b) / double(1ull << 30));
    out += "\n";
  }
  if (it.host_memory_bytes > 0)
    out += format("host memory (GiB): %.2f\n", double(it.host_memory_bytes) / double(1ull << 30));
  // Mixture of experts: the log line's router losses and expert load.
  if (!std::isnan(it.load_balancing_loss)) out += format("load_balancing_loss: %E\n", it.load_balancing_loss);
  if (!std::isnan(it.z_loss)) out += format("z_loss: %E\n", it.z_loss);
  if (!it.moe_layers.empty()) {
    out += "expert load max/mean:";
    for (size_t l = 0; l < it.moe_layers.size() && l < it.expert_load_max.size() && l < it.expert_load_mean.size(); ++l)
      out += format(" %ld: %ld/%.1f", long(it.moe_layers[l]), long(it.expert_load_max[l]), it.expert_load_mean[l]);
    out += "\n";
  }
  // The straggler report, a line per device as in the log (apps/train/straggler_report.hpp).
  // (Copied a character at a time: g++ 12 warns falsely of overlap (-Wrestrict) on string::replace.)
  std::string stragglers;
  for (size_t i = 0; i < it.stragglers.size(); ++i)
    if (it.stragglers.compare(i, 2, "; ") == 0) {
      stragglers += '\n';
      ++i;
    } else {
      stragglers += it.stragglers[i];
    }
  if (!stragglers.empty()) out += stragglers + "\n";
  return out;
}

std::string format_stages(const MonitorStages& s, int width) {
  const double window = double(std::max<int64_t>(s.end_ns - s.start_ns, 1));
  std::string out = format("stage time at iteration %ld (%.1f ms):", long(s.iteration), window / 1e6);
  const int bar = std::clamp(width - 70, 8, 30);
  std::string header(size_t(bar) + 11, ' ');
  actors::monitor_stage_states(
      s, [&](const char* state, const std::vector<int64_t>&) { header += format(" %6.6s", state); });
  out += "\n" + header + "\n";
  for (size_t st = 0; st < s.busy_ns.size(); ++st) {
    out += format("  stage %-2zu ", st) + progress_bar(double(s.busy_ns[st]) / window, bar);
    actors::monitor_stage_states(s, [&](const char*, const std::vector<int64_t>& ns) {
      out += format(" %5.1f%%", st < ns.size() ? 100.0 * double(ns[st]) / window : 0.0);
    });
    out += "\n";
  }
  return out;
}

std::string format_serving(const MonitorServing& s) {
  auto ms = [](double seconds) { return std::isfinite(seconds) ? format("%.1f", seconds * 1e3) : std::string("n/a"); };
  std::string out =
      format("requests/s: %.2f | tokens/s: %.1f (over %.0f s) | queue: %ld | batch: %ld | ", s.requests_per_second,
             s.tokens_per_second, s.rate_window_s, long(s.queue_length), long(s.batch_size));
  out += format("KV blocks: %ld/%ld\n", long(s.kv_blocks_used), long(s.kv_blocks_total));
  out += format("requests: %ld (failed %ld) | prompt tokens: %ld | generated tokens: %ld | engine steps: %ld\n",
                long(s.requests), long(s.failed_requests), long(s.prompt_tokens), long(s.generated_tokens),
                long(s.engine_steps));
  out += "TTFT ms p50: " + ms(s.ttft_p50_s) + " p99: " + ms(s.ttft_p99_s) + " | TPOT ms p50: " + ms(s.tpot_p50_s) +
         " p99: " + ms(s.tpot_p99_s) +
         format(" (%ld requests of the last %.0f s)\n", long(s.latency_samples), s.latency_window_s);
  return out;
}

std::string loss_chart(const std::map<int64_t, double>& losses, int width, int height) {
  std::vector<std::pair<int64_t, double>> points;
  for (const auto& [iteration, loss] : losses)
    if (std::isfinite(loss)) points.emplace_back(iteration, loss);
  if (points.empty() || width < 2 || height < 2) return "";
  if (int(points.size()) > width) points.erase(points.begin(), points.end() - width);
  double lo = points[0].second, hi = lo;
  for (const auto& p : points) lo = std::min(lo, p.second), hi = std::max(hi, p.second);
  std::vector<std::string> rows(size_t(height), std::string(points.size(), ' '));
  for (size_t c = 0; c < points.size(); ++c) {
    const double t = hi > lo ? (hi - points[c].second) / (hi - lo) : 0.5;
    rows[size_t(std::lround(t * (height - 1)))][c] = '*';
  }
  std::string out;
  for (int r = 0; r < height; ++r) {
    const std::string label = r == 0            ? format("%9.4f", hi)
                              : r == height - 1 ? format("%9.4f", lo)
                                                : std::string(9, ' ');
    std::string row = label + " |" + rows[size_t(r)];
    row.erase(row.find_last_not_of(' ') + 1);
    out += row + "\n";
  }
  out += std::string(10, ' ') + "+" + std::string(points.size(), '-') + "\n";
  const std::string first = format("%ld", long(points.front().first)), last = format("%ld", long(points.back().first));
  const size_t gap = points.size() > first.size() + last.size() ? points.size() - first.size() - last.size() : 1;
  return out + std::string(11, ' ') + first + std::string(gap, ' ') + last + "\n";
}

// The training part of the terminal view: the layout, progress, values, stages, loss chart.
template <class Add>
void render_training(const MonitorView& v, int width, Add& add) {
  const MonitorHello& h = *v.hello;
  add(format("%s: %.2fM parameters, %ld layers, hidden %ld, seq %ld, global batch %ld", h.model.c_str(),
             double(h.parameters) / 1e6, long(h.num_layers), long(h.hidden_size), long(h.seq_length),
             long(h.global_batch_size)));
  add(format("%ld %s devices (%s): tensor %ld x pipeline %ld (%ld chunks, %s) x data %ld", long(h.device_count),
             h.device_kind.c_str(), h.dtype.c_str(), long(h.tensor_parallel), long(h.pipeline_parallel),
             long(h.virtual_chunks), h.schedule.c_str(), long(h.data_parallel)));
  if (v.iteration) {
    const MonitorIteration& it = *v.iteration;
    const int bar = std::clamp(width - 60, 10, 50);
    add(format("iteration %8ld/%8ld %s %5.1f%% | ETA %s", long(it.iteration), long(it.train_iters),
               progress_bar(v.progress(), bar).c_str(), v.progress() * 100, format_duration(v.eta_seconds()).c_str()));
    add(format_values(it));
  } else {
    add(format("waiting for the first log line (every %ld iterations, --log-interval)", long(h.log_interval)));
  }
  if (v.validation)
    add(format("validation at %ld: lm loss value: %E | lm loss PPL: %E", long(v.validation->iteration),
               v.validation->lm_loss, v.validation->ppl));
  if (v.stages) add(format_stages(*v.stages, width));
  const std::string chart = loss_chart(v.losses, std::clamp(width - 12, 10, 120), 8);
  if (!chart.empty()) {
    add(format("lm loss over the last %zu log lines",
               std::min(v.losses.size(), size_t(std::clamp(width - 12, 10, 120)))));
    add(chart);
  }
}

std::string render_terminal(const MonitorView& v, const std::string& endpoint, int width,
                            double seconds_since_message) {
  std::vector<std::string> lines;
  auto add = [&](const std::string& text) {
    size_t start = 0;
    while (start <= text.size()) {
      const size_t nl = text.find('\n', start);
      const std::string line = text.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
      if (nl == std::string::npos) {
        if (!line.empty()) lines.push_back(line);
        break;
      }
      lines.push_back(line);
      start = nl + 1;
    }
  };
  if (!v.hello) {
    add(format("troupe monitor: waiting for the run at %s ...", endpoint.c_str()));
    return truncate(lines[0], width) + "\n";
  }
  const MonitorHello& h = *v.hello;
  add(format("troupe monitor  %s  run %s", endpoint.c_str(), h.run_id.c_str()));
  if (v.serve()) {
    add(format("serving %s: %.2fM parameters, %ld layers, hidden %ld, up to %ld tokens", h.model.c_str(),
               double(h.parameters) / 1e6, long(h.num_layers), long(h.hidden_size), long(h.seq_length)));
    add(format("%ld replicas on %ld %s devices (%s)", long(h.replicas), long(h.device_count), h.device_kind.c_str(),
               h.dtype.c_str()));
    add(v.serving ? format_serving(*v.serving) : std::string("waiting for the first serving record"));
  } else {
    render_training(v, width, add);
  }
  if (v.end) add(format_end(v, *v.end));
  add(
      format("last message %.1f s ago | messages missed: %lu | trace events: %lu (the run dropped %ld) | Ctrl-C "
             "detaches",
             seconds_since_message, static_cast<unsigned long>(v.missed), static_cast<unsigned long>(v.trace_events),
             long(v.dropped_events)));
  std::string out;
  for (const std::string& line : lines) out += truncate(line, width) + "\n";
  return out;
}

std::string render_line(const MonitorView& v, const MonitorMessage& m) {
  if (const auto* h = std::get_if<MonitorHello>(&m.body))
    return format("run %s: %s, %ld %s devices, %ld iterations from %ld", h->run_id.c_str(), h->model.c_str(),
                  long(h->device_count), h->device_kind.c_str(), long(h->train_iters), long(h->start_iteration));
  if (const auto* it = std::get_if<MonitorIteration>(&m.body)) {
    if (!v.iteration || v.iteration->iteration != it->iteration) return "";  // an older one, for the chart
    std::string values = format_values(*it);
    values.pop_back();  // the last newline
    for (size_t nl; (nl = values.find('\n')) != std::string::npos;) values.replace(nl, 1, " | ");
    if (v.stages && v.stages->iteration == it->iteration) {
      const double window = double(std::max<int64_t>(v.stages->end_ns - v.stages->start_ns, 1));
      values += " | stages busy:";
      for (int64_t busy : v.stages->busy_ns) values += format(" %.0f%%", 100.0 * double(busy) / window);
    }
    return format("iteration %ld/%ld (%.1f%%, ETA %s) | ", long(it->iteration), long(it->train_iters),
                  v.progress() * 100, format_duration(v.eta_seconds()).c_str()) +
           values;
  }
  if (const auto* sv = std::get_if<MonitorServing>(&m.body)) {
    std::string values = format_serving(*sv);
    values.pop_back();
    for (size_t nl; (nl = values.find('\n')) != std::string::npos;) values.replace(nl, 1, " | ");
    return "serving | " + values;
  }
  if (std::holds_alternative<MonitorTrace>(m.body) || std::holds_alternative<MonitorStages>(m.body))
    return "";  // shown with the iteration's log line
  if (const auto* val = std::get_if<MonitorValidation>(&m.body))
    return format("validation at iteration %ld: lm loss value: %E | lm loss PPL: %E", long(val->iteration),
                  val->lm_loss, val->ppl);
  return format_end(v, std::get<MonitorEnd>(m.body));
}

std::string snapshot_json(const MonitorView& v, const std::string& endpoint) {
  nlohmann::ordered_json j;
  j["endpoint"] = endpoint;
  j["schema_version"] = actors::kMonitorSchemaVersion;
  j["hello"] = record_json(v.hello);
  j["iteration"] = record_json(v.iteration);
  j["validation"] = record_json(v.validation);
  j["end"] = record_json(v.end);
  j["stages"] = record_json(v.stages);
  j["serving"] = record_json(v.serving);
  j["progress"] = finite_or_nan(v.progress());
  j["eta_seconds"] = finite_or_nan(v.eta_seconds());
  j["missed_messages"] = v.missed;
  j["trace_events"] = v.trace_events;
  j["dropped_trace_events"] = v.dropped_events;
  return j.dump(2) + "\n";
}

}  // namespace troupe::apps
