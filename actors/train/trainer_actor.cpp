#include "actors/train/trainer_actor.hpp"

#include <algorithm>
#include <map>
#include <optional>

#include "actors/fabric/fabric.hpp"
#include "actors/train/messages.hpp"
#include "actors/train/run_error.hpp"
#include "actors/monitor/trace_forwarding.hpp"
#include "base/check.hpp"

namespace troupe::actors {

using Clock = std::chrono::steady_clock;

namespace {

class TrainerActor : public trainer_actor::base {
 public:
  TrainerActor(caf::actor_config& cfg, TrainerSetup setup) : trainer_actor::base(cfg), s_(std::move(setup)) {}

  behavior_type make_behavior() override {
    TROUPE_CHECK(size_t(s_.layout.world()) == s_.stages.size(), "trainer: ", s_.stages.size(),
                 " stage actors for a layout of ", s_.layout.world(), " ranks");
    P_ = s_.layout.pipeline;
    D_ = s_.layout.data;
    if (s_.local_count == 0) s_.local_count = s_.stages.size();
    for (size_t i = 0; i < s_.stages.size(); ++i) {
      const stage_actor& a = s_.stages[i];
      index_[a.address()] = i;
      monitor(a);  // also the other processes' stages: their process dying fails the run here
      if (!local(i)) continue;
      std::vector<stage_peer_actor> pipeline, followers;
      for (int p : s_.layout.pipeline_group(int(i))) pipeline.push_back(s_.stages[size_t(p)]);
      // The ranks whose collectives pair up inside ops (tensor, context, expert groups) run one
      // op order: the first of them leads (StageOptions::follower).
      const std::vector<int> order = s_.layout.order_group(int(i));
      if (size_t(order.front()) == i)
        for (int t : order)
          if (size_t(t) != i) followers.push_back(s_.stages[size_t(t)]);
      send(a, peers_atom::value, stage_listener{this}, std::move(pipeline), std::move(followers));
    }
    for (const grad_reducer_actor& a : s_.reducers) monitor(a);
    for (const optimizer_shard_actor& a : s_.shards) monitor(a);
    monitor(s_.loader);
    monitor(s_.optimizer);
    set_down_handler([this](caf::down_msg& dm) {
      if (failed_ || !dm.reason) return;
      // A stage of another process: most likely that whole process exited or was killed.
      const auto it = index_.find(dm.source);
      const std::string elsewhere =
          it == index_.end() || local(it->second)
              ? ""
              : str_cat(" (process ", it->second / s_.local_count, " exited, was killed or became unreachable)");
      fail_run(make_run_error(RunError::stopped,
                              str_cat(name_of(dm.source), " stopped: ", system().render(dm.reason), elsewhere)));
    });
    last_progress_.assign(s_.stages.size(), Clock::now());
    running_.resize(s_.stages.size());
    iteration_ = s_.first_iteration;
    return {
        [this](train_atom) -> caf::result<IterationStats> {
          if (caf::error refused = refusal()) return refused;
          auto rp = make_response_promise<IterationStats>();
          pending_train_ = rp;
          start_train();
          return rp;
        },
        [this](eval_atom, int64_t count) -> caf::result<double> {
          if (caf::error refused = refusal()) return refused;
          auto rp = make_response_promise<double>();
          pending_eval_ = rp;
          start_eval(count);
          return rp;
        },
        [this](report_atom, const StageReport& r) { on_report(r); },
        [this](progress_atom, const schedules::TraceEvent& e) { on_progress(e); },
        [this](fail_atom, const caf::error& e) { fail_run(e); },
        [this](tick_atom, uint64_t generation) { on_tick(generation); },
        // The run's monitor: from now on every traced event also goes there (trace_forwarding.hpp).
        [this](attach_atom, monitor_trace_actor monitor, std::shared_ptr<TraceQueue> queue) {
          monitor_ = std::move(monitor);
          monitor_queue_ = std::move(queue);
        },
        [this](host_op_atom, const schedules::TraceEvent& e) { emit(e); },
        // A checkpoint was loaded: the iteration numbers, the LR schedule (at `updates`
        // successful steps: the optimizer's restored step count, 0 without its state, as
        // Megatron restores its scheduler with the optimizer) and the dropout seeds continue
        // from there (the dropout streams from the checkpoint's seed, unless --no-load-rng).
        [this](resume_atom, int64_t iteration, int64_t updates, uint64_t seed) -> bool {
          if (busy() || failed_ || next_.pending || next_.info) return false;  // no data sent ahead yet
          iteration_ = iteration;
          updates_ = updates;
          s_.seed = seed;
          return true;
        },
    };
  }

  void on_exit() override {
    next_ = Prefetch{};
    s_.stages.clear();
    s_.reducers.clear();
    s_.shards.clear();
    s_.loader = nullptr;
    s_.optimizer = nullptr;
    monitor_ = nullptr;
    pending_train_ = {};
    pending_eval_ = {};
  }

 private:
  bool busy() const { return pending_train_.pending() || pending_eval_.pending(); }

  // Why a train or eval request cannot start now (no error: it can).
  caf::error refusal() {
    if (failed_)
      return make_run_error(RunError::rejected, str_cat("the run failed earlier: ", system().render(failure_)));
    if (busy()) return make_run_error(RunError::rejected, "an iteration is already running");
    return caf::error{};
  }

  RankCoord rank_of(size_t i) const { return s_.layout.coord(int(i)); }
  std::string stage_name(size_t i) const { return s_.layout.stage_name(int(i)); }
  bool local(size_t i) const { return i >= s_.first_local && i < s_.first_local + s_.local_count; }
  // Evaluation runs on data rank 0 (every replica holds the same weights), or on the data
  // ranks its expert groups span (they exchange tokens).
  bool takes_part(size_t i) const {
    return local(i) && (training_ || rank_of(i).dp < s_.layout.expert_group_data_ranks());
  }

  std::string name_of(const caf::actor_addr& a) const {
    if (auto it = index_.find(a); it != index_.end()) return stage_name(it->second);
    for (size_t i = 0; i < s_.reducers.size(); ++i)
      if (a == s_.reducers[i].address()) return str_cat("the gradient reducer of ", stage_name(s_.first_local + i));
    for (size_t i = 0; i < s_.shards.size(); ++i)
      if (a == s_.shards[i].address()) return str_cat("the optimizer shard of ", stage_name(s_.first_local + i));
    if (a == s_.loader.address()) return "the data loader";
    if (a == s_.optimizer.address()) return "the optimizer";
    return "an actor";
  }

  // The run failed: the pending request is answered with the error, and so is every later one.
  void fail_run(caf::error error) {
    if (failed_) return;
    failed_ = true;
    failure_ = std::move(error);
    ++generation_;  // stops the watchdog
    if (pending_train_.pending()) pending_train_.deliver(failure_);
    if (pending_eval_.pending()) pending_eval_.deliver(failure_);
    pending_train_ = {};
    pending_eval_ = {};
  }

  int64_t now_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - s_.epoch).count();
  }

  // A trace event of this iteration from start_ns to end_ns (now when 0), at least 1 ns long.
  void record(const std::string& actor, schedules::EventKind kind, int64_t start_ns, int64_t end_ns = 0) {
    if (!s_.trace && !monitor_) return;
    schedules::TraceEvent e;
    e.actor = actor;
    e.kind = kind;
    e.iteration = iteration_;
    e.start_ns = start_ns;
    e.end_ns = std::max(end_ns > 0 ? end_ns : now_ns(), start_ns + 1);
    emit(e);
  }

  // A traced event: to the --trace file, and to the monitor with the iteration's batch.
  void emit(const schedules::TraceEvent& e) {
    if (s_.trace) s_.trace->append(e);
    if (monitor_) batch_.push_back(e);
  }

  // A training iteration ended: its events to the monitor, unless it is too far behind.
  void forward_batch() {
    if (!monitor_) return;
    TraceBatch b{iteration_, now_ns(), std::move(batch_)};
    batch_ = {};
    if (monitor_queue_->try_push(int64_t(b.events.size()))) send(monitor_, trace_atom::value, std::move(b));
  }

  // The loader sends the stages the data of plan `id` and answers the counts.
  void fetch(int64_t id, bool train, int64_t count, std::function<void(const BatchInfo&)> then) {
    const int64_t t0 = now_ns();
    request(s_.loader, s_.op_timeout, batch_atom::value, id, train, count)
        .then(
            [=, this](const BatchInfo& info) {
              record("data_loader", schedules::EventKind::data, t0);
              then(info);
            },
            [=, this](caf::error& e) {
              fail_run(make_run_error(RunError::data, str_cat("the data loader failed: ", system().render(e))));
            });
  }

  // The next iteration's data is asked for as soon as an iteration is dispatched (the loader
  // sends it to the stages while the pipeline runs), so that the next train_atom dispatches at
  // once. A loader error is kept until that data is needed.
  void prefetch_train() {
    next_ = Prefetch{};
    next_.pending = true;
    next_.iteration = iteration_ + 1;
    next_.start_ns = now_ns();
    request(s_.loader, s_.op_timeout, batch_atom::value, next_.iteration, true, int64_t(s_.microbatches))
        .then(
            [this](const BatchInfo& info) {
              next_.info = info;
              prefetched();
            },
            [this](caf::error& e) {
              next_.error = make_run_error(RunError::data, str_cat("the data loader failed: ", system().render(e)));
              prefetched();
            });
  }

  void prefetched() {
    next_.pending = false;
    next_.end_ns = now_ns();
    if (!next_.waiter) return;
    auto waiter = std::move(next_.waiter);
    next_.waiter = nullptr;
    waiter();
  }

  // The training data of the iteration starting now: prefetched, or fetched now.
  void take_train_batches(std::function<void(const BatchInfo&)> then) {
    if (next_.pending) {
      next_.waiter = [this, then] { take_train_batches(then); };
      return;
    }
    if (next_.error) {
      caf::error error = std::move(next_.error);
      next_ = Prefetch{};
      fail_run(std::move(error));
      return;
    }
    if (!next_.info) {
      fetch(iteration_, true, s_.microbatches, std::move(then));
      return;
    }
    if (next_.iteration != iteration_) {  // resume_atom refuses once data went ahead: cannot happen
      fail_run(make_run_error(RunError::data, str_cat("the data for iteration ", next_.iteration,
                                                      " was sent ahead, but iteration ", iteration_, " starts")));
      return;
    }
    record("data_loader", schedules::EventKind::data, next_.start_ns, next_.end_ns);
    const BatchInfo info = *next_.info;
    next_ = Prefetch{};
    then(info);
  }

  void start_train() {
    ++iteration_;
    training_ = true;
    take_train_batches([this](const BatchInfo& info) {
      stats_ = IterationStats{};
      stats_.iteration = iteration_;
      stats_.lr = s_.lr.at(updates_);  // Megatron's: the scheduler after the updates so far
      stats_.loss_scale = s_.scaler ? s_.scaler->scale() : 1.0f;
      stats_.tokens = info.target_tokens;
      if (stats_.tokens <= 0) {
        fail_run(make_run_error(RunError::data,
                                str_cat("iteration ", iteration_, ": every target of the batch is ignored")));
        return;
      }
      const float grad_scale = stats_.loss_scale / float(stats_.tokens);
      // The same dropout streams as the single-device Trainer: one per (iteration, microbatch).
      const uint64_t seed = s_.seed * 0x9e3779b97f4a7c15ull + uint64_t(iteration_) * 1024;
      dispatch(iteration_, info, true, grad_scale, seed);
      prefetch_train();
    });
  }

  void start_eval(int64_t count) {
    training_ = false;
    const int64_t id = -(++evaluations_);  // evaluations get numbers of their own
    fetch(id, false, count, [this, id](const BatchInfo& info) {
      eval_tokens_ = info.target_tokens;
      if (eval_tokens_ <= 0) {
        fail_run(make_run_error(RunError::data, "evaluate: every target is ignored"));
        return;
      }
      dispatch(id, info, false, 1.0f, 0);
    });
  }

  // Every local stage taking part gets its plan `id`; the first and last ones get their data
  // from the loader.
  void dispatch(int64_t id, const BatchInfo& info, bool training, float grad_scale, uint64_t seed) {
    const size_t n = s_.stages.size();
    IterationPlan base;
    base.iteration = id;
    base.training = training;
    base.batch = s_.micro_batch_size;
    base.seq = s_.seq_length;
    base.loss_grad_scale = grad_scale;
    base.moe_loss_grad_scale = training ? stats_.loss_scale / float(info.microbatches) : 1.0f;
    base.dropout_seed = seed;
    base.local_step = training && n == 1;  // see IterationPlan::local_step
    base.lr = float(stats_.lr);
    base.loss_scale = stats_.loss_scale;
    reports_ = 0;
    expected_reports_ = 0;
    moe_stats_.clear();
    loss_sum_ = 0;
    phase_start_ns_ = now_ns();
    reported_.assign(n, false);
    losses_.assign(n, 0.0);
    busy_ns_.assign(n, 0);
    for (size_t i = 0; i < n; ++i) {
      running_[i].clear();
      if (!takes_part(i)) {
        reported_[i] = true;  // nothing to wait for
        continue;
      }
      const RankCoord r = rank_of(i);
      IterationPlan plan = base;
      // Data rank d takes microbatches d, d + D, ... (the loader's LoaderFeed): Megatron's
      // order, where each step of the global batch hands consecutive micro-batches to
      // consecutive data ranks.
      const int stride = training ? D_ : s_.layout.expert_group_data_ranks();
      // The dropout streams follow the global microbatch: seed + k for global microbatch k.
      for (int64_t k = r.dp; k < info.microbatches; k += stride) {
        if (plan.microbatches == 0) plan.dropout_seed = seed + uint64_t(k);
        ++plan.microbatches;
      }
      plan.dropout_stride = uint64_t(stride);
      send(s_.stages[i], plan_atom::value, std::move(plan));
      last_progress_[i] = Clock::now();
      ++expected_reports_;
    }
    arm_watchdog();
    if (expected_reports_ == 0) phase_done();
  }

  void on_progress(const schedules::TraceEvent& e) {
    const auto from = index_.find(caf::actor_cast<caf::actor_addr>(current_sender()));
    if (from == index_.end()) return;
    const size_t i = from->second;
    last_progress_[i] = Clock::now();
    std::vector<Running>& running = running_[i];
    if (e.end_ns == 0) {
      running.push_back(Running{e, Clock::now()});
      return;
    }
    for (auto it = running.begin(); it != running.end(); ++it) {
      if (it->event.kind == e.kind && it->event.microbatch == e.microbatch && it->event.chunk == e.chunk) {
        running.erase(it);
        break;
      }
    }
    // Every device's busy time (the straggler report compares the devices of a stage).
    if (training_ && i < busy_ns_.size() && schedules::is_op_kind(e.kind)) busy_ns_[i] += e.end_ns - e.start_ns;
    // The trace shows one pipeline: data rank 0, tensor rank 0 (the others run the same ops).
    if (training_ && rank_of(i).dp == 0 && rank_of(i).cp == 0 && rank_of(i).tp == 0) emit(e);
  }

  void on_report(const StageReport& r) {
    const RankLayout& L = s_.layout;
    // r.dp: the stage's rank in its data x context group (context fastest).
    if (r.stage < 0 || r.stage >= L.pipeline || r.dp < 0 || r.dp >= L.data * L.context || r.tp < 0 || r.tp >= L.tensor)
      return;
    const size_t i = size_t(L.rank({.pp = r.stage, .dp = r.dp / L.context, .cp = r.dp % L.context, .tp = r.tp}));
    if (failed_ || reported_[i]) return;
    reported_[i] = true;
    // Every tensor rank of a data replica's last stage holds the same losses: count rank 0's.
    if (r.stage == (s_.loss_stage >= 0 ? s_.loss_stage : P_ - 1) && r.tp == 0) losses_[i] = r.loss_sum;
    moe_stats_.insert(moe_stats_.end(), r.moe.begin(), r.moe.end());
    if (++reports_ < expected_reports_) return;
    phase_done();
  }

  // Every local stage has reported (or none takes part here: an evaluation runs on data rank
  // 0, which may live in another process).
  void phase_done() {
    if (!combine_processes()) return;
    loss_sum_ = 0;
    for (double l : losses_) loss_sum_ += l;  // rank order: the same sum every run
    ++generation_;                            // pipeline phase over: the watchdog stops
    if (!training_) {
      record("trainer", schedules::EventKind::other, phase_start_ns_);
      deliver_eval(loss_sum_ / double(eval_tokens_));
      return;
    }
    stats_.loss = loss_sum_ / double(stats_.tokens);
    stats_.moe = summarize_moe_stats(moe_stats_);  // this process's stages only
    stats_.busy_ms.resize(busy_ns_.size());
    for (size_t i = 0; i < busy_ns_.size(); ++i) stats_.busy_ms[i] = double(busy_ns_[i]) / 1e6;
    // The optimizer shards took over the gradients as the stages reported.
    const int64_t t0 = now_ns();
    request(s_.optimizer, infinite_backstop(), step_atom::value,
            StepRequest{iteration_, float(stats_.lr), stats_.loss_scale})
        .then(
            [=, this](const StepResult& r) {
              record("optimizer", schedules::EventKind::optimizer, t0);
              finish_step(r);
            },
            [=, this](caf::error& e) {
              fail_run(make_run_error(RunError::optimizer, str_cat("the optimizer step failed: ", system().render(e))));
            });
  }

  // Several processes: every process's losses and (training) devices' busy times, summed in rank
  // order (each rank's come from one process, the others add zeros). Blocks on the other
  // processes' trainers. (The optimizer sums the gradient statistics the same way, after this:
  // every process in the same order.)
  bool combine_processes() {
    if (!s_.fabric || s_.fabric->processes() == 1) return true;
    const size_t n = s_.stages.size();
    std::vector<double> v(training_ ? 2 * n : n, 0.0);
    for (size_t i = 0; i < n; ++i)
      if (local(i)) {
        v[i] = losses_[i];
        if (training_) v[n + i] = double(busy_ns_[i]);
      }
    try {
      s_.fabric->all_reduce(v, ReduceOp::sum);
    } catch (const std::exception& e) {
      fail_run(make_run_error(RunError::reduction,
                              str_cat("summing the iteration's results over processes failed: ", e.what())));
      return false;
    }
    for (size_t i = 0; training_ && i < n; ++i) busy_ns_[i] = int64_t(v[n + i]);
    v.resize(n);
    losses_ = std::move(v);
    return true;
  }

  void finish_step(const StepResult& r) {
    stats_.skipped = r.skipped;
    stats_.grad_norm = r.grad_norm;
    if (s_.scaler) s_.scaler->update(r.skipped);
    if (!r.skipped) ++updates_;  // Megatron steps its scheduler only after a successful update
    stats_.next_lr = s_.lr.at(updates_);
    deliver_train(stats_);
  }

  // The optimizer's own requests to the stages time out after op_timeout; this only guards
  // against a lost reply.
  std::chrono::milliseconds infinite_backstop() const { return s_.op_timeout * 4 + std::chrono::seconds(10); }

  // The answer of an iteration that succeeded: after the trace is flushed and (training) the
  // iteration's events went to the monitor.
  void deliver_train(const IterationStats& stats) {
    if (s_.clocks)
      for (const schedules::TraceEvent& e : s_.clocks->drain(iteration_)) emit(e);
    if (s_.trace) s_.trace->flush();
    forward_batch();
    if (pending_train_.pending()) pending_train_.deliver(stats);
    pending_train_ = {};
  }
  void deliver_eval(double loss) {
    if (s_.trace) s_.trace->flush();
    if (pending_eval_.pending()) pending_eval_.deliver(loss);
    pending_eval_ = {};
  }

  void arm_watchdog() {
    const auto period = std::clamp(s_.op_timeout / 4, std::chrono::milliseconds(5), std::chrono::milliseconds(1000));
    delayed_send(this, period, tick_atom::value, generation_);
  }

  // A stage running one op longer than op_timeout, or the whole pipeline silent that long, fails the run.
  void on_tick(uint64_t generation) {
    if (failed_ || generation != generation_) return;
    const auto now = Clock::now();
    const auto ms = [](Clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); };
    for (size_t s = 0; s < s_.stages.size(); ++s) {
      // The oldest op the stage started and has not finished (a GPU stage runs a few ahead).
      if (reported_[s] || running_[s].empty() || now - running_[s].front().since <= s_.op_timeout) continue;
      const schedules::TraceEvent& e = running_[s].front().event;
      fail_run(make_run_error(
          RunError::timeout,
          str_cat(stage_name(s), " failed in ", e.kind == schedules::EventKind::forward ? "forward" : "backward",
                  " of microbatch ", e.microbatch, " (chunk ", e.chunk, "): no answer after ",
                  ms(now - running_[s].front().since), " ms (op timeout ", s_.op_timeout.count(), " ms)")));
      return;
    }
    if (s_.heartbeat) {
      if (std::string silence = s_.heartbeat->silence_error(now, s_.heartbeat_timeout); !silence.empty()) {
        fail_run(make_run_error(RunError::timeout, std::move(silence)));
        return;
      }
    }
    bool all_silent = true;
    size_t oldest = 0;
    for (size_t s = 0; s < s_.stages.size(); ++s) {
      if (reported_[s]) continue;
      if (now - last_progress_[s] <= s_.op_timeout) all_silent = false;
      if (reported_[oldest] || last_progress_[s] < last_progress_[oldest]) oldest = s;
    }
    if (all_silent) {
      fail_run(make_run_error(RunError::timeout,
                              str_cat("the pipeline stalled: no stage finished an op for ",
                                      ms(now - last_progress_[oldest]), " ms (op timeout ", s_.op_timeout.count(),
                                      " ms); ", stage_name(oldest), " has been silent longest")));
      return;
    }
    arm_watchdog();
  }

  struct Running {
    schedules::TraceEvent event;
    Clock::time_point since;
  };

  struct Prefetch {
    bool pending = false;              // asked, no answer yet
    int64_t iteration = 0;             // the plan it is for
    std::optional<BatchInfo> info;     // the answer
    caf::error error;                  // or the loader's failure
    int64_t start_ns = 0, end_ns = 0;  // for the trace's data event
    std::function<void()> waiter;      // an iteration waiting for the answer
  };

  TrainerSetup s_;
  caf::typed_response_promise<IterationStats> pending_train_;  // the running request, if any
  caf::typed_response_promise<double> pending_eval_;
  bool failed_ = false;
  caf::error failure_;
  bool training_ = true;
  int64_t iteration_ = 0;
  int64_t updates_ = 0;  // successful optimizer steps: where the LR schedule is
  IterationStats stats_;
  std::vector<MoeLayerStats> moe_stats_;  // the reports' MoE statistics of the running iteration
  int64_t eval_tokens_ = 0;
  int64_t evaluations_ = 0;  // evaluation plans are numbered -1, -2, ...
  size_t reports_ = 0, expected_reports_ = 0;
  std::vector<bool> reported_;
  std::vector<double> losses_;               // per stage actor: its loss sum (last stage, tensor rank 0)
  std::vector<int64_t> busy_ns_;             // per stage actor: its forward/backward time this iteration
  int P_ = 1, D_ = 1;                        // s_.layout's pipeline and data sizes
  std::map<caf::actor_addr, size_t> index_;  // stage actor -> its rank
  double loss_sum_ = 0;
  int64_t phase_start_ns_ = 0;
  uint64_t generation_ = 0;
  std::vector<Clock::time_point> last_progress_;
  std::vector<std::vector<Running>> running_;  // per stage: started, not finished
  Prefetch next_;                              // the next training iteration's batches
  monitor_trace_actor monitor_;                // null: no monitor attached
  std::shared_ptr<TraceQueue> monitor_queue_;
  std::vector<schedules::TraceEvent> batch_;  // traced since the last forward_batch
};

}  // namespace

trainer_actor spawn_trainer(caf::actor_system& system, TrainerSetup setup, ActorThread mode) {
  if (mode == ActorThread::scheduled) return system.spawn<TrainerActor>(std::move(setup));
  // Detached: a message from a stage thread wakes it at once (a condition variable), where a
  // scheduled actor waits for a worker that polls every 50 us after a while without work;
  // every hop between the last op of an iteration and the next one's first op is on the
  // critical path (the GPU idles).
  return system.spawn<TrainerActor, caf::detached>(std::move(setup));
}

}  // namespace troupe::actors
