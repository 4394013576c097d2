// TrainingRun's checkpoints. A save takes a snapshot between iterations (host copies of each
// local rank's part of the parameters and optimizer state; on a GPU, copies on a side stream
// into pinned memory that the next optimizer step waits for, so the stall is the enqueueing),
// hands it to this process's checkpoint writer actor, and commits once every process has
// written its part: metadata.json, then the tracker. Loading reads, for every local rank, the
// slices of each stored tensor its shard holds, so any layout loads any other.
#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "actors/train/checkpoint_shards.hpp"
#include "actors/train/checkpoint_writer_actor.hpp"
#include "actors/fabric/fabric.hpp"
#include "actors/train/training_run_impl.hpp"
#include "base/check.hpp"
#include "base/log.hpp"
#include "storage/checkpoint_reader.hpp"
#include "storage/checkpoint_writer.hpp"

namespace troupe::actors {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// An outcome as it travels between processes: "" + index, or "!" + error.
std::string encode(const SaveOutcome& o) { return o.error.empty() ? " " + o.index : "!" + o.error; }

// The FP8 recipe's fields that give the stored scaling state its meaning.
nlohmann::json fp8_record(const Fp8Recipe& r) {
  return {{"format", r.backward == Fp8Format::e5m2 ? "hybrid" : "e4m3"},
          {"recipe", r.scaling == Fp8ScalingKind::delayed ? "delayed" : "tensorwise"},
          {"amax_history_len", r.amax_history_len}};
}

// A chunk's FP8 scaling state from the checkpoint, when it holds it for the same format and
// recipe: false (the scales stay at 1) where it does not. Another history length is refused.
bool load_fp8_state(const CheckpointReader& r, const nlohmann::json& training_state, const Fp8Recipe& recipe,
                    GptChunk& model) {
  std::vector<std::pair<std::string, Tensor>> state = model.fp8_buffers();
  for (const auto& [name, t] : state)
    if (!r.has(name)) return false;
  const nlohmann::json stored = training_state.value("fp8", nlohmann::json());
  const nlohmann::json mine = fp8_record(recipe);
  if (!stored.is_object() || stored.value("format", "") != mine["format"] ||
      stored.value("recipe", "") != mine["recipe"])
    return false;
  TROUPE_CHECK(
      recipe.scaling != Fp8ScalingKind::delayed || stored.value("amax_history_len", 0) == recipe.amax_history_len,
      "checkpoint '", r.dir(), "' keeps FP8 amax histories of ", stored.value("amax_history_len", 0),
      " steps, this run asks for --fp8-amax-history-len ", recipe.amax_history_len,
      ": resume with the checkpoint's length");
  for (auto& [name, t] : state) read_whole_tensor(r, name, Context::cpu(), t);
  model.load_fp8_buffers(state);
  return true;
}

}  // namespace

CheckpointMetadata TrainingRun::Impl::checkpoint_metadata(bool with_optimizer, int64_t step) const {
  CheckpointMetadata meta;
  meta.iteration = iteration;
  meta.consumed_samples = consumed;
  meta.model_config = to_json(config.model);
  meta.parallel_layout = {{"tensor_model_parallel_size", T},
                          {"pipeline_model_parallel_size", P},
                          {"virtual_pipeline_chunks", V},
                          {"pipeline_schedule", schedules::schedule_name(config.parallel.schedule)},
                          {"data_parallel_size", D},
                          {"sequence_parallel", config.parallel.sequence_parallel},
                          {"distributed_optimizer", config.parallel.distributed_optimizer},
                          {"processes", fabric->processes()}};
  // The split is a record only: tensors are stored by global name, so any split loads it.
  const PipelineSplit& split = config.parallel.split;
  if (split.first_stage_layers) meta.parallel_layout["decoder_first_pipeline_num_layers"] = *split.first_stage_layers;
  if (split.last_stage_layers) meta.parallel_layout["decoder_last_pipeline_num_layers"] = *split.last_stage_layers;
  if (split.account_for_embedding) meta.parallel_layout["account_for_embedding_in_pipeline_split"] = true;
  if (split.account_for_loss) meta.parallel_layout["account_for_loss_in_pipeline_split"] = true;
  meta.rng_state = {{"seed", config_seed}};
  nlohmann::json scaler_state = nullptr;
  if (auto* dyn = dynamic_cast<DynamicLossScaler*>(scaler.get())) {
    scaler_state = {{"type", "dynamic"},
                    {"scale", dyn->state().scale},
                    {"growth_tracker", dyn->state().growth_tracker},
                    {"hysteresis_tracker", dyn->state().hysteresis_tracker}};
  } else if (scaler) {
    scaler_state = {{"type", "constant"}, {"scale", scaler->scale()}};
  }
  meta.training_state = {{"optimizer_step", std::max<int64_t>(step, 0)},
                         {"optimizer_saved", with_optimizer},
                         {"loss_scaler", scaler_state}};
  if (config.fp8.enabled) meta.training_state["fp8"] = fp8_record(config.fp8);
  return meta;
}

bool TrainingRun::Impl::saves_state(const StageWorker* w) const {
  // Data-parallel replicas hold the same state, unless the distributed optimizer shards it or
  // expert parallelism splits the experts (the first EP data ranks hold them all).
  return w != nullptr && (w->dp_rank() == 0 || distributed_optimizer() || w->dp_rank() < EP);
}

const Tensor& TrainingRun::Impl::staging_buffer(size_t slot, int64_t numel) {
  if (staging.size() <= slot) staging.resize(slot + 1);
  Tensor& buf = staging[slot];
  if (!buf.defined() || buf.numel() != numel) buf = Tensor::pinned_host(DType::f32, {numel});
  return buf;
}

void TrainingRun::reserve_save_buffers(bool optimizer) {
  Impl& d = *impl_;
  size_t slot = 0;  // the order start_save uses
  for (size_t r = 0; r < d.workers.size(); ++r) {
    if (!d.saves_state(d.workers[r].get())) continue;
    const StageOptimizer& opt = *d.stage_optimizers[r];
    for (int c = 0; c < opt.chunks(); ++c)
      for (const auto& [prefix, src] : checkpoint_parts(opt.optimizer(c), optimizer))
        d.staging_buffer(slot++, src->numel());
  }
}

void TrainingRun::start_save(const std::string& root, const SaveOptions& options) {
  Impl& d = *impl_;
  const HostOpSpan traced(d.trainer, d.epoch, d.iteration, "checkpoint", schedules::EventKind::checkpoint);
  if (!d.failure.empty()) throw Error(str_cat("the run failed earlier: ", d.failure));
  finish_save(/*wait=*/true);  // one save at a time (its pinned buffers are reused)
  const auto t0 = Clock::now();
  auto job = std::make_shared<SaveJob>();
  job->root = root;
  job->iteration = d.iteration;
  if (d.fabric->process() == 0) job->files = options.files;
  int64_t step = -1;
  size_t slot = 0;  // staging buffers, in a fixed order across saves
  for (size_t r = 0; r < d.workers.size(); ++r) {
    const auto& w = d.workers[r];
    if (!d.saves_state(w.get())) continue;
    auto state = std::make_shared<StateCopy>();
    state->writer_id = int(r);
    state->with_moments = options.optimizer;
    state->staging = [&d, &slot](int64_t numel) -> const Tensor& { return d.staging_buffer(slot++, numel); };
    if (w->context().is_cuda()) {
      // The copies run on a side stream, after the last optimizer step, while the next
      // iteration's forward and backward run; the next step waits for them.
      auto& side = d.snapshot_contexts[r];
      if (!side) side = std::make_unique<Context>(Context::cuda(w->context().device_index()));
      state->copier = side.get();
    }
    // The shard owns the state: it copies it between its own messages (a whole number of steps).
    std::string failed;
    (*d.self)
        ->request(d.shards[r], d.config.op_timeout, state_copy_atom::value, state)
        .receive([](bool) {}, [&](caf::error& e) { failed = d.system->render(e); });
    TROUPE_CHECK(failed.empty(), "save_checkpoint: copying the state of ", w->name(), " failed: ", failed);
    TROUPE_CHECK(step < 0 || step == state->step, "save_checkpoint: optimizer steps differ across ranks (", step,
                 " vs ", state->step, ")");
    step = state->step;
    for (ChunkState& s : state->chunks) {
      job->chunks.push_back(std::move(s));
      job->ready.push_back(state->ready);
    }
  }
  Impl::PendingSave pending;
  pending.root = root;
  pending.keep_last = options.keep_last;
  pending.meta = d.checkpoint_metadata(options.optimizer, step);
  pending.done = job->outcome.get_future();
  pending.stall_seconds = seconds_since(t0);
  pending.started = t0;
  if (!d.checkpoint_writer) d.checkpoint_writer = spawn_checkpoint_writer(*d.system);
  caf::anon_send(d.checkpoint_writer, save_atom::value, std::move(job));
  d.pending_save = std::move(pending);
}

std::optional<SavedCheckpoint> TrainingRun::finish_save(bool wait) {
  Impl& d = *impl_;
  if (!d.pending_save) return std::nullopt;
  Impl::PendingSave& p = *d.pending_save;
  bool ready = p.done.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  if (!wait && d.fabric->processes() > 1) {  // every process must have written its part
    std::vector<double> flag = {ready ? 1.0 : 0.0};
    d.fabric->all_reduce(flag, ReduceOp::sum);
    ready = flag[0] == double(d.fabric->processes());
  }
  if (!wait && !ready) return std::nullopt;
  const SaveOutcome mine = p.done.get();
  const std::vector<std::string> parts =
      d.fabric->processes() > 1 ? d.fabric->all_gather(encode(mine)) : std::vector<std::string>{encode(mine)};
  std::string result;  // process 0's verdict: "" or the error
  std::string dir;
  if (d.fabric->process() == 0) {
    try {
      std::vector<std::string> indices;
      for (size_t i = 0; i < parts.size(); ++i) {
        TROUPE_CHECK(parts[i][0] == ' ', "process ", i,
                     " could not write its part of the checkpoint: ", parts[i].substr(1));
        indices.push_back(parts[i].substr(1));
      }
      dir = commit_checkpoint(p.root, p.meta, indices);
      if (p.keep_last > 0) prune_checkpoints(p.root, p.keep_last);
    } catch (const std::exception& e) {
      result = e.what();
    }
  }
  if (d.fabric->processes() > 1) result = d.fabric->all_gather(result)[0];
  SavedCheckpoint saved{
      .dir = (std::filesystem::path(p.root) / checkpoint_iteration_dir_name(p.meta.iteration)).string(),
      .iteration = p.meta.iteration,
      .stall_seconds = p.stall_seconds,
      .write_seconds = mine.seconds,
      .total_seconds = seconds_since(p.started),
      .bytes = mine.bytes};
  d.pending_save.reset();
  TROUPE_CHECK(result.empty(), "saving checkpoint iteration ", saved.iteration, " to '", saved.dir,
               "' failed (the previous checkpoint stays the latest): ", result);
  return saved;
}

SavedCheckpoint TrainingRun::save_checkpoint(const std::string& root, const SaveOptions& options) {
  start_save(root, options);
  return *finish_save(/*wait=*/true);
}

void TrainingRun::load_checkpoint(const std::string& root, const LoadOptions& options) {
  Impl& d = *impl_;
  if (!d.failure.empty()) throw Error(str_cat("the run failed earlier: ", d.failure));
  TROUPE_CHECK(d.iteration == 0, "load_checkpoint: a checkpoint loads into a fresh run; this one has run ", d.iteration,
               " iterations");
  const CheckpointReader r = CheckpointReader::open(root, options.iteration);
  const CheckpointMetadata& meta = r.metadata();
  check_model_config(to_json(d.config.model), meta.model_config, r.dir());
  const bool resume = !options.finetune;
  TROUPE_CHECK(!resume || meta.consumed_samples == d.consumed, "checkpoint '", r.dir(), "' resumes at ",
               meta.consumed_samples, " consumed samples, but the training data loader starts at ", d.consumed,
               " (build it from TrainingRun::read_checkpoint_metadata)");
  const nlohmann::json& ts = meta.training_state;
  const bool with_optimizer = options.optimizer && resume;
  TROUPE_CHECK(!with_optimizer || ts.value("optimizer_saved", false), "checkpoint '", r.dir(),
               "' holds no optimizer state (saved with --no-save-optim): load it with --no-load-optim");
  const int64_t step = with_optimizer ? ts.value("optimizer_step", int64_t(0)) : 0;
  bool fp8_missing = false;

  for (size_t rank = 0; rank < d.workers.size(); ++rank) {
    const auto& w = d.workers[rank];
    if (!w) continue;
    w->context().activate();
    for (int c = 0; c < w->chunks(); ++c) {
      const ParamLayout& layout = w->model(c).layout();
      // Elements the checkpoint does not store (vocabulary padding rows) start from the run's init.
      const Tensor current = to_host_f32(w->context(), w->model(c).params());  // may be padded past layout.size()
      Tensor master = Tensor::host(DType::f32, {layout.size()});
      std::copy_n(current.data_as<float>(), layout.size(), master.data_as<float>());
      Tensor m = Tensor::host(DType::f32, {layout.size()});
      Tensor v = Tensor::host(DType::f32, {layout.size()});
      fill_zero(Context::cpu(), m);
      fill_zero(Context::cpu(), v);
      read_chunk_tensor(r, layout, "", master);
      if (with_optimizer) {
        read_chunk_tensor(r, layout, kExpAvgPrefix, m);
        read_chunk_tensor(r, layout, kExpAvgSqPrefix, v);
      }
      d.stage_optimizers[rank]->optimizer(c).restore(master, m, v, step);
      for (const auto& [name, t] : w->model(c).moe_buffers()) read_whole_tensor(r, name, w->context(), t);
      if (resume && w->model(c).fp8_enabled() && !load_fp8_state(r, ts, d.config.fp8, w->model(c))) fp8_missing = true;
    }
  }
  if (fp8_missing)
    logger("checkpoint")
        .warning("checkpoint '", r.dir(), "' holds no FP8 scaling state for this run's recipe (",
                 fp8_recipe_str(d.config.fp8), "): the FP8 scales start at 1");
  if (!resume) return;  // --finetune: weights only, from iteration 0
  const nlohmann::json scaler = ts.value("loss_scaler", nlohmann::json());
  if (auto* dyn = dynamic_cast<DynamicLossScaler*>(d.scaler.get());
      dyn && scaler.is_object() && scaler.value("type", "") == "dynamic") {
    DynamicLossScaler::State s;
    s.scale = scaler.at("scale").get<float>();
    s.growth_tracker = scaler.at("growth_tracker").get<int64_t>();
    s.hysteresis_tracker = scaler.at("hysteresis_tracker").get<int64_t>();
    dyn->restore(s);
  }
  // The trainer numbers iterations (dropout seeds) and steps the LR schedule: continue from the
  // checkpoint's. The schedule is at the optimizer's successful steps (0 with --no-load-optim: as
  // Megatron, whose scheduler state loads with the optimizer's).
  const uint64_t seed = options.rng ? meta.rng_state.value("seed", d.config_seed) : d.config_seed;
  std::string error;
  (*d.self)
      ->request(d.trainer, d.config.op_timeout, resume_atom::value, meta.iteration, step, seed)
      .receive(
          [&](bool ok) {
            if (!ok) error = "the trainer is busy or failed";
          },
          [&](caf::error& e) { error = d.system->render(e); });
  TROUPE_CHECK(error.empty(), "load_checkpoint: the trainer did not take iteration ", meta.iteration, ": ", error);
  d.iteration = meta.iteration;
  d.config_seed = seed;
}

CheckpointMetadata TrainingRun::read_checkpoint_metadata(const std::string& root, std::optional<int64_t> iteration) {
  return CheckpointReader::open(root, iteration).metadata();
}

}  // namespace troupe::actors
