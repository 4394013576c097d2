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
  LoaderActor(caf::actor_config& cfg, std::unique_ptr<DataLoader> train, std::unique_ptr<DataLoader> valid)
      : loader_actor::base(cfg), train_(std::move(train)), valid_(std::move(valid)) {}

  behavior_type make_behavior() override {
    return {
        [this](batch_atom, bool train, int64_t count) -> caf::result<BatchList> {
          try {
            if (!train) return fetch(valid_.get(), "validation", count);
            BatchList batches;
            if (prefetched_ && int64_t(prefetched_->size()) == count)
              batches = std::move(*prefetched_);
            else
              batches = fetch(train_.get(), "training", count);
            prefetched_.reset();
            auto rp = make_response_promise<BatchList>();
            rp.deliver(std::move(batches));
            try {
              prefetched_ = fetch(train_.get(), "training", count);  // while the pipeline runs
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

  std::unique_ptr<DataLoader> train_, valid_;
  std::optional<BatchList> prefetched_;
};

}  // namespace

loader_actor spawn_loader(caf::actor_system& system, std::unique_ptr<DataLoader> train,
                          std::unique_ptr<DataLoader> valid, SpawnMode mode) {
  if (mode == SpawnMode::scheduled) return system.spawn<LoaderActor>(std::move(train), std::move(valid));
  return system.spawn<LoaderActor, caf::detached>(std::move(train), std::move(valid));
}

}  // namespace troupe::actors
