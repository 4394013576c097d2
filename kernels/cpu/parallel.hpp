// When a CPU kernel's loop is worth an OpenMP team. Each parallel loop pays a fork/join,
// and far more when the cores are busy (several pipeline stages on one machine, a loaded CI
// runner): a thread that is not scheduled holds up the whole team. Small loops therefore
// run on the calling thread: `#pragma omp parallel for if(worth_parallel(work))`.
#pragma once

#include <cstdint>

namespace troupe::cpu {

constexpr int64_t kMinParallelWork = int64_t(1) << 16;  // elements (or multiply-adds) per loop

inline bool worth_parallel(int64_t work) { return work >= kMinParallelWork; }

}  // namespace troupe::cpu
