#include "actors/train/clock_sampler.hpp"

#include <utility>

namespace troupe::actors {

ClockSampler::ClockSampler(std::vector<StageDevice> devices, std::chrono::steady_clock::time_point epoch, ReadMhz read,
                           std::chrono::milliseconds period)
    : devices_(std::move(devices)), epoch_(epoch), read_(std::move(read)), period_(period), thread_([this] {
        run();
      }) {}

ClockSampler::~ClockSampler() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::vector<schedules::TraceEvent> ClockSampler::drain(int64_t iteration) {
  std::vector<schedules::TraceEvent> out;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    out.swap(samples_);
  }
  for (schedules::TraceEvent& e : out) e.iteration = iteration;
  return out;
}

void ClockSampler::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    lock.unlock();
    std::vector<schedules::TraceEvent> now;
    for (const StageDevice& d : devices_) {
      const int mhz = read_(d.device);
      if (mhz <= 0) continue;
      schedules::TraceEvent e;
      e.actor = "clock";
      e.device = d.device;
      e.stage = d.stage;
      e.kind = schedules::EventKind::clock;
      e.start_ns = e.end_ns =
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - epoch_).count();
      e.sm_clock_mhz = mhz;
      now.push_back(std::move(e));
    }
    lock.lock();
    samples_.insert(samples_.end(), now.begin(), now.end());
    wake_.wait_for(lock, period_, [this] { return stop_; });
  }
}

}  // namespace troupe::actors
