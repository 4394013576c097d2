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

#include <cstdint>
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
  bool operator==(const PipelineShape&) const = default;
};

const char* schedule_name(Schedule s);
// "gpipe", "1f1b", "interleaved" (also "interleaved_1f1b").
Schedule schedule_from_name(const std::string& name);
std::string op_str(const Op& op);  // "F3.c1", "B0.c0"

// The group size G in effect: shape.group_size, or P when it is 0.
int group_size(const PipelineShape& shape);
// Virtual stage (global position in the model) of local chunk `chunk` on stage `stage`.
inline int virtual_stage(const PipelineShape& shape, int stage, int chunk) { return chunk * shape.stages + stage; }

// Throws troupe::Error naming the flag and the constraint when the shape is impossible
// for the schedule (e.g. interleaving needs M % P == 0 with the default group size).
// Megatron's constraints: GPipe and 1F1B run V = 1; interleaving needs P >= 2 (Megatron asks
// P > 2 unless --overlap-p2p-communication, its default with interleaving; ours always
// overlaps), P <= G <= M, and M mod G == 0 or >= P. Interleaving with V = 1 is allowed: it is
// Megatron's interleaved code path with one chunk (warmup 2(P-s-1), not 1F1B's P-s-1).
void validate(Schedule schedule, const PipelineShape& shape);

// The op order stage `stage` runs in Megatron-LM for this schedule (every forward and
// backward of every local chunk and microbatch, exactly once).
std::vector<Op> canonical_order(Schedule schedule, const PipelineShape& shape, int stage);

// Megatron's schedule table for interleaving: entry k (0 <= k < M*V) is the k-th forward a
// stage runs, as {microbatch, chunk}. Microbatches go in groups of G; within a group, chunk 0
// of every microbatch of the group, then chunk 1, ... (the last group holds what is left).
// Example M=5, V=2, G=3: mb 0 1 2 0 1 2 3 4 3 4, chunk 0 0 0 1 1 1 0 0 1 1.
std::vector<Op> schedule_table(int microbatches, int chunks, int group_size);
// Each stage's forwards / backwards in the order the schedule runs them. The k-th backward
// of interleaving is backward-table entry k: the k-th table entry with chunk V-1-chunk.
std::vector<Op> forward_order(Schedule schedule, const PipelineShape& shape, int stage);
std::vector<Op> backward_order(Schedule schedule, const PipelineShape& shape, int stage);
// Megatron's warmup forwards on `stage`: GPipe M; 1F1B min(P-s-1, M); interleaved
// min(M*V, 2*(P-s-1) + (V-1)*G).
int warmup_forwards(Schedule schedule, const PipelineShape& shape, int stage);
// Most forwards a stage holds before their backward (activation memory, in microbatch-chunks):
// warmup + 1, capped at M*V. 1F1B: min(P-s, M); GPipe: M.
int max_in_flight(Schedule schedule, const PipelineShape& shape, int stage);

// Theoretical bubble fraction: idle time / step time of every stage, when forward and
// backward take the same time per layer and P2P is free. GPipe and 1F1B: (P-1)/(M+P-1);
// interleaved: (P-1)/(V*M+P-1). The simulator reproduces both exactly for every valid shape
// in simulator_test (any G, backward = forward or 2 x forward).
// Megatron's paper states the same bubble relative to the ideal time: (P-1)/M and (P-1)/(V*M).
double theoretical_bubble(Schedule schedule, const PipelineShape& shape);

// The decision rule of one stage actor. The stage calls next() whenever it is idle; the
// policy answers the op to run now (the stage then runs it) or nothing (wait for inputs).
// With equal op durations the resulting order equals canonical_order().
//
// The rule (one stage runs one op at a time):
//   - forwards and backwards are two queues, each in schedule order (forward_order(),
//     backward_order()); only the head of each queue is ever considered, so a ready op
//     never overtakes an earlier one of its kind;
//   - the head backward runs if it is ready (its output gradient arrived; on the last
//     virtual stage: its own forward ran) -- a ready backward goes first, because it frees
//     activation memory and unblocks the stages before this one;
//   - otherwise the head forward runs if it is ready and fewer than max_in_flight() forwards
//     are waiting for their backward (1F1B: P-s; interleaved: Megatron's warmup + 1);
//   - GPipe: no backward until every forward has been handed out (no in-flight limit);
//   - interleaved: backward k also waits until forward min(W+k+1, M*V) has been handed out
//     (W = warmup_forwards()), i.e. Megatron's steady state of one forward, then one
//     backward. Without it a gradient that comes back early would be run before the forward
//     of a later chunk that the next stages are waiting for (measured: a longer step).
// A handed-out op counts at once (in flight from its forward's hand-out to its backward's).
// The simulator checks that this yields canonical_order() for every valid P in {1,2,3,4,8},
// V in {1,2,3}, M in 1..16 and several G, also with backward = 2 x forward and a P2P latency.
class StagePolicy {
 public:
  using IsReady = std::function<bool(const Op&)>;  // have the op's inputs arrived?
  StagePolicy(Schedule schedule, const PipelineShape& shape, int stage);
  std::optional<Op> next(const IsReady& is_ready);
  bool done() const;  // every op of the iteration has been handed out
  void reset();       // start the next iteration

  int in_flight() const { return int(next_forward_) - int(next_backward_); }
  int max_in_flight() const { return max_in_flight_; }
  int stage() const { return stage_; }
  Schedule schedule() const { return schedule_; }
  const PipelineShape& shape() const { return shape_; }

 private:
  Schedule schedule_;
  PipelineShape shape_;
  int stage_;
  std::vector<Op> forwards_, backwards_;  // each in the order the schedule takes them
  std::vector<size_t> forward_index_;     // per backward: position of its forward in forwards_
  size_t next_forward_ = 0, next_backward_ = 0;
  int max_in_flight_ = 0;  // forwards started but not yet backpropagated
};

}  // namespace troupe::schedules
