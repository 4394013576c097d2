// A per-device execution context: which backend runs an op, and for CUDA the
// device, stream, cuBLASLt handle and workspace. Passed explicitly to every op;
// there is no process-wide device state.
//
//   troupe::Context cpu = troupe::Context::cpu();
//   troupe::Context gpu = troupe::Context::cuda(0);
//   troupe::layernorm_forward(gpu, x, w, b, eps, y, mean, rstd);
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace troupe {

enum class DeviceKind : uint8_t { cpu, cuda };

struct CudaState;  // defined in kernels/cuda/cuda_state.cuh; opaque to non-CUDA code
struct CudaStateDeleter {
  void operator()(CudaState* s) const noexcept;  // defined with CudaState
};

class Context {
 public:
  static Context cpu();
  // Makes `device` current, creates a stream, a cuBLASLt handle and a workspace.
  static Context cuda(int device = 0);

  Context(Context&&) noexcept;
  Context& operator=(Context&&) noexcept;
  ~Context();

  DeviceKind kind() const { return kind_; }
  bool is_cuda() const { return kind_ == DeviceKind::cuda; }
  int device_index() const { return device_; }
  CudaState& cuda_state() const;  // throws on a CPU context

  // Waits for all work enqueued on this context (a no-op on the CPU).
  void synchronize() const;
  // Makes this context's device current for the calling thread.
  void activate() const;

 private:
  Context(DeviceKind kind, int device);
  DeviceKind kind_;
  int device_;
  std::unique_ptr<CudaState, CudaStateDeleter> cuda_;
};

// True when the CUDA backend was built and at least one GPU is visible.
bool cuda_available();
// True when the CUDA backend was compiled in (nvcc was found at configure time).
bool cuda_built();
// Bytes of device memory in use on ctx's GPU (all processes; total - free); 0 on the CPU.
size_t device_memory_in_use(const Context& ctx);
// Bytes of memory a device has in all: GPU `device`'s total when `cuda`, else the machine's
// physical memory (CPU devices share it).
size_t device_memory_total(bool cuda, int device);

}  // namespace troupe
