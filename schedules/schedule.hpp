// Pipeline schedules as plain code: the per-stage op orders Megatron-LM runs, and the
// policy a stage actor follows so that those orders EMERGE from "run whatever is ready".
//
// A pipeline has P stages (devices), V model chunks per stage (V > 1: interleaved) and M
// microbatches per iteration. Chunk c of stage s holds virtual stage c * P + s (Megatron's
// placement); activations flow s -> s+1, and from the last stage's chunk c to the first
// stage's chunk c + 1.
//
//   PipelineShape shape{.stages = 4, .chunks = 1, .microbatches = 8};
//   validate(Schedule::one_f_one_b, shape);                       // clear error if impossible
//   std::vector<Op> order = canonical_order(Schedule::one_f_one_b, shape, /*stage=*/1);
//   StagePolicy policy(Schedule::one_f_one_b, shape, 1);
//   std::optional<Op> op = policy.next([&](const Op& o) { return inputs_arrived(o); });
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace troupe::schedules {

enum class Schedule { gpipe, one_f_one_b, interleaved_1f1b };

enum class OpKind : uint8_t { forward, backward };

struct Op {
  OpKind kind = OpKind::forward;
  int microbatch = 0;
  int chunk = 0;  // local chunk index on the stage, 0 <= chunk < V
  bool operator==(const Op&) const = default;
};

struct PipelineShape {
  int stages = 1;        // P
  int chunks = 1;        // V, model chunks per stage (> 1 only for interleaved_1f1b)
  int microbatches = 1;  // M per iteration
  int group_size = 0;    // microbatch_group_size_per_vp_stage; 0: P (Megatron's default)
};

const char* schedule_name(Schedule s);
// "gpipe", "1f1b", "interleaved" (also "interleaved_1f1b").
Schedule schedule_from_name(const std::string& name);
std::string op_str(const Op& op);  // "F3.c1", "B0.c0"

// Throws troupe::Error naming the flag and the constraint when the shape is impossible
// for the schedule (e.g. interleaving needs M % P == 0 with the default group size).
void validate(Schedule schedule, const PipelineShape& shape);

// The op order stage `stage` runs in Megatron-LM for this schedule (every forward and
// backward of every local chunk and microbatch, exactly once).
std::vector<Op> canonical_order(Schedule schedule, const PipelineShape& shape, int stage);

// The decision rule of one stage actor. The stage calls next() whenever it is idle; the
// policy answers the op to run now (the stage then runs it) or nothing (wait for inputs).
// With equal op durations the resulting order equals canonical_order().
class StagePolicy {
 public:
  using IsReady = std::function<bool(const Op&)>;  // have the op's inputs arrived?
  StagePolicy(Schedule schedule, const PipelineShape& shape, int stage);
  std::optional<Op> next(const IsReady& is_ready);
  bool done() const;  // every op of the iteration has been handed out
  void reset();       // start the next iteration

 private:
  Schedule schedule_;
  PipelineShape shape_;
  int stage_;
  std::vector<Op> forwards_, backwards_;  // each in the order the schedule takes them
  size_t next_forward_ = 0, next_backward_ = 0;
  int max_in_flight_ = 0;  // forwards started but not yet backpropagated
};

}  // namespace troupe::schedules
