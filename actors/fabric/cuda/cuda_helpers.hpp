// Helpers shared by the CUDA side of actors/ (internal; included by actors/fabric/cuda/*.cpp only):
// the NCCL check macro, events that travel in parcels, transfer streams, the stream-ordered
// pool's settings, and the warm-up that connects a pair of NCCL ranks.
#pragma once

#include <nccl.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cuda/cuda_state.cuh"

// Checks an NCCL call; the optional arguments say what it was for ("group 'tp0' member 1:
// all_reduce of bf16[4096]"), and NCCL's last error message is added.
#define TROUPE_NCCL_CHECK(call, ...)                                                                            \
  do {                                                                                                          \
    ncclResult_t troupe_nccl_ = (call);                                                                         \
    if (troupe_nccl_ != ncclSuccess)                                                                            \
      ::troupe::fail("nccl", #call, __FILE__, __LINE__,                                                         \
                     ::troupe::str_cat(__VA_ARGS__ __VA_OPT__(, ": ", ) ncclGetErrorString(troupe_nccl_), ": ", \
                                       ncclGetLastError(nullptr)));                                             \
  } while (0)

namespace troupe::actors::cuda {

// NCCL connects a pair of ranks on their first transfer, and that handshake blocks the host
// until both sides have called in. Our two ends are driven by two stage threads that only
// post a receive after the sender's message arrives, so connect them before any stage runs:
// from one thread (a group call) when both ranks are in this process ...
void connect_pair(ncclComm_t comms[2], int d0, int d1, bool all_reduce);
// ... or, when they are in two processes, each process its own rank (rank 0 sends).
void connect_pair_end(ncclComm_t comm, int rank, int device);

// A unique id from the bytes cuda::nccl_unique_id() made (in this process or another).
ncclUniqueId nccl_id_from_bytes(const std::vector<uint8_t>& bytes);

// An event on the current device, owned by a shared_ptr<void> so that it can travel in a
// Parcel or an Inbound (destroying it while work still waits for it is fine).
std::shared_ptr<void> make_event(bool timing);
inline cudaEvent_t event_of(const std::shared_ptr<void>& p) { return static_cast<cudaEvent_t>(p.get()); }

// An Inbound's `timing`: events around one transfer on the receiving device.
struct TransferEvents {
  std::shared_ptr<void> start, end;
};

// A stream for transfers: highest priority, so that the block scheduler starts a NCCL kernel
// as soon as SMs free up instead of behind the queued compute blocks.
cudaStream_t make_transfer_stream();

// Runs fn with `device` current, restoring the caller's device.
template <typename F>
void on_device(int device, F&& fn) {
  int previous = 0;
  TROUPE_CUDA_CHECK(cudaGetDevice(&previous));
  TROUPE_CUDA_CHECK(cudaSetDevice(device));
  fn();
  TROUPE_CUDA_CHECK(cudaSetDevice(previous));
}

// Freed transfer buffers stay in the device's pool (the default threshold hands memory back
// to the driver at every synchronization, and the next allocation pays for it again).
// A block freed on one stream is reused on another only once its free has run, never by
// making the allocating stream wait for the freeing one: transfer buffers are allocated on
// one stream (compute, receive) and freed on another (send, compute), and such a hidden wait
// would tie a stage's compute to its transfers and, through NCCL, to the other stages.
void keep_pool_memory(int device);

}  // namespace troupe::actors::cuda
