#include "actors/train/grad_reducer_actor.hpp"

#include "actors/fabric/device_services.hpp"
#include "actors/actor_error.hpp"
#include "actors/train/messages.hpp"
#include "actors/train/run_error.hpp"
#include "actors/train/stage_optimizer.hpp"
#include "kernels/nvtx.hpp"
#include "base/check.hpp"

namespace troupe::actors {

namespace {

class GradReducerActor : public grad_reducer_actor::base {
 public:
  GradReducerActor(caf::actor_config& cfg, GradReducerSetup setup)
      : grad_reducer_actor::base(cfg), s_(std::move(setup)) {}

  behavior_type make_behavior() override {
    // A failed collective (or a bucket handed over twice) ends the reducer with the error's
    // text, which its monitors report ("the gradient reducer of stage 1 stopped: ...").
    set_exception_handler([](caf::scheduled_actor*, std::exception_ptr& eptr) -> caf::error {
      const std::string what = exception_text(eptr);
      return make_run_error(RunError::reduction, what);
    });
    return {
        [this](bucket_atom, const BucketReady& r) { on_ready(r); },
    };
  }

 private:
  void on_ready(const BucketReady& r) {
    const std::vector<GradBucket>& buckets = s_.worker->buckets();
    if (r.iteration != iteration_) {  // the first bucket of a new iteration
      iteration_ = r.iteration;
      fences_.assign(buckets.size(), nullptr);
      ready_.assign(buckets.size(), 0);
      next_ = 0;
    }
    TROUPE_CHECK(r.bucket >= 0 && size_t(r.bucket) < buckets.size() && !ready_[size_t(r.bucket)],
                 "gradient reducer: bucket ", r.bucket, " of ", buckets.size(), " handed over twice or unknown");
    ready_[size_t(r.bucket)] = 1;
    fences_[size_t(r.bucket)] = r.fence;
    s_.comm->activate();
    while (next_ < buckets.size() && ready_[next_]) {
      const GradBucket& b = buckets[next_];
      const NvtxRange range("reduce bucket ", next_);
      fence_wait(*s_.comm, fences_[next_]);
      fences_[next_].reset();
      reduce_bucket(*s_.comm, *s_.worker, b, s_.group);
      ++next_;
    }
    if (next_ == buckets.size())
      send(s_.listener, reduced_atom::value, BucketsReduced{iteration_, fence_record(*s_.comm)});
  }

  GradReducerSetup s_;
  int64_t iteration_ = -1;
  std::vector<std::shared_ptr<void>> fences_;
  std::vector<char> ready_;
  size_t next_ = 0;
};

}  // namespace

grad_reducer_actor spawn_grad_reducer(caf::actor_system& system, GradReducerSetup setup, ActorThread mode) {
  if (mode == ActorThread::scheduled) return system.spawn<GradReducerActor>(std::move(setup));
  // Detached: a CPU collective blocks its thread until every data rank has arrived.
  return system.spawn<GradReducerActor, caf::detached>(std::move(setup));
}

}  // namespace troupe::actors
