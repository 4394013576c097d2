// TrainingRun: builds the stages (contexts, chunks, optimizers, channels) as plain objects,
// then one CAF actor system with the stage, data-loader, optimizer and trainer actors, and
// talks to the trainer through a scoped actor.
#include "actors/train/training_run.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "actors/fabric/collective_groups.hpp"
#include "actors/fabric/device_services.hpp"
#include "actors/fabric/fabric.hpp"
#include "actors/train/clock_shift_hook.hpp"
#include "actors/train/grad_reducer_actor.hpp"
#include "actors/fabric/group_pair_reducer.hpp"
#include "actors/train/loader_actor.hpp"
#include "actors/train/messages.hpp"
#include "actors/train/optimizer_actor.hpp"
#include "actors/train/optimizer_shard_actor.hpp"
#include "actors/train/process_heartbeat.hpp"
#include "actors/train/run_error.hpp"
#include "actors/train/stage_actor.hpp"
#include "actors/train/stage_worker.hpp"
#include "actors/train/trainer_actor.hpp"
#include "actors/train/training_run_impl.hpp"
#include "base/check.hpp"
#include "base/exit_deadline.hpp"
#include "model/context_parallel.hpp"
#include "model/memory_floor.hpp"
#include "base/log.hpp"
#if TROUPE_HAVE_CUDA
#include "kernels/cuda/runtime.hpp"
#endif

namespace troupe::actors {

schedules::Schedule effective_schedule(const ParallelConfig& p) {
  // Megatron picks the schedule from the layout: chunks per stage > 1 means interleaving (zb-v
  // places its two chunks in a V instead).
  if (p.schedule == schedules::Schedule::zb_v) return p.schedule;
  return p.virtual_chunks > 1 ? schedules::Schedule::interleaved_1f1b : p.schedule;
}

namespace {

// How often each process pings the lower-numbered ones (process_heartbeat.hpp).
constexpr std::chrono::milliseconds kHeartbeatPeriod{500};

// Microbatches each data-parallel replica runs per iteration.
int microbatches_of(const TrainingConfig& c) {
  const int D = c.parallel.data_size;
  TROUPE_CHECK(c.micro_batch_size >= 1, "--micro-batch-size must be >= 1, got ", c.micro_batch_size);
  TROUPE_CHECK(c.global_batch_size >= c.micro_batch_size * D && c.global_batch_size % (c.micro_batch_size * D) == 0,
               "--global-batch-size (", c.global_batch_size, ") must be a multiple of --micro-batch-size (",
               c.micro_batch_size, ") times the data-parallel size (", D, ")");
  return int(c.global_batch_size / (c.micro_batch_size * D));
}

// --context-parallel-size: what the ring implements (model/context_parallel.hpp), the rest refused by name.
void validate_context_parallel(const TrainingConfig& c) {
  const int C = c.parallel.context_size;
  TROUPE_CHECK(C >= 1, "--context-parallel-size must be >= 1, got ", C);
  if (C == 1) return;
  check_context_split(c.model.seq_length, C);
  TROUPE_CHECK(c.model.sliding_window == 0,
               "--context-parallel-size with a sliding window (--window-size) is not implemented; use one or the "
               "other");
  if (c.model.moe.enabled()) c.model.moe.validate_context_parallel(C);
}

// --overlap-moe-expert-parallel-comm: a forward and a backward of one stage in flight at once
// (StageSetup::lanes); what is built so far, the rest refused by name.
void validate_expert_lanes(const TrainingConfig& c) {
  const ParallelConfig& p = c.parallel;
  if (!p.overlap_moe_expert_parallel_comm) return;
  constexpr const char* flag = "--overlap-moe-expert-parallel-comm";
  TROUPE_CHECK(p.expert_size > 1, flag,
               " overlaps one microbatch's expert all-to-alls with another's work: it needs "
               "--expert-model-parallel-size > 1");
  TROUPE_CHECK(p.pipeline_size == 1, flag, " with --pipeline-model-parallel-size ", p.pipeline_size,
               " is not implemented (one pipeline stage only)");
  TROUPE_CHECK(p.tensor_size == 1, flag, " with --tensor-model-parallel-size ", p.tensor_size, " is not implemented");
  TROUPE_CHECK(p.context_size == 1, flag, " with --context-parallel-size ", p.context_size, " is not implemented");
  TROUPE_CHECK(!p.moe_all_to_all_on_compute_stream, flag,
               " runs the all-to-alls on streams of their own: drop --moe-all-to-all-on-compute-stream");
}

// --expert-model-parallel-size: experts split over consecutive data x context ranks (RankLayout's
// expert grid), what is exact so far; the rest refused by name.
void validate_expert_parallel(const TrainingConfig& c) {
  const int EP = c.parallel.expert_size, D = c.parallel.data_size, T = c.parallel.tensor_size,
            ETP = c.parallel.expert_tensor_size;
  TROUPE_CHECK(EP >= 1, "--expert-model-parallel-size must be >= 1, got ", EP);
  // Megatron's default: each expert split over the tensor-parallel group like the dense MLP.
  TROUPE_CHECK(ETP == 0 || ETP == T, "--expert-tensor-parallel-size ", ETP,
               " is not implemented: the experts split over the tensor-parallel group, its default "
               "(--tensor-model-parallel-size ",
               T, "); leave it out");
  validate_expert_lanes(c);
  if (EP == 1) return;
  const int E = c.model.moe.num_experts;
  TROUPE_CHECK(c.model.moe.enabled(), "--expert-model-parallel-size ", EP,
               " needs a mixture-of-experts model; set --num-experts or use --expert-model-parallel-size 1");
  TROUPE_CHECK(E % EP == 0, "--expert-model-parallel-size ", EP, " must divide --num-experts ", E,
               "; pick a size that divides it");
  // Megatron carves the expert groups out of the data x context ranks.
  const int C = c.parallel.context_size;
  if (C == 1)
    TROUPE_CHECK(D % EP == 0, "--expert-model-parallel-size ", EP, " must divide the data-parallel size ", D,
                 " (devices / (--tensor-model-parallel-size x --pipeline-model-parallel-size)); pick a size that "
                 "divides it");
  else
    TROUPE_CHECK((D * C) % EP == 0, "--expert-model-parallel-size ", EP,
                 " must divide the data-parallel size times --context-parallel-size (", D, " x ", C,
                 "); pick a size that divides it");
  // With several stages the all-to-all pairs up the expert group's ranks op by op: they run
  // their stage's ops in the order of the group's first rank (RankLayout::order_group).
}

// FP8 GEMMs (cuBLASLt's, and the CPU emulation refusing alike) take M, N and K in multiples of
// 16: a linear's tokens and each of its widths on one tensor-parallel rank, whichever of them a
// forward, input-gradient or weight-gradient GEMM puts in which place.
void validate_fp8_shapes(const TrainingConfig& c) {
  const GptConfig& m = c.model;
  const int T = c.parallel.tensor_size;
  const int64_t tokens = int64_t(c.micro_batch_size) * m.seq_length / c.parallel.context_size;
  const std::pair<const char*, int64_t> sizes[] = {
      {"the tokens of a microbatch on one rank (--micro-batch-size x --seq-length / --context-parallel-size)", tokens},
      {"--hidden-size", m.hidden_size},
      {"the QKV projection's width per tensor-parallel rank ((heads + 2 x query groups) x head dim / TP)",
       m.qkv_size() / T},
      {"the attention output's width per tensor-parallel rank (heads x head dim / TP)",
       int64_t(m.num_attention_heads) * m.head_dim() / T},
      {"--ffn-hidden-size per tensor-parallel rank", m.ffn() / T},
  };
  for (const auto& [what, size] : sizes)
    TROUPE_CHECK(size % 16 == 0, "--fp8-format: FP8 GEMMs need sizes that are multiples of 16; ", what, " is ", size);
}

void validate(const TrainingConfig& c) {
  c.model.validate();
  const int P = c.parallel.pipeline_size, V = c.parallel.virtual_chunks, L = c.model.num_layers;
  const int T = c.parallel.tensor_size, D = c.parallel.data_size;
  TROUPE_CHECK(P >= 1, "--pipeline-model-parallel-size must be >= 1, got ", P);
  TROUPE_CHECK(D >= 1, "the data-parallel size must be >= 1, got ", D);
  TROUPE_CHECK(V >= 1, "model chunks per stage must be >= 1, got ", V);
  validate_expert_parallel(c);
  validate_pipeline_split(L, P, V, c.parallel.split);
  c.model.validate_tensor_parallel(T);
  if (c.parallel.sequence_parallel) {
    TROUPE_CHECK((c.micro_batch_size * c.model.seq_length) % T == 0, "--sequence-parallel: the ",
                 c.micro_batch_size * c.model.seq_length, " tokens of a microbatch (--micro-batch-size ",
                 c.micro_batch_size, " x --seq-length ", c.model.seq_length,
                 ") must be divisible by --tensor-model-parallel-size (", T, ")");
  }
  validate_context_parallel(c);
  const int M = microbatches_of(c);
  schedules::validate(effective_schedule(c.parallel), {P, V, M, c.parallel.group_size});
  if (c.fp8.enabled) {
    TROUPE_CHECK(!c.model.moe.enabled(),
                 "--fp8-format with --num-experts is not implemented: the experts' grouped GEMMs have no FP8 path");
    validate_fp8_shapes(c);
  }
  if (c.devices.cuda) {
    TROUPE_CHECK(cuda_available(), "GPU training was asked for, but no GPU is visible (use CPU devices instead)");
  } else {
    TROUPE_CHECK(c.devices.compute == DType::f32, "CPU devices compute in f32, not ", dtype_name(c.devices.compute));
    TROUPE_CHECK(c.devices.cpu_devices >= 0, "--cpu-devices must be >= 0, got ", c.devices.cpu_devices);
  }
  // Before the loader builds samples for a microbatch that could never fit (GPUs: the first one's size).
  check_microbatch_fits(c.model, c.micro_batch_size, T, c.devices.compute,
                        int64_t(device_memory_total(c.devices.cuda, 0)));
  TROUPE_CHECK(c.op_timeout.count() > 0, "the op timeout must be positive");
  TROUPE_CHECK(c.max_consecutive_skipped >= 0, "--max-consecutive-skipped-iterations must be >= 0, got ",
               c.max_consecutive_skipped);
}

// The device of the `rank`-th local rank of a process that is `node_process`-th on its machine,
// each process holding `per_process` ranks: GPUs are dealt out round robin over the machine's
// processes (one process per GPU: process i takes GPU i); CPU devices are per process.
int device_of_rank(const TrainingConfig& c, int rank, int node_process, int per_process) {
  if (c.devices.cuda) {
    int gpus = 1;
#if TROUPE_HAVE_CUDA
    gpus = std::max(1, troupe::cuda::device_count());
#endif
    return (node_process * per_process + rank) % gpus;
  }
  const int ranks = c.parallel.tensor_size * c.parallel.context_size * c.parallel.data_size * c.parallel.pipeline_size;
  const int n = c.devices.cpu_devices > 0 ? c.devices.cpu_devices : ranks;
  return rank % n;
}

// Why the run must stop after an iteration whose step was skipped for inf/nan gradients ("" if it
// goes on): that is the loss scaler's business with fp16, a divergence otherwise. Every
// process sees the same global statistics, so all stop at the same iteration.
std::string divergence_error(const TrainingConfig& c, bool loss_scaling, const IterationStats& stats,
                             int64_t skipped_in_a_row) {
  if (stats.skipped && c.check_for_nan && !loss_scaling)
    return str_cat("iteration ", stats.iteration,
                   ": the gradients hold inf/NaN values (the global gradient norm is not finite), so the training "
                   "diverged; pass --no-check-for-nan-in-loss-and-grad to skip such iterations instead of stopping");
  if (c.max_consecutive_skipped > 0 && skipped_in_a_row >= c.max_consecutive_skipped)
    return str_cat("iteration ", stats.iteration, ": ", skipped_in_a_row,
                   " iterations in a row were skipped for inf/NaN gradients (--max-consecutive-skipped-iterations ",
                   c.max_consecutive_skipped, "), so the training diverged; lower --lr or raise the bound");
  return "";
}

}  // namespace

bool TrainingRun::Impl::local(size_t r) const { return process_of(r) == fabric->process(); }

std::unique_ptr<Context> TrainingRun::Impl::make_context(size_t r) const {
  const int device = device_of_rank(config, int(r) % per_process, fabric->node_process(), per_process);
  return std::make_unique<Context>(config.devices.cuda ? Context::cuda(device) : Context::cpu());
}

void TrainingRun::Impl::build_stages() {
  const size_t ranks = size_t(layout.world());
  // Devices first: the groups need every member's context.
  std::vector<std::unique_ptr<Context>> contexts(ranks);
  for (size_t r = 0; r < ranks; ++r)
    if (local(r)) contexts[r] = make_context(r);
  // With overlap each device's reducer drives the data-parallel collectives on a stream of its own.
  if (config.parallel.overlap_grad_reduce && D * C > 1) {
    comm_contexts.resize(ranks);
    for (size_t r = 0; r < ranks; ++r)
      if (local(r)) comm_contexts[r] = make_context(r);
  }
  // Context parallelism on GPUs: the ring's passes run on a stream of their own, beside the
  // block attention (model/context_parallel.hpp). CPU collectives block: no use there.
  if (C > 1 && config.devices.cuda) {
    cp_contexts.resize(ranks);
    for (size_t r = 0; r < ranks; ++r)
      if (local(r)) cp_contexts[r] = make_context(r);
  }
  // Expert parallelism on GPUs: the all-to-alls on a stream of their own (with
  // --moe-shared-expert-overlap, beside the shared expert; model/moe/moe_mlp.hpp).
  if (EP > 1 && config.devices.cuda && !config.parallel.moe_all_to_all_on_compute_stream) {
    moe_contexts.resize(ranks);
    for (size_t r = 0; r < ranks; ++r)
      if (local(r)) moe_contexts[r] = make_context(r);
  }
  // --overlap-moe-expert-parallel-comm: the backwards' all-to-alls on one more stream.
  if (!moe_contexts.empty() && config.parallel.overlap_moe_expert_parallel_comm) {
    moe_backward_contexts.resize(ranks);
    for (size_t r = 0; r < ranks; ++r)
      if (local(r)) moe_backward_contexts[r] = make_context(r);
  }
  const StageGroups member = make_groups(contexts);
  workers.resize(ranks);
  stage_optimizers.resize(ranks);
  snapshot_contexts.resize(ranks);
  for (size_t r = 0; r < ranks; ++r) {
    if (!local(r)) continue;
    workers[r] = make_worker(r, std::move(contexts[r]), member);
    stage_optimizers[r] = make_stage_optimizer(r, workers[r]);
  }
  if (P > 1) link_pipelines();
}

// Tensor-parallel groups (per stage and data rank) and data-parallel groups (per stage and
// tensor rank; on the reducers' streams with overlap).
TrainingRun::Impl::StageGroups TrainingRun::Impl::make_groups(const std::vector<std::unique_ptr<Context>>& contexts) {
  const std::vector<Collectives*> none(contexts.size(), nullptr);
  StageGroups member{none, none, none, none, none, none};
  auto build_group = [&](const std::vector<int>& members, bool data_parallel, const std::string& name,
                         bool context = false, std::vector<Collectives*>* into = nullptr) {
    std::vector<const Context*> ctxs;
    std::vector<int> procs;
    for (int m : members) {
      const size_t r = size_t(m);
      ctxs.push_back(!local(r)                                 ? nullptr
                     : data_parallel && !comm_contexts.empty() ? comm_contexts[r].get()
                                                               : contexts[r].get());
      procs.push_back(process_of(r));
    }
    // CPU devices: shared memory here, MPI to other processes; GPUs: NCCL. Every process makes
    // every group, in the same order.
    std::vector<std::unique_ptr<Collectives>> group =
        fabric->make_group(procs, ctxs, GroupOptions{name, config.op_timeout});
    for (size_t i = 0; i < members.size(); ++i) {
      if (!group[i]) continue;
      if (into == nullptr) into = context ? &member.cp : data_parallel ? &member.dp : &member.tp;
      (*into)[size_t(members[i])] = group[i].get();
      groups.push_back(std::move(group[i]));
    }
  };
  // Megatron's dp_cp group: the data and context ranks of a stage and tensor rank, in rank order
  // (context fastest). Parameters are replicated over it, so gradients are reduced over it.
  auto data_context_group = [&](int s, int tp) {
    std::vector<int> members;
    for (int dp = 0; dp < D; ++dp)
      for (int cp = 0; cp < C; ++cp) members.push_back(int(rank(s, dp, tp, cp)));
    return members;
  };
  for (int s = 0; s < P; ++s) {
    for (int dp = 0; dp < D && T > 1; ++dp)
      for (int cp = 0; cp < C; ++cp)
        build_group(layout.tensor_group(int(rank(s, dp, 0, cp))), false,
                    C > 1 ? str_cat("the tensor-parallel group of stage ", s, ", data rank ", dp, ", context rank ", cp)
                          : str_cat("the tensor-parallel group of stage ", s, ", data rank ", dp));
    for (int tp = 0; tp < T && D * C > 1; ++tp)
      build_group(data_context_group(s, tp), true,
                  str_cat(C > 1 ? "the data-and-context-parallel group of stage " : "the data-parallel group of stage ",
                          s, ", tensor rank ", tp));
    for (int dp = 0; dp < D && C > 1; ++dp)
      for (int tp = 0; tp < T; ++tp)
        build_group(layout.context_group(int(rank(s, dp, tp))), false,
                    str_cat("the context-parallel group of stage ", s, ", data rank ", dp, ", tensor rank ", tp), true);
    if (EP > 1) make_expert_groups(s, build_group, member);
  }
  return member;
}

// Expert parallelism (the expert-tensor-parallel size is T, Megatron's default): per tensor
// rank, the expert groups (EP consecutive data x context ranks of stage s, context fastest) and
// the expert-data-parallel groups (the data x context ranks with the same expert coordinate).
template <typename BuildGroup>
void TrainingRun::Impl::make_expert_groups(int s, BuildGroup& build_group, StageGroups& member) const {
  const int ranks = D * C;  // a stage's data x context ranks, index dp * C + cp
  auto rank_at = [&](int i, int tp) { return int(rank(s, i / C, tp, i % C)); };
  for (int tp = 0; tp < T; ++tp) {
    const std::string of_tp = T > 1 ? str_cat(", tensor rank ", tp) : std::string();
    for (int edp = 0; edp < ranks / EP; ++edp) {
      build_group(layout.expert_group(rank_at(edp * EP, tp)), false,
                  str_cat("the expert-parallel group of stage ", s, ", expert-data rank ", edp, of_tp), false,
                  &member.ep);
      // --overlap-moe-expert-parallel-comm: the backwards' all-to-alls on a communicator of their own.
      if (config.parallel.overlap_moe_expert_parallel_comm)
        build_group(layout.expert_group(rank_at(edp * EP, tp)), false,
                    str_cat("the backward expert-parallel group of stage ", s, ", expert-data rank ", edp, of_tp),
                    false, &member.ep_backward);
    }
    for (int ep = 0; ep < EP && ranks > EP; ++ep) {
      std::vector<int> members;
      for (int i = 0; i < ranks; ++i)
        if (layout.expert_coord(rank_at(i, tp)).ep == ep) members.push_back(rank_at(i, tp));
      // Reduces gradients: on the reducers' streams with --overlap-grad-reduce, as the data-parallel group.
      build_group(members, true, str_cat("the expert-data-parallel group of stage ", s, ", expert rank ", ep, of_tp),
                  false, &member.edp);
    }
  }
}

// Rank r's worker: its chunks (virtual stages s, s + P, ...; zb-v: s, 2P-1-s) and their gradient buckets.
std::shared_ptr<StageWorker> TrainingRun::Impl::make_worker(size_t r, std::unique_ptr<Context> context,
                                                            const StageGroups& member) {
  const GptConfig& model = config.model;
  const ParallelConfig& par = config.parallel;
  const RankCoord at = layout.coord(int(r));
  const int s = at.pp, dp = at.dp * C + at.cp, tp = at.tp;  // dp: the rank in the data x context group
  const std::vector<ChunkLayers> split = pipeline_split(model.num_layers, P, V, par.split);
  const bool dist_opt = distributed_optimizer();
  const DType compute = config.devices.cuda ? config.devices.compute : DType::f32;
  StageSetup setup;
  setup.stage = s;
  setup.stages = P;
  setup.chunks = V;
  setup.placement = placement();
  // zb-v: stage 0 holds the embedding and the LM head, so both copies of a tied embedding.
  setup.tied_within = tied_split() && placement() == schedules::Placement::v && s == 0;
  setup.tp_rank = tp;
  setup.tp_size = T;
  setup.dp_rank = dp;
  setup.dp_size = D * C;
  setup.dp_group = member.dp[r];
  setup.distributed_optimizer = dist_opt;
  setup.overlap_grad_reduce = !comm_contexts.empty();
  // The loss is on the host anyway (StageWorker::finish): checking it costs nothing.
  setup.check_losses = config.check_for_nan || config.check_for_nan_every_op;
  // fp16 with dynamic scaling expects inf/nan gradients (the step is skipped), as in Megatron.
  setup.check_tensors =
      config.check_for_nan_every_op && !(config.devices.compute == DType::f16 && config.loss_scale <= 0);
  setup.context = std::move(context);
  const TensorParallel tpar{
      {tp, T}, par.sequence_parallel, member.tp[r], {layout.expert_coord(int(r)).ep, EP}, member.ep[r]};
  setup.expert_data_group = member.edp[r];
  setup.moe_comm = moe_contexts.empty() ? nullptr : moe_contexts[r].get();
  setup.moe_shared_expert_overlap = par.moe_shared_expert_overlap;
  setup.lanes = par.overlap_moe_expert_parallel_comm;
  // The distributed optimizer gives each data x context rank a 64-aligned (D x C)-th of every bucket.
  const int64_t multiple = dist_opt ? 64 * int64_t(D * C) : 1;
  std::vector<int64_t> sizes;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> expert_runs;  // EP: reduced over their own group
  for (int c = 0; c < V; ++c) {
    const int vs = schedules::virtual_stage(setup.placement, {P, V, 1}, s, c);
    const ChunkSpec spec{split[size_t(vs)].first_layer, split[size_t(vs)].num_layers, vs == 0, vs == P * V - 1};
    auto chunk = std::make_unique<GptChunk>(*setup.context, model, spec, compute, tpar, multiple, config.recompute);
    if (C > 1)
      chunk->set_context_parallel({at.cp, C, member.cp[r], cp_contexts.empty() ? nullptr : cp_contexts[r].get()});
    if (config.fp8.enabled) chunk->enable_fp8(config.fp8);
    if (par.overlap_moe_expert_parallel_comm)
      chunk->set_moe_backward_comm(member.ep_backward[r],
                                   moe_backward_contexts.empty() ? nullptr : moe_backward_contexts[r].get());
    chunk->init_weights(config.seed);
    sizes.push_back(chunk->params().numel());
    if (EP > 1) expert_runs.push_back(chunk->layout().expert_runs());
    setup.models.push_back(std::move(chunk));
  }
  if (D * C > 1) setup.buckets = make_grad_buckets(sizes, par.bucket_elements, multiple, expert_runs);
  setup.timing = !config.trace_path.empty() || config.time_ops;
  setup.epoch = epoch;
  return std::make_shared<StageWorker>(std::move(setup));
}

// Rank r's optimizer state: an Optimizer per chunk of its worker (with the distributed
// optimizer its shard of every bucket among the ranks of the bucket's group).
std::shared_ptr<StageOptimizer> TrainingRun::Impl::make_stage_optimizer(size_t r,
                                                                        std::shared_ptr<StageWorker> worker) const {
  const bool dist_opt = distributed_optimizer();
  const int s = layout.coord(int(r)).pp;
  std::vector<std::unique_ptr<Optimizer>> optimizers;
  for (int c = 0; c < V; ++c) {
    OptimizerShard shard;
    for (const GradBucket& b : worker->buckets())
      if (dist_opt && b.chunk == c)
        shard.ranges.push_back(bucket_shard(b, bucket_group(*worker, b, worker->dp_group())));
    std::sort(shard.ranges.begin(), shard.ranges.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
    optimizers.push_back(std::make_unique<Optimizer>(worker->model(c), config.optimizer, shard));
  }
  std::vector<std::string> norm_exclude(size_t(V), "");
  if (tied_split() && s == loss_holder().stage)  // counted with the embedding's chunk (stage 0, chunk 0)
    norm_exclude[size_t(loss_holder().chunk)] = kWordEmbeddingName;
  return std::make_shared<StageOptimizer>(std::move(worker), std::move(optimizers), std::move(norm_exclude));
}

// Each (data rank, context rank, tensor rank) pipeline: activations s -> s+1 and gradients s -> s-1; with
// interleaving also the wrap from the last stage to the first (activations) and back
// (gradients); zb-v's chunk 1 sends its activations back and its gradients on over the same two
// channels, and needs no wrap. Links between processes: MPI (CPU) or NCCL (GPU) channels, made by every
// process in the same order. With tied embeddings the first and last stage sum the
// embedding's gradient through a pair reducer.
void TrainingRun::Impl::link_pipelines() {
  const bool timing = !config.trace_path.empty() || config.time_ops;
  auto link = [&](size_t from, size_t to) -> Channel* {
    const Context* f = local(from) ? &workers[from]->context() : nullptr;
    const Context* t = local(to) ? &workers[to]->context() : nullptr;
    std::unique_ptr<Channel> c =
        fabric->make_channel(process_of(from), process_of(to), f, t, timing, config.op_timeout);
    if (!c) return nullptr;
    channels.push_back(std::move(c));
    return channels.back().get();
  };
  for (int dpc = 0; dpc < D * C; ++dpc) {
    const int dp = dpc / C, cp = dpc % C;
    for (int tp = 0; tp < T; ++tp) {
      std::vector<Channel*> act_out(size_t(P), nullptr), act_in(size_t(P), nullptr);
      std::vector<Channel*> grad_out(size_t(P), nullptr), grad_in(size_t(P), nullptr);
      for (int s = 0; s < P; ++s) {
        const int next = (s + 1) % P, prev = (s - 1 + P) % P;
        const size_t r = rank(s, dp, tp, cp);
        const bool wrap = V > 1 && placement() == schedules::Placement::loop;
        if (s < P - 1 || wrap)
          act_out[size_t(s)] = act_in[size_t(next)] = link(r, size_t(layout.pipeline_next(int(r))));
        if (s > 0 || wrap) grad_out[size_t(s)] = grad_in[size_t(prev)] = link(r, size_t(layout.pipeline_prev(int(r))));
      }
      for (int s = 0; s < P; ++s) {
        const size_t r = rank(s, dp, tp, cp);
        if (local(r))
          workers[r]->connect(act_out[size_t(s)], act_in[size_t(s)], grad_out[size_t(s)], grad_in[size_t(s)]);
      }
      if (!tied_split() || placement() == schedules::Placement::v) continue;  // zb-v: summed within stage 0
      const size_t first = rank(0, dp, tp, cp), last = rank(P - 1, dp, tp, cp);
      if (local(first) && local(last)) {
        tied.push_back(make_pair_reducer(workers[first]->context(), workers[last]->context()));
      } else {
        const Context* c0 = local(first) ? &workers[first]->context() : nullptr;
        const Context* c1 = local(last) ? &workers[last]->context() : nullptr;
        auto pair =
            fabric->make_group({process_of(first), process_of(last)}, {c0, c1},
                               GroupOptions{str_cat("the tied embedding of data rank ", dp,
                                                    C > 1 ? str_cat(", context rank ", cp) : "", ", tensor rank ", tp),
                                            config.op_timeout});
        if (!c0 && !c1) continue;
        tied.push_back(std::make_unique<GroupPairReducer>(std::move(pair)));
      }
      if (local(first)) workers[first]->connect_tied(tied.back().get(), 0, 0);
      if (local(last)) workers[last]->connect_tied(tied.back().get(), 1, V - 1);
    }
  }
}

void TrainingRun::Impl::connect_processes() {
  // Every process publishes a directory of its stage actors on a port of its own; the ports
  // travel over MPI. Connections go one way only, from each process to every lower-numbered
  // one (two nodes dialing each other at once can leave the middleman routing over a
  // connection it then drops): process p hands its stages to q's directory and gets q's back.
  // Remote handles work like local ones (messages are serialized), and a process dying reaches
  // whoever monitors its actors.
  struct Registrations {
    std::mutex mu;
    std::map<int, std::vector<caf::actor>> stages;  // from higher-numbered processes
  };
  auto registered = std::make_shared<Registrations>();
  // Weak handles: a published actor outlives the run's shutdown a little, and a strong handle
  // held here would keep the detached stage actors' threads waiting.
  std::vector<caf::actor_addr> mine;
  for (const stage_actor& a : local_stages) mine.push_back(a.address());
  heartbeat_board = std::make_shared<HeartbeatBoard>(fabric->processes(), fabric->process());
  directory = system->spawn([mine, registered, board = heartbeat_board](
                                stage_directory_actor::pointer) -> stage_directory_actor::behavior_type {
    return {[mine, registered](peers_atom, int from, std::vector<caf::actor>& theirs) {
              {
                std::lock_guard lock(registered->mu);
                registered->stages[from] = std::move(theirs);
              }
              std::vector<caf::actor> out;
              for (const caf::actor_addr& a : mine) out.push_back(caf::actor_cast<caf::actor>(a));
              return out;
            },
            [board](heartbeat_atom, int from) {
              board->saw(from);
              return 0;
            }};
  });
  auto port = system->middleman().publish(directory, 0, nullptr, true);
  TROUPE_CHECK(port, "process ", fabric->process(),
               ": publishing the stage directory failed: ", system->render(port.error()));
  char host[256] = {};
  TROUPE_SYSCALL(gethostname(host, sizeof host - 1), "the host name other processes connect to");
  const std::vector<std::string> hosts = fabric->all_gather(host);
  const std::vector<std::string> ports = fabric->all_gather(std::to_string(*port));
  const bool one_host = std::all_of(hosts.begin(), hosts.end(), [&](const std::string& h) { return h == hosts[0]; });
  const int me = fabric->process();
  // The handles travel between processes untyped (see stage_directory_actor): stage actors again here.
  auto take = [&](int q, std::vector<caf::actor>& theirs) {
    TROUPE_CHECK(int(theirs.size()) == per_process, "process ", me, ": process ", q, " handed out ", theirs.size(),
                 " stage actors, not ", per_process);
    for (int i = 0; i < per_process; ++i)
      stages[size_t(q) * size_t(per_process) + size_t(i)] = caf::actor_cast<stage_actor>(theirs[size_t(i)]);
  };
  std::vector<caf::actor> ours;
  for (const stage_actor& a : local_stages) ours.push_back(caf::actor_cast<caf::actor>(a));
  std::vector<std::pair<int, stage_directory_actor>> lower;  // pinged for as long as the run lasts
  for (int q = 0; q < me; ++q) {
    const std::string where = one_host ? "127.0.0.1" : hosts[size_t(q)];
    auto remote = system->middleman().remote_actor<stage_directory_actor>(where, uint16_t(std::stoi(ports[size_t(q)])));
    TROUPE_CHECK(remote, "process ", me, ": connecting to process ", q, " at ", where, ":", ports[size_t(q)],
                 " failed: ", system->render(remote.error()));
    std::vector<caf::actor> theirs;
    std::string error;
    (*self)
        ->request(*remote, config.op_timeout, peers_atom::value, me, ours)
        .receive([&](std::vector<caf::actor>& v) { theirs = std::move(v); },
                 [&](caf::error& e) { error = system->render(e); });
    TROUPE_CHECK(error.empty(), "process ", me, ": process ", q, " did not hand out its stage actors: ", error);
    take(q, theirs);
    lower.emplace_back(q, *remote);
  }
  heartbeat = spawn_heartbeat(*system, heartbeat_board, std::move(lower), me, kHeartbeatPeriod);
  fabric->barrier();  // every higher-numbered process has registered with this one
  std::lock_guard lock(registered->mu);
  for (int q = me + 1; q < fabric->processes(); ++q) {
    auto it = registered->stages.find(q);
    TROUPE_CHECK(it != registered->stages.end(), "process ", me, ": process ", q, " never handed over its stages");
    take(q, it->second);
  }
  registered->stages.clear();
}

template <typename Answer, typename... Ts>
Answer TrainingRun::Impl::ask(Ts... xs) {
  std::optional<Answer> answer;
  std::string error;
  // The trainer's watchdog answers within op_timeout of a stalled op; this bound only guards
  // against a lost reply.
  const auto backstop = config.op_timeout * (2 * M * V + 8) + std::chrono::seconds(30);
  (*self)
      ->request(trainer, backstop, xs...)
      .receive([&](Answer& a) { answer = std::move(a); },
               [&](caf::error& e) {
                 // A run error is the trainer's answer (the run's failure); any other: no answer.
                 error =
                     is_run_error(e) ? system->render(e) : str_cat("the trainer did not answer: ", system->render(e));
               });
  if (answer) return std::move(*answer);
  if (error.empty()) error = "the trainer did not answer";
  failure = error;
  throw Error(error);
}

namespace {

// Destroys the actor system, waiting at most `limit`. After a failure of a run over several
// processes a detached actor can stay referenced (by another process's proxy of it), and the
// system's destructor then waited for its thread for ever (about one run in three of
// multiprocess_failure_test): the system is left behind (its remaining thread ends with the
// process) and the failure goes on to be reported.
void release_within(std::unique_ptr<caf::actor_system> system, std::chrono::seconds limit) {
  auto released = std::make_shared<std::promise<void>>();
  std::future<void> done = released->get_future();
  std::thread t([sys = std::move(system), released]() mutable {
    sys.reset();
    released->set_value();
  });
  if (done.wait_for(limit) == std::future_status::ready) {
    t.join();
    return;
  }
  t.detach();
  logger("train").warning("after the failure, the actor system did not shut down within ", limit.count(),
                          " s (an actor still referenced); leaving it behind");
}

// Waits for every local device. Pending completion callbacks send to actors of the run's system:
// they run while it exists, and the completion threads stop (unless a stage may still use them).
void stop_devices(const std::vector<std::shared_ptr<StageWorker>>& workers, bool timed_out) {
  for (const auto& w : workers) {
    if (!w) continue;
    try {
      w->synchronize();
    } catch (const std::exception&) {
      // A device error after a failure: nothing more to do with this device.
    }
    if (!timed_out) w->stop_completions();  // else a stage may still be using it
  }
}

}  // namespace

// One ordered teardown (its steps depend on each other); split only with care.
// NOLINTNEXTLINE(readability-function-size)
void TrainingRun::Impl::shutdown() {
  if (!system) return;
  bool failed = !failure.empty();
  std::optional<ExitDeadline> stuck;
  const auto guard_failed_shutdown = [&] {
    if (failed && config.failed_shutdown_limit.count() > 0)
      stuck.emplace(config.failed_shutdown_limit, str_cat(failure, " (and the shutdown after it did not finish within ",
                                                          config.failed_shutdown_limit.count() / 1000.0,
                                                          " s: a device or a peer is stuck; exiting without waiting)"));
  };
  guard_failed_shutdown();
  end_monitor();
  // Exits and down messages are for any actor: the typed handles are cast to plain ones here.
  std::vector<caf::actor> all;  // remote stages belong to their own processes
  for (const stage_actor& a : local_stages) all.push_back(caf::actor_cast<caf::actor>(a));
  for (const grad_reducer_actor& a : reducers)
    if (a) all.push_back(caf::actor_cast<caf::actor>(a));
  for (const optimizer_shard_actor& a : shards)
    if (a) all.push_back(caf::actor_cast<caf::actor>(a));
  for (const caf::actor& a : {caf::actor_cast<caf::actor>(loader), caf::actor_cast<caf::actor>(optimizer),
                              caf::actor_cast<caf::actor>(trainer), caf::actor_cast<caf::actor>(directory), heartbeat,
                              caf::actor_cast<caf::actor>(monitor), caf::actor_cast<caf::actor>(checkpoint_writer)})
    if (a) all.push_back(a);
  // Several processes: another one may still be finishing the step this one has finished (its
  // optimizer's replies on their way to its trainer), and its trainer monitors our stages: their
  // exit would fail its step. Stop only once every process has its last answer.
  // The barrier fails when another process went or went silent (the heartbeats): then this run
  // failed too, and nothing may leave this destructor's path.
  if (!failed && fabric && fabric->processes() > 1) {
    try {
      fabric->barrier();
    } catch (const std::exception& e) {
      failure = e.what();
      failed = true;
      guard_failed_shutdown();
    }
  }
  // After a failure, the failed rank's partners may be waiting inside a collective or a receive
  // for it: abort every group and channel first, so they end their op now, not at the timeout.
  const auto abort_transport = [&] {
    for (auto& c : channels) c->abort();
    for (auto& t : tied) t->abort();
    for (auto& g : groups) g->abort();
  };
  if (failed) abort_transport();
  for (const caf::actor& a : all) {
    (*self)->monitor(a);
    (*self)->send_exit(a, caf::exit_reason::user_shutdown);
  }
  // Wait for every actor (a stage finishes its current op first); then no thread enqueues
  // device work any more.
  size_t down = 0;
  bool timed_out = false;
  while (down < all.size() && !timed_out) {
    (*self)->receive([&](caf::down_msg&) { ++down; },
                     caf::after(config.op_timeout + std::chrono::seconds(10)) >> [&] { timed_out = true; });
  }
  if (fabric) fabric->watch_peers({});  // the heartbeats have stopped
  if (timed_out) abort_transport();
  stop_devices(workers, timed_out);
  // A tied-embedding sum whose partner stage failed before joining it still holds the other
  // stage's handle (its `done`), and that stage's thread would never end: drop the reducers.
  if (failed && !timed_out) tied.clear();
  // A detached actor's thread ends only once nothing holds it. Actors known to other processes
  // are held by the middleman (the registry, and each remote proxy's bookkeeping) until the
  // other processes drop their proxies: drop ours, wait for everyone, then release the rest.
  const bool several = fabric && fabric->processes() > 1 && !failed && !timed_out;
  std::vector<caf::actor_id> ids;
  for (const caf::actor& a : all) ids.push_back(a->id());
  if (directory && fabric && fabric->processes() > 1) system->middleman().unpublish(directory);
  all.clear();
  stages.clear();
  local_stages.clear();
  reducers.clear();
  shards.clear();
  directory = nullptr;
  heartbeat = nullptr;
  loader = nullptr;
  optimizer = nullptr;
  checkpoint_writer = nullptr;
  trainer = nullptr;
  monitor = nullptr;
  if (several) {
    try {
      fabric->barrier();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the proxies' goodbyes arrive
    } catch (const std::exception& e) {                             // another process went on its way out
      failure = e.what();
      failed = true;
    }
  }
  for (caf::actor_id id : ids) system->registry().erase(id);
  self.reset();
  if ((failed || timed_out) && fabric && fabric->processes() > 1) {
    release_within(std::move(system), std::chrono::seconds(2));
  } else {
    system.reset();
  }
}

TrainingRun::TrainingRun(const TrainingConfig& config, std::unique_ptr<DataLoader> train,
                         std::unique_ptr<DataLoader> valid)
    : impl_(std::make_unique<Impl>()) {
  Impl& d = *impl_;
  d.config = config;
  d.config_seed = config.seed;
  validate(config);
  d.P = config.parallel.pipeline_size;
  d.V = config.parallel.virtual_chunks;
  d.T = config.parallel.tensor_size;
  d.D = config.parallel.data_size;
  d.C = config.parallel.context_size;
  d.EP = config.parallel.expert_size;
  // The expert grid's tensor size is T (Megatron's default --expert-tensor-parallel-size).
  d.layout =
      RankLayout{.tensor = d.T, .context = d.C, .data = d.D, .pipeline = d.P, .expert = d.EP, .expert_tensor = d.T};
  d.layout.validate();
  d.M = microbatches_of(config);
  TROUPE_CHECK(train != nullptr, "TrainingRun needs a training data loader");
  d.consumed = train->consumed_samples();
  d.fabric = Fabric::init();
  d.epoch -= injected_clock_shift(d.fabric->process());  // a test hook (TROUPE_CLOCK_SHIFT); 0 normally
  const int world = d.layout.world(), procs = d.fabric->processes();
  TROUPE_CHECK(world % procs == 0, "the ", world, " ranks (tensor ", d.T, " x context ", d.C, " x data ", d.D,
               " x pipeline ", d.P, ") do not split evenly over ", procs, " processes");
  d.per_process = world / procs;
  d.build_stages();
  const schedules::Schedule schedule = effective_schedule(config.parallel);
  if (!config.trace_path.empty()) {
    schedules::TraceHeader header;
    header.schedule = schedule;
    header.shape = {d.P, d.V, d.M, config.parallel.group_size};
    header.num_layers = config.model.num_layers;
    header.chunk_layers = recorded_chunk_layers(config.model.num_layers, d.P, d.V, config.parallel.split);
    header.iteration = 1;
    header.process = d.fabric->process();
    header.processes = procs;
    // Every process's trace on process 0's clock (troupe replay merges them): the offset of
    // this process's trace clock, measured now by round trips with process 0.
    const ClockOffset clock = d.fabric->clock_offset([epoch = d.epoch] {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - epoch).count();
    });
    header.clock_offset_ns = clock.offset_ns;
    header.clock_rtt_ns = clock.rtt_ns;
    // Under mpirun each process records its own stages, into PATH.rankR (one file would be
    // written by every process at once).
    const std::string path = procs > 1 ? str_cat(config.trace_path, ".rank", d.fabric->process()) : config.trace_path;
    d.trace = std::make_shared<schedules::TraceWriter>(path, header);
  }

  d.caf_config.set("scheduler.max-threads", 2);  // every actor of the run is detached; the scheduler idles
  add_run_error_category(d.caf_config);          // system->render(e) gives a run error's sentence
  if (procs > 1) {
    // Control messages between processes (parcel announcements, tensor-rank orders, and the
    // down messages of a process that dies) go through CAF's middleman.
    d.caf_config.load<caf::io::middleman>();
    d.caf_config.add_message_type<RemoteParcel>("troupe.RemoteParcel");
  }
  d.system = std::make_unique<caf::actor_system>(d.caf_config);
  d.self = std::make_unique<caf::scoped_actor>(*d.system);
  try {
    d.start_actors(std::move(train), std::move(valid), schedule);
  } catch (const std::exception& e) {
    d.failure = e.what();  // no goodbye barrier with the other processes
    d.shutdown();          // the actors already spawned must end before the system goes
    throw;
  }
}

// Spawns and wires every actor of the run, in the order their handles are needed.
// NOLINTNEXTLINE(readability-function-size)
void TrainingRun::Impl::start_actors(std::unique_ptr<DataLoader> train, std::unique_ptr<DataLoader> valid,
                                     schedules::Schedule schedule) {
  Impl& d = *this;
  const int procs = d.fabric->processes();
  d.stages.resize(d.workers.size());
  d.shards.resize(d.workers.size());
  for (size_t r = 0; r < d.workers.size(); ++r)
    if (d.local(r))
      d.shards[r] = spawn_optimizer_shard(*d.system, {d.stage_optimizers[r], int(r), !d.comm_contexts.empty()});
  d.reducers.resize(d.comm_contexts.size());
  for (size_t r = 0; r < d.comm_contexts.size(); ++r)
    if (d.local(r))
      d.reducers[r] = spawn_grad_reducer(
          *d.system, {d.workers[r], d.comm_contexts[r].get(), d.workers[r]->dp_group(), d.shards[r]});
  for (size_t r = 0; r < d.workers.size(); ++r) {
    if (!d.local(r)) continue;
    StageOptions o;
    if (!d.reducers.empty()) o.reducer = d.reducers[r];
    o.optimizer_shard = d.shards[r];
    o.schedule = schedule;
    o.group_size = config.parallel.group_size;
    o.device = device_of_rank(config, int(r) % d.per_process, d.fabric->node_process(), d.per_process);
    o.follower = d.layout.order_group(int(r)).front() != int(r);
    o.max_outstanding = config.devices.cuda ? (config.max_outstanding_ops > 0 ? config.max_outstanding_ops : 4) : 1;
    o.fixed_op_duration = config.fixed_op_duration;
    o.before_op = config.before_op;
    o.epoch = d.epoch;
    d.stages[r] = spawn_stage(*d.system, d.workers[r], std::move(o));
    d.local_stages.push_back(d.stages[r]);
  }
  if (procs > 1) {
    d.connect_processes();
    // The trainer's watchdog reads the heartbeats while the pipeline runs; the host exchanges
    // between processes (the trainer's and optimizer's sums, barriers) block a thread, so they
    // read them too.
    d.fabric->watch_peers([board = d.heartbeat_board, timeout = config.heartbeat_timeout] {
      return board->silence_error(HeartbeatBoard::Clock::now(), timeout);
    });
  }
  LoaderSetup ls{std::move(train), std::move(valid), {}, d.D, d.layout.expert_group_data_ranks()};
  for (size_t r = 0; r < d.stages.size(); ++r) {
    const RankCoord at = d.layout.coord(int(r));
    const bool loss = at.pp == d.loss_holder().stage;  // the targets go where the loss is
    if (d.local(r) && (at.pp == 0 || loss)) ls.feeds.push_back({d.stages[r], at.dp, at.pp == 0, loss});
  }
  d.loader = spawn_loader(*d.system, std::move(ls));
  OptimizerSetup os;
  for (size_t r = 0; r < d.shards.size(); ++r) {
    if (!d.shards[r]) continue;
    os.shards.push_back(d.shards[r]);
    os.ranks.push_back(int(r));
  }
  os.layout = d.layout;
  os.distributed_optimizer = d.distributed_optimizer();
  os.fabric = d.fabric;
  os.clip_grad = config.optimizer.clip_grad;
  os.timeout = config.op_timeout;
  d.optimizer = spawn_optimizer(*d.system, std::move(os));
  TrainerSetup ts;
  ts.stages = d.stages;
  for (const grad_reducer_actor& a : d.reducers)
    if (a) ts.reducers.push_back(a);
  for (const optimizer_shard_actor& a : d.shards)
    if (a) ts.shards.push_back(a);
  ts.fabric = d.fabric;
  ts.first_local = size_t(d.fabric->process()) * size_t(d.per_process);
  ts.local_count = size_t(d.per_process);
  ts.layout = d.layout;
  ts.loss_stage = d.loss_holder().stage;
  ts.loader = d.loader;
  ts.optimizer = d.optimizer;
  ts.microbatches = d.M * d.D;
  ts.micro_batch_size = config.micro_batch_size;
  ts.seq_length = config.model.seq_length;
  ts.seed = config.seed;
  ts.lr = config.lr;
  if (config.loss_scale > 0)
    ts.scaler = std::make_shared<ConstantLossScaler>(config.loss_scale);
  else if (config.devices.cuda && config.devices.compute == DType::f16)
    ts.scaler = std::make_shared<DynamicLossScaler>();
  d.scaler = ts.scaler;
  ts.op_timeout = config.op_timeout;
  ts.heartbeat = d.heartbeat_board;
  ts.heartbeat_timeout = config.heartbeat_timeout;
  ts.trace = d.trace;
  ts.epoch = d.epoch;
#if TROUPE_HAVE_CUDA
  if (d.trace && config.devices.cuda) {
    std::vector<StageDevice> gpus;
    for (size_t r = 0; r < d.stages.size(); ++r)
      if (d.local(r))
        gpus.push_back({d.layout.coord(int(r)).pp,
                        device_of_rank(config, int(r) % d.per_process, d.fabric->node_process(), d.per_process)});
    ts.clocks = std::make_shared<ClockSampler>(std::move(gpus), d.epoch, troupe::cuda::sm_clock_mhz);
  }
#endif
  d.trainer = spawn_trainer(*d.system, ts);
}

TrainingRun::~TrainingRun() {
  if (!impl_) return;
  impl_->shutdown();
  if (impl_->trace) impl_->trace->close();
}

IterationStats TrainingRun::train_iteration() {
  Impl& d = *impl_;
  if (!d.failure.empty()) throw Error(str_cat("the run failed earlier: ", d.failure));
  IterationStats stats = d.ask<IterationStats>(train_atom::value);
  ++d.iteration;
  d.consumed += d.config.global_batch_size;
  d.skipped_in_a_row = stats.skipped ? d.skipped_in_a_row + 1 : 0;
  const std::string diverged = divergence_error(d.config, d.scaler != nullptr, stats, d.skipped_in_a_row);
  if (!diverged.empty()) {
    d.failure = diverged;
    throw Error(diverged);
  }
  return stats;
}

double TrainingRun::evaluate(int64_t iters) {
  Impl& d = *impl_;
  if (!d.failure.empty()) throw Error(str_cat("the run failed earlier: ", d.failure));
  TROUPE_CHECK(iters >= 1, "evaluate: --eval-iters must be >= 1, got ", iters);
  // The ranks of an expert group run their forwards together: each the same number.
  const int ranks = d.layout.expert_group_data_ranks();
  TROUPE_CHECK(iters % ranks == 0, "evaluate: --eval-iters ", iters, " does not split over the ", ranks,
               " data ranks that --expert-model-parallel-size ", d.EP, "'s expert groups span; pick a multiple of ",
               ranks);
  return d.ask<double>(eval_atom::value, iters);
}

Tensor TrainingRun::gather_weights() const {
  // Between iterations the stage actors do not touch their parameters, so read them from here;
  // the copy waits for each stage's stream (its last optimizer step included).
  const Impl& d = *impl_;
  const ParamLayout whole(d.config.model, ChunkSpec::whole_model());
  Tensor out = Tensor::host(DType::f32, {whole.size()});
  fill_zero(Context::cpu(), out);
  for (const auto& w : d.workers) {
    // Every data-parallel replica holds the same weights; under expert parallelism the first EP
    // data ranks each hold their experts.
    if (!w || w->dp_rank() >= d.EP) continue;
    w->context().activate();
    for (int c = 0; c < w->chunks(); ++c) {
      GptChunk& chunk = w->model(c);
      const Tensor host = to_host_f32(w->context(), chunk.params());
      for (const ParamInfo& p : chunk.layout().params()) {
        // Each element from one place (the processes' parts are summed below): a replicated
        // parameter from tensor rank 0, the tied embedding from the first stage.
        if (p.replicated() && w->tp_rank() != 0) continue;
        if (w->dp_rank() != 0 && !ParamLayout::is_expert_param(p.name)) continue;
        if (p.name == kWordEmbeddingName && !chunk.layout().spec().pre_process) continue;
        const ParamInfo& dst = whole.find(p.name);
        shard_to_global(p, host.data_as<float>() + p.offset, out.data_as<float>() + dst.offset, dst.global_shape[0]);
      }
    }
  }
  if (d.fabric->processes() > 1) {
    std::vector<double> all(out.data_as<float>(), out.data_as<float>() + out.numel());
    d.fabric->all_reduce(all, ReduceOp::sum);
    std::copy(all.begin(), all.end(), out.data_as<float>());
  }
  return out;
}

TrainingRun::MemoryReport TrainingRun::memory_report() const {
  const Impl& d = *impl_;
  MemoryReport m;
  for (size_t r = 0; r < d.workers.size(); ++r) {
    const auto& w = d.workers[r];
    if (!w) continue;
    for (int c = 0; c < w->chunks(); ++c) {
      const GptChunk& chunk = w->model(c);
      const Optimizer& opt = d.stage_optimizers[r]->optimizer(c);
      m.parameters += chunk.layout().size();
      m.parameter_bytes += int64_t(chunk.params().nbytes());
      m.gradient_bytes += int64_t(chunk.grads().nbytes());
      if (opt.master().data() != chunk.params().data()) m.optimizer_bytes += int64_t(opt.master().nbytes());
      m.optimizer_bytes += int64_t(opt.exp_avg().nbytes() + opt.exp_avg_sq().nbytes());
    }
    m.device_in_use = ::troupe::device_memory_in_use(w->context());
    break;  // the first local device
  }
  return m;
}

int64_t TrainingRun::iteration() const { return impl_->iteration; }
int64_t TrainingRun::consumed_samples() const { return impl_->consumed; }

}  // namespace troupe::actors
