// A GPU's current SM clock through NVML, which ships with the driver (libnvidia-ml.so.1): loaded
// with dlopen on first use, so a machine without the driver builds and runs (the clock reads 0).
// CUDA device ordinals (which CUDA_VISIBLE_DEVICES renumbers) map to NVML's devices by PCI bus id.
#include <dlfcn.h>

#include <array>
#include <mutex>

#include "kernels/cuda/cuda_state.cuh"
#include "kernels/cuda/runtime.hpp"

namespace troupe::cuda {

namespace {

// The few NVML entry points used, with the types of NVML's stable C ABI (nvml.h is not part of
// the toolkit here): a status (0: success), an opaque device handle, clock type 1 = SM.
using NvmlDevice = void*;
constexpr int kNvmlClockSm = 1;
struct Nvml {
  int (*init)() = nullptr;
  int (*by_pci_bus_id)(const char*, NvmlDevice*) = nullptr;
  int (*clock_info)(NvmlDevice, int, unsigned int*) = nullptr;
  bool ready = false;
};

const Nvml& nvml() {
  static Nvml n;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return;
    n.init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
    n.by_pci_bus_id =
        reinterpret_cast<int (*)(const char*, NvmlDevice*)>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    n.clock_info = reinterpret_cast<int (*)(NvmlDevice, int, unsigned int*)>(dlsym(lib, "nvmlDeviceGetClockInfo"));
    n.ready = n.init != nullptr && n.by_pci_bus_id != nullptr && n.clock_info != nullptr && n.init() == 0;
  });
  return n;
}

}  // namespace

int sm_clock_mhz(int device) {
  const Nvml& n = nvml();
  if (!n.ready) return 0;
  std::array<char, 64> bus_id{};
  if (cudaDeviceGetPCIBusId(bus_id.data(), int(bus_id.size()), device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  NvmlDevice handle = nullptr;
  unsigned int mhz = 0;
  if (n.by_pci_bus_id(bus_id.data(), &handle) != 0 || n.clock_info(handle, kNvmlClockSm, &mhz) != 0) return 0;
  return int(mhz);
}

}  // namespace troupe::cuda
