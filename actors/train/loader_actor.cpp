#include "actors/train/loader_actor.hpp"

#include <optional>

#include "actors/train/messages.hpp"
#include "actors/train/run_error.hpp"
#include "actors/train/training_run.hpp"
#include "base/check.hpp"

namespace troupe::actors {

Batch to_batch(const MicroBatch& mb) {
  Batch b;
  b.tokens = mb.tokens;
  b.targets = Tensor::host(DType::i32, mb.labels.shape());
  const int32_t* labels = mb.labels.data_as<int32_t>();
  const float* mask = mb.loss_mask.data_as<float>();
  int32_t* targets = b.targets.data_as<int32_t>();
  for (int64_t i = 0; i < mb.labels.numel(); ++i) targets[i] = mask[i] != 0.0f ? labels[i] : -1;
  return b;
}

namespace {

class LoaderActor : public loader_actor::base {
 public:
  LoaderActor(caf::actor_config& cfg, LoaderSetup setup) : loader_actor::base(cfg), s_(std::move(setup)) {}

  behavior_type make_behavior() override {
    return {
        [this](batch_atom, int64_t iteration, bool train, int64_t count) -> caf::result<BatchInfo> {
          try {
            if (!train) return feed(iteration, false, fetch(s_.valid.get(), "validation", count));
            BatchList batches;
            if (prefetched_ && int64_t(prefetched_->size()) == count)
              batches = std::move(*prefetched_);
            else
              batches = fetch(s_.train.get(), "training", count);
            prefetched_.reset();
            auto rp = make_response_promise<BatchInfo>();
            rp.deliver(feed(iteration, true, batches));
            try {
              prefetched_ = fetch(s_.train.get(), "training", count);  // while the pipeline runs
            } catch (const Error&) {
              // Out of data: the next request fetches again and reports it.
            }
            return rp;
          } catch (const std::exception& e) {
            return make_run_error(RunError::data, str_cat("data loader: ", e.what()));
          }
        },
    };
  }

  void on_exit() override { s_.feeds.clear(); }

 private:
  static BatchList fetch(DataLoader* loader, const char* which, int64_t count) {
    TROUPE_CHECK(loader != nullptr, "no ", which, " data loader was given");
    BatchList out;
    for (int64_t i = 0; i < count; ++i) {
      std::optional<MicroBatch> mb = loader->next();
      TROUPE_CHECK(mb.has_value(), "the ", which, " data ran out after ", loader->consumed_samples(), " samples (",
                   loader->dataset().size(), " in the dataset)");
      out.push_back(to_batch(*mb));
    }
    return out;
  }

  // Each fed stage its microbatches of the batch; the counts for the trainer.
  BatchInfo feed(int64_t iteration, bool train, const BatchList& batches) {
    const int D = train ? s_.data_parallel : s_.eval_data_parallel;
    for (const LoaderFeed& f : s_.feeds) {
      if (f.dp >= D) continue;  // evaluation runs on the first eval_data_parallel data ranks
      StageData data{iteration, {}, {}};
      for (size_t k = size_t(f.dp); k < batches.size(); k += size_t(D)) {
        if (f.tokens) data.tokens.push_back(batches[k].tokens);
        if (f.targets) data.targets.push_back(batches[k].targets);
      }
      send(f.stage, data_atom::value, std::move(data));
    }
    BatchInfo info{int64_t(batches.size()), 0};
    for (const Batch& b : batches) info.target_tokens += count_targets(b.targets);
    return info;
  }

  LoaderSetup s_;
  std::optional<BatchList> prefetched_;
};

}  // namespace

loader_actor spawn_loader(caf::actor_system& system, LoaderSetup setup, ActorThread mode) {
  TROUPE_CHECK(setup.data_parallel >= 1, "spawn_loader: data-parallel size ", setup.data_parallel);
  if (mode == ActorThread::scheduled) return system.spawn<LoaderActor>(std::move(setup));
  return system.spawn<LoaderActor, caf::detached>(std::move(setup));
}

}  // namespace troupe::actors
