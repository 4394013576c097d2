// Fitting the per-op cost model to measured durations, and applying it to another shape.
#include "schedules/op_cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>

#include "base/check.hpp"

namespace troupe::schedules {

namespace {

// t[k]: the measured time of virtual stage k's op of one kind.
OpKindCost fit_kind(const std::vector<double>& t, const std::vector<double>& n, std::string& fit) {
  const size_t K = t.size();
  OpKindCost c;
  if (K == 1) {
    c.layer_ns = n[0] > 0 ? t[0] / n[0] : 0;
    fit = "one chunk";
    return c;
  }
  double mid_t = 0, mid_n = 0;
  for (size_t k = 1; k + 1 < K; ++k) mid_t += t[k], mid_n += n[k];
  if (mid_n > 0) {
    c.layer_ns = mid_t / mid_n;
    fit = "middle chunks";
  } else {
    // Two chunks (or middle chunks without layers): one equation short. The embedding (a
    // gather forward, a scatter-add backward) is the cheaper extra by far, so it is taken as
    // free and the first chunk gives the layer cost.
    c.layer_ns = n[0] > 0 ? t[0] / n[0] : (n[K - 1] > 0 ? t[K - 1] / n[K - 1] : 0);
    fit = "embedding taken as free";
  }
  c.first_ns = std::max(0.0, t[0] - n[0] * c.layer_ns);
  c.last_ns = std::max(0.0, t[K - 1] - n[K - 1] * c.layer_ns);
  return c;
}

// Mean of the per-edge latencies of each recorded link in one direction (transfer_link()); -1
// where none. `gradient`: the edges' latencies are the gradients'.
std::vector<int64_t> link_latencies(const std::vector<int64_t>& activation, const std::vector<int64_t>& gradient,
                                    Placement placement, const PipelineShape& shape, bool up) {
  const int P = shape.stages;
  std::vector<double> sum(size_t(P), 0);
  std::vector<int> count(size_t(P), 0);
  for (const bool grad : {false, true}) {
    const std::vector<int64_t>& edges = grad ? gradient : activation;
    for (size_t k = 0; k < edges.size(); ++k) {
      const Link l = transfer_link(placement, shape, int(k), grad);
      if (edges[k] < 0 || l.link < 0 || l.up != up) continue;
      sum[size_t(l.link)] += double(edges[k]);
      count[size_t(l.link)] += 1;
    }
  }
  std::vector<int64_t> out(size_t(P), -1);
  for (size_t s = 0; s < size_t(P); ++s)
    if (count[s] > 0) out[s] = std::llround(sum[s] / count[s]);
  return out;
}

int64_t mean_seen(const std::vector<int64_t>& links, int64_t fallback) {
  double sum = 0;
  int n = 0;
  for (int64_t ns : links)
    if (ns >= 0) sum += double(ns), ++n;
  return n > 0 ? std::llround(sum / n) : fallback;
}

// Mean time around the layers of one op kind's ops, over the virtual stages `wanted` says.
double mean_around(const LayerTime& layers, EventKind kind, const std::function<bool(int, int)>& wanted) {
  for (const LayerTimeOfKind& k : layers.kinds) {
    if (k.kind != kind) continue;
    double ns = 0, ops = 0;
    for (const auto& [where, sum] : k.around)
      if (wanted(where.first, where.second)) ops += double(sum.first), ns += double(sum.second);
    return ops > 0 ? ns / ops : 0;
  }
  return 0;
}

std::string ms(double ns) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f ms", ns / 1e6);
  return buf;
}

}  // namespace

std::vector<double> chunk_layer_counts(const PipelineShape& shape, int num_layers,
                                       const std::vector<int>& chunk_layers) {
  const int K = shape.stages * shape.chunks;
  if (!chunk_layers.empty()) {
    TROUPE_CHECK(chunk_layers.size() == size_t(K), "chunk layers: ", chunk_layers.size(), " counts for P*V = ", K,
                 " virtual stages");
    return {chunk_layers.begin(), chunk_layers.end()};
  }
  const double L = num_layers > 0 ? double(num_layers) : double(K);
  return std::vector<double>(size_t(K), L / K);
}

OpOverhead op_overhead(const TraceHeader& header, const LayerTime& layers) {
  const PipelineShape& shape = header.shape;
  const int K = shape.stages * shape.chunks;
  OpOverhead o;
  if (K < 2 || layers.kinds.empty()) return o;
  const Placement where = placement(header.schedule);
  auto wanted = [&](int stage, int chunk) {
    if (stage >= shape.stages || chunk >= shape.chunks) return false;
    const int k = virtual_stage(where, shape, stage, chunk);
    return K == 2 ? k == 0 : k > 0 && k < K - 1;
  };
  o.forward_ns = mean_around(layers, EventKind::forward, wanted);
  if (splits_backward(header.schedule)) {
    o.backward_ns = mean_around(layers, EventKind::backward_input, wanted);
    o.weight_ns = mean_around(layers, EventKind::backward_weight, wanted);
  } else {
    o.backward_ns = o.weight_ns = mean_around(layers, EventKind::backward, wanted);
  }
  return o;
}

OpCostModel fit_op_cost_model(const TraceHeader& header, const OpDurations& measured, const LayerTime& layers) {
  const PipelineShape& shape = header.shape;
  const int P = shape.stages, K = P * shape.chunks;
  TROUPE_CHECK(measured.forward_ns.size() == size_t(P), "fit_op_cost_model: durations for ", measured.forward_ns.size(),
               " stages, the trace has ", P);
  const std::vector<double> n = chunk_layer_counts(shape, header.num_layers, header.chunk_layers);
  const Placement where = placement(header.schedule);
  auto at = [&](const std::vector<std::vector<int64_t>>& t, int k) {
    const StageChunk sc = stage_chunk(where, shape, k);
    return double(t[size_t(sc.stage)][size_t(sc.chunk)]);
  };
  OpCostModel m;
  m.overhead = op_overhead(header, layers);
  m.recorded_split = splits_backward(header.schedule);
  // The recorded ops' overhead comes off before the fit: what is left scales with the layers.
  const double weight_op = m.recorded_split ? m.overhead.weight_ns : 0;
  std::vector<double> f(static_cast<size_t>(K)), b(static_cast<size_t>(K));
  for (int k = 0; k < K; ++k) {
    f[size_t(k)] = at(measured.forward_ns, k) - m.overhead.forward_ns;
    b[size_t(k)] = at(measured.backward_ns, k) - m.overhead.backward_ns - weight_op;
  }
  m.forward = fit_kind(f, n, m.fit);
  m.backward = fit_kind(b, n, m.fit);
  if (!measured.weight_ns.empty()) {
    std::vector<double> w(static_cast<size_t>(K));
    for (int k = 0; k < K; ++k) w[size_t(k)] = at(measured.weight_ns, k) - weight_op;
    m.weight = fit_kind(w, n, m.fit);
    m.has_weight = true;
  }
  for (double x : n) m.model_layers += x;
  m.stages = P;
  std::vector<int64_t> act = measured.activation_p2p_ns, grad = measured.gradient_p2p_ns;
  if (act.empty()) act.assign(size_t(std::max(K - 1, 0)), measured.p2p_ns);
  if (grad.empty()) grad.assign(size_t(std::max(K - 1, 0)), measured.p2p_ns);
  m.activation_link_ns = link_latencies(act, grad, where, shape, true);
  m.gradient_link_ns = link_latencies(act, grad, where, shape, false);
  m.activation_ns = mean_seen(m.activation_link_ns, measured.p2p_ns);
  m.gradient_ns = mean_seen(m.gradient_link_ns, measured.p2p_ns);
  m.dispatch_ns = measured.dispatch_ns;
  m.mean_dispatch_ns = mean_seen(m.dispatch_ns, 0);
  return m;
}

OpDurations model_durations(const OpCostModel& model, const PipelineShape& shape, const std::vector<int>& chunk_layers,
                            Placement where, bool splits) {
  const int P = shape.stages, K = P * shape.chunks;
  std::vector<double> n;
  if (!chunk_layers.empty()) {
    n = chunk_layer_counts(shape, 0, chunk_layers);
  } else {
    n.assign(size_t(K), model.model_layers / K);
  }
  OpDurations d = OpDurations::uniform(shape, 0, 0, std::max(model.activation_ns, model.gradient_ns));
  const OpOverhead& o = model.overhead;
  const double weight_op = splits ? o.weight_ns : 0;
  auto cost = [&](const OpKindCost& c, int k, double overhead) {
    double t = n[size_t(k)] * c.layer_ns + overhead;
    if (k == 0) t += c.first_ns;
    if (k == K - 1) t += c.last_ns;
    return int64_t(std::llround(std::max(t, 0.0)));
  };
  for (int k = 0; k < K; ++k) {
    const StageChunk sc = stage_chunk(where, shape, k);
    d.forward_ns[size_t(sc.stage)][size_t(sc.chunk)] = cost(model.forward, k, o.forward_ns);
    d.backward_ns[size_t(sc.stage)][size_t(sc.chunk)] = cost(model.backward, k, o.backward_ns + weight_op);
  }
  // W: as fitted, or half of the backward's layer work when no W was measured, plus its op's
  // overhead; part of the backward, so never above it.
  if (model.has_weight || weight_op > 0) {
    d.weight_ns.assign(size_t(P), std::vector<int64_t>(size_t(shape.chunks), 0));
    for (int k = 0; k < K; ++k) {
      const StageChunk sc = stage_chunk(where, shape, k);
      const int64_t w = model.has_weight ? cost(model.weight, k, weight_op)
                                         : cost(model.backward, k, 0) / 2 + std::llround(weight_op);
      d.weight_ns[size_t(sc.stage)][size_t(sc.chunk)] = std::min(w, d.backward_ns[size_t(sc.stage)][size_t(sc.chunk)]);
    }
  }
  const bool same_links = P == model.stages;
  auto latency = [&](int k, bool gradient) -> int64_t {
    const Link l = transfer_link(where, shape, k, gradient);
    if (l.link < 0) return 0;  // two chunks of one stage
    const int64_t mean = l.up ? model.activation_ns : model.gradient_ns;
    if (!same_links) return mean;
    const int64_t ns = (l.up ? model.activation_link_ns : model.gradient_link_ns)[size_t(l.link)];
    return ns >= 0 ? ns : mean;
  };
  for (int k = 0; k + 1 < K; ++k) {
    d.activation_p2p_ns.push_back(latency(k, false));
    d.gradient_p2p_ns.push_back(latency(k, true));
  }
  if (!model.dispatch_ns.empty())
    for (int s = 0; s < P; ++s)
      d.dispatch_ns.push_back(same_links ? model.dispatch_ns[size_t(s)] : model.mean_dispatch_ns);
  return d;
}

OpDurations with_weight_ops(const OpCostModel& model, OpDurations d, bool splits) {
  const int64_t w = std::llround(model.overhead.weight_ns);
  if (splits == model.recorded_split || w == 0) return d;
  const bool had_weight = !d.weight_ns.empty();
  if (splits && !had_weight) d.weight_ns.assign(d.backward_ns.size(), std::vector<int64_t>(d.backward_ns[0].size(), 0));
  for (size_t s = 0; s < d.backward_ns.size(); ++s)
    for (size_t c = 0; c < d.backward_ns[s].size(); ++c) {
      int64_t& b = d.backward_ns[s][c];
      if (!splits) {  // one backward op where the trace ran two
        b = std::max<int64_t>(b - w, 0);
        continue;
      }
      int64_t& weight = d.weight_ns[s][c];
      weight = (had_weight ? weight : b / 2) + w;
      b += w;
    }
  return d;
}

std::string format_op_cost_model(const OpCostModel& m, bool splits_backward) {
  auto kind = [&](const char* name, const OpKindCost& c) {
    return str_cat(name, " ", ms(c.layer_ns), "/layer, embedding +", ms(c.first_ns), ", LM head and loss +",
                   ms(c.last_ns));
  };
  // Activations cross link s from s to s+1, gradients from s+1 to s.
  auto links = [&](const std::vector<int64_t>& l, bool back) {
    std::string s;
    for (size_t i = 0; i < l.size(); ++i) {
      const size_t a = i, b = (i + 1) % l.size();
      s += str_cat(i ? ", " : "", back ? b : a, "->", back ? a : b, " ",
                   l[i] >= 0 ? ms(double(l[i])) : std::string("not used"));
    }
    return s;
  };
  const OpOverhead& o = m.overhead;
  const std::string overhead =
      o.measured()
          ? str_cat("\nper op outside its layers: forward ", ms(o.forward_ns), ", backward ", ms(o.backward_ns),
                    m.recorded_split || splits_backward ? str_cat(", W ", ms(o.weight_ns)) : std::string(),
                    m.recorded_split ? std::string() : std::string(" (W op: as the backward)"))
          : std::string();
  std::string dispatch;
  for (size_t s = 0; s < m.dispatch_ns.size(); ++s)
    dispatch += str_cat(s ? ", " : "", "s", s, " ", ms(double(m.dispatch_ns[s])));
  return str_cat("cost model (", m.fit, "): ", kind("forward", m.forward), "; ", kind("backward", m.backward),
                 m.has_weight      ? str_cat("; of which W ", kind("", m.weight).substr(1))
                 : splits_backward ? std::string("; W of a split backward taken as half the backward")
                                   : std::string(),
                 "\ntransfers: activation ", ms(double(m.activation_ns)), " (", links(m.activation_link_ns, false),
                 "), gradient ", ms(double(m.gradient_ns)), " (", links(m.gradient_link_ns, true), ")",
                 dispatch.empty() ? std::string() : str_cat("; between ops ", dispatch), overhead);
}

}  // namespace troupe::schedules
