// TrainingRun's monitoring: the monitor actor in the run's actor system, records handed to it
// without waiting, the run's end reported at shutdown when the app did not, device memory.
#include <algorithm>
#include <chrono>
#include <exception>
#include <utility>

#include "actors/monitor/monitor_actor.hpp"
#include "actors/train/training_run.hpp"
#include "actors/train/training_run_impl.hpp"
#include "base/check.hpp"

namespace troupe::actors {

MonitorAddresses TrainingRun::start_monitor(const MonitorOptions& options, const MonitorHello& hello) {
  Impl& d = *impl_;
  TROUPE_CHECK(!d.monitor, "the run's monitor is running already");
  schedules::TraceHeader trace;
  trace.schedule = effective_schedule(d.config.parallel);
  trace.shape = {d.P, d.V, d.M, d.config.parallel.group_size};
  trace.num_layers = d.config.model.num_layers;
  trace.chunk_layers = recorded_chunk_layers(d.config.model.num_layers, d.P, d.V, d.config.parallel.split);
  trace.iteration = d.iteration + 1;
  MonitorSpawn spawned = spawn_monitor(*d.system, options, hello, trace);
  d.monitor = std::move(spawned.monitor);
  // From the next iteration on, the trainer forwards every traced event to the monitor.
  caf::anon_send(d.trainer, attach_atom::value, monitor_trace_actor{d.monitor}, std::move(spawned.trace_queue));
  return spawned.addresses;
}

bool TrainingRun::monitoring() const { return bool(impl_->monitor); }

void TrainingRun::publish(MonitorBody record) {
  if (impl_->monitor) caf::anon_send(impl_->monitor, publish_atom::value, std::move(record));
}

std::vector<int64_t> TrainingRun::device_memory_in_use() const {
  const Impl& d = *impl_;
  std::vector<int64_t> bytes;
  if (!d.config.devices.cuda) return bytes;  // CPU devices share the host's memory: nothing per device
  // One context per distinct GPU (several ranks may share one); between iterations, so the
  // stage actors are idle and the query does not race their work.
  std::vector<std::pair<int, const Context*>> devices;
  for (const auto& w : d.workers) {
    const int device = w->context().device_index();
    if (std::none_of(devices.begin(), devices.end(), [&](const auto& x) { return x.first == device; }))
      devices.emplace_back(device, &w->context());
  }
  std::sort(devices.begin(), devices.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [device, ctx] : devices) bytes.push_back(int64_t(troupe::device_memory_in_use(*ctx)));
  return bytes;
}

HostOpSpan::HostOpSpan(trainer_actor trainer, std::chrono::steady_clock::time_point epoch, int64_t iteration,
                       const char* actor, schedules::EventKind kind)
    : trainer_(std::move(trainer)), epoch_(epoch) {
  event_.actor = actor;
  event_.kind = kind;
  event_.iteration = iteration;
  event_.start_ns = now_ns();
}

HostOpSpan::~HostOpSpan() {
  event_.end_ns = std::max(now_ns(), event_.start_ns + 1);
  if (trainer_) caf::anon_send(trainer_, host_op_atom::value, event_);
}

int64_t HostOpSpan::now_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - epoch_).count();
}

void TrainingRun::Impl::end_monitor() {
  if (!monitor) return;
  MonitorEnd end{
      .iteration = iteration, .reason = "stopped", .detail = "the run was shut down before it reported its end"};
  if (!failure.empty()) {
    end.reason = "failed";
    end.detail = failure;
  } else if (std::uncaught_exceptions() > 0) {  // destroyed while an error unwinds troupe train
    end.reason = "failed";
    end.detail = "troupe train stopped on an error (its output says which)";
  }
  // The monitor ignores this if the app published an end already. Waiting for the answer
  // means the message was handed to ZeroMQ before the actor is told to exit.
  (*self)
      ->request(monitor, std::chrono::seconds(5), publish_atom::value, MonitorBody{std::move(end)})
      .receive([](bool) {}, [](caf::error&) {});
}

}  // namespace troupe::actors
