#include "actors/train/stage_worker.hpp"

#include <cmath>

#include "actors/train/slow_device_hook.hpp"
#include "base/check.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/nvtx.hpp"
#include "model/train/trainer.hpp"

namespace troupe::actors {

using schedules::Op;
using schedules::OpKind;

std::vector<GradBucket> make_grad_buckets(const std::vector<int64_t>& chunk_sizes, int64_t bucket_elements,
                                          int64_t multiple,
                                          const std::vector<std::vector<std::pair<int64_t, int64_t>>>& expert_runs) {
  TROUPE_CHECK(multiple >= 1 && bucket_elements >= 1, "gradient buckets of ", bucket_elements, " elements, multiple ",
               multiple);
  const int64_t size = (bucket_elements + multiple - 1) / multiple * multiple;
  std::vector<GradBucket> out;
  for (int c = int(chunk_sizes.size()) - 1; c >= 0; --c) {
    const int64_t n = chunk_sizes[size_t(c)];
    TROUPE_CHECK(n % multiple == 0, "chunk ", c, " buffer of ", n, " elements is not a multiple of ", multiple);
    const auto& runs =
        size_t(c) < expert_runs.size() ? expert_runs[size_t(c)] : std::vector<std::pair<int64_t, int64_t>>{};
    for (const auto& [lo, hi] : runs)
      TROUPE_CHECK(lo % multiple == 0 && hi % multiple == 0 && lo < hi && hi <= n, "chunk ", c,
                   ": the routed experts' run [", lo, ", ", hi, ") is not aligned to ", multiple,
                   " within its buffer of ", n);
    for (int64_t b = 0; b < n; b += size) {
      const int64_t e = std::min(b + size, n);
      int64_t at = b;
      for (const auto& [lo, hi] : runs) {
        const int64_t from = std::max(lo, at), to = std::min(hi, e);
        if (from >= to) continue;
        if (from > at) out.push_back({c, at, from});
        out.push_back({c, from, to, true});
        at = to;
      }
      if (at < e) out.push_back({c, at, e});
    }
  }
  return out;
}

StageWorker::StageWorker(StageSetup setup) : setup_(std::move(setup)) {
  TROUPE_CHECK(setup_.context && int(setup_.models.size()) == setup_.chunks, "StageWorker: stage ", setup_.stage,
               " needs a context and ", setup_.chunks, " chunks");
  completions_ = setup_.completions ? std::move(setup_.completions)
                                    : make_completion_queue(*setup_.context, setup_.timing, setup_.epoch);
  // Traced runs mark the MoE layers' all-to-alls (and what runs beside them) inside their ops.
  for (const std::unique_ptr<GptChunk>& m : setup_.models)
    m->set_moe_comm({setup_.moe_comm, completions_->spans(), setup_.moe_shared_expert_overlap});
  if (setup_.lanes) {
    lanes_ = std::make_unique<ContextLanes>(*setup_.context);
    use_lane(0);
  }
}

void StageWorker::use_lane(int lane) {
  lanes_->use(lane);
  for (const std::unique_ptr<GptChunk>& m : setup_.models) m->set_lane(lane);
}

StageWorker::LaneScope::LaneScope(StageWorker& w, const Op& op) : w_(w) {
  if (w_.lanes_) w_.use_lane(op.kind == OpKind::forward ? 0 : 1);
}

StageWorker::LaneScope::~LaneScope() {
  if (!w_.lanes_ || w_.lanes_->lane() == 0) return;
  try {
    w_.lane1_end_ = fence_record(w_.context());
  } catch (...) {
    // The op failed already (the stage is stopping); a fence that cannot be recorded adds nothing.
  }
  w_.use_lane(0);
}

StageWorker::~StageWorker() { completions_.reset(); }  // its thread may still call back

void StageWorker::connect(Channel* activation_out, Channel* activation_in, Channel* gradient_out,
                          Channel* gradient_in) {
  setup_.activation_out = activation_out;
  setup_.activation_in = activation_in;
  setup_.gradient_out = gradient_out;
  setup_.gradient_in = gradient_in;
}

void StageWorker::connect_tied(PairReducer* reducer, int rank, int chunk) {
  TROUPE_CHECK(chunk >= 0 && chunk < setup_.chunks && model(chunk).layout().has(kWordEmbeddingName), "stage ", stage(),
               ": chunk ", chunk, " holds no ", kWordEmbeddingName);
  setup_.tied = reducer;
  setup_.tied_rank = rank;
  setup_.tied_chunk = chunk;
}

int StageWorker::loss_chunk() const {
  for (int c = 0; c < setup_.chunks; ++c)
    if (last_virtual(c)) return c;
  return -1;
}

bool StageWorker::holds_tied_copy(int chunk) const {
  if (setup_.tied_within) return chunk == 0 || chunk == setup_.chunks - 1;
  return has_tied() && chunk == setup_.tied_chunk;
}

Channel* StageWorker::channel_in(Direction direction, int chunk) const {
  // An activation comes over the edge from virtual stage k - 1, a gradient over the one to k + 1.
  const bool gradient = direction == Direction::gradient;
  const int k = virtual_stage(chunk);
  const schedules::Link link = schedules::transfer_link(setup_.placement, shape(), gradient ? k : k - 1, gradient);
  TROUPE_CHECK(link.link >= 0, "stage ", stage(), ": chunk ", chunk, "'s ", gradient ? "gradient" : "activation",
               " comes from this stage, not over a channel");
  return link.up ? setup_.activation_in : setup_.gradient_in;
}

std::optional<Outbound> StageWorker::hand_on(Direction direction, int microbatch, int to, const Tensor& t) {
  const bool gradient = direction == Direction::gradient;
  const schedules::StageChunk dst = schedules::stage_chunk(setup_.placement, shape(), to);
  const schedules::Link link = schedules::transfer_link(setup_.placement, shape(), gradient ? to : to - 1, gradient);
  if (link.link < 0) {  // zb-v's turn: the other chunk of this stage reads it from this device's stream
    std::vector<Inbound>& slots = gradient ? output_grads_ : inputs_;
    slots[slot(microbatch, dst.chunk)] = Inbound{t, nullptr, nullptr};
    return std::nullopt;
  }
  Channel* channel = link.up ? setup_.activation_out : setup_.gradient_out;
  TROUPE_CHECK(channel != nullptr, "stage ", stage(), " has no channel to stage ", dst.stage);
  return Outbound{direction, dst.stage, microbatch, dst.chunk, channel->send(context(), t)};
}

Shape StageWorker::hidden_shape() const { return setup_.models.front()->hidden_shape(plan_.batch, plan_.seq); }

std::string StageWorker::name() const {
  if (setup_.tp_size == 1 && setup_.dp_size == 1) return str_cat("stage ", setup_.stage);
  // dp_rank counts the data x context ranks (context fastest), as the gradient reduction does.
  if (const ContextParallel& cp = setup_.models.front()->context_parallel(); cp.enabled())
    return str_cat("stage ", setup_.stage, " (tensor rank ", setup_.tp_rank, ", data rank ", setup_.dp_rank / cp.size,
                   ", context rank ", cp.rank, ")");
  return str_cat("stage ", setup_.stage, " (tensor rank ", setup_.tp_rank, ", data rank ", setup_.dp_rank, ")");
}

namespace {

// Every id of the microbatches inside the model's vocabulary (the tokenizer's, not the padded
// one: a padding row, or another tensor-parallel rank's rows, must never be read as a token);
// targets may also be -1 (ignored). Names the microbatch and position of the first that is not.
void check_vocabulary(const std::vector<Tensor>& mbs, int64_t vocab, bool targets) {
  for (size_t m = 0; m < mbs.size(); ++m) {
    const Tensor& t = mbs[m];
    const int32_t* ids = t.data_as<int32_t>();
    for (int64_t n = 0; n < t.numel(); ++n) {
      if ((ids[n] >= 0 && ids[n] < vocab) || (targets && ids[n] == -1)) continue;
      TROUPE_FAIL(targets ? "label" : "token", " id ", ids[n], " in microbatch ", m, " at [", n / t.dim(1), ", ",
                  n % t.dim(1), "] is outside the model's vocabulary [0, ", vocab,
                  ") (data tokenized with a larger vocabulary?)");
    }
  }
}

}  // namespace

void StageWorker::begin(IterationPlan plan) {
  plan_ = std::move(plan);
  // Context parallelism: this rank runs its two chunks of every sequence (model/context_parallel.hpp).
  if (const ContextParallel& cp = setup_.models.front()->context_parallel(); cp.enabled()) {
    for (Tensor& t : plan_.tokens) t = context_local_tokens(t, cp);
    for (Tensor& t : plan_.targets) t = context_local_tokens(t, cp);
    plan_.seq /= cp.size;
  }
  const int M = plan_.microbatches, V = setup_.chunks;
  const Context& ctx = context();
  TROUPE_CHECK(M >= 1 && plan_.batch >= 1 && plan_.seq >= 1, "stage ", stage(), ": empty iteration plan");
  tokens_.clear();
  targets_.clear();
  const int64_t vocab = setup_.models.front()->layout().config().vocab_size;
  if (first_virtual(0)) {
    check_vocabulary(plan_.tokens, vocab, false);
    TROUPE_CHECK(int(plan_.tokens.size()) == M, "stage 0 got ", plan_.tokens.size(), " token tensors for ", M,
                 " microbatches");
    for (const Tensor& t : plan_.tokens) {
      expect_shape("StageWorker::begin", "tokens", t, {plan_.batch, plan_.seq});
      tokens_.push_back(buffer_upload(ctx, t));
    }
  }
  if (loss_chunk() >= 0) {
    check_vocabulary(plan_.targets, vocab, true);
    TROUPE_CHECK(int(plan_.targets.size()) == M, "the last stage got ", plan_.targets.size(), " target tensors for ", M,
                 " microbatches");
    for (const Tensor& t : plan_.targets) {
      expect_shape("StageWorker::begin", "targets", t, {plan_.batch, plan_.seq});
      targets_.push_back(buffer_upload(ctx, t));
    }
    const Shape loss_shape{M, plan_.batch * plan_.seq};
    if (!losses_.defined() || losses_.shape() != loss_shape) losses_ = Tensor::empty(ctx, DType::f32, loss_shape);
  }
  const size_t slots = size_t(M) * size_t(V);
  inputs_.assign(slots, Inbound());
  output_grads_.assign(slots, Inbound());
  saved_.clear();
  saved_.resize(slots);
  forward_ran_.assign(slots, 0);
  forward_end_.assign(lanes_ ? slots : 0, nullptr);
  input_grad_ran_.assign(slots, 0);
  bucket_sent_.assign(setup_.buckets.size(), 0);
  ready_buckets_.clear();
}

void StageWorker::accept(Direction direction, int microbatch, int chunk, Parcel& parcel) {
  const bool act = direction == Direction::activation;
  TROUPE_CHECK(microbatch >= 0 && microbatch < plan_.microbatches && chunk >= 0 && chunk < setup_.chunks, "stage ",
               stage(), " got a parcel for microbatch ", microbatch, " chunk ", chunk);
  Channel* channel = channel_in(direction, chunk);
  TROUPE_CHECK(channel != nullptr, "stage ", stage(), " has no ", act ? "activation" : "gradient", " input channel");
  std::vector<Inbound>& slots = act ? inputs_ : output_grads_;
  Inbound& dst = slots[slot(microbatch, chunk)];
  TROUPE_CHECK(!dst.tensor.defined(), "stage ", stage(), " got the ", act ? "activation" : "gradient",
               " of microbatch ", microbatch, " chunk ", chunk, " twice");
  dst = channel->receive(context(), parcel);
}

bool StageWorker::ready(const Op& op) const {
  const size_t i = slot(op.microbatch, op.chunk);
  if (op.kind == OpKind::forward) return first_virtual(op.chunk) || inputs_[i].tensor.defined();
  if (op.kind == OpKind::backward_weight) return input_grad_ran_[i];
  return forward_ran_[i] && (last_virtual(op.chunk) || output_grads_[i].tensor.defined());
}

Inbound* StageWorker::input_of(const Op& op) {
  TROUPE_CHECK(op.microbatch >= 0 && op.microbatch < plan_.microbatches && op.chunk >= 0 && op.chunk < setup_.chunks,
               "stage ", stage(), ": no op ", schedules::op_str(op), " in this iteration");
  const size_t i = slot(op.microbatch, op.chunk);
  if (op.kind == OpKind::forward) return first_virtual(op.chunk) ? nullptr : &inputs_[i];
  if (op.kind == OpKind::backward_weight) return nullptr;  // reads what its backward_input kept
  return last_virtual(op.chunk) ? nullptr : &output_grads_[i];
}

StageWorker::InputTransfer StageWorker::await_inputs(const Op& op) {
  Inbound* in = input_of(op);
  if (in == nullptr || !in->tensor.defined()) return {};
  inbound_wait(context(), *in);
  return {in->timing, int64_t(in->tensor.nbytes())};
}

void StageWorker::check_finite(const Op& op, const Tensor& t, const char* what) {
  const Context& ctx = context();
  // A stream-ordered buffer, not Tensor::empty: cudaFree waits for the whole device, and with
  // two stages on one GPU the other stage's NCCL kernel may be waiting for this one (a hang).
  const bool converted = t.dtype() != DType::f32;
  const Tensor f32 = converted ? buffer_alloc(ctx, DType::f32, t.shape()) : t;
  if (converted) convert(ctx, t, f32);
  const bool finite = troupe::grad_stats(ctx, {f32.view({f32.numel()})}).finite;
  if (converted) buffer_free(ctx, f32);
  if (!finite) throw StageOpError(op, str_cat("NaN/Inf in ", what));
}

std::optional<Outbound> StageWorker::run(const Op& op) {
  TROUPE_CHECK(op.microbatch >= 0 && op.microbatch < plan_.microbatches && op.chunk >= 0 && op.chunk < setup_.chunks,
               "stage ", stage(), ": no op ", schedules::op_str(op), " in this iteration");
  const char* what = op.kind == OpKind::forward           ? "forward"
                     : op.kind == OpKind::backward_input  ? "backward_input"
                     : op.kind == OpKind::backward_weight ? "backward_weight"
                                                          : "backward";
  const NvtxRange range(what, " stage ", stage(), " chunk ", op.chunk, " mb ", op.microbatch);
  model(op.chunk).set_layer_spans(op_sleep_injected() ? nullptr : sampled_spans(op));  // the trace's layer spans
  try {
    if (op.kind == OpKind::forward) return run_forward(op);
    if (op.kind != OpKind::backward_weight) return run_backward(op);
    run_backward_weight(op);
    return std::nullopt;
  } catch (const StageOpError&) {
    throw;
  } catch (const std::exception& e) {
    throw StageOpError(op, e.what());
  }
}

std::optional<Outbound> StageWorker::run_forward(const Op& op) {
  const Context& ctx = context();
  const int m = op.microbatch, c = op.chunk;
  const size_t i = slot(m, c);
  const int vs = virtual_stage(c);
  GptChunk& chunk = model(c);
  TROUPE_CHECK(!forward_ran_[i], "forward ran twice");
  TROUPE_CHECK(first_virtual(c) || inputs_[i].tensor.defined(), "the input activation has not arrived");
  const bool last = last_virtual(c);
  if (!first_virtual(c)) inbound_wait(ctx, inputs_[i]);
  const Tensor input = first_virtual(c) ? tokens_[size_t(m)] : inputs_[i].tensor;
  const Tensor target = last ? targets_[size_t(m)] : Tensor();
  const Tensor out = last ? Tensor() : buffer_alloc(ctx, chunk.compute_dtype(), hidden_shape());
  ActivationsPtr a = chunk.forward(input, target, out,
                                   {.training = plan_.training,
                                    .loss_grad_scale = plan_.loss_grad_scale,
                                    .dropout_seed = plan_.dropout_seed + uint64_t(m) * plan_.dropout_stride,
                                    .batch = plan_.batch,
                                    .seq = plan_.seq,
                                    .moe_loss_grad_scale = plan_.moe_loss_grad_scale});
  if (!first_virtual(c)) {
    buffer_free(ctx, inputs_[i].tensor);
    inputs_[i] = Inbound();
  }
  forward_ran_[i] = 1;
  if (last) {
    const int64_t n = plan_.batch * plan_.seq;
    copy(ctx, a->losses, losses_.slice(int64_t(m) * n, {n}));
    if (setup_.check_tensors) check_finite(op, a->losses, "the per-token losses");
  }
  if (lanes_ && plan_.training) forward_end_[i] = fence_record(ctx);  // its backward runs on the other lane
  if (plan_.training)
    saved_[i] = std::move(a);
  else
    chunk.release(std::move(a));
  if (last) return std::nullopt;
  if (setup_.check_tensors) check_finite(op, out, "the output activations");
  return hand_on(Direction::activation, m, vs + 1, out);
}

std::optional<Outbound> StageWorker::run_backward(const Op& op) {
  const Context& ctx = context();
  const int m = op.microbatch, c = op.chunk;
  const size_t i = slot(m, c);
  const int vs = virtual_stage(c);
  GptChunk& chunk = model(c);
  TROUPE_CHECK(plan_.training, "a backward in a forward-only pass");
  TROUPE_CHECK(forward_ran_[i] && saved_[i], "the forward has not run");
  const bool last = last_virtual(c), first = first_virtual(c);
  TROUPE_CHECK(last || output_grads_[i].tensor.defined(), "the output gradient has not arrived");
  if (!last) inbound_wait(ctx, output_grads_[i]);
  const Tensor dout = last ? Tensor() : output_grads_[i].tensor;
  const Tensor din = first ? Tensor() : buffer_alloc(ctx, chunk.compute_dtype(), hidden_shape());
  if (lanes_) {
    fence_wait(ctx, forward_end_[i]);
    forward_end_[i].reset();
  }
  const bool split = op.kind == OpKind::backward_input;
  const bool hand_over = !split && hand_over_buckets(op);
  if (split) {
    TROUPE_CHECK(!input_grad_ran_[i], "backward_input ran twice");
    chunk.backward_input(*saved_[i], dout, din);
    input_grad_ran_[i] = 1;
  } else {
    chunk.set_weight_grad_spans(sampled_spans(op));  // the trace's weight_ns
    chunk.backward(*saved_[i], dout, din);
    if (hand_over) chunk.set_grads_ready_hook(nullptr);
    chunk.release(std::move(saved_[i]));
  }
  if (!last) {
    buffer_free(ctx, dout);
    output_grads_[i] = Inbound();
  }
  if (setup_.check_tensors) {
    if (!first)
      check_finite(op, din, "the input gradients");
    else if (!split)  // a backward_input leaves the weight gradients to its backward_weight
      check_finite(op, chunk.grads(), "the parameter gradients");
  }
  if (first) return std::nullopt;
  return hand_on(Direction::gradient, m, vs - 1, din);
}

void StageWorker::run_backward_weight(const Op& op) {
  const size_t i = slot(op.microbatch, op.chunk);
  GptChunk& chunk = model(op.chunk);
  TROUPE_CHECK(plan_.training, "a backward_weight in a forward-only pass");
  TROUPE_CHECK(input_grad_ran_[i] && saved_[i], "its backward_input has not run");
  const bool hand_over = hand_over_buckets(op);
  chunk.backward_weight(*saved_[i]);
  if (hand_over) chunk.set_grads_ready_hook(nullptr);
  input_grad_ran_[i] = 0;
  chunk.release(std::move(saved_[i]));  // W was the activations' last reader
  if (setup_.check_tensors && first_virtual(op.chunk)) check_finite(op, chunk.grads(), "the parameter gradients");
}

bool StageWorker::hand_over_buckets(const Op& op) {
  const int c = op.chunk;
  GptChunk& chunk = model(c);
  if (!(setup_.overlap_grad_reduce && setup_.dp_group && op.microbatch == plan_.microbatches - 1)) return false;
  // A tied embedding's copy is summed with the other stage's first (reduce_tied), so its
  // buckets wait: the data-parallel reduction (a reduce-scatter, with the distributed
  // optimizer) must see the sum.
  int64_t tied_begin = -1, tied_end = -1;
  if (holds_tied_copy(c)) {
    const ParamInfo& t = chunk.layout().find(kWordEmbeddingName);
    tied_begin = t.offset;
    tied_end = t.offset + t.numel();
  }
  // Called during the op, after this function returned: nothing of its frame is captured by reference.
  chunk.set_grads_ready_hook([this, c, tied_begin, tied_end](int64_t ready) {
    for (size_t b = 0; b < setup_.buckets.size(); ++b) {
      const GradBucket& bucket = setup_.buckets[b];
      if (bucket.chunk != c || bucket_sent_[b] || bucket.end > ready) continue;
      if (bucket.begin < tied_end && tied_begin < bucket.end) continue;
      bucket_sent_[b] = 1;
      ready_buckets_.push_back({int(b), fence_record(context())});
    }
  });
  return true;
}

double StageWorker::finish() {
  const Context& ctx = context();
  fence_wait(ctx, lane1_end_);  // lanes: what follows (the losses, the optimizer) after every backward
  lane1_end_.reset();
  double sum = 0;
  if (const int loss = loss_chunk(); loss >= 0) {
    const Tensor host = to_host_f32(ctx, losses_);
    const int64_t n = host.dim(1);
    for (int m = 0; m < plan_.microbatches; ++m) {
      const double s = sum_losses(host.slice(int64_t(m) * n, {n}));
      if (setup_.check_losses && !std::isfinite(s)) {
        const std::string whose =
            plan_.training ? str_cat("the loss of iteration ", plan_.iteration) : std::string("the validation loss");
        throw StageOpError({OpKind::forward, m, loss},
                           str_cat(whose, " is ", std::isnan(s) ? "NaN" : "infinite",
                                   ", so the training diverged; pass --no-check-for-nan-in-loss-and-grad to ",
                                   plan_.training ? "skip such iterations" : "go on", " instead of stopping"));
      }
      sum += s;
    }
  }
  for (const Tensor& t : tokens_) buffer_free(ctx, t);
  for (const Tensor& t : targets_) buffer_free(ctx, t);
  tokens_.clear();
  targets_.clear();
  for (size_t i = 0; i < saved_.size(); ++i)
    if (saved_[i]) model(int(i % size_t(setup_.chunks))).release(std::move(saved_[i]));
  return sum;
}

void StageWorker::reduce_tied(std::function<void()> done) {
  if (!has_tied()) {
    done();
    return;
  }
  if (setup_.tied_within) {  // both copies here: a + b into both, in stream order
    GptChunk &first = model(0), &last = model(setup_.chunks - 1);
    const Tensor a = first.layout().view(first.grads(), kWordEmbeddingName);
    const Tensor b = last.layout().view(last.grads(), kWordEmbeddingName);
    add(context(), a, b, a);
    copy(context(), a, b);
    done();
    return;
  }
  GptChunk& chunk = model(setup_.tied_chunk);
  setup_.tied->reduce(setup_.tied_rank, context(), chunk.layout().view(chunk.grads(), kWordEmbeddingName),
                      std::move(done));
}

std::vector<ReadyBucket> StageWorker::take_remaining_buckets() {
  std::vector<ReadyBucket> out;
  std::shared_ptr<void> fence;
  for (size_t b = 0; b < setup_.buckets.size(); ++b) {
    if (bucket_sent_[b]) continue;
    bucket_sent_[b] = 1;
    if (!fence) fence = fence_record(context());
    out.push_back({int(b), fence});
  }
  return out;
}

}  // namespace troupe::actors
