#include "actors/train/stage_actor.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "actors/actor_error.hpp"
#include "actors/train/messages.hpp"
#include "actors/train/run_error.hpp"
#include "actors/train/slow_device_hook.hpp"
#include "base/check.hpp"

namespace troupe::actors {

using schedules::Op;
using schedules::OpKind;

namespace {

int64_t ns_since(std::chrono::steady_clock::time_point epoch) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - epoch).count();
}

// A traced span kind as its trace event kind (weight_gradient spans are summed, not traced).
schedules::EventKind span_event_kind(SpanKind kind) {
  switch (kind) {
    case SpanKind::moe_dispatch:
      return schedules::EventKind::moe_dispatch;
    case SpanKind::moe_combine:
      return schedules::EventKind::moe_combine;
    case SpanKind::moe_overlap:
      return schedules::EventKind::moe_overlap;
    case SpanKind::layer:
      return schedules::EventKind::layer;
    case SpanKind::weight_gradient:
      break;
  }
  return schedules::EventKind::other;
}

const char* op_name(OpKind kind) {
  switch (kind) {
    case OpKind::forward:
      return "forward";
    case OpKind::backward:
      return "backward";
    case OpKind::backward_input:
      return "backward_input (B)";
    case OpKind::backward_weight:
      return "backward_weight (W)";
  }
  return "?";
}

std::string describe(const std::string& stage, const Op& op, const std::string& what) {
  return str_cat(stage, " failed in ", op_name(op.kind), " of microbatch ", op.microbatch, " (chunk ", op.chunk,
                 "): ", what);
}

class StageActor : public stage_actor::base {
 public:
  StageActor(caf::actor_config& cfg, std::shared_ptr<StageWorker> worker, StageOptions options)
      : stage_actor::base(cfg), worker_(std::move(worker)), options_(std::move(options)) {}

  behavior_type make_behavior() override {
    set_exception_handler([this](caf::scheduled_actor*, std::exception_ptr& eptr) -> caf::error {
      const std::string what = exception_text(eptr);
      caf::error error = make_run_error(RunError::stage_failed, str_cat(worker_->name(), " failed: ", what));
      if (trainer_) send(trainer_, fail_atom::value, error);
      return error;
    });
    return {
        [this](peers_atom, stage_listener& trainer, std::vector<stage_peer_actor>& peers,
               std::vector<stage_peer_actor>& followers) {
          trainer_ = std::move(trainer);
          peers_ = std::move(peers);
          followers_ = std::move(followers);
        },
        // A follower runs its ops in the order its leader chose (RankLayout::order_group).
        [this](order_atom, int64_t iteration, int kind, int microbatch, int chunk) {
          const Op op{OpKind(kind), microbatch, chunk};  // int(OpKind), from run_op
          if (failed_) return;
          if (!active_ || iteration != worker_->iteration()) {
            early_orders_.emplace_back(iteration, op);
            return;
          }
          orders_.push_back(op);
          if (in_flight_ < options_.max_outstanding) schedule_pump();
        },
        [this](plan_atom, IterationPlan& plan) { on_plan(std::move(plan)); },
        [this](data_atom, StageData& data) { on_data(std::move(data)); },
        [this](parcel_atom, TensorMessage& msg) { on_parcel(msg); },
        // From a stage in another process: the tensor comes over the channel.
        [this](parcel_atom, const RemoteParcel& r) {
          TensorMessage msg{r.iteration, Direction(r.direction), r.microbatch, r.chunk, {}};
          msg.parcel.shape = r.shape;
          msg.parcel.dtype = DType(r.dtype);
          on_parcel(msg);
        },
        [this](pump_atom) {
          pump_pending_ = false;
          pump();
        },
        [this](done_atom, uint64_t id, int64_t start_ns, int64_t end_ns, const std::vector<int64_t>& spans) {
          on_done(id, start_ns, end_ns, spans);
        },
        [this](tied_atom) {
          // The tied sum is enqueued (NCCL) or done (one device). Wait for it off this thread:
          // a peer that fails before joining the reduction must not block the actor.
          if (failed_) return;
          worker_->context().activate();
          worker_->completions().op_end(
              [self = stage_actor{this}](OpTimes) { caf::anon_send(self, stats_atom::value); });
        },
        [this](stats_atom) { after_tied(); },
    };
  }

  // Handles between actors form cycles (peers, trainer); a detached actor's thread ends only
  // once its object is destroyed, so drop them when the actor terminates.
  void on_exit() override {
    peers_.clear();
    followers_.clear();
    trainer_ = nullptr;
    stash_.clear();
    data_.clear();
    waiting_plan_.reset();
  }

 private:
  int stage() const { return worker_->stage(); }
  const std::string& stage_name() const { return name_; }
  bool follower() const { return options_.follower; }

  // Runs fn; on an exception the stage fails naming `what`. Returns false then.
  template <typename F>
  bool guarded(const char* what, F&& fn) {
    try {
      fn();
      return true;
    } catch (const StageOpError& e) {
      fail(describe(stage_name(), e.op(), e.what()));
    } catch (const std::exception& e) {
      fail(str_cat(stage_name(), " failed in ", what, ": ", e.what()));
    }
    return false;
  }

  void fail(const std::string& text) {
    if (failed_) return;
    failed_ = true;
    const caf::error error = make_run_error(RunError::stage_failed, text);
    if (trainer_) send(trainer_, fail_atom::value, error);
    quit(error);
  }

  // The first and last stage take data from the loader, which may come before or after the plan.
  bool takes_data() const { return worker_->first_virtual(0) || worker_->last_virtual(worker_->chunks() - 1); }

  void on_plan(IterationPlan plan) {
    if (failed_) return;
    if (takes_data()) {
      const auto it = data_.find(plan.iteration);
      if (it == data_.end()) {
        waiting_plan_ = std::move(plan);
        return;
      }
      plan.tokens = std::move(it->second.tokens);
      plan.targets = std::move(it->second.targets);
      data_.erase(it);
    }
    start(std::move(plan));
  }

  void on_data(StageData data) {
    if (failed_) return;
    const int64_t iteration = data.iteration;
    data_[iteration] = std::move(data);
    if (waiting_plan_ && waiting_plan_->iteration == iteration) on_plan(*std::exchange(waiting_plan_, std::nullopt));
  }

  void start(IterationPlan plan) {
    if (failed_) return;
    const bool ok = guarded("starting an iteration", [&] {
      TROUPE_CHECK(!active_, "an iteration started while iteration ", worker_->iteration(), " is running");
      worker_->context().activate();
      const int M = plan.microbatches;
      worker_->begin(std::move(plan));
      if (worker_->training()) {
        const schedules::PipelineShape shape{worker_->stages(), worker_->chunks(), M, options_.group_size};
        if (!policy_ || policy_->shape().microbatches != M)
          policy_.emplace(options_.schedule, shape, stage());
        else
          policy_->reset();
      } else {
        eval_order_.clear();
        for (int m = 0; m < M; ++m)
          for (int c = 0; c < worker_->chunks(); ++c) eval_order_.push_back({OpKind::forward, m, c});
        eval_next_ = 0;
      }
      active_ = true;
      in_flight_ = 0;
      ops_run_ = 0;
      // Training: a forward and a backward per (microbatch, chunk), or zb-h1's forward, B and W.
      const int ops_per_forward = schedules::splits_backward(options_.schedule) ? 3 : 2;
      ops_total_ = worker_->training() ? ops_per_forward * M * worker_->chunks() : M * worker_->chunks();
      orders_.clear();
      std::vector<std::pair<int64_t, Op>> orders;
      orders.swap(early_orders_);
      for (const auto& [iteration, op] : orders) {
        if (iteration == worker_->iteration())
          orders_.push_back(op);
        else
          early_orders_.emplace_back(iteration, op);
      }
      std::vector<TensorMessage> early;
      early.swap(stash_);
      for (TensorMessage& msg : early) {
        TROUPE_CHECK(msg.iteration == worker_->iteration(), "a parcel of iteration ", msg.iteration,
                     " during iteration ", worker_->iteration());
        worker_->accept(msg.direction, msg.microbatch, msg.chunk, msg.parcel);
      }
    });
    if (ok) pump();
  }

  void on_parcel(TensorMessage& msg) {
    if (failed_) return;
    if (!active_ || msg.iteration != worker_->iteration()) {
      stash_.push_back(std::move(msg));  // an early parcel of the next iteration: keep its order
      return;
    }
    const Op op{msg.direction == Direction::activation ? OpKind::forward : OpKind::backward, msg.microbatch, msg.chunk};
    try {
      worker_->accept(msg.direction, msg.microbatch, msg.chunk, msg.parcel);
    } catch (const std::exception& e) {
      fail(describe(stage_name(), op,
                    str_cat("receiving its ", msg.direction == Direction::activation ? "input" : "output gradient",
                            ": ", e.what())));
      return;
    }
    if (in_flight_ < options_.max_outstanding) schedule_pump();
  }

  // Next decision: at once, or (fixed op durations) after a settle delay.
  void schedule_pump() {
    if (options_.fixed_op_duration.count() == 0) {
      pump();
      return;
    }
    if (pump_pending_) return;
    pump_pending_ = true;
    delayed_send(this, options_.fixed_op_duration / 3, pump_atom::value);
  }

  std::optional<Op> next_op() {
    if (follower()) {
      if (orders_.empty() || !worker_->ready(orders_.front())) return std::nullopt;
      const Op op = orders_.front();
      orders_.pop_front();
      return op;
    }
    if (worker_->training()) return policy_->next([this](const Op& op) { return worker_->ready(op); });
    for (size_t i = eval_next_; i < eval_order_.size(); ++i) {
      if (!worker_->ready(eval_order_[i])) continue;
      std::swap(eval_order_[i], eval_order_[eval_next_]);
      return eval_order_[eval_next_++];
    }
    return std::nullopt;
  }

  bool all_handed_out() const {
    if (follower()) return ops_run_ == ops_total_;
    return worker_->training() ? policy_->done() : eval_next_ == eval_order_.size();
  }

  void pump() {
    if (failed_ || !active_) return;
    while (in_flight_ < options_.max_outstanding) {
      const std::optional<Op> op = next_op();
      if (!op) break;
      run_op(*op);
      if (failed_) return;
    }
    if (in_flight_ == 0 && all_handed_out()) finish_iteration();
  }

  void run_op(const Op& op) {
    const uint64_t id = next_id_++;
    Running& r = running_[id];
    r.op = op;
    ++ops_run_;
    for (const stage_peer_actor& f : followers_)
      send(f, order_atom::value, worker_->iteration(), int(op.kind), op.microbatch, op.chunk);
    try {
      const Context& ctx = worker_->context();
      ctx.activate();
      const StageWorker::LaneScope lane(*worker_, op);  // two lanes: everything below on the op's
      const auto t0 = std::chrono::steady_clock::now();
      r.start_ns = ns_since(options_.epoch);
      send(trainer_, progress_atom::value, event(op, r.start_ns, 0, 0));  // the watchdog's "running"
      if (options_.before_op) options_.before_op(stage(), op);
      // The device waits for the op's input right here, before the op's start is taken.
      r.input = worker_->await_inputs(op);
      CompletionQueue& completions = worker_->completions();
      completions.op_begin();
      std::optional<Outbound> out = worker_->run(op);
      // Test hooks (TROUPE_SLOW_DEVICE, TROUPE_OP_SLEEP); 0 normally.
      std::this_thread::sleep_for(injected_op_delay(*worker_) + injected_op_sleep(*worker_, op));
      for (ReadyBucket& b : worker_->take_ready_buckets())
        send(options_.reducer, bucket_atom::value, BucketReady{worker_->iteration(), b.bucket, std::move(b.fence)});
      if (options_.fixed_op_duration.count() > 0) std::this_thread::sleep_until(t0 + options_.fixed_op_duration);
      ++in_flight_;
      // On a GPU the times are the device's (start: when the stream reached the op). Taken before
      // the output goes out: on a CPU the end is now, and the receiver may start (and this
      // thread be descheduled) as soon as the parcel arrives, which would end the op late.
      // Across processes the parcel's notice goes out from the completion thread once the op has
      // finished on the device: the receiver launches its NCCL receive when the notice comes, and
      // a receive launched while the producing op still runs spins on the receiver's SMs all that
      // time, slowing its compute (measured: 20-30% per op, two H100s, a process each). Sent from
      // there, not from on_done, it does not wait for this actor to finish enqueuing its next op.
      // One thread sends every notice of this stage, in completion (= enqueue) order.
      const stage_peer_actor* peer = out ? &peers_.at(size_t(out->stage)) : nullptr;
      std::optional<RemoteParcel> notice;
      if (peer != nullptr && peer->node() != node())
        notice = RemoteParcel{worker_->iteration(), int32_t(out->direction), out->microbatch,
                              out->chunk,           out->parcel.shape,       int32_t(out->parcel.dtype)};
      const bool noticed = notice.has_value();  // read before the callback takes the notice
      const stage_peer_actor remote = noticed ? *peer : stage_peer_actor{};
      completions.op_end([self = stage_actor{this}, id, notice = std::move(notice), remote](const OpTimes& t) {
        if (notice) caf::anon_send(remote, parcel_atom::value, *notice);
        std::vector<int64_t> spans;
        for (const MarkedSpan& s : t.spans) spans.insert(spans.end(), {int64_t(s.kind), s.start_ns, s.end_ns});
        caf::anon_send(self, done_atom::value, id, t.start_ns, t.end_ns, std::move(spans));
      });
      if (out) {
        r.bytes = out->parcel.bytes();
        if (!noticed)
          send(
              *peer, parcel_atom::value,
              TensorMessage{worker_->iteration(), out->direction, out->microbatch, out->chunk, std::move(out->parcel)});
      }
    } catch (const StageOpError& e) {
      fail(describe(stage_name(), e.op(), e.what()));
    } catch (const std::exception& e) {
      fail(describe(stage_name(), op, e.what()));
    }
  }

  schedules::TraceEvent event(const Op& op, int64_t start_ns, int64_t end_ns, int64_t bytes) const {
    schedules::TraceEvent e;
    e.actor = str_cat("stage", stage());
    e.device = options_.device;
    e.stage = stage();
    e.kind = schedules::event_kind(op.kind);
    e.microbatch = op.microbatch;
    e.chunk = op.chunk;
    e.iteration = worker_->iteration();
    e.start_ns = start_ns;
    e.end_ns = end_ns;
    e.bytes = bytes;
    return e;
  }

  void on_done(uint64_t id, int64_t start_ns, int64_t end_ns, const std::vector<int64_t>& spans) {
    if (failed_) return;
    const auto it = running_.find(id);
    if (it == running_.end()) return;
    Running r = std::move(it->second);
    if (start_ns > 0) r.start_ns = start_ns;
    if (end_ns <= 0) end_ns = ns_since(options_.epoch);
    running_.erase(it);
    --in_flight_;
    if (r.input.timing) {
      // The transfer of the op's input as the receiving device saw it: from the producing op's
      // end (the receive waits for it) to the data being in place.
      const OpTimes t = worker_->completions().transfer_times(r.input.timing);
      if (t.start_ns > 0 && t.end_ns > 0) {
        schedules::TraceEvent e = event(r.op, t.start_ns, std::max(t.end_ns, t.start_ns + 1), r.input.bytes);
        e.actor = str_cat("stage", stage(), ".recv");
        e.kind = schedules::EventKind::recv;
        send(trainer_, progress_atom::value, e);
      }
    }
    // Spans marked inside the op (kernels/stream_spans.hpp): (kind, start, end) triples. A fused
    // backward's weight-gradient spans add up to its weight_ns; the others are traced.
    int64_t weight_ns = 0;
    bool weight_marked = false;
    for (size_t i = 0; i + 2 < spans.size(); i += 3) {
      if (SpanKind(spans[i]) == SpanKind::weight_gradient) {
        weight_ns += spans[i + 2] - spans[i + 1];
        weight_marked = true;
        continue;
      }
      schedules::TraceEvent e = event(r.op, spans[i + 1], spans[i + 2], 0);
      e.kind = span_event_kind(SpanKind(spans[i]));
      // All-to-alls on their own track beside the op (chrome-trace export); the rest nest in it.
      if (e.kind == schedules::EventKind::moe_dispatch || e.kind == schedules::EventKind::moe_combine)
        e.actor = str_cat("stage", stage(), ".comm");
      send(trainer_, progress_atom::value, e);
    }
    schedules::TraceEvent finished = event(r.op, r.start_ns, std::max(end_ns, r.start_ns + 1), r.bytes);
    if (weight_marked) finished.weight_ns = std::clamp<int64_t>(weight_ns, 0, finished.end_ns - finished.start_ns);
    send(trainer_, progress_atom::value, finished);
    if (options_.fixed_op_duration.count() > 0 && !all_handed_out())
      schedule_pump();
    else
      pump();
  }

  // Every op has finished. Evaluation: report the loss. Training: first the tied embedding's
  // copies are summed (tied_atom, stats_atom); then the gradients go to the optimizer shard
  // (and the buckets not reduced yet to the reducer) and the loss to the trainer.
  void finish_iteration() {
    Op last_forward{OpKind::forward, worker_->microbatches() - 1, worker_->chunks() - 1};
    try {
      loss_sum_ = worker_->finish();
    } catch (const StageOpError& e) {
      fail(describe(stage_name(), e.op(), e.what()));
      return;
    } catch (const std::exception& e) {
      fail(describe(stage_name(), last_forward, e.what()));
      return;
    }
    active_ = false;
    if (!worker_->training()) {
      report();
      return;
    }
    if (!worker_->has_tied()) {
      after_tied();
      return;
    }
    guarded("the tied-embedding gradient reduction", [&] {
      worker_->context().activate();
      worker_->reduce_tied([self = stage_actor{this}] { caf::anon_send(self, tied_atom::value); });
    });
  }

  // The tied copies are summed (enqueued). With a gradient reducer, the buckets it has not had
  // yet go to it now (it tells the optimizer shard when they are all under way); the shard
  // takes over the gradients, and this stage is idle until its next plan.
  void after_tied() {
    if (failed_) return;
    if (options_.reducer && !worker_->buckets().empty() &&
        !guarded("handing the last gradient buckets to the reducer", [&] {
          worker_->context().activate();
          for (ReadyBucket& b : worker_->take_remaining_buckets())
            send(options_.reducer, bucket_atom::value, BucketReady{worker_->iteration(), b.bucket, std::move(b.fence)});
        }))
      return;
    send(options_.optimizer_shard, grads_atom::value,
         GradsReady{worker_->iteration(), worker_->local_step(), worker_->lr(), worker_->loss_scale()});
    report();
  }

  void report() {
    StageReport r{.stage = stage(), .iteration = worker_->iteration(), .loss_sum = loss_sum_};
    r.tp = worker_->tp_rank();
    r.dp = worker_->dp_rank();
    // Every tensor rank routes the same tokens, and every context rank holds the statistics of
    // its group's (model/moe/router.hpp): tensor and context rank 0 report the MoE statistics.
    const bool reports_moe = r.tp == 0 && worker_->model(0).context_parallel().rank == 0;
    for (int c = 0; c < worker_->chunks() && worker_->training(); ++c) {
      std::vector<MoeLayerStats> moe = worker_->model(c).take_moe_stats();
      if (reports_moe) r.moe.insert(r.moe.end(), moe.begin(), moe.end());
    }
    send(trainer_, report_atom::value, r);
  }

  struct Running {
    Op op;
    int64_t start_ns = 0;
    int64_t bytes = 0;
    StageWorker::InputTransfer input;
  };

  std::shared_ptr<StageWorker> worker_;
  StageOptions options_;
  std::vector<stage_peer_actor> peers_;      // the stage actors of this (data rank, tensor rank) pipeline
  std::vector<stage_peer_actor> followers_;  // the rest of this rank's order group (leader only)
  std::string name_ = worker_->name();
  std::deque<Op> orders_;                             // follower: the leader's ops not yet run
  std::vector<std::pair<int64_t, Op>> early_orders_;  // follower: orders of an iteration not started yet
  int ops_run_ = 0, ops_total_ = 0;
  stage_listener trainer_;
  std::optional<schedules::StagePolicy> policy_;
  std::vector<Op> eval_order_;
  size_t eval_next_ = 0;
  std::vector<TensorMessage> stash_;
  std::map<uint64_t, Running> running_;
  uint64_t next_id_ = 0;
  int in_flight_ = 0;
  bool active_ = false;
  bool pump_pending_ = false;
  bool failed_ = false;
  double loss_sum_ = 0;                        // of the iteration being reported
  std::map<int64_t, StageData> data_;          // from the loader, by plan (the next iteration's may come early)
  std::optional<IterationPlan> waiting_plan_;  // a plan whose data has not come yet
};

}  // namespace

stage_actor spawn_stage(caf::actor_system& system, std::shared_ptr<StageWorker> worker, StageOptions options,
                        ActorThread mode) {
  if (mode == ActorThread::scheduled) return system.spawn<StageActor>(std::move(worker), std::move(options));
  return system.spawn<StageActor, caf::detached>(std::move(worker), std::move(options));
}

}  // namespace troupe::actors
