// Megatron's --deterministic-mode: a GPU run that repeats itself to the bit. Troupe's own kernels
// are deterministic (no float atomics); cuDNN's default attention backward is not (it sums dq with
// atomics), so while a DeterministicMode lives, CUDA attention runs cuDNN's deterministic backward
// (Troupe's flash kernels where TROUPE_ATTENTION_BACKEND=flash or there is no cuDNN). With
// TROUPE_ATTENTION_BACKEND=cudnn it is refused, naming both. CPU runs are deterministic anyway.
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
  std::unique_ptr<Backend> backend_;  // the attention backend chosen for the run (null: left alone)
};

}  // namespace troupe::apps
