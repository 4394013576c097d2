// Megatron's --deterministic-mode: a GPU run that repeats itself to the bit. Troupe's own kernels
// are deterministic (no float atomics); cuDNN's default attention backward is not (it sums dq with
// atomics), so while a DeterministicMode lives, CUDA attention runs cuDNN's deterministic backward
// (Troupe's flash kernels where TROUPE_ATTENTION_BACKEND=flash or there is no cuDNN), and the MLP
// backward takes a fixed path rather than the one a timing picks (kernels/linear_fused.hpp), and
// GEMMs take cuBLASLt's heuristic algorithms rather than searched ones (kernels/cuda/gemm_lt.hpp).
// With TROUPE_ATTENTION_BACKEND=cudnn, TROUPE_MLP_DGELU=measure or TROUPE_GEMM_SEARCH=on it is
// refused, naming them. CPU runs are deterministic anyway.
//
//   const DeterministicMode deterministic(options.deterministic_mode);  // for the whole run
#pragma once

#include <memory>

namespace troupe::apps {

class DeterministicMode {
 public:
  explicit DeterministicMode(bool on);
  ~DeterministicMode();
  DeterministicMode(const DeterministicMode&) = delete;
  DeterministicMode& operator=(const DeterministicMode&) = delete;

 private:
  struct Backend;
  std::unique_ptr<Backend> backend_;  // the kernels' choices fixed for the run (null: left alone)
};

}  // namespace troupe::apps
