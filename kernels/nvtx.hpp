// NVTX ranges: names on the host-side spans of work, so that an Nsight Systems timeline shows
// which stage, microbatch, bucket or step launched each kernel (docs/profiling.md). Without the
// CUDA backend, or without a profiler attached, a range costs a function call and nothing else.
//
//   NvtxRange range("forward", "stage ", s, " mb ", m);   // until the end of the scope
#pragma once

#include <string>

#include "base/check.hpp"

namespace troupe {

// True when a tool (nsys, ncu) has attached to NVTX; names are only formatted then.
bool nvtx_enabled();
void nvtx_push(const std::string& name);
void nvtx_pop();

class NvtxRange {
 public:
  template <typename... Args>
  explicit NvtxRange(const Args&... name) : active_(nvtx_enabled()) {
    if (active_) nvtx_push(str_cat(name...));
  }
  ~NvtxRange() {
    if (active_) nvtx_pop();
  }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;

 private:
  bool active_;
};

}  // namespace troupe
