// TrainingRun::save_checkpoint / load_checkpoint: synchronous, between iterations, when no
// stage actor touches its chunks. Tensors are keyed by global parameter name, so the
// pipeline layout of the saving run does not matter to the loading one.
#include <caf/all.hpp>

#include <algorithm>
#include <memory>
#include <set>

#include "actors/fabric.hpp"
#include "actors/training_run_impl.hpp"
#include "kernels/check.hpp"
#include "storage/checkpoint_reader.hpp"
#include "storage/checkpoint_writer.hpp"

namespace troupe::actors {

namespace {

const std::string kExpAvg = "optimizer.exp_avg.";
const std::string kExpAvgSq = "optimizer.exp_avg_sq.";

// Throws naming the first field where the checkpoint's model differs from the run's.
void check_model_config(const nlohmann::json& run, const nlohmann::json& ckpt, const std::string& dir) {
  TROUPE_CHECK(ckpt.is_object(), "checkpoint '", dir, "': model_config is not an object");
  for (const auto& [key, value] : run.items()) {
    TROUPE_CHECK(ckpt.contains(key), "checkpoint '", dir, "' was saved for a different model: its model_config has no '",
                 key, "' (this run: ", value.dump(), ")");
    TROUPE_CHECK(ckpt.at(key) == value, "checkpoint '", dir, "' was saved for a different model: model_config.", key,
                 " is ", ckpt.at(key).dump(), " in the checkpoint, ", value.dump(), " in this run");
  }
  for (const auto& [key, value] : ckpt.items()) {
    TROUPE_CHECK(run.contains(key), "checkpoint '", dir, "' was saved for a different model: its model_config has '",
                 key, "' = ", value.dump(), ", unknown to this run");
  }
}

// Copies tensor `name` (f32, `shape`) of the checkpoint into `flat` at `offset`.
void read_into(const CheckpointReader& r, const std::string& name, const Shape& shape, Tensor& flat, int64_t offset) {
  const Tensor t = r.expect(name, shape);
  TROUPE_CHECK(t.dtype() == DType::f32, "checkpoint '", r.dir(), "': tensor '", name, "' is ", dtype_name(t.dtype()),
               ", expected f32");
  std::copy_n(t.data_as<float>(), t.numel(), flat.data_as<float>() + offset);
}

}  // namespace

std::string TrainingRun::save_checkpoint(const std::string& root, bool optimizer) {
  Impl& d = *impl_;
  const HostOpSpan traced(d.trainer, d.epoch, d.iteration, "checkpoint", schedules::EventKind::checkpoint);
  if (!d.failure.empty()) throw Error(str_cat("the run failed earlier: ", d.failure));
  TROUPE_CHECK(d.fabric->processes() == 1, "checkpoints of runs over several processes are not implemented yet");
  TROUPE_CHECK(d.T == 1 && !(d.config.parallel.distributed_optimizer && d.D > 1),
               "checkpoints of tensor-parallel runs and of the distributed optimizer are not implemented yet "
               "(--tensor-model-parallel-size ", d.T, ", --use-distributed-optimizer)");
  CheckpointWriter writer(root, d.iteration);
  std::set<std::string> written;  // a tied embedding lives on two stages: written once
  int64_t step = -1;
  for (const auto& w : d.workers) {
    if (w->dp_rank() != 0) continue;  // data-parallel replicas hold the same state
    w->context().activate();
    for (int c = 0; c < w->chunks(); ++c) {
      Optimizer& opt = w->optimizer(c);
      TROUPE_CHECK(step < 0 || step == opt.iteration(), "save_checkpoint: optimizer steps differ across chunks (",
                   step, " vs ", opt.iteration(), ")");
      step = opt.iteration();
      const ParamLayout& layout = w->model(c).layout();
      // Host copies; the copy waits for the stage's stream (its last optimizer step included).
      const Tensor master = to_host_f32(w->context(), opt.master());
      const Tensor m = optimizer ? to_host_f32(w->context(), opt.exp_avg()) : Tensor();
      const Tensor v = optimizer ? to_host_f32(w->context(), opt.exp_avg_sq()) : Tensor();
      for (const ParamInfo& p : layout.params()) {
        if (!written.insert(p.name).second) continue;
        const ShardSlice whole = ShardSlice::whole(p.shape);
        writer.add_shard(w->stage(), p.name, p.shape, whole, layout.view(master, p.name));
        if (!optimizer) continue;
        writer.add_shard(w->stage(), kExpAvg + p.name, p.shape, whole, layout.view(m, p.name));
        writer.add_shard(w->stage(), kExpAvgSq + p.name, p.shape, whole, layout.view(v, p.name));
      }
    }
  }
  CheckpointMetadata meta;
  meta.iteration = d.iteration;
  meta.consumed_samples = d.consumed;
  meta.model_config = to_json(d.config.model);
  meta.parallel_layout = {{"pipeline_model_parallel_size", d.P},
                          {"virtual_pipeline_chunks", d.V},
                          {"pipeline_schedule", schedules::schedule_name(d.config.parallel.schedule)},
                          {"tensor_model_parallel_size", d.T},
                          {"data_parallel_size", d.D}};
  meta.rng_state = {{"seed", d.config.seed}};
  nlohmann::json scaler = nullptr;
  if (auto* dyn = dynamic_cast<DynamicLossScaler*>(d.scaler.get())) {
    scaler = {{"type", "dynamic"},
              {"scale", dyn->state().scale},
              {"growth_tracker", dyn->state().growth_tracker},
              {"hysteresis_tracker", dyn->state().hysteresis_tracker}};
  } else if (d.scaler) {
    scaler = {{"type", "constant"}, {"scale", d.scaler->scale()}};
  }
  meta.training_state = {{"optimizer_step", std::max<int64_t>(step, 0)}, {"optimizer_saved", optimizer},
                         {"loss_scaler", scaler}};
  return writer.commit(meta);
}

void TrainingRun::load_checkpoint(const std::string& root, bool optimizer) {
  Impl& d = *impl_;
  if (!d.failure.empty()) throw Error(str_cat("the run failed earlier: ", d.failure));
  TROUPE_CHECK(d.iteration == 0, "load_checkpoint: a checkpoint loads into a fresh run; this one has run ",
               d.iteration, " iterations");
  TROUPE_CHECK(d.fabric->processes() == 1, "loading checkpoints into runs over several processes is not implemented yet");
  TROUPE_CHECK(d.T == 1 && !(d.config.parallel.distributed_optimizer && d.D > 1),
               "loading checkpoints into tensor-parallel runs or the distributed optimizer is not implemented yet "
               "(--tensor-model-parallel-size ", d.T, ", --use-distributed-optimizer)");
  const CheckpointReader r = CheckpointReader::open(root);
  const CheckpointMetadata& meta = r.metadata();
  check_model_config(to_json(d.config.model), meta.model_config, r.dir());
  TROUPE_CHECK(meta.consumed_samples == d.consumed, "checkpoint '", r.dir(), "' resumes at ", meta.consumed_samples,
               " consumed samples, but the training data loader starts at ", d.consumed,
               " (build it from TrainingRun::read_checkpoint_metadata)");
  const nlohmann::json& ts = meta.training_state;
  const bool saved_optim = ts.value("optimizer_saved", false);
  TROUPE_CHECK(!optimizer || saved_optim, "checkpoint '", r.dir(),
               "' holds no optimizer state (saved with --no-save-optim): load it with --no-load-optim");
  const int64_t step = optimizer ? ts.value("optimizer_step", int64_t(0)) : 0;

  for (const auto& w : d.workers) {
    w->context().activate();
    for (int c = 0; c < w->chunks(); ++c) {
      const ParamLayout& layout = w->model(c).layout();
      Tensor master = Tensor::host(DType::f32, {layout.size()});
      Tensor m = Tensor::host(DType::f32, {layout.size()});
      Tensor v = Tensor::host(DType::f32, {layout.size()});
      fill_zero(Context::cpu(), m);
      fill_zero(Context::cpu(), v);
      for (const ParamInfo& p : layout.params()) {
        read_into(r, p.name, p.shape, master, p.offset);
        if (!optimizer) continue;
        read_into(r, kExpAvg + p.name, p.shape, m, p.offset);
        read_into(r, kExpAvgSq + p.name, p.shape, v, p.offset);
      }
      w->optimizer(c).restore(master, m, v, step);
    }
  }
  const nlohmann::json scaler = ts.value("loss_scaler", nlohmann::json());
  if (auto* dyn = dynamic_cast<DynamicLossScaler*>(d.scaler.get()); dyn && scaler.is_object() &&
                                                                     scaler.value("type", "") == "dynamic") {
    DynamicLossScaler::State s;
    s.scale = scaler.at("scale").get<float>();
    s.growth_tracker = scaler.at("growth_tracker").get<int64_t>();
    s.hysteresis_tracker = scaler.at("hysteresis_tracker").get<int64_t>();
    dyn->restore(s);
  }

  // The trainer numbers iterations (LR schedule, dropout seeds): continue from the checkpoint's.
  std::string error;
  (*d.self)
      ->request(d.trainer, d.config.op_timeout, resume_atom::value, meta.iteration)
      .receive([&](bool ok) { if (!ok) error = "the trainer is busy or failed"; },
               [&](caf::error& e) { error = d.system->render(e); });
  TROUPE_CHECK(error.empty(), "load_checkpoint: the trainer did not take iteration ", meta.iteration, ": ", error);
  d.iteration = meta.iteration;
}

CheckpointMetadata TrainingRun::read_checkpoint_metadata(const std::string& root) {
  return CheckpointReader::open(root).metadata();
}

}  // namespace troupe::actors
