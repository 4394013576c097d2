// The total time of some spans of the work enqueued on a context, read once that work has
// finished: CUDA events around each span on a GPU, the clock on the CPU (where the work runs as
// it is enqueued). A fused backward times its weight-gradient part with it (the trace's
// weight_ns: what a split backward's W would take).
//
//   SpanTimer timer(ctx);
//   { SpanTimer::Scope s(&timer); linear_backward(ctx, dy, x, w, Tensor(), dw, db); }  // null: not timed
//   SpanTimes spans = timer.take();  // the spans since the last take()
//   ... once the work has finished (an op's completion):  spans.total_ns()
#pragma once

#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/context.hpp"

namespace troupe {

class SpanTimes {
 public:
  SpanTimes() = default;
  SpanTimes(SpanTimes&& o) noexcept { *this = std::move(o); }
  SpanTimes& operator=(SpanTimes&& o) noexcept;
  SpanTimes(const SpanTimes&) = delete;
  SpanTimes& operator=(const SpanTimes&) = delete;
  ~SpanTimes();
  // The spans' total; on a GPU only once their work has finished (it waits for the last event).
  int64_t total_ns() const;
  bool empty() const { return events_.empty() && cpu_spans_ == 0; }

 private:
  friend class SpanTimer;
  void release() noexcept;
  std::vector<std::pair<void*, void*>> events_;  // CUDA: (start, end) per span
  int64_t cpu_ns_ = 0;                           // CPU: measured as the spans ran
  int cpu_spans_ = 0;
};

class SpanTimer {
 public:
  explicit SpanTimer(const Context& ctx) : ctx_(ctx) {}
  void begin();
  void end();
  SpanTimes take() { return std::exchange(open_, SpanTimes()); }

  class Scope {
   public:
    explicit Scope(SpanTimer* t) : t_(t) {
      if (t_) t_->begin();
    }
    ~Scope() {
      if (t_) t_->end();
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    SpanTimer* t_;
  };

 private:
  const Context& ctx_;
  SpanTimes open_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace troupe
