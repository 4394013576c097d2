// A model chunk: an optional embedding, a run of transformer layers, an optional final
// norm + output layer + loss. It owns its parameter buffer (compute dtype) and gradient
// buffer (f32), and runs forward and backward for one microbatch at a time on its context.
// This is the unit a pipeline stage executes; a single-device model is one chunk.
//
//   GptChunk chunk(ctx, config, ChunkSpec::whole_model(), DType::bf16);
//   chunk.init_weights(1234);
//   ActivationsPtr a = chunk.forward(tokens, targets, {}, {.training = true, .loss_grad_scale = 1.0f / n});
//   chunk.backward(*a, {}, {});   // gradients accumulate into chunk.grads()
//   chunk.release(std::move(a));  // activation memory goes back to the pool
//
// Tensor parallelism (Megatron's): each rank of the group holds a ParamLayout shard; the
// chunk runs the same ops on its shard with the group's collectives around the parallel
// GEMMs (all-reduce after the row-parallel linears and the vocabulary-parallel embedding, and
// of the column-parallel linears' input gradients). With sequence parallelism the residual
// stream, norms, dropout and residual adds work on this rank's 1/T of the rows (of B*T), an
// all-gather before each column-parallel GEMM and a reduce-scatter after each row-parallel one.
//
// Activation recomputation (model/recompute.hpp): the layers or modules it names keep only their
// inputs per microbatch; their other tensors live in one workspace of the chunk, written by the
// forward and written again right before the layer's backward.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/collectives.hpp"
#include "kernels/context.hpp"
#include "kernels/fp8.hpp"
#include "kernels/op_profiler.hpp"
#include "kernels/rope.hpp"
#include "kernels/stream_spans.hpp"
#include "kernels/tensor.hpp"
#include "model/activations.hpp"
#include "model/config.hpp"
#include "model/context_parallel.hpp"
#include "model/fp8/fp8_recipe.hpp"
#include "model/param_layout.hpp"
#include "model/recompute.hpp"
#include "model/tensor_parallel.hpp"

namespace troupe {

class Fp8Linears;

struct ForwardOptions {
  bool training = true;          // dropout on; the loss gradient is produced (post-process)
  float loss_grad_scale = 1.0f;  // d(objective)/d(per-token loss), e.g. loss_scale / tokens in the batch
  uint64_t dropout_seed = 0;     // distinct per microbatch and step
  // The microbatch shape [B, T], needed when the input is sequence-parallel rows [B*T/TP, C]
  // (0: read from the input).
  int64_t batch = 0, seq = 0;
  // MoE: d(objective)/d(this microbatch's router losses), loss_scale / microbatches of the
  // global batch: each microbatch's aux/z losses weigh 1/M, as Megatron's
  // MoEAuxLossAutoScaler (loss scale / microbatches, then the data-parallel mean).
  float moe_loss_grad_scale = 1.0f;
};

// One MoE layer's router statistics summed over the training forwards since the last
// take_moe_stats() (Megatron logs the loss values divided by their coefficients).
struct MoeLayerStats {
  int layer = 0;                      // global
  int microbatches = 0;               // forwards summed
  double load_balancing_loss = 0;     // sum of aux (or seq_aux) loss / --moe-aux-loss-coeff
  double z_loss = 0;                  // sum of z loss / --moe-z-loss-coeff
  int64_t tokens_per_expert_max = 0;  // the most (token, choice) pairs one expert got in one forward
  double tokens_per_expert_mean = 0;  // summed over forwards
  int64_t dropped = 0;                // choices dropped by the capacity, summed
};

using ActivationsPtr = std::unique_ptr<ChunkActivations>;

class GptChunk {
 public:
  // compute: f32 on a CPU context; bf16 or f16 on a CUDA context.
  // The flat buffers are padded to a multiple of `buffer_multiple` elements (the distributed
  // optimizer splits them into equal data-parallel shards), and under expert parallelism each
  // run of routed experts too (ParamLayout's expert_run_multiple: sharded over fewer ranks).
  // `recompute`: what activations are recomputed in backward instead of kept (default: none).
  GptChunk(const Context& ctx, const GptConfig& config, const ChunkSpec& spec, DType compute, TensorParallel tp = {},
           int64_t buffer_multiple = 1, const RecomputeConfig& recompute = {});
  ~GptChunk();
  GptChunk(const GptChunk&) = delete;
  GptChunk& operator=(const GptChunk&) = delete;

  const GptConfig& config() const { return layout_.config(); }
  const ParamLayout& layout() const { return layout_; }
  const Context& context() const { return ctx_; }
  DType compute_dtype() const { return compute_; }
  const Tensor& params() const { return params_; }  // [P'] compute dtype (P' >= layout().size(): padding)
  const Tensor& grads() const { return grads_; }    // [P'] f32
  void zero_grads();
  const TensorParallel& tensor_parallel() const { return tp_; }
  const RecomputeConfig& recompute() const { return recompute_; }
  // The shape of the hidden states between chunks for a [batch, seq] microbatch: [B, T, C],
  // or this rank's [B*T/TP, C] rows under sequence parallelism.
  Shape hidden_shape(int64_t batch, int64_t seq) const;
  // Sums over the tensor-parallel group the gradients of replicated weights that each rank
  // computed only part of (once per iteration, after the last backward): the norms' under
  // sequence parallelism (each rank has its rows), the q/k norms' always (each rank has its heads).
  void reduce_tensor_parallel_grads();

  // Megatron initialization (init_params) with the given seed, uploaded to the device.
  void init_weights(uint64_t seed);
  // Loads a host f32 buffer of layout().size() elements (converted to the compute dtype).
  void load_weights(const Tensor& host_f32);

  // input: i32 tokens [B, T] (pre-process chunk) or hidden [B, T, C] in the compute dtype.
  // targets: i32 [B, T] (post-process chunk; -1 = ignored), else undefined.
  // output: hidden [B, T, C] the chunk writes (not post-process), else undefined.
  // Host tensors are copied to the device. Returns the saved activations; for a
  // post-process chunk they hold `losses` (and `logits` when !options.training).
  ActivationsPtr forward(const Tensor& input, const Tensor& targets, const Tensor& output,
                         const ForwardOptions& options);
  // doutput: gradient of the chunk's output [B, T, C] (not post-process), else undefined.
  // dinput: receives the gradient of the hidden input (not pre-process), else undefined.
  // Parameter gradients accumulate into grads().
  void backward(ChunkActivations& acts, const Tensor& doutput, const Tensor& dinput);
  // Zero-bubble pipelining's split of backward (schedules/schedule.hpp, zb-h1): backward() is
  // backward_input() then backward_weight(), with the same bits. backward_input (B) computes
  // every input gradient (dinput, the norms', attention's) and the norms' and q/k norms' weight
  // gradients, and keeps in `acts` the output gradients of the GEMMs (qkv, proj, fc1, fc2; the
  // output layer's dlogits are kept already) and of the embedding; backward_weight (W) computes
  // the GEMMs' weight and bias gradients and the embedding's from them, and fires the
  // grads-ready hook (B fires none: no gradient is final before its W). Release after W.
  // Refused (naming the flags): MoE layers, activation recompute, context parallelism.
  void backward_input(ChunkActivations& acts, const Tensor& doutput, const Tensor& dinput);
  void backward_weight(ChunkActivations& acts);
  // Returns a set of activations to the pool for reuse.
  void release(ActivationsPtr acts);
  // During backward, `hook(ready)` says that grads()[0, ready) hold their final values for
  // this backward (enqueued on the context): after the output layer and final norm, after each
  // layer, and at the end (ready = grads().numel()). The layout's reverse order makes that a
  // growing prefix. For overlapping the data-parallel reduction; null: off.
  void set_grads_ready_hook(std::function<void(int64_t ready)> hook) { grads_ready_ = std::move(hook); }
  // MoE: the aux-loss-free expert bias update from the token counts since the last one
  // (Megatron's finalize_model_grads step): once per optimizer step, skipped or not (the
  // Optimizer calls it). Nothing without --moe-router-enable-expert-bias.
  void update_moe_expert_bias();
  // MoE: the router statistics of each MoE layer of the chunk since the last call (then reset).
  std::vector<MoeLayerStats> take_moe_stats();
  // MoE: layer `global_layer`'s router state (expert bias, token counts).
  const MoeRouterState& moe_router_state_of(int global_layer) const;
  // MoE: the router buffers a checkpoint stores beside the parameters, by global name
  // (Megatron's "decoder.layers.N.mlp.router.expert_bias", f32 [E]): views of the state, on
  // the device. Empty without --moe-router-enable-expert-bias.
  std::vector<std::pair<std::string, Tensor>> moe_buffers() const;
  // MoE: each layer's token counts since the last expert bias update (f32 [E] views, on the
  // device), which a data-parallel run sums over its replicas before the update.
  std::vector<Tensor> moe_token_counts() const;

  // Times every op into `profiler` (null: off). The profiler must outlive its use.
  void set_profiler(OpProfiler* profiler) { profiler_ = profiler; }
  // MoE layers under expert parallelism: where their all-to-alls run and what marks them for the
  // trace (model/moe/moe_mlp.hpp, MoeComm: a second context on this chunk's device runs them
  // beside the shared expert). The context and the spans must outlive their use.
  void set_moe_comm(const MoeComm& comm) { moe_comm_ = comm; }
  // Two ops in flight at once (kernels/context_lanes.hpp; --overlap-moe-expert-parallel-comm): the
  // caller switches the context's lane and says which here before each op, and orders a
  // microbatch's backward after its forward. The chunk then keeps a set of temporaries per lane,
  // and an activation set released by a backward on one lane is reused by a forward on the other
  // only behind a fence (its MoE tensors, stream-ordered on the forward's lane, are freed then).
  // The backward's expert all-to-alls run on `backward_expert_group` (a communicator of their
  // own: a forward's collectives never queue behind a backward's) and the stream `backward_comm`.
  void set_lane(int lane);
  void set_moe_backward_comm(Collectives* backward_expert_group, const Context* backward_comm);
  // Marks the weight-gradient part of each fused backward() in `spans` (SpanKind::weight_gradient;
  // null: off): the GEMMs' weight and bias gradients and the embedding's, what a split backward's
  // W runs (the trace's weight_ns). Not with FP8 linears or MoE layers (their fused backwards do
  // not mark it). The spans must outlive their use.
  void set_weight_grad_spans(StreamSpans* spans) { weight_spans_ = spans; }
  // Marks each transformer layer's work in forward(), backward(), backward_input() and
  // backward_weight() in `spans` (SpanKind::layer; null: off), so a trace tells the layers' time
  // from the rest of an op's. The spans must outlive their use.
  void set_layer_spans(StreamSpans* spans) { layer_spans_ = spans; }
  // Context parallelism (model/context_parallel.hpp), before the first forward: inputs and
  // targets are then this rank's local tokens [B, T / C], at their global positions.
  void set_context_parallel(const ContextParallel& cp);
  const ContextParallel& context_parallel() const { return cp_; }
  // FP8 training (model/fp8/fp8_linears.hpp), before the first forward and after
  // set_context_parallel: the transformer layers'
  // qkv, proj, fc1 and fc2 run their GEMMs in FP8 (not the embedding and the output layer, as
  // Transformer Engine). Their GEMM epilogue fusions give way to separate GELU and residual ops.
  // Refused (naming the flags): MoE layers; on CUDA, widths that are not multiples of 16.
  void enable_fp8(const Fp8Recipe& recipe);
  bool fp8_enabled() const { return fp8_ != nullptr; }
  // Delayed scaling, once per optimizer step after the last backward: the step's amaxes reduced
  // (max) over the tensor-parallel group and `more_groups` (the data x context one), then the next
  // scales. Nothing without FP8 or under tensorwise scaling.
  void fp8_update_scales(const std::vector<Collectives*>& more_groups = {});
  const Fp8Linears* fp8() const { return fp8_.get(); }
  // FP8: the scaling state a checkpoint stores beside the parameters, by global layer l (host f32
  // copies): "decoder.layers.<l>.fp8_meta.forward.{amax_history [L, 8], scale [8], scale_inv [8]}"
  // (x then w of qkv, proj, fc1, fc2) and "....fp8_meta.backward.{amax_history [L, 4], scale [4],
  // scale_inv [4]}" (their output gradients). Empty without FP8. load_fp8_buffers takes tensors of
  // these names and shapes back (a resumed run continues the scales).
  std::vector<std::pair<std::string, Tensor>> fp8_buffers() const;
  void load_fp8_buffers(const std::vector<std::pair<std::string, Tensor>>& host);

 private:
  struct Scratch;  // per-shape temporaries shared by all microbatches (one stream)
  ActivationsPtr acquire(int64_t batch, int64_t seq);
  Scratch& scratch(int64_t batch, int64_t seq);
  void layer_forward(int l, ChunkActivations& a, const ForwardOptions& o);
  // backward() and backward_input(): with defer_weight_grads the GEMMs' weight gradients and the
  // embedding's are left to backward_weight(), their output gradients kept in `a`.
  void backward_pass(ChunkActivations& a, const Tensor& doutput, const Tensor& dinput, bool defer_weight_grads);
  void layer_backward(int l, ChunkActivations& a, bool defer_weight_grads);
  // `kept`, allocated like `like` unless it is already (B writes a gradient W needs straight into it).
  const Tensor& kept_like(const Tensor& like, Tensor& kept);
  // A copy of a scratch gradient that must outlive the op (kept: reused once allocated).
  void keep_gradient(const Tensor& src, Tensor& kept);
  // B keeps a GEMM's output gradient `grad` for W in `kept`. When `grad` is the residual stream's
  // gradient `dres` itself (no dropout, no sequence parallelism), which the next norm backward
  // adds to, the buffers trade places instead of copying: `kept` takes dres's, dres gets a free
  // one, and the returned tensor (the kept gradient) is what the norm backward must add to.
  // Otherwise a copy; returns undefined (the norm backward adds to dres in place).
  Tensor keep_output_gradient(const Tensor& grad, Tensor& dres, Tensor& kept);
  // The word (and position) embedding's gradients from the gradient of the embedding's output
  // dout [N, C] (all rows).
  void embedding_weight_backward(const ChunkActivations& a, const Tensor& dout);
  // The pieces of layer_forward that selective recompute runs again.
  // fp8: the norm's FP8 side output (layer_input_cast), written with y_full (no sequence parallelism).
  void norm_gather_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y_full, const Tensor& mean,
                           const Tensor& rstd, const Fp8SideOutput& fp8 = {});
  void core_attention_forward(LayerActivations& s, int64_t batch, int64_t seq);
  // FP8: fc1_cast, what ln2 wrote beside s.ln2 (layer_input_cast); with cast_for_fc2 the GELU
  // writes fc2's input cast, returned for fc2's forward.
  Fp8SideOutput mlp_activation_forward(int i, const LayerTensors& w, LayerActivations& s, bool training,
                                       const Fp8SideOutput& fc1_cast, bool cast_for_fc2);
  // An MoE layer's MLP: out [N, C] from s.ln2 (model/moe/moe_mlp.hpp); its backward writes
  // d(ln2) into dln2.
  void moe_forward(int i, ChunkActivations& a, const ForwardOptions& o, const Tensor& out);
  void moe_backward(int i, const ChunkActivations& a, const Tensor& dy, const Tensor& dln2);
  // Layer i's MoE weights with the router in f32 (a converted copy when computing in 16 bits).
  MoeMlpParams moe_params(int i) const;
  Collectives* expert_group() const;      // MoE: the expert-parallel group, or null
  Collectives* moe_tensor_group() const;  // MoE: the tensor-parallel group, or null
  // Recompute (model/recompute.hpp): layer i's recomputed tensors in `a` pointed at the workspace
  // (bind) or emptied (unbind); recompute_layer writes them again before layer i's backward.
  void bind_recomputed(int i, ChunkActivations& a);
  void unbind_recomputed(int i, ChunkActivations& a);
  void recompute_layer(int i, ChunkActivations& a);
  // Layer activations of a [batch, seq] microbatch: the tensors `which` marks as recomputed when
  // `recomputed`, the others when not.
  LayerActivations layer_activations(int64_t batch, int64_t seq, const RecomputedTensors& which, bool recomputed);
  // qk_layernorm: the query and key heads of s.qkv normalized in place (their inputs kept in s.qk).
  void qk_norm_forward(const LayerTensors& w, LayerActivations& s);
  // The q/k norms' backward in place on dqkv [N, (H+2G)*D]; their weights' gradients into g.
  void qk_norm_backward(const LayerTensors& w, const LayerTensors& g, const LayerActivations& s, const Tensor& dqkv);
  void norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y, const Tensor& mean,
                    const Tensor& rstd, const Fp8SideOutput& fp8 = {});
  // dx += the input gradient; with dx_in: dx = dx_in + it (kernels/norm.hpp).
  void norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                     const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dx_in = Tensor());
  Tensor device_tokens(const Tensor& t);
  bool sharded_rows() const { return tp_.sequence_parallel && tp_.shard.size > 1; }
  int64_t local_rows(int64_t n) const { return sharded_rows() ? n / tp_.shard.size : n; }
  // This rank's rows of a full [N, C] tensor (all of it without sequence parallelism).
  Tensor rows_of(const Tensor& full) const;
  // Partial sums of a row-parallel output [N, C] -> the reduced rows this rank keeps.
  Tensor reduce_rows(const Tensor& partial, const Tensor& local_dst);
  // This rank's rows -> all rows (`local` may be rows_of(full_dst)).
  Tensor gather_rows(const Tensor& local, const Tensor& full_dst);
  void loss(ChunkActivations& a, const ForwardOptions& o);
  uint64_t row_offset(int64_t n, int64_t width) const;  // dropout counters of this rank's first row
  // Dropout (backward: its gradient) of this rank's rows x -> y at `site` with the single-device counters.
  void site_dropout(bool backward, const Tensor& x, const Tensor& y, int site, uint64_t seed, int64_t batch,
                    int64_t seq);
  OpProfiler::Scope timed(const char* name) { return OpProfiler::Scope(profiler_, name); }
  // The weight-gradient spans where every weight gradient of a fused backward passes through them.
  StreamSpans* weight_spans() const { return fp8_ || config().moe.enabled() ? nullptr : weight_spans_; }
  // A fused backward's linear_backward: dx, then dw and db timed as weight-gradient work (the
  // GEMMs linear_backward runs, in its order).
  void linear_backward_fused(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx, const Tensor& dw,
                             const Tensor& db);
  // A transformer layer's linears: in FP8 when enabled (fp8_), else linear_forward / linear_backward.
  enum class LayerLinear { qkv, proj, fc1, fc2 };
  // x_cast: x's FP8 cast (or amax) written by the op that produced it (layer_input_cast).
  void layer_linear_forward(int i, LayerLinear which, const Tensor& x, const Tensor& w, const Tensor& b,
                            const Tensor& y, bool training, const Fp8SideOutput& x_cast = {});
  // In FP8, what the op producing x_full (the input of `which`, all rows: ln1, ln2, the GELU)
  // writes beside it in its own pass (Fp8Linears::input_cast); nothing without FP8, with fused
  // casts off, or for a norm under sequence parallelism (it writes this rank's rows; the linear
  // casts the gathered ones).
  Fp8SideOutput layer_input_cast(int i, LayerLinear which, const Tensor& x_full, bool training);
  // With `deferred` (zero-bubble's B op: dw and db undefined), the weight gradients are left to
  // layer_linear_weight_backward (the W op), FP8 keeping its scales in `deferred`.
  void layer_linear_backward(int i, LayerLinear which, const Tensor& dy, const Tensor& x, const Tensor& w,
                             const Tensor& dx, const Tensor& dw, const Tensor& db,
                             LayerActivations* deferred = nullptr);
  void layer_linear_weight_backward(int i, LayerLinear which, const Tensor& dy, const Tensor& x, const Tensor& w,
                                    const Tensor& dw, const Tensor& db, const LayerActivations& deferred);

  const Context& ctx_;
  TensorParallel tp_;
  ParamLayout layout_;
  DType compute_;
  Tensor params_, grads_;
  // Views into params_/grads_, built once (name lookups are not free).
  std::vector<LayerTensors> layer_params_, layer_grads_;
  OuterTensors outer_params_, outer_grads_;
  std::vector<ActivationsPtr> pool_;
  // MoE, per chunk-local layer (empty on dense layers): the router's state, the f32 router
  // weight a 16-bit chunk converts for every forward, the statistics since take_moe_stats.
  MoeMlpSpec moe_spec_;
  std::vector<MoeRouterState> moe_state_;
  std::vector<Tensor> router_f32_;
  std::vector<MoeLayerStats> moe_stats_;
  RecomputeConfig recompute_;
  std::vector<LayerRecompute> recompute_plan_;       // per chunk-local layer
  std::array<std::unique_ptr<Scratch>, 2> scratch_;  // per lane (set_lane)
  int lane_ = 0;
  bool lanes_ = false;  // set_lane was called: releases are fenced
  Collectives* moe_backward_group_ = nullptr;
  const Context* moe_backward_comm_ = nullptr;
  OpProfiler* profiler_ = nullptr;
  StreamSpans* weight_spans_ = nullptr;
  StreamSpans* layer_spans_ = nullptr;
  std::function<void(int64_t)> grads_ready_;
  ContextParallel cp_;
  MoeComm moe_comm_;
  std::unique_ptr<Fp8Linears> fp8_;
  Tensor cp_positions_;  // i32 [B * Tl]: the global positions of the local tokens (context parallelism)
  const Tensor& context_positions_of(int64_t batch, int64_t seq);
  // Context parallelism's pieces of forward and backward (model/gpt_chunk_context.cpp): out
  // [B, Tl, C] += wpe at the local tokens' global positions; RoPE at those positions (else as
  // rope_apply).
  void add_context_position_embedding(const Tensor& out);
  void rope_forward_backward(const Tensor& qkv, const RopeConfig& cfg, bool inverse);
  // pending_[i]: the lowest offset whose gradient is not final once layers i.. of the chunk
  // (local index) have run backward; pending_[num_layers] after the output part.
  std::vector<int64_t> pending_;
  void grads_ready(int64_t ready) const {
    if (grads_ready_) grads_ready_(ready);
  }
};

}  // namespace troupe
