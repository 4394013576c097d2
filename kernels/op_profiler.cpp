#include "kernels/op_profiler.hpp"

#include <algorithm>

#if TROUPE_HAVE_CUDA
#include "kernels/cuda/runtime.hpp"
#endif

namespace troupe {

OpProfiler::OpProfiler(const Context& ctx, bool enabled) : ctx_(ctx), enabled_(enabled) {}

OpProfiler::~OpProfiler() {
#if TROUPE_HAVE_CUDA
  for (Mark& m : marks_) {
    cuda::event_destroy(m.start);
    cuda::event_destroy(m.end);
  }
#endif
}

OpProfiler::Scope::Scope(OpProfiler* p, const char* name) : p_(p) {
  if (p_) index_ = p_->begin(name);
}

OpProfiler::Scope::~Scope() {
  if (p_) p_->end(index_);
}

size_t OpProfiler::begin(const char* name) {
  if (used_ == marks_.size()) {
    Mark m;
    m.name = name;
#if TROUPE_HAVE_CUDA
    if (ctx_.is_cuda()) {
      m.start = cuda::event_create();
      m.end = cuda::event_create();
    }
#endif
    marks_.push_back(m);
  }
  Mark& m = marks_[used_];
  m.name = name;
#if TROUPE_HAVE_CUDA
  if (ctx_.is_cuda()) cuda::event_record(ctx_, m.start);
#endif
  if (!ctx_.is_cuda()) m.t0 = std::chrono::steady_clock::now();
  return used_++;
}

void OpProfiler::end(size_t index) {
  Mark& m = marks_[index];
#if TROUPE_HAVE_CUDA
  if (ctx_.is_cuda()) cuda::event_record(ctx_, m.end);
#endif
  if (!ctx_.is_cuda()) m.t1 = std::chrono::steady_clock::now();
}

void OpProfiler::collect() {
  for (size_t i = 0; i < used_; ++i) {
    Mark& m = marks_[i];
    double ms = 0;
#if TROUPE_HAVE_CUDA
    if (ctx_.is_cuda()) ms = cuda::event_elapsed_ms(m.start, m.end);
#endif
    if (!ctx_.is_cuda()) ms = std::chrono::duration<double, std::milli>(m.t1 - m.t0).count();
    totals_[m.name] += ms;
  }
  used_ = 0;
}

void OpProfiler::print(std::FILE* out, int64_t steps) const {
  std::vector<std::pair<std::string, double>> rows(totals_.begin(), totals_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  double total = 0;
  for (const auto& r : rows) total += r.second;
  std::fprintf(out, "%-24s %10s %7s\n", "op", "ms/step", "share");
  for (const auto& [name, ms] : rows)
    std::fprintf(out, "%-24s %10.3f %6.1f%%\n", name.c_str(), ms / double(std::max<int64_t>(steps, 1)),
                 total > 0 ? 100.0 * ms / total : 0.0);
  std::fprintf(out, "%-24s %10.3f\n", "total (timed ops)", total / double(std::max<int64_t>(steps, 1)));
}

}  // namespace troupe
