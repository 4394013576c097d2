// Pipeline schedules as plain code: the per-stage op orders Megatron-LM runs, and the
// policy a stage actor follows so that those orders EMERGE from "run whatever is ready".
//
// A pipeline has P stages (devices), V model chunks per stage (V > 1: interleaved) and M
// microbatches per iteration. Chunk c of stage s holds virtual stage c * P + s (Megatron's
// placement); activations flow s -> s+1, and from the last stage's chunk c to the first
// stage's chunk c + 1. ZB-V places its two chunks in a V instead: stage s holds virtual
// stages s and 2P-1-s, so activations go down the stages on chunk 0, turn on stage P-1 and come
// back up on chunk 1; the embedding and the LM head both live on stage 0.
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

enum class Schedule { gpipe, one_f_one_b, interleaved_1f1b, zb_h1, zb_v };

// A fused backward (gpipe, 1f1b, interleaved) computes the input and weight gradients in one
// op; a zero-bubble schedule (zb_h1, zb_v) splits it into backward_input (B: the input gradient the
// previous stage waits for) and backward_weight (W: the weight gradient, which nothing
// downstream waits for, so it can be deferred into the bubbles).
enum class OpKind : uint8_t { forward, backward, backward_input, backward_weight };

struct Op {
  OpKind kind = OpKind::forward;
  int microbatch = 0;
  int chunk = 0;  // local chunk index on the stage, 0 <= chunk < V
  bool operator==(const Op&) const = default;
};

struct PipelineShape {
  int stages = 1;        // P
  int chunks = 1;        // V, model chunks per stage (> 1 only for interleaved_1f1b; 2 for zb_v)
  int microbatches = 1;  // M per iteration
  int group_size = 0;    // microbatch_group_size_per_vp_stage; 0: P (Megatron's default)
  bool operator==(const PipelineShape&) const = default;
};

const char* schedule_name(Schedule s);
// "gpipe", "1f1b", "interleaved" (also "interleaved_1f1b"), "zb-h1" (also "zb_h1"), "zb-v" (also "zb_v").
Schedule schedule_from_name(const std::string& name);
std::string op_str(const Op& op);  // "F3.c1", "B0.c0" (fused or input gradient), "W0.c0"
// Whether the schedule runs backward_input and backward_weight ops instead of backward.
bool splits_backward(Schedule s);

// The group size G in effect: shape.group_size, or P when it is 0.
int group_size(const PipelineShape& shape);
// How chunks sit on stages: `loop` (chunk c of stage s is virtual stage c * P + s: every
// schedule but zb_v) or `v` (zb_v: chunk 0 of stage s is virtual stage s, chunk 1 is 2P-1-s).
enum class Placement : uint8_t { loop, v };
Placement placement(Schedule s);
// Virtual stage (global position in the model) of local chunk `chunk` on stage `stage`.
int virtual_stage(Placement placement, const PipelineShape& shape, int stage, int chunk);
inline int virtual_stage(Schedule s, const PipelineShape& shape, int stage, int chunk) {
  return virtual_stage(placement(s), shape, stage, chunk);
}
struct StageChunk {
  int stage = 0, chunk = 0;
};
// The inverse: the stage and local chunk holding virtual stage k.
StageChunk stage_chunk(Placement placement, const PipelineShape& shape, int k);
// The link a transfer between virtual stages k and k+1 crosses (an activation goes from k to
// k+1, a gradient back): link l joins stage l and stage (l+1) mod P, `up` when the transfer
// goes from l to l+1. link = -1: both chunks are on one stage (zb_v's turn), no transfer.
struct Link {
  int link = -1;
  bool up = true;
};
Link transfer_link(Placement placement, const PipelineShape& shape, int k, bool gradient);

// Throws troupe::Error naming the flag and the constraint when the shape is impossible
// for the schedule (e.g. interleaving needs M % P == 0 with the default group size).
// Megatron's constraints: GPipe and 1F1B run V = 1 (so does ZB-H1; ZB-V runs V = 2); interleaving needs P >= 2
// (Megatron asks P > 2 unless --overlap-p2p-communication, its default with interleaving; ours always overlaps), P <= G
// <= M, and M mod G == 0 or >= P. Interleaving with V = 1 is allowed: it is Megatron's interleaved code path with one
// chunk (warmup 2(P-s-1), not 1F1B's P-s-1).
void validate(Schedule schedule, const PipelineShape& shape);

// The op order stage `stage` runs in Megatron-LM for this schedule (every forward and
// backward of every local chunk and microbatch, exactly once; for zb_h1 every forward,
// backward_input and backward_weight).
//
// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", 2023, section 2.1 and figure 3; the
// authors' zb-h1-quick-start patch to Megatron's 1F1B): 1F1B's warmup of W = min(P-s-1, M)
// forwards and its steady state of one forward then one B; stage s runs a W (oldest
// first) after each steady-state B except the first s, and one after each cool-down B; the s
// deferred Ws close the order, filling the cool-down bubble. Example P=4, M=8:
//   stage 0: F0 F1 F2 F3 B0 W0 F4 B1 W1 ... F7 B4 W4 B5 W5 B6 W6 B7 W7
//   stage 3: F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 ... F7 B7 W4 W5 W6 W7
// Activations held from F to B never exceed 1F1B's P-s; from F to W (the W keeps part of
// them) never above P, 1F1B's peak on stage 0: the paper's "same memory as 1F1B".
//
// ZB-V (the same paper, section 6 and its figure of ZB-V; the handcrafted schedule as PyTorch's
// ScheduleZBVZeroBubble runs it). Counting microbatches n = max(M, 2P-1) (the ops of microbatches
// >= M are then left out), stage s runs: 2(P-s)-1 forwards of chunk 0; s pairs (F chunk 1, F
// chunk 0); P-s triples F, B, W of chunk 1; then, while chunk 1 has forwards left, [F chunk 0
// while it has some], B and W chunk 0, F, B and W chunk 1; the cool-down: s pairs (B chunk 0,
// B chunk 1) with their Ws held back, P-s times B chunk 0 then the oldest held W of chunk 0,
// and the held Ws of chunk 1, then of chunk 0. Example P=2, M=4:
//   stage 0: F0.c0 F1.c0 F2.c0 F0.c1 B0.c1 W0.c1 F1.c1 B1.c1 W1.c1 F3.c0 B0.c0 W0.c0 F2.c1 ...
//   stage 1: F0.c0 F0.c1 F1.c0 F1.c1 B0.c1 W0.c1 F2.c0 B0.c0 W0.c0 F2.c1 B1.c1 W1.c1 ...
// Each stage holds at most 2P chunk activations (P stages' worth, 1F1B's peak) and, when
// F = B = W and M >= 2P-1, idles (P-1) F per iteration.
std::vector<Op> canonical_order(Schedule schedule, const PipelineShape& shape, int stage);

// Megatron's schedule table for interleaving: entry k (0 <= k < M*V) is the k-th forward a
// stage runs, as {microbatch, chunk}. Microbatches go in groups of G; within a group, chunk 0
// of every microbatch of the group, then chunk 1, ... (the last group holds what is left).
// Example M=5, V=2, G=3: mb 0 1 2 0 1 2 3 4 3 4, chunk 0 0 0 1 1 1 0 0 1 1.
std::vector<Op> schedule_table(int microbatches, int chunks, int group_size);
// Each stage's forwards / backwards in the order the schedule runs them. The k-th backward
// of interleaving is backward-table entry k: the k-th table entry with chunk V-1-chunk.
// For zb_h1 the backwards are backward_input ops; weight_order() lists its backward_weight
// ops in the order it runs them (microbatch order; empty for schedules that fuse backward).
std::vector<Op> forward_order(Schedule schedule, const PipelineShape& shape, int stage);
std::vector<Op> backward_order(Schedule schedule, const PipelineShape& shape, int stage);
std::vector<Op> weight_order(Schedule schedule, const PipelineShape& shape, int stage);
// Megatron's warmup forwards on `stage`: GPipe M; 1F1B and ZB-H1 min(P-s-1, M); interleaved
// min(M*V, 2*(P-s-1) + (V-1)*G); ZB-V the forwards before its first B, less one (2P-1 when
// M >= 2P-1).
int warmup_forwards(Schedule schedule, const PipelineShape& shape, int stage);
// Most forwards a stage holds before their backward (activation memory, in microbatch-chunks):
// warmup + 1, capped at M*V. 1F1B and ZB-H1 (counting to the B): min(P-s, M); GPipe: M.
int max_in_flight(Schedule schedule, const PipelineShape& shape, int stage);

// Theoretical bubble fraction: idle time / step time of every stage, when forward and
// backward take the same time per layer and P2P is free. GPipe and 1F1B: (P-1)/(M+P-1);
// interleaved: (P-1)/(V*M+P-1). The simulator reproduces both exactly for every valid shape
// in simulator_test (any G, backward = forward or 2 x forward).
// Megatron's paper states the same bubble relative to the ideal time: (P-1)/M and (P-1)/(V*M).
// ZB-H1, when F, B and W take the same time: each stage idles (P-1)(F+B-W) (the paper's
// section 2.1; 1F1B's (P-1)(F+B+W)), a third of 1F1B's idle time: (P-1)/(3M+P-1).
// ZB-V, F = B = W per chunk and M >= 2P-1: each stage idles (P-1) F against 6MF of work:
// (P-1)/(6M+P-1) (fewer microbatches leave more: the simulator tells how much).
double theoretical_bubble(Schedule schedule, const PipelineShape& shape);
// The idle time of every stage of ZB-H1 for op times F, B, W and free P2P: the paper's
// (P-1)(F+B-W) where W <= B (its setting); with a longer W the deferred Ws outlast the
// cool-down and the idle stays (P-1)F (the simulator shows both, zero_bubble_test).
double zb_h1_bubble_ns(int stages, double forward_ns, double input_grad_ns, double weight_grad_ns);

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
// zb_h1: a third queue, the deferred Ws (each ready once its B has run), oldest first:
//   - a W goes first when the stage holds more than s deferred Ws (stage s defers s: activations
//     kept to the W then never exceed P, 1F1B's peak) or when the last op was a cool-down B
//     (backward k >= M - warmup, as 1F1B's cool-down; its W fills the wait for the next gradient);
//   - then 1F1B's rule for the Bs and forwards, with interleaving's pairing (B k waits until
//     forward min(warmup + k + 1, M) has been handed out: one forward, then one B);
//   - a W when nothing else is ready only once every B has been handed out (the deferred Ws close
//     the iteration; earlier, an idle stage waits for its gradient as canonical_order() does).
// zb_v: the same three queues (each in canonical_order()'s order of its kind) and rules, with
//   the V schedule's pairing of forwards and Bs instead of 1F1B's: a forward waits until the Bs
//   the schedule puts before it have been handed out, and a B until its forwards have (as
//   interleaving's B waits for its paired forward); a W goes first after a B of the warmup or
//   steady state, and in the cool-down once more Ws are held than its first 2s Bs hold back.
//   When each op runs, and so where the stage waits, is left to the inputs' arrival.
// The simulator checks that these yield canonical_order() for every valid P in {1,2,3,4,8},
// V in {1,2,3}, M in 1..16 and several G, also with backward = 2 x forward and a P2P latency;
// zb_h1 and zb_v with equal F, B and W for P in {1,2,3,4,5,8}, M in 1..16, with and without a
// latency.
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
  std::optional<Op> next_zero_bubble(const IsReady& is_ready);  // zb_h1's and zb_v's rule

  Schedule schedule_;
  PipelineShape shape_;
  int stage_;
  std::vector<Op> forwards_, backwards_;  // each in the order the schedule takes them
  std::vector<Op> weights_;               // splits_backward(): the Ws, in their Bs' order
  std::vector<size_t> forward_index_;     // per backward: position of its forward in forwards_
  size_t next_forward_ = 0, next_backward_ = 0, next_weight_ = 0;
  int max_in_flight_ = 0;    // forwards started but not yet backpropagated
  size_t warmup_ = 0;        // warmup_forwards()
  bool weight_due_ = false;  // splits_backward(): the last op was a B whose W goes next
  // splits_backward(): the pairing of forwards and Bs (forward j waits for backwards_before_[j]
  // Bs handed out; B k for forwards_before_[k] forwards), which Bs have their W follow at once,
  // how many Ws the stage may hold before one must go, and per W the position of its B.
  std::vector<size_t> backwards_before_, forwards_before_, weight_input_;
  std::vector<char> weight_follows_;
  size_t weights_held_ = 0;
};

}  // namespace troupe::schedules
