// TrainingRun's private state, shared by training_run.cpp (construction, iterations) and
// training_run_checkpoint.cpp (save/load). Between iterations the stage and optimizer shard
// actors leave their chunks and optimizer state alone, so these files reach them through
// `workers` and `stage_optimizers` directly.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/monitor/protocols.hpp"
#include "actors/train/checkpoint_writer_actor.hpp"
#include "actors/fabric/device_services.hpp"
#include "actors/train/messages.hpp"
#include "actors/train/process_heartbeat.hpp"
#include "actors/train/protocols.hpp"
#include "actors/train/stage_optimizer.hpp"
#include "actors/train/stage_worker.hpp"
#include "actors/train/trainer_actor.hpp"
#include "kernels/collectives.hpp"
#include "actors/train/training_run.hpp"
#include "model/rank_layout.hpp"
#include "model/train/loss_scaler.hpp"

namespace troupe::actors {

class Fabric;

// The schedule a layout runs: Megatron interleaves whenever a stage holds several chunks.
schedules::Schedule effective_schedule(const ParallelConfig& p);

struct TrainingRun::Impl {
  TrainingConfig config;
  int P = 1, V = 1, M = 1;  // M: microbatches per data-parallel replica
  int T = 1, D = 1;
  int C = 1;          // context-parallel size: parameters are replicated over D x C ranks (Megatron's dp_cp)
  int EP = 1;         // expert-parallel size: MoE experts split over EP consecutive data ranks
  RankLayout layout;  // {T, C, D, P}: every rank computation goes through it
  // Each data x context rank owns a shard of the optimizer state (--use-distributed-optimizer, D x C > 1).
  bool distributed_optimizer() const { return config.parallel.distributed_optimizer && D * C > 1; }
  // The first and last stage each hold a copy of the tied embedding (P * V > 1 and not untied;
  // zb-v: stage 0 holds both).
  bool tied_split() const { return !config.model.untie_embeddings_and_output_weights && P * V > 1; }
  // How chunks sit on stages (zb-v: a V), and where the last virtual stage (LM head, loss) is.
  schedules::Placement placement() const { return schedules::placement(effective_schedule(config.parallel)); }
  schedules::StageChunk loss_holder() const { return schedules::stage_chunk(placement(), {P, V, 1}, P * V - 1); }
  std::shared_ptr<Fabric> fabric;                       // this process among the run's processes (one without mpirun)
  std::vector<std::unique_ptr<Collectives>> groups;     // tensor- and data-parallel group members
  std::vector<std::unique_ptr<Context>> comm_contexts;  // --overlap-grad-reduce: each reducer's stream
  std::vector<std::unique_ptr<Context>> cp_contexts;    // context parallelism on GPUs: each ring's pass stream
  std::vector<std::unique_ptr<Context>> moe_contexts;   // expert parallelism on GPUs: each rank's all-to-all stream
  // --overlap-moe-expert-parallel-comm on GPUs: each rank's stream for the backwards' all-to-alls
  std::vector<std::unique_ptr<Context>> moe_backward_contexts;
  std::vector<grad_reducer_actor> reducers;  // ... and the reducer actors, by rank
  std::chrono::steady_clock::time_point epoch = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<StageWorker>> workers;              // by rank (null: another process's)
  std::vector<std::shared_ptr<StageOptimizer>> stage_optimizers;  // ... their optimizer state
  std::vector<std::unique_ptr<Channel>> channels;
  std::vector<std::unique_ptr<PairReducer>> tied;  // per (data rank, tensor rank) pipeline
  std::shared_ptr<schedules::TraceWriter> trace;
  caf::actor_system_config caf_config;
  std::unique_ptr<caf::actor_system> system;
  std::unique_ptr<caf::scoped_actor> self;
  std::vector<stage_actor> stages;
  std::vector<optimizer_shard_actor> shards;  // by rank, this process's (else null)
  loader_actor loader;
  optimizer_actor optimizer;
  trainer_actor trainer;
  monitor_actor monitor;  // null unless start_monitor was called
  int64_t iteration = 0, consumed = 0;
  int64_t skipped_in_a_row = 0;  // iterations skipped for inf/nan gradients, up to the last one
  std::string failure;
  std::shared_ptr<LossScaler> scaler;  // shared with the trainer; touched here only between iterations

  // Checkpoints (training_run_checkpoint.cpp).
  uint64_t config_seed = 0;                   // the dropout streams' seed: config.seed, or the loaded checkpoint's
  checkpoint_writer_actor checkpoint_writer;  // spawned by the first save
  std::vector<std::unique_ptr<Context>> snapshot_contexts;  // per rank: the side stream of GPU snapshots
  std::vector<Tensor> staging;                              // pinned host copies, reused by every save
  struct PendingSave {
    std::string root;
    int keep_last = 0;
    CheckpointMetadata meta;
    std::future<SaveOutcome> done;
    double stall_seconds = 0;
    std::chrono::steady_clock::time_point started;
  };
  std::optional<PendingSave> pending_save;
  CheckpointMetadata checkpoint_metadata(bool with_optimizer, int64_t step) const;
  bool saves_state(const StageWorker* w) const;              // writes its state into checkpoints
  const Tensor& staging_buffer(size_t slot, int64_t numel);  // staging[slot], (re)allocated to numel

  // The stage workers of this process, their groups and the links between them (training_run.cpp).
  void build_stages();
  struct StageGroups {
    // Per rank: its member of the tensor-, data (x context)- and context-parallel group (null: none).
    std::vector<Collectives*> tp, dp, cp;
    // MoE with expert parallelism: the expert group (the EP ranks splitting the experts) and the
    // expert-data-parallel group (the D / EP ranks holding the same experts; null when 1).
    std::vector<Collectives*> ep, edp;
    // --overlap-moe-expert-parallel-comm: the expert group again, for the backwards' all-to-alls.
    std::vector<Collectives*> ep_backward;
  };
  std::unique_ptr<Context> make_context(size_t r) const;  // rank r's device (r in this process)
  StageGroups make_groups(const std::vector<std::unique_ptr<Context>>& contexts);
  template <typename BuildGroup>
  void make_expert_groups(int s, BuildGroup& build_group, StageGroups& member) const;
  std::shared_ptr<StageWorker> make_worker(size_t r, std::unique_ptr<Context> context, const StageGroups& groups);
  std::shared_ptr<StageOptimizer> make_stage_optimizer(size_t r, std::shared_ptr<StageWorker> worker) const;
  void link_pipelines();  // activation and gradient channels, and the tied embedding's pair reducers
  // The actors, after the system exists (TrainingRun's constructor shuts down on a failure).
  void start_actors(std::unique_ptr<DataLoader> train, std::unique_ptr<DataLoader> valid, schedules::Schedule schedule);
  // Stage actors and workers are indexed by global rank (layout.rank: Megatron's order). Process p
  // holds ranks [p * per_process, (p + 1) * per_process); workers, contexts and reducers of
  // ranks elsewhere are null, their stage actors remote handles.
  size_t rank(int stage, int dp, int tp, int cp = 0) const {
    return size_t(layout.rank({.pp = stage, .dp = dp, .cp = cp, .tp = tp}));
  }
  int per_process = 0;
  int process_of(size_t r) const { return int(r) / per_process; }
  bool local(size_t r) const;
  std::vector<stage_actor> local_stages;            // this process's stage actors, by rank
  stage_directory_actor directory;                  // several processes: hands out local_stages to the others
  std::shared_ptr<HeartbeatBoard> heartbeat_board;  // several processes: when each was last heard from
  caf::actor heartbeat;                             // pings the lower-numbered processes' directories
  void connect_processes();                         // several processes: learns every other process's stage actors
  // The trainer's answer to (xs...); throws troupe::Error with the run's failure (kept in `failure`).
  template <typename Answer, typename... Ts>
  Answer ask(Ts... xs);
  void shutdown();
  // Publishes the run's `end` unless the app did (training_run_monitor.cpp); waits until sent.
  void end_monitor();
};

// Traces a host op of the run (a checkpoint save) from construction to destruction, through
// the trainer (the trace's one writer): into --trace and to the monitor.
class HostOpSpan {
 public:
  // `epoch`: the trace clock's zero; `iteration`: the run's iteration count now.
  HostOpSpan(trainer_actor trainer, std::chrono::steady_clock::time_point epoch, int64_t iteration, const char* actor,
             schedules::EventKind kind);
  ~HostOpSpan();
  HostOpSpan(const HostOpSpan&) = delete;
  HostOpSpan& operator=(const HostOpSpan&) = delete;

 private:
  int64_t now_ns() const;
  trainer_actor trainer_;
  std::chrono::steady_clock::time_point epoch_;
  schedules::TraceEvent event_;
};

}  // namespace troupe::actors
