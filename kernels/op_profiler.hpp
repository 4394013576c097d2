// Where a step's time goes, op by op: each timed scope records a start and end marker on
// the context's stream (CUDA events on a GPU, a clock on the CPU); collect() waits for the
// work and adds each scope's time to its name's total. Disabled profilers cost nothing.
//
//   OpProfiler prof(ctx, /*enabled=*/true);
//   { auto t = prof.scope("fc1.fwd"); linear_forward(ctx, ...); }
//   prof.collect();                      // once per step
//   prof.print(stdout, steps);           // table: op, ms/step, share
#pragma once

#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "kernels/context.hpp"

namespace troupe {

class OpProfiler {
 public:
  OpProfiler(const Context& ctx, bool enabled);
  ~OpProfiler();
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  class Scope {
   public:
    Scope(OpProfiler* p, const char* name);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    OpProfiler* p_;
    size_t index_ = 0;
  };
  Scope scope(const char* name) { return Scope(enabled_ ? this : nullptr, name); }
  bool enabled() const { return enabled_; }

  // Waits for the recorded work and folds it into the totals.
  void collect();
  // Total milliseconds per op name since construction.
  const std::map<std::string, double>& totals_ms() const { return totals_; }
  // A table sorted by time: name, ms per step, share of the timed total.
  void print(std::FILE* out, int64_t steps) const;

 private:
  struct Mark {
    const char* name = nullptr;
    void* start = nullptr;  // CUDA events, or unused on the CPU
    void* end = nullptr;
    std::chrono::steady_clock::time_point t0, t1;
  };
  size_t begin(const char* name);
  void end(size_t index);
  const Context& ctx_;
  bool enabled_;
  std::vector<Mark> marks_;  // this step's scopes; events are reused across steps
  size_t used_ = 0;
  std::map<std::string, double> totals_;
};

}  // namespace troupe
