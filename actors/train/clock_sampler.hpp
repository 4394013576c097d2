// Samples the SM clock of each of a process's GPUs while a traced run trains, for the trace's
// clock events (schedules::EventKind::clock): `troupe replay` fits how each stage's clock follows
// its load (schedules/clock_model.hpp). A thread reads every device every `period`; the trainer
// takes the samples at each iteration's end (drain()) and writes them with that iteration.
//
//   ClockSampler s({{.stage = 0, .device = 0}, {.stage = 1, .device = 1}}, epoch, cuda::sm_clock_mhz);
//   for (TraceEvent& e : s.drain()) ...   // kind clock, stage, device, start_ns = end_ns, sm_clock_mhz
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "schedules/trace.hpp"

namespace troupe::actors {

struct StageDevice {
  int stage = 0;   // pipeline stage
  int device = 0;  // its GPU
};

class ClockSampler {
 public:
  using ReadMhz = std::function<int(int device)>;  // 0: not readable (no sample)
  ClockSampler(std::vector<StageDevice> devices, std::chrono::steady_clock::time_point epoch, ReadMhz read,
               std::chrono::milliseconds period = std::chrono::milliseconds(20));
  ~ClockSampler();
  ClockSampler(const ClockSampler&) = delete;
  ClockSampler& operator=(const ClockSampler&) = delete;

  // The samples since the last call, as trace events of `iteration` (times since `epoch`).
  std::vector<schedules::TraceEvent> drain(int64_t iteration);

 private:
  void run();

  std::vector<StageDevice> devices_;
  std::chrono::steady_clock::time_point epoch_;
  ReadMhz read_;
  std::chrono::milliseconds period_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::vector<schedules::TraceEvent> samples_;
  std::thread thread_;  // last: starts once the rest is set
};

}  // namespace troupe::actors
