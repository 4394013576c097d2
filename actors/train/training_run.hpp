// The public face of the actor runtime: one training run on this process's devices.
// Behind it, one CAF actor system: a stage actor per pipeline stage (owning its device,
// context and model chunks), a data-loader actor, an optimizer actor and a trainer actor;
// the pipeline schedule emerges from the stage actors' policies (schedules/schedule.hpp).
// `troupe train` drives this; nothing outside actors/ includes CAF.
//
//   TrainingRun run(config, train_loader, valid_loader);
//   while (run.iteration() < config.train_iters && !stop_requested)
//     IterationStats s = run.train_iteration();          // throws troupe::Error on failure
//   double valid_loss = run.evaluate(config.eval_iters);
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actors/monitor/monitor_options.hpp"
#include "actors/monitor/monitor_schema.hpp"
#include "data/data_loader.hpp"
#include "model/config.hpp"
#include "model/fp8/fp8_recipe.hpp"
#include "model/recompute.hpp"
#include "model/pipeline_split.hpp"
#include "model/train/lr_schedule.hpp"
#include "model/train/optimizer.hpp"
#include "model/train/trainer.hpp"
#include "schedules/schedule.hpp"
#include "storage/checkpoint_format.hpp"

namespace troupe::actors {

struct ParallelConfig {
  int tensor_size = 1;         // --tensor-model-parallel-size
  int context_size = 1;        // --context-parallel-size (model/context_parallel.hpp)
  int data_size = 1;           // devices / (tensor size * pipeline size)
  int expert_size = 1;         // --expert-model-parallel-size: MoE experts split over data ranks
  int expert_tensor_size = 0;  // --expert-tensor-parallel-size; 0: tensor_size (the only one implemented)
  // On GPUs with expert_size > 1 the all-to-alls run on a stream of their own (model/moe/
  // moe_mlp.hpp), unless --moe-all-to-all-on-compute-stream; --moe-shared-expert-overlap: the
  // shared expert computes beside them (the backward adds its input gradient last).
  bool moe_shared_expert_overlap = false;
  bool moe_all_to_all_on_compute_stream = false;
  // --overlap-moe-expert-parallel-comm (Megatron's, its "combined 1F1B"): a forward runs beside the
  // backward enqueued before it, on a second stream (StageSetup::lanes), so its expert all-to-alls
  // and the waits for their counts overlap the other microbatch's work. The same math.
  bool overlap_moe_expert_parallel_comm = false;
  bool sequence_parallel = false;      // --sequence-parallel
  bool distributed_optimizer = false;  // --use-distributed-optimizer
  bool overlap_grad_reduce = false;    // --overlap-grad-reduce: reduce buckets during backward
  int64_t bucket_elements = 40000000;  // --ddp-bucket-size (Megatron's default)
  int pipeline_size = 1;               // --pipeline-model-parallel-size
  int virtual_chunks = 1;              // V; from --num-layers-per-virtual-pipeline-stage
  // --decoder-first/last-pipeline-num-layers, --account-for-embedding/loss-in-pipeline-split:
  // which layers each chunk holds (model/pipeline_split.hpp); default: equal chunks.
  PipelineSplit split;
  schedules::Schedule schedule = schedules::Schedule::one_f_one_b;
  int group_size = 0;  // --microbatch-group-size-per-vp-stage (0: P)
};

struct DeviceConfig {
  bool cuda = false;           // GPUs or CPU devices; one rank (TP x DP x PP) per device
  int cpu_devices = 0;         // CPU devices (threads with their own memory); 0: one per rank
  DType compute = DType::f32;  // f32 on CPU devices; bf16 or f16 on GPUs
};

struct TrainingConfig {
  GptConfig model;
  ParallelConfig parallel;
  DeviceConfig devices;
  RecomputeConfig recompute;  // --recompute-*: activations recomputed in backward (model/recompute.hpp)
  Fp8Recipe fp8;              // --fp8-*: the linear layers' GEMMs in FP8 (model/fp8/fp8_recipe.hpp)
  OptimizerConfig optimizer;
  LrSchedule lr;
  float loss_scale = 0.0f;  // --loss-scale: constant (fp16); 0: dynamic when fp16, none otherwise
  int64_t micro_batch_size = 1;
  int64_t global_batch_size = 1;  // microbatches per iteration = global / micro
  int64_t train_iters = 0;
  uint64_t seed = 1234;
  std::string trace_path;  // --trace: record every op (msgpack); empty: off; several processes: PATH.rankR each
  bool time_ops = false;   // time GPU ops with events as --trace does (for the monitor's trace)
  std::chrono::milliseconds op_timeout{std::chrono::minutes(5)};  // a stage silent this long fails the run
  // --heartbeat-timeout: several processes, another process silent this long (stopped, wedged)
  // fails the run while an iteration is under way (actors/train/process_heartbeat.hpp).
  std::chrono::milliseconds heartbeat_timeout{std::chrono::seconds(20)};
  // --check-for-nan-in-loss-and-grad (Megatron's default: on): a non-finite loss (the last
  // stage's host copy of it, each iteration) or global gradient norm (the optimizer's, for
  // clipping) stops the run with an error naming the iteration; no extra device sync. With a
  // loss scaler (fp16) inf/nan gradients are expected and only skip the step.
  bool check_for_nan = true;
  // --max-consecutive-skipped-iterations: this many iterations in a row skipped for inf/nan
  // gradients stop the run with an error (0: no bound).
  int64_t max_consecutive_skipped = 100;

  // Runtime knobs and test hooks (no command-line flags).
  int max_outstanding_ops = 0;  // ops a GPU stage enqueues ahead of completion; 0: 4 (CPU devices: always 1)
  // Debugging a divergence: also every op's output activations and gradients, a device sync per
  // op (off with fp16 dynamic loss scaling), so the first op making a NaN is named.
  bool check_for_nan_every_op = false;
  // Every op takes exactly this long (CPU devices; sleeps after the work): equal op durations
  // for the test that the emergent order equals schedules::canonical_order.
  std::chrono::microseconds fixed_op_duration{0};
  // Called on the stage's thread before each op; may throw (failure injection) or record the order.
  std::function<void(int stage, const schedules::Op& op)> before_op;
  // > 0: after a failure, a shutdown still unfinished this long later (a stage wedged in a device
  // call or a collective that no abort reaches) ends the process with exit status 1 and the
  // failure's message, instead of hanging (base/exit_deadline.hpp). `troupe train` sets it; 0
  // (library default) waits as long as it takes.
  std::chrono::milliseconds failed_shutdown_limit{0};
};

// A loader microbatch as the model consumes it: targets = labels, -1 where loss_mask == 0.
Batch to_batch(const MicroBatch& mb);

// TrainingRun::start_save / save_checkpoint.
struct SaveOptions {
  bool optimizer = true;  // also the Adam moments (--no-save-optim: false)
  int keep_last = 0;      // --most-recent-k: keep this many complete checkpoints (0: all)
  // Files copied into the iteration directory, (source, name there): the tokenizer's.
  std::vector<std::pair<std::string, std::string>> files;
};
struct SavedCheckpoint {
  std::string dir;
  int64_t iteration = 0;
  double stall_seconds = 0;  // training stopped for the snapshot
  double write_seconds = 0;  // this process's writer, in the background
  double total_seconds = 0;  // snapshot to commit
  uint64_t bytes = 0;        // written by this process
};
// TrainingRun::load_checkpoint.
struct LoadOptions {
  bool optimizer = true;  // --no-load-optim: fresh Adam moments
  bool rng = true;        // --no-load-rng: dropout streams from this run's --seed
  bool finetune = false;  // --finetune: weights only; iteration, optimizer and data from 0
  // --ckpt-step: this iteration of the root, not the tracker's.
  std::optional<int64_t> iteration = std::nullopt;
};

class TrainingRun {
 public:
  // Loaders yield this rank's microbatches (host tensors); valid may be null.
  TrainingRun(const TrainingConfig& config, std::unique_ptr<DataLoader> train, std::unique_ptr<DataLoader> valid);
  ~TrainingRun();
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;

  // One iteration: forward/backward of every microbatch through the pipeline, then the
  // optimizer step. Throws troupe::Error naming the stage and op when any actor fails, and
  // (the run then stays failed) on a non-finite loss or gradient norm with check_for_nan, or
  // after max_consecutive_skipped skipped iterations in a row.
  IterationStats train_iteration();
  // Mean validation loss over `iters` microbatches (no gradients, no dropout).
  double evaluate(int64_t iters);
  int64_t iteration() const;
  int64_t consumed_samples() const;
  // The whole model's current parameters as a host f32 buffer in the single-device layout
  // (ParamLayout(config.model, ChunkSpec::whole_model())), gathered from every stage: for a
  // text sample after training and for export.
  Tensor gather_weights() const;

  // Model-state memory of this process's first device (rank p * devices per process):
  // parameters (compute dtype), gradients (f32), optimizer state (fp32 master weights where
  // they are a copy, Adam moments; a 1/DP shard of them with the distributed optimizer), the
  // parameters it holds (its shard under tensor parallelism), and the device's memory in use
  // (total - free; 0 on a CPU device).
  struct MemoryReport {
    int64_t parameters = 0, parameter_bytes = 0, gradient_bytes = 0, optimizer_bytes = 0;
    size_t device_in_use = 0;
  };
  MemoryReport memory_report() const;

  // Checkpoints (storage/checkpoint_format.hpp; actors/train/checkpoint_shards.hpp says who writes
  // which slices). Every process calls these at the same iterations.
  // Starts saving the current iteration to <root>/iter_<iteration()>/: waits for a pending
  // save, takes a snapshot (host copies; on a GPU enqueued on a side stream that the next
  // optimizer step waits for) and hands it to the checkpoint writer actor. Training may go on
  // at once; the checkpoint is complete (metadata.json, tracker) only after finish_save.
  void start_save(const std::string& root, const SaveOptions& options = {});
  // Commits the pending save once every process has written its part (wait: blocks until
  // then; otherwise nullopt while any process is still writing). Throws troupe::Error when a
  // part could not be written; the tracker then still names the previous checkpoint.
  std::optional<SavedCheckpoint> finish_save(bool wait);
  // Allocates the pinned host buffers saves copy into (the first save does otherwise, and
  // stalls for it): call once before training when checkpoints will be saved.
  void reserve_save_buffers(bool optimizer);
  // start_save + finish_save(true).
  SavedCheckpoint save_checkpoint(const std::string& root, const SaveOptions& options = {});

  // Loads the tracker's checkpoint (or options.iteration's) into this fresh run (before its
  // first iteration), whatever layout saved it: every rank reads the slices of each tensor its shard holds. Restores
  // iteration, optimizer step and moments, loss scale and the dropout seed, as options say.
  // The train loader must have been built at the checkpoint's consumed samples (read them with
  // read_checkpoint_metadata; 0 with finetune). Throws troupe::Error naming the first
  // differing model config field, a missing tensor or shard, a corrupt or truncated file.
  void load_checkpoint(const std::string& root, const LoadOptions& options = {});
  // The metadata of the tracker's checkpoint in `root`, or of `iteration`'s (validated, no tensor read).
  static CheckpointMetadata read_checkpoint_metadata(const std::string& root,
                                                     std::optional<int64_t> iteration = std::nullopt);

  // Live monitoring (actors/monitor/monitor_actor.hpp, training_run_monitor.cpp). start_monitor binds
  // the options' endpoints (throws troupe::Error naming one it cannot bind), spawns the monitor
  // actor in this run's actor system and publishes `hello`; it returns where it listens.
  // publish() hands the monitor a record without waiting (nothing without a monitor). A run
  // destroyed before an `end` was published publishes one itself: "failed" (with the error)
  // or "stopped".
  MonitorAddresses start_monitor(const MonitorOptions& options, const MonitorHello& hello);
  bool monitoring() const;
  void publish(MonitorBody record);
  // Bytes in use on each GPU of the run, in device order (all processes on it: total - free);
  // empty for CPU devices.
  std::vector<int64_t> device_memory_in_use() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe::actors
