// Megatron-LM's pipeline schedules as op orders, and the stage policy they emerge from.
// Reference: megatron/core/pipeline_parallel/schedules.py (get_schedule_table,
// get_pp_rank_microbatches, forward_backward_pipelining_with/without_interleaving); ZB-H1:
// Qi et al., "Zero Bubble Pipeline Parallelism" (2023), section 2.1.
#include "schedules/schedule.hpp"

#include <algorithm>

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
  }
  return "?";
}

Schedule schedule_from_name(const std::string& name) {
  if (name == "gpipe") return Schedule::gpipe;
  if (name == "1f1b" || name == "one_f_one_b") return Schedule::one_f_one_b;
  if (name == "interleaved" || name == "interleaved_1f1b") return Schedule::interleaved_1f1b;
  if (name == "zb-h1" || name == "zb_h1") return Schedule::zb_h1;
  TROUPE_FAIL("unknown pipeline schedule '", name, "' (expected gpipe, 1f1b, interleaved or zb-h1)");
}

std::string op_str(const Op& op) {
  const char* letter = op.kind == OpKind::forward ? "F" : op.kind == OpKind::backward_weight ? "W" : "B";
  return str_cat(letter, op.microbatch, ".c", op.chunk);
}

bool splits_backward(Schedule s) { return s == Schedule::zb_h1; }

int group_size(const PipelineShape& shape) { return shape.group_size > 0 ? shape.group_size : shape.stages; }

void validate(Schedule schedule, const PipelineShape& shape) {
  const int P = shape.stages, V = shape.chunks, M = shape.microbatches;
  TROUPE_CHECK(P >= 1, "--pipeline-model-parallel-size must be >= 1, got ", P);
  TROUPE_CHECK(M >= 1, "an iteration needs at least one microbatch (--global-batch-size / (--micro-batch-size * ",
               "data-parallel size)), got ", M);
  TROUPE_CHECK(V >= 1, "model chunks per stage must be >= 1, got ", V);
  TROUPE_CHECK(shape.group_size >= 0, "--microbatch-group-size-per-vp-stage must be >= 1 (0: the default, P), got ",
               shape.group_size);
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

}  // namespace

std::vector<Op> forward_order(Schedule schedule, const PipelineShape& shape, int stage) {
  validate(schedule, shape);
  check_stage(shape, stage);
  if (schedule == Schedule::interleaved_1f1b)
    return schedule_table(shape.microbatches, shape.chunks, group_size(shape));
  std::vector<Op> order;
  for (int m = 0; m < shape.microbatches; ++m) order.push_back({OpKind::forward, m, 0});
  return order;
}

std::vector<Op> backward_order(Schedule schedule, const PipelineShape& shape, int stage) {
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
}

std::optional<Op> StagePolicy::next_zero_bubble(const IsReady& is_ready) {
  const size_t deferred = next_backward_ - next_weight_;  // Ws whose B has been handed out
  if (deferred > 0 && (deferred > size_t(stage_) || weight_due_) && is_ready(weights_[next_weight_])) {
    weight_due_ = false;
    return weights_[next_weight_++];
  }
  if (next_backward_ < backwards_.size() && forward_index_[next_backward_] < next_forward_ &&
      next_forward_ >= std::min(size_t(max_in_flight_) + next_backward_, forwards_.size()) &&
      is_ready(backwards_[next_backward_])) {
    weight_due_ = next_backward_ + warmup_ >= forwards_.size();  // a cool-down B
    return backwards_[next_backward_++];
  }
  if (next_forward_ < forwards_.size() && in_flight() < max_in_flight_ && is_ready(forwards_[next_forward_]))
    return forwards_[next_forward_++];
  if (deferred > 0 && next_backward_ == backwards_.size() && is_ready(weights_[next_weight_]))
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
