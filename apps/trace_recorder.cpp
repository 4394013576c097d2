#include "apps/trace_recorder.hpp"


namespace troupe::apps {

void TraceRecorder::apply(const actors::MonitorMessage& m) {
  if (const auto* h = std::get_if<actors::MonitorHello>(&m.body)) {
    if (run_id_.empty()) run_id_ = h->run_id;
    other_run_ = h->run_id != run_id_;  // a new run on the endpoint: its seq numbers start again
    return;
  }
  const auto* t = std::get_if<actors::MonitorTrace>(&m.body);
  if (!t || other_run_ || !written_.insert(m.seq).second) return;
  if (!writer_) {
    schedules::TraceHeader header;
    header.schedule = schedules::schedule_from_name(t->schedule);
    header.shape = {int(t->stages), int(t->chunks), int(t->microbatches), int(t->group_size)};
    header.num_layers = int(t->num_layers);
    header.iteration = t->iteration;
    writer_ = std::make_unique<schedules::TraceWriter>(path_, header);
  }
  for (const schedules::TraceEvent& e : t->events) writer_->append(e);
  writer_->flush();  // readable after every message, as --trace's file
  events_ += int64_t(t->events.size());
  iterations_.insert(t->iteration);
}

bool TraceRecorder::close() {
  if (!writer_) return false;
  writer_->close();
  return true;
}

}  // namespace troupe::apps
