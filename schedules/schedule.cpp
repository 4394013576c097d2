// Megatron-LM's pipeline schedules as op orders, and the stage policy they emerge from.
// Reference: megatron/core/pipeline_parallel/schedules.py (get_schedule_table,
// get_pp_rank_microbatches, forward_backward_pipelining_with/without_interleaving); ZB-H1 and
// ZB-V: Qi et al., "Zero Bubble Pipeline Parallelism" (2023), sections 2.1 and 6.
#include "schedules/schedule.hpp"

#include <algorithm>
#include <iterator>

#include "base/check.hpp"

namespace troupe::schedules {

const char* schedule_name(Schedule s) {
  switch (s) {
    case Schedule::gpipe:
      return "gpipe";
    case Schedule::one_f_one_b:
      return "1f1b";
    case Schedule::interleaved_1f1b:
      return "interleaved";
    case Schedule::zb_h1:
      return "zb-h1";
    case Schedule::zb_v:
      return "zb-v";
  }
  return "?";
}

Schedule schedule_from_name(const std::string& name) {
  if (name == "gpipe") return Schedule::gpipe;
  if (name == "1f1b" || name == "one_f_one_b") return Schedule::one_f_one_b;
  if (name == "interleaved" || name == "interleaved_1f1b") return Schedule::interleaved_1f1b;
  if (name == "zb-h1" || name == "zb_h1") return Schedule::zb_h1;
  if (name == "zb-v" || name == "zb_v") return Schedule::zb_v;
  TROUPE_FAIL("unknown pipeline schedule '", name, "' (expected gpipe, 1f1b, interleaved, zb-h1 or zb-v)");
}

std::string op_str(const Op& op) {
  const char* letter = op.kind == OpKind::forward ? "F" : op.kind == OpKind::backward_weight ? "W" : "B";
  return str_cat(letter, op.microbatch, ".c", op.chunk);
}

bool splits_backward(Schedule s) { return s == Schedule::zb_h1 || s == Schedule::zb_v; }

Placement placement(Schedule s) { return s == Schedule::zb_v ? Placement::v : Placement::loop; }

int virtual_stage(Placement placement, const PipelineShape& shape, int stage, int chunk) {
  if (placement == Placement::v) return chunk == 0 ? stage : 2 * shape.stages - 1 - stage;
  return chunk * shape.stages + stage;
}

StageChunk stage_chunk(Placement placement, const PipelineShape& shape, int k) {
  const int P = shape.stages;
  if (placement == Placement::v) return k < P ? StageChunk{k, 0} : StageChunk{2 * P - 1 - k, 1};
  return {k % P, k / P};
}

Link transfer_link(Placement placement, const PipelineShape& shape, int k, bool gradient) {
  const int P = shape.stages;
  if (placement == Placement::loop || k < P - 1) return {k % P, !gradient};
  if (k == P - 1) return {};
  return {2 * P - 2 - k, gradient};  // the V's way back up: activations go from stage l+1 to l
}

int group_size(const PipelineShape& shape) { return shape.group_size > 0 ? shape.group_size : shape.stages; }

void validate(Schedule schedule, const PipelineShape& shape) {
  const int P = shape.stages, V = shape.chunks, M = shape.microbatches;
  TROUPE_CHECK(P >= 1, "--pipeline-model-parallel-size must be >= 1, got ", P);
  TROUPE_CHECK(M >= 1, "an iteration needs at least one microbatch (--global-batch-size / (--micro-batch-size * ",
               "data-parallel size)), got ", M);
  TROUPE_CHECK(V >= 1, "model chunks per stage must be >= 1, got ", V);
  TROUPE_CHECK(shape.group_size >= 0, "--microbatch-group-size-per-vp-stage must be >= 1 (0: the default, P), got ",
               shape.group_size);
  if (schedule == Schedule::zb_v) {
    TROUPE_CHECK(V == 2, "the zb-v schedule runs two model chunks per stage (a V: stage s holds virtual stages s and ",
                 "2P-1-s), got ", V);
    return;
  }
  if (schedule != Schedule::interleaved_1f1b) {
    TROUPE_CHECK(V == 1, "the ", schedule_name(schedule), " schedule runs one model chunk per stage, got ", V,
                 " (--num-layers-per-virtual-pipeline-stage selects the interleaved schedule)");
    return;
  }
  // Megatron asks for P > 2 unless --overlap-p2p-communication is on, which is its default with
  // interleaving; our channels always overlap, so P = 2 is allowed.
  TROUPE_CHECK(P >= 2, "the interleaved schedule needs --pipeline-model-parallel-size > 1, got ", P,
               " (drop --num-layers-per-virtual-pipeline-stage on a single stage)");
  const int G = group_size(shape);
  TROUPE_CHECK(G >= P, "--microbatch-group-size-per-vp-stage (", G, ") must be >= --pipeline-model-parallel-size (", P,
               ")");
  TROUPE_CHECK(G <= M, "the interleaved schedule needs at least ", G, " microbatches per iteration (",
               shape.group_size > 0 ? "--microbatch-group-size-per-vp-stage" : "the default group size, P",
               "), got M = ", M, "; raise --global-batch-size / --micro-batch-size");
  const int rest = M % G;
  TROUPE_CHECK(rest == 0 || rest >= P, "with the interleaved schedule, M mod G must be 0 or >= P, got M = ", M,
               ", G = ", G, " (--microbatch-group-size-per-vp-stage", shape.group_size > 0 ? "" : ", default P",
               "), P = ", P,
               (shape.group_size > 0 ? ""
                                     : ": with the default group size M must be a multiple of "
                                       "--pipeline-model-parallel-size"),
               "; the last microbatch group would stall the pipeline");
}

std::vector<Op> schedule_table(int microbatches, int chunks, int group) {
  TROUPE_CHECK(microbatches >= 1 && chunks >= 1 && group >= 1, "schedule_table: M = ", microbatches, ", V = ", chunks,
               ", G = ", group);
  std::vector<Op> table;
  table.reserve(size_t(microbatches) * size_t(chunks));
  for (int first = 0; first < microbatches; first += group) {
    const int last = std::min(first + group, microbatches);
    for (int c = 0; c < chunks; ++c)
      for (int m = first; m < last; ++m) table.push_back({OpKind::forward, m, c});
  }
  return table;
}

namespace {

void check_stage(const PipelineShape& shape, int stage) {
  TROUPE_CHECK(stage >= 0 && stage < shape.stages, "stage ", stage, " is outside the pipeline of ", shape.stages,
               " stages");
}

// ZB-V's order on one stage (schedule.hpp), with how many of its Bs come before the cool-down and
// in the cool-down's first 2s (their Ws held back): StagePolicy's W rule.
struct VOrder {
  std::vector<Op> ops;
  size_t steady_inputs = 0, held_inputs = 0;
};

VOrder zb_v_order(const PipelineShape& shape, int s) {
  validate(Schedule::zb_v, shape);
  check_stage(shape, s);
  const int P = shape.stages, M = shape.microbatches;
  const int n = std::max(M, 2 * P - 1);  // microbatches >= M stand in for a full pipeline, then go
  VOrder v;
  int forwards[2] = {0, 0}, inputs[2] = {0, 0}, weights[2] = {0, 0};
  enum Phase { steady, held, rest } phase = steady;
  auto emit = [&](OpKind kind, int chunk) {
    int* count = kind == OpKind::forward ? forwards : kind == OpKind::backward_input ? inputs : weights;
    const int m = count[chunk]++;
    if (m >= M) return;
    v.ops.push_back({kind, m, chunk});
    if (kind == OpKind::backward_input && phase != rest) ++(phase == steady ? v.steady_inputs : v.held_inputs);
  };
  auto triple = [&](int chunk) {  // F, B and W of one chunk
    emit(OpKind::forward, chunk);
    emit(OpKind::backward_input, chunk);
    emit(OpKind::backward_weight, chunk);
  };
  for (int i = 0; i < 2 * (P - s) - 1; ++i) emit(OpKind::forward, 0);
  for (int i = 0; i < s; ++i) emit(OpKind::forward, 1), emit(OpKind::forward, 0);
  for (int i = 0; i < P - s; ++i) triple(1);
  while (forwards[1] < forwards[0] || forwards[0] < n) {
    if (forwards[0] < n) emit(OpKind::forward, 0);
    emit(OpKind::backward_input, 0), emit(OpKind::backward_weight, 0);
    triple(1);
  }
  phase = held;
  for (int i = 0; i < s; ++i) emit(OpKind::backward_input, 0), emit(OpKind::backward_input, 1);
  phase = rest;
  for (int i = 0; i < P - s; ++i) emit(OpKind::backward_input, 0), emit(OpKind::backward_weight, 0);
  while (weights[1] < n) emit(OpKind::backward_weight, 1);
  while (weights[0] < n) emit(OpKind::backward_weight, 0);
  return v;
}

std::vector<Op> ops_of_kind(const std::vector<Op>& ops, OpKind kind) {
  std::vector<Op> out;
  std::copy_if(ops.begin(), ops.end(), std::back_inserter(out), [&](const Op& op) { return op.kind == kind; });
  return out;
}

}  // namespace

std::vector<Op> forward_order(Schedule schedule, const PipelineShape& shape, int stage) {
  validate(schedule, shape);
  check_stage(shape, stage);
  if (schedule == Schedule::zb_v) return ops_of_kind(zb_v_order(shape, stage).ops, OpKind::forward);
  if (schedule == Schedule::interleaved_1f1b)
    return schedule_table(shape.microbatches, shape.chunks, group_size(shape));
  std::vector<Op> order;
  for (int m = 0; m < shape.microbatches; ++m) order.push_back({OpKind::forward, m, 0});
  return order;
}

std::vector<Op> backward_order(Schedule schedule, const PipelineShape& shape, int stage) {
  if (schedule == Schedule::zb_v) return ops_of_kind(zb_v_order(shape, stage).ops, OpKind::backward_input);
  std::vector<Op> order = forward_order(schedule, shape, stage);
  const OpKind kind = splits_backward(schedule) ? OpKind::backward_input : OpKind::backward;
  // Backward entry k takes table entry k's chunk mirrored; within one chunk the microbatches
  // come in table order, which is 0, 1, ..., so entry k's microbatch is the right one.
  for (Op& op : order) {
    op.kind = kind;
    op.chunk = shape.chunks - 1 - op.chunk;
  }
  return order;
}

std::vector<Op> weight_order(Schedule schedule, const PipelineShape& shape, int stage) {
  if (schedule == Schedule::zb_v) return ops_of_kind(zb_v_order(shape, stage).ops, OpKind::backward_weight);
  std::vector<Op> order = backward_order(schedule, shape, stage);
  if (!splits_backward(schedule)) return {};
  for (Op& op : order) op.kind = OpKind::backward_weight;  // each W in its B's order: oldest first
  return order;
}

int warmup_forwards(Schedule schedule, const PipelineShape& shape, int stage) {
  validate(schedule, shape);
  check_stage(shape, stage);
  const int P = shape.stages, M = shape.microbatches, V = shape.chunks;
  switch (schedule) {
    case Schedule::gpipe:
      return M;
    case Schedule::one_f_one_b:
    case Schedule::zb_h1:
      return std::min(P - stage - 1, M);
    case Schedule::interleaved_1f1b:
      return std::min(M * V, 2 * (P - stage - 1) + (V - 1) * group_size(shape));
    case Schedule::zb_v: {
      const std::vector<Op> ops = zb_v_order(shape, stage).ops;
      const auto first_input =
          std::find_if(ops.begin(), ops.end(), [](const Op& op) { return op.kind == OpKind::backward_input; });
      return int(std::count_if(ops.begin(), first_input, [](const Op& op) { return op.kind == OpKind::forward; })) - 1;
    }
  }
  return 0;
}

int max_in_flight(Schedule schedule, const PipelineShape& shape, int stage) {
  return std::min(warmup_forwards(schedule, shape, stage) + 1, shape.microbatches * shape.chunks);
}

namespace {

// ZB-H1's order (schedule.hpp): 1F1B's forwards and Bs, a W after each B except the first
// `stage` steady-state ones; the deferred Ws close the order.
std::vector<Op> zb_h1_order(const PipelineShape& shape, int stage) {
  const std::vector<Op> forwards = forward_order(Schedule::zb_h1, shape, stage);
  const std::vector<Op> inputs = backward_order(Schedule::zb_h1, shape, stage);
  const std::vector<Op> weights = weight_order(Schedule::zb_h1, shape, stage);
  const size_t total = forwards.size(), warmup = size_t(warmup_forwards(Schedule::zb_h1, shape, stage));
  std::vector<Op> order(forwards.begin(), forwards.begin() + long(warmup));
  size_t next_weight = 0;
  for (size_t i = 0; i + warmup < total; ++i) {
    order.push_back(forwards[warmup + i]);
    order.push_back(inputs[i]);
    if (i >= size_t(stage)) order.push_back(weights[next_weight++]);
  }
  for (size_t i = total - warmup; i < total; ++i) {
    order.push_back(inputs[i]);
    order.push_back(weights[next_weight++]);
  }
  order.insert(order.end(), weights.begin() + long(next_weight), weights.end());
  return order;
}

}  // namespace

std::vector<Op> canonical_order(Schedule schedule, const PipelineShape& shape, int stage) {
  if (schedule == Schedule::zb_h1) return zb_h1_order(shape, stage);
  if (schedule == Schedule::zb_v) return zb_v_order(shape, stage).ops;
  const std::vector<Op> forwards = forward_order(schedule, shape, stage);
  const std::vector<Op> backwards = backward_order(schedule, shape, stage);
  const size_t total = forwards.size(), warmup = size_t(warmup_forwards(schedule, shape, stage));
  std::vector<Op> order(forwards.begin(), forwards.begin() + long(warmup));
  // Steady state: one forward, then one backward; cooldown: the remaining backwards.
  for (size_t i = 0; i + warmup < total; ++i) {
    order.push_back(forwards[warmup + i]);
    order.push_back(backwards[i]);
  }
  order.insert(order.end(), backwards.begin() + long(total - warmup), backwards.end());
  return order;
}

double zb_h1_bubble_ns(int stages, double forward_ns, double input_grad_ns, double weight_grad_ns) {
  return double(stages - 1) * (forward_ns + std::max(0.0, input_grad_ns - weight_grad_ns));
}

double theoretical_bubble(Schedule schedule, const PipelineShape& shape) {
  const double P = shape.stages, M = shape.microbatches;
  // Equal F, B and W: idle (P-1)(F+B-W) = (P-1)F against 3MF of work per stage.
  if (schedule == Schedule::zb_h1) return (P - 1) / (3 * M + P - 1);
  // Equal F, B and W per chunk, M >= 2P-1: idle (P-1)F against 6MF of work per stage.
  if (schedule == Schedule::zb_v) return (P - 1) / (6 * M + P - 1);
  const double V = schedule == Schedule::interleaved_1f1b ? shape.chunks : 1;
  return (P - 1) / (V * M + P - 1);
}

StagePolicy::StagePolicy(Schedule schedule, const PipelineShape& shape, int stage)
    : schedule_(schedule), shape_(shape), stage_(stage) {
  forwards_ = forward_order(schedule, shape, stage);
  backwards_ = backward_order(schedule, shape, stage);
  max_in_flight_ = schedules::max_in_flight(schedule, shape, stage);  // GPipe: M, no limit
  weights_ = weight_order(schedule, shape, stage);                    // empty unless splits_backward()
  warmup_ = size_t(warmup_forwards(schedule, shape, stage));
  forward_index_.resize(backwards_.size());
  for (size_t b = 0; b < backwards_.size(); ++b) {
    const Op& op = backwards_[b];
    const auto it = std::find(forwards_.begin(), forwards_.end(), Op{OpKind::forward, op.microbatch, op.chunk});
    forward_index_[b] = size_t(it - forwards_.begin());
  }
  if (!splits_backward(schedule)) return;
  for (const Op& w : weights_) {
    const auto it = std::find(backwards_.begin(), backwards_.end(), Op{OpKind::backward_input, w.microbatch, w.chunk});
    weight_input_.push_back(size_t(it - backwards_.begin()));
  }
  const size_t total = forwards_.size(), limit = size_t(max_in_flight_);
  if (schedule == Schedule::zb_h1) {
    // 1F1B's pairing: B k after forward min(warmup + k + 1, M); a forward while fewer than P-s are in flight.
    for (size_t k = 0; k < total; ++k) {
      forwards_before_.push_back(std::min(limit + k, total));
      weight_follows_.push_back(k + warmup_ >= total);  // a cool-down B
    }
    for (size_t j = 0; j < total; ++j) backwards_before_.push_back(j + 1 > limit ? j + 1 - limit : 0);
    weights_held_ = size_t(stage);  // stage s defers s Ws
    return;
  }
  // zb_v: the V schedule's pairing, read off its order.
  const VOrder v = zb_v_order(shape, stage);
  size_t forwards = 0, inputs = 0;
  for (const Op& op : v.ops) {
    if (op.kind == OpKind::forward) backwards_before_.push_back(inputs), ++forwards;
    if (op.kind != OpKind::backward_input) continue;
    forwards_before_.push_back(forwards);
    weight_follows_.push_back(inputs++ < v.steady_inputs);
  }
  weights_held_ = v.held_inputs;
}

std::optional<Op> StagePolicy::next_zero_bubble(const IsReady& is_ready) {
  const size_t held = next_backward_ - next_weight_;  // Ws whose B has been handed out
  if (held > 0 && (held > weights_held_ || weight_due_) && weight_input_[next_weight_] < next_backward_ &&
      is_ready(weights_[next_weight_])) {
    weight_due_ = false;
    return weights_[next_weight_++];
  }
  if (next_backward_ < backwards_.size() && forward_index_[next_backward_] < next_forward_ &&
      next_forward_ >= forwards_before_[next_backward_] && is_ready(backwards_[next_backward_])) {
    weight_due_ = weight_follows_[next_backward_] != 0;
    return backwards_[next_backward_++];
  }
  if (next_forward_ < forwards_.size() && next_backward_ >= backwards_before_[next_forward_] &&
      is_ready(forwards_[next_forward_]))
    return forwards_[next_forward_++];
  if (held > 0 && next_backward_ == backwards_.size() && is_ready(weights_[next_weight_]))
    return weights_[next_weight_++];
  return std::nullopt;
}

std::optional<Op> StagePolicy::next(const IsReady& is_ready) {
  if (splits_backward(schedule_)) return next_zero_bubble(is_ready);
  if (next_backward_ < backwards_.size()) {
    const bool forwards_first = schedule_ == Schedule::gpipe && next_forward_ < forwards_.size();
    const bool forward_ran = forward_index_[next_backward_] < next_forward_ &&
                             (schedule_ != Schedule::interleaved_1f1b ||
                              next_forward_ >= std::min(size_t(max_in_flight_) + next_backward_, forwards_.size()));
    if (!forwards_first && forward_ran && is_ready(backwards_[next_backward_])) return backwards_[next_backward_++];
  }
  if (next_forward_ < forwards_.size() && in_flight() < max_in_flight_ && is_ready(forwards_[next_forward_]))
    return forwards_[next_forward_++];
  return std::nullopt;
}

bool StagePolicy::done() const {
  return next_forward_ == forwards_.size() && next_backward_ == backwards_.size() && next_weight_ == weights_.size();
}

void StagePolicy::reset() {
  next_forward_ = next_backward_ = next_weight_ = 0;
  weight_due_ = false;
}

}  // namespace troupe::schedules
