#include "kernels/span_timer.hpp"

#include <cmath>

#if TROUPE_HAVE_CUDA
#include "kernels/cuda/runtime.hpp"
#endif

namespace troupe {

SpanTimes& SpanTimes::operator=(SpanTimes&& o) noexcept {
  if (this != &o) {
    release();
    events_ = std::exchange(o.events_, {});
    cpu_ns_ = std::exchange(o.cpu_ns_, 0);
    cpu_spans_ = std::exchange(o.cpu_spans_, 0);
  }
  return *this;
}

SpanTimes::~SpanTimes() { release(); }

void SpanTimes::release() noexcept {
#if TROUPE_HAVE_CUDA
  for (auto [start, end] : events_) {
    cuda::event_destroy(start);
    cuda::event_destroy(end);
  }
#endif
  events_.clear();
}

int64_t SpanTimes::total_ns() const {
  double ms = 0;
#if TROUPE_HAVE_CUDA
  for (auto [start, end] : events_) ms += double(cuda::event_elapsed_ms(start, end));
#endif
  return cpu_ns_ + std::llround(ms * 1e6);
}

void SpanTimer::begin() {
#if TROUPE_HAVE_CUDA
  if (ctx_.is_cuda()) {
    void* start = cuda::event_create();
    void* end = cuda::event_create();
    open_.events_.emplace_back(start, end);
    cuda::event_record(ctx_, start);
    return;
  }
#endif
  t0_ = std::chrono::steady_clock::now();
}

void SpanTimer::end() {
#if TROUPE_HAVE_CUDA
  if (ctx_.is_cuda()) {
    cuda::event_record(ctx_, open_.events_.back().second);
    return;
  }
#endif
  open_.cpu_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_).count();
  ++open_.cpu_spans_;
}

}  // namespace troupe
