#include "actors/monitor/monitor_history.hpp"

#include <algorithm>
#include <cstdint>

#include "actors/monitor/monitor_json.hpp"

namespace troupe::actors {

namespace {

template <class T>
void keep(std::deque<T>& recent, T value, size_t n) {
  recent.push_back(std::move(value));
  if (recent.size() > n) recent.pop_front();
}

template <class T>
nlohmann::ordered_json array_of(const std::deque<T>& records) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (const T& r : records) a.push_back(monitor_json(r));
  return a;
}

}  // namespace

void MonitorHistory::update(const MonitorMessage& message) {
  if (message.repeat) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (const auto* h = std::get_if<MonitorHello>(&message.body)) {
    hello_ = *h;
  } else if (const auto* it = std::get_if<MonitorIteration>(&message.body)) {
    keep(iterations_, *it, kIterations);
  } else if (const auto* v = std::get_if<MonitorValidation>(&message.body)) {
    keep(validations_, *v, kIterations);
  } else if (const auto* e = std::get_if<MonitorEnd>(&message.body)) {
    end_ = *e;
  } else if (const auto* st = std::get_if<MonitorStages>(&message.body)) {
    keep(stages_, *st, kStages);
  } else if (const auto* t = std::get_if<MonitorTrace>(&message.body)) {
    trace_events_ += int64_t(t->events.size());
    dropped_ = t->dropped_events;
    // A large iteration arrives in several messages: they extend the same timeline entry.
    if (timeline_.empty() || timeline_.back().iteration != t->iteration)
      keep(timeline_, TimelineIteration{t->iteration, INT64_MAX, INT64_MIN, {}}, kTimeline);
    TimelineIteration& line = timeline_.back();
    for (const schedules::TraceEvent& e : t->events) {
      // Layers nest in the ops drawn; clock samples are no boxes.
      if (e.stage < 0 || e.kind == schedules::EventKind::layer || e.kind == schedules::EventKind::clock) continue;
      line.ops.push_back(e);
      line.start_ns = std::min(line.start_ns, e.start_ns);
      line.end_ns = std::max(line.end_ns, e.end_ns);
    }
  }
}

std::string MonitorHistory::json() const {
  std::lock_guard<std::mutex> lock(mutex_);
  nlohmann::ordered_json j;
  j["hello"] = hello_ ? monitor_json(*hello_) : nlohmann::ordered_json(nullptr);
  j["iterations"] = array_of(iterations_);
  j["validations"] = array_of(validations_);
  j["stages"] = array_of(stages_);
  nlohmann::ordered_json timeline = nlohmann::ordered_json::array();
  for (const TimelineIteration& line : timeline_) {
    if (line.ops.empty()) continue;
    nlohmann::ordered_json ops = nlohmann::ordered_json::array();
    for (const schedules::TraceEvent& e : line.ops)
      ops.push_back({e.stage, int(e.kind), e.microbatch, e.chunk, e.start_ns, e.end_ns});
    timeline.push_back(
        {{"iteration", line.iteration}, {"start_ns", line.start_ns}, {"end_ns", line.end_ns}, {"ops", std::move(ops)}});
  }
  j["timeline"] = std::move(timeline);
  j["end"] = end_ ? monitor_json(*end_) : nlohmann::ordered_json(nullptr);
  j["trace_events"] = trace_events_;
  j["dropped_trace_events"] = dropped_;
  return j.dump();
}

}  // namespace troupe::actors
