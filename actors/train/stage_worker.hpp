// The non-actor half of a pipeline stage: its device context, its V model chunks (parameters
// and gradients; their optimizer state is the optimizer shard's, stage_optimizer.hpp), the channels to its neighbours,
// and the per-iteration state (inputs that have arrived, saved activations, losses). The stage actor (stage_actor.cpp)
// decides WHICH op runs next; this class runs it (enqueues it on the device) and says what goes to a peer. No CAF here,
// so it can be tested and benchmarked as plain code.
//
// Chunk c of stage s holds virtual stage c * P + s (zb-v: s and 2P-1-s, schedules::Placement);
// layers are split evenly over the P * V virtual stages. The forward output of virtual stage k
// feeds k + 1 (stage s + 1, or from the last stage to stage 0's next chunk; zb-v: down the
// stages on chunk 0, within stage P-1 to its chunk 1, back up on chunk 1), the input gradient
// of k feeds k - 1. The channels join neighbours: activation_out/in carry what goes from stage
// s to s + 1 (activations, and zb-v's chunk-1 gradients), gradient_out/in what goes back.
//
//   StageWorker w(setup);
//   w.begin(plan);                                   // tokens/targets of this iteration
//   w.accept(Direction::activation, mb, chunk, parcel);   // as messages arrive: posts the receive
//   if (w.ready(op)) {
//     w.await_inputs(op);                                  // the device waits for the op's input here
//     std::optional<Outbound> out = w.run(op); ...send out->parcel...
//   }
//   double loss_sum = w.finish();                    // last stage: sum of per-token losses
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/fabric/device_services.hpp"
#include "base/check.hpp"
#include "kernels/collectives.hpp"
#include "kernels/context_lanes.hpp"
#include "kernels/grad_norm.hpp"
#include "model/gpt_chunk.hpp"
#include "schedules/schedule.hpp"

namespace troupe::actors {

// One iteration's (or evaluation's) work for the stages.
struct IterationPlan {
  int64_t iteration = 0;
  bool training = true;
  int microbatches = 0;
  int64_t batch = 0, seq = 0;    // every microbatch is [batch, seq]
  float loss_grad_scale = 1.0f;  // loss_scale / tokens of the global batch
  uint64_t dropout_seed = 0;     // microbatch m uses dropout_seed + m * dropout_stride
  uint64_t dropout_stride = 1;   // data parallelism: this rank's microbatches are every D-th of the global batch
  // loss_scale / microbatches of the global batch (ForwardOptions::moe_loss_grad_scale)
  float moe_loss_grad_scale = 1.0f;
  // From the data loader (the stage actor puts its StageData here): host i32 [B, T] per microbatch.
  std::vector<Tensor> tokens;   // for the stage holding virtual stage 0
  std::vector<Tensor> targets;  // for the stage holding the last virtual stage
  // One stage holds the whole model (P = 1): its gradient norm is the global one, so its
  // optimizer shard takes the whole step right after the stage's last op (norm, clip and AdamW
  // together, as the single-device loop does) instead of sending its part of the norm to the
  // optimizer actor and waiting for the clip coefficient. The stage passes lr and loss_scale on.
  bool local_step = false;
  float lr = 0;
  float loss_scale = 1;
};

enum class Direction : uint8_t { activation, gradient };

// What one op sends to another stage.
struct Outbound {
  Direction direction = Direction::activation;
  int stage = 0;  // receiving stage
  int microbatch = 0;
  int chunk = 0;  // the receiver's local chunk
  Parcel parcel;
};

// An op failed; carries which one so the actor can name it.
class StageOpError : public Error {
 public:
  StageOpError(const schedules::Op& op, const std::string& what) : Error(what), op_(op) {}
  const schedules::Op& op() const { return op_; }

 private:
  schedules::Op op_;
};

// A range of one chunk's flat gradient buffer that one group reduces as one collective: the
// data-parallel group, or for routed experts under expert parallelism the expert-data-parallel
// group (the ranks holding the same experts). With the distributed optimizer, rank r of that
// group owns the r-th part of the bucket.
struct GradBucket {
  int chunk = 0;
  int64_t begin = 0, end = 0;
  bool expert = false;  // routed experts only (a run of ParamLayout::expert_runs)
  int64_t shard_size(int group_size) const { return (end - begin) / group_size; }
  int64_t shard_begin(int group_rank, int group_size) const { return begin + group_rank * shard_size(group_size); }
};

// Splits the chunks' buffers (sizes multiples of `multiple`) into buckets of about
// `bucket_elements` (each a multiple of `multiple`), in the order backward finishes them: the
// last chunk first, each buffer front to back (the layout is in reverse layer order). Under
// expert parallelism `expert_runs[c]` holds chunk c's runs of routed experts (ParamLayout::
// expert_runs, aligned to `multiple`): buckets are cut at their ends and those inside marked
// `expert`. Throws when a run is not aligned.
std::vector<GradBucket> make_grad_buckets(
    const std::vector<int64_t>& chunk_sizes, int64_t bucket_elements, int64_t multiple,
    const std::vector<std::vector<std::pair<int64_t, int64_t>>>& expert_runs = {});

// A bucket whose gradients are final (enqueued) on the stage's device, behind `fence`.
struct ReadyBucket {
  int bucket = 0;
  std::shared_ptr<void> fence;
};

struct StageSetup {
  int stage = 0;
  int stages = 1;  // P
  int chunks = 1;  // V
  schedules::Placement placement = schedules::Placement::loop;
  // Place in the tensor- and data-parallel groups (Megatron's rank order: TP fastest, then DP,
  // then PP). The chunks hold the tensor-parallel group; the data-parallel group sums (or,
  // with the distributed optimizer, reduce-scatters) the gradients and all-gathers the
  // updated parameter shards. With context parallelism (the chunks hold the context group) the
  // data-parallel group is Megatron's dp_cp: dp_rank = data rank x C + context rank, dp_size = D x C.
  int tp_rank = 0, tp_size = 1, dp_rank = 0, dp_size = 1;
  Collectives* dp_group = nullptr;  // null: no data parallelism
  // MoE expert parallelism: the routed experts' gradients are reduced over the ranks holding the
  // same experts (the chunks hold the expert group); null: none or one such rank.
  Collectives* expert_data_group = nullptr;
  // Expert parallelism on GPUs: the stream the MoE layers' all-to-alls run on (model/moe/
  // moe_mlp.hpp); null: they run on `context`. With --moe-shared-expert-overlap the shared
  // expert computes beside them.
  const Context* moe_comm = nullptr;
  bool moe_shared_expert_overlap = false;
  // --overlap-moe-expert-parallel-comm: forwards on lane 0 of the context, backwards on lane 1
  // (kernels/context_lanes.hpp), so a forward enqueued right after a backward runs beside it and
  // its expert-count waits and all-to-alls overlap the backward's work (LaneScope).
  bool lanes = false;
  bool distributed_optimizer = false;
  std::vector<GradBucket> buckets;  // the data-parallel reduction's units
  // --overlap-grad-reduce: a gradient reducer actor reduces each bucket as soon as the last
  // microbatch's backward has written it (take_ready_buckets); reduce_grads() leaves it out.
  bool overlap_grad_reduce = false;
  bool check_losses = false;         // --check-for-nan-in-loss-and-grad: per-microbatch losses, on the host in finish()
  bool check_tensors = false;        // debugging: every op's output activations / gradients too (a device sync per op)
  std::unique_ptr<Context> context;  // the device (a stable address: chunks keep a reference)
  std::vector<std::unique_ptr<GptChunk>> models;  // V chunks, chunk c = virtual_stage(c)
  // Channels (owned by the run): activations to stage s+1 / from s-1, gradients to s-1 / from s+1
  // (all modulo P). Null where the pipeline has one stage.
  Channel* activation_out = nullptr;
  Channel* activation_in = nullptr;
  Channel* gradient_out = nullptr;
  Channel* gradient_in = nullptr;
  // Tied embeddings split over two stages: this stage's rank in the reduction (-1: none) and
  // the chunk holding the copy.
  PairReducer* tied = nullptr;
  int tied_rank = -1;
  int tied_chunk = 0;
  // zb-v: both copies are this stage's (chunks 0 and V-1), summed on its device.
  bool tied_within = false;
  // Op completion: GPU timing for the trace, on the trace clock starting at `epoch`.
  bool timing = false;
  std::chrono::steady_clock::time_point epoch;
  // Tests: completions delivered when the test says (null: the device's own, make_completion_queue).
  std::unique_ptr<CompletionQueue> completions;
};

class StageWorker {
 public:
  explicit StageWorker(StageSetup setup);
  ~StageWorker();
  StageWorker(const StageWorker&) = delete;
  StageWorker& operator=(const StageWorker&) = delete;

  // Wiring, before the first iteration (a channel needs both stages' contexts).
  void connect(Channel* activation_out, Channel* activation_in, Channel* gradient_out, Channel* gradient_in);
  void connect_tied(PairReducer* reducer, int rank, int chunk);

  int stage() const { return setup_.stage; }
  int stages() const { return setup_.stages; }
  int tp_rank() const { return setup_.tp_rank; }
  int tp_size() const { return setup_.tp_size; }
  int dp_rank() const { return setup_.dp_rank; }
  int dp_size() const { return setup_.dp_size; }
  bool distributed_optimizer() const { return setup_.distributed_optimizer; }
  bool overlap_grad_reduce() const { return setup_.overlap_grad_reduce; }
  Collectives* dp_group() const { return setup_.dp_group; }
  Collectives* expert_data_group() const { return setup_.expert_data_group; }
  // "stage 2", or "stage 2 (tensor rank 1, data rank 0)" when there is more than one device per stage.
  std::string name() const;
  int chunks() const { return setup_.chunks; }
  const Context& context() const { return *setup_.context; }
  GptChunk& model(int chunk) { return *setup_.models[size_t(chunk)]; }
  schedules::PipelineShape shape() const { return {.stages = setup_.stages, .chunks = setup_.chunks}; }
  int virtual_stage(int chunk) const {
    return schedules::virtual_stage(setup_.placement, shape(), setup_.stage, chunk);
  }
  bool first_virtual(int chunk) const { return virtual_stage(chunk) == 0; }
  bool last_virtual(int chunk) const { return virtual_stage(chunk) == setup_.stages * setup_.chunks - 1; }
  // The chunk holding the LM head and loss (the last virtual stage), -1 where this stage holds none.
  int loss_chunk() const;
  int64_t iteration() const { return plan_.iteration; }
  bool training() const { return plan_.training; }
  bool local_step() const { return plan_.training && plan_.local_step; }
  float lr() const { return plan_.lr; }
  float loss_scale() const { return plan_.loss_scale; }
  int microbatches() const { return plan_.microbatches; }

  // Starts an iteration: uploads the plan's tokens/targets, resets the per-iteration state.
  void begin(IterationPlan plan);
  // A parcel from a neighbour for (microbatch, local chunk) of the current iteration: posts
  // the receive at once (NCCL needs receives in send order).
  void accept(Direction direction, int microbatch, int chunk, Parcel& parcel);
  // Have the op's inputs been announced? (A backward also needs its forward to have run; a
  // backward_weight, its backward_input.)
  // Their data may still be on its way: the device waits for it (await_inputs).
  bool ready(const schedules::Op& op) const;
  // Makes the work enqueued from now on wait for the op's received input (run() does it too;
  // the stage calls it before timing the op, so the op's time excludes the wait). Returns
  // the transfer for the trace: its timing handle (CompletionQueue::transfer_times; null:
  // not measured or nothing received) and its size.
  struct InputTransfer {
    std::shared_ptr<void> timing;
    int64_t bytes = 0;
  };
  InputTransfer await_inputs(const schedules::Op& op);
  // With StageSetup::lanes, the context enqueues on the op's lane (a forward's 0, a backward's
  // 1) while the scope lives, and on lane 0 after; without, nothing. Taken around everything
  // the stage enqueues for the op (its input wait, timing events and the op itself).
  class LaneScope {
   public:
    LaneScope(StageWorker& w, const schedules::Op& op);
    ~LaneScope();
    LaneScope(const LaneScope&) = delete;
    LaneScope& operator=(const LaneScope&) = delete;

   private:
    StageWorker& w_;
  };
  // Enqueues the op on the device; returns what must go to a neighbour. Throws StageOpError.
  // A fused backward or a backward_input sends the input gradient; a backward_weight (zb-h1)
  // sends nothing and releases the microbatch's activations.
  std::optional<Outbound> run(const schedules::Op& op);
  // After the last op: the sum of per-token losses on the stage holding the last virtual
  // stage (0 elsewhere); checks the losses for NaN when asked. Synchronizes the device.
  double finish();

  // After the last op: the gradient's last steps before the optimizer shard takes over.
  bool has_tied() const { return setup_.tied_within || (setup_.tied != nullptr && setup_.tied_rank >= 0); }
  // Does chunk c hold a copy of the tied embedding that reduce_tied() sums?
  bool holds_tied_copy(int chunk) const;
  // Sums the tied embedding's gradient copies; `done` (any thread) once the sum is enqueued
  // on this stage's device. No-op (done at once) without a tied copy.
  void reduce_tied(std::function<void()> done);
  const std::vector<GradBucket>& buckets() const { return setup_.buckets; }
  // Overlap: the buckets the last run() made final (each once per iteration). Buckets holding
  // a tied embedding copy wait for the tied sum (reduce_tied): take_remaining_buckets().
  std::vector<ReadyBucket> take_ready_buckets() { return std::move(ready_buckets_); }
  // After the last op (and the tied sum): every bucket not handed over yet, behind a fence now.
  std::vector<ReadyBucket> take_remaining_buckets();
  // Tells when an op enqueued on the device has finished.
  CompletionQueue& completions() { return *completions_; }
  // Teardown: waits for the device, then for the completion callbacks (which send to actors).
  void synchronize() const { setup_.context->synchronize(); }
  void stop_completions() { completions_.reset(); }

 private:
  size_t slot(int microbatch, int chunk) const { return size_t(microbatch) * size_t(setup_.chunks) + size_t(chunk); }
  // With timing, where `op` marks its layers and a fused backward its weight-gradient part: the
  // first microbatch's ops stand for every microbatch of their chunk (timing each one, two
  // events per GEMM, slowed traced backwards by about 3%; H200, GPT-2 1.5B-like). Else null.
  StreamSpans* sampled_spans(const schedules::Op& op) const {
    return op.microbatch == 0 ? completions_->spans() : nullptr;
  }
  Shape hidden_shape() const;
  void check_finite(const schedules::Op& op, const Tensor& t, const char* what);
  // run()'s two halves (throw; run() turns what they throw into a StageOpError).
  std::optional<Outbound> run_forward(const schedules::Op& op);
  std::optional<Outbound> run_backward(const schedules::Op& op);  // fused, or backward_input
  void run_backward_weight(const schedules::Op& op);
  // The last microbatch's backward (or backward_weight) writes each gradient for the last time:
  // with the overlapped reduction, buckets go to the reducer as its layers finish. Returns
  // whether the hook was set (the caller clears it after the op).
  bool hand_over_buckets(const schedules::Op& op);
  // StageSetup::lanes: the context and every chunk on `lane` (LaneScope).
  void use_lane(int lane);

  StageSetup setup_;
  std::unique_ptr<ContextLanes> lanes_;             // StageSetup::lanes
  std::shared_ptr<void> lane1_end_;                 // after lane 1's last op: finish() waits for it on lane 0
  std::vector<std::shared_ptr<void>> forward_end_;  // lanes: per (microbatch, chunk), after its forward
  std::unique_ptr<CompletionQueue> completions_;
  IterationPlan plan_;
  std::vector<Tensor> tokens_, targets_;       // on the device, per microbatch
  Inbound* input_of(const schedules::Op& op);  // the op's received input; null: none (first/last virtual stage)
  // An output for virtual stage `to` (the next one, or for a gradient the previous one): sent
  // on the channel toward its stage, or (zb-v's turn) kept as that chunk's input here.
  std::optional<Outbound> hand_on(Direction direction, int microbatch, int to, const Tensor& t);
  // The channel a parcel for (direction, local chunk) comes in on.
  Channel* channel_in(Direction direction, int chunk) const;

  std::vector<Inbound> inputs_;        // received activations, per (microbatch, chunk)
  std::vector<Inbound> output_grads_;  // received gradients, per (microbatch, chunk)
  std::vector<ActivationsPtr> saved_;  // forward activations kept for the backward
  std::vector<char> forward_ran_;
  std::vector<char> input_grad_ran_;  // zb-h1: backward_input ran, its backward_weight may follow
  Tensor losses_;                     // f32 [M, B*T] on the device (last virtual stage)
  std::vector<char> bucket_sent_;     // per bucket: handed to the reducer this iteration
  std::vector<ReadyBucket> ready_buckets_;
};

}  // namespace troupe::actors
