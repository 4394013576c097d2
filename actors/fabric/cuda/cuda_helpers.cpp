#include "actors/fabric/cuda/cuda_helpers.hpp"

#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "actors/fabric/cuda/cuda_services.hpp"

namespace troupe::actors::cuda {

void connect_pair(ncclComm_t comms[2], int d0, int d1, bool all_reduce) {
  void* buf[2] = {nullptr, nullptr};
  cudaStream_t streams[2] = {nullptr, nullptr};
  const int devices[2] = {d0, d1};
  for (int r = 0; r < 2; ++r) {
    TROUPE_CUDA_CHECK(cudaSetDevice(devices[r]));
    TROUPE_CUDA_CHECK(cudaMalloc(&buf[r], 64));
    TROUPE_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
  }
  TROUPE_NCCL_CHECK(ncclGroupStart());
  if (all_reduce) {
    for (int r = 0; r < 2; ++r)
      TROUPE_NCCL_CHECK(ncclAllReduce(buf[r], buf[r], 1, ncclFloat32, ncclSum, comms[r], streams[r]));
  } else {
    TROUPE_NCCL_CHECK(ncclSend(buf[0], 4, ncclInt8, 1, comms[0], streams[0]));
    TROUPE_NCCL_CHECK(ncclRecv(buf[1], 4, ncclInt8, 0, comms[1], streams[1]));
  }
  TROUPE_NCCL_CHECK(ncclGroupEnd());
  for (int r = 0; r < 2; ++r) {
    TROUPE_CUDA_CHECK(cudaSetDevice(devices[r]));
    TROUPE_CUDA_CHECK(cudaStreamSynchronize(streams[r]));
    TROUPE_CUDA_CHECK(cudaStreamDestroy(streams[r]));
    TROUPE_CUDA_CHECK(cudaFree(buf[r]));
  }
}

void connect_pair_end(ncclComm_t comm, int rank, int device) {
  on_device(device, [&] {
    void* buf = nullptr;
    cudaStream_t stream = nullptr;
    TROUPE_CUDA_CHECK(cudaMalloc(&buf, 64));
    TROUPE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    if (rank == 0)
      TROUPE_NCCL_CHECK(ncclSend(buf, 4, ncclInt8, 1, comm, stream), "connecting a channel's sender");
    else
      TROUPE_NCCL_CHECK(ncclRecv(buf, 4, ncclInt8, 0, comm, stream), "connecting a channel's receiver");
    TROUPE_CUDA_CHECK(cudaStreamSynchronize(stream));
    TROUPE_CUDA_CHECK(cudaStreamDestroy(stream));
    TROUPE_CUDA_CHECK(cudaFree(buf));
  });
}

std::vector<uint8_t> nccl_unique_id() {
  ncclUniqueId id;
  TROUPE_NCCL_CHECK(ncclGetUniqueId(&id), "a new NCCL unique id");
  const auto* p = reinterpret_cast<const uint8_t*>(&id);
  return std::vector<uint8_t>(p, p + sizeof(id));
}

ncclUniqueId nccl_id_from_bytes(const std::vector<uint8_t>& bytes) {
  ncclUniqueId id;
  TROUPE_CHECK(bytes.size() == sizeof(id), "an NCCL unique id of ", bytes.size(), " bytes, expected ", sizeof(id));
  std::memcpy(&id, bytes.data(), sizeof(id));
  return id;
}

std::shared_ptr<void> make_event(bool timing) {
  cudaEvent_t e = nullptr;
  TROUPE_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  return std::shared_ptr<void>(e, [](void* p) { cudaEventDestroy(static_cast<cudaEvent_t>(p)); });
}

cudaStream_t make_transfer_stream() {
  int least = 0, greatest = 0;
  TROUPE_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t s = nullptr;
  TROUPE_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest));
  return s;
}

void keep_pool_memory(int device) {
  static std::mutex mu;
  static std::vector<int> done;
  std::lock_guard<std::mutex> lock(mu);
  for (int d : done)
    if (d == device) return;
  cudaMemPool_t pool = nullptr;
  TROUPE_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  uint64_t threshold = UINT64_MAX;
  TROUPE_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  int no_internal_dependencies = 0;
  TROUPE_CUDA_CHECK(
      cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &no_internal_dependencies));
  done.push_back(device);
}

}  // namespace troupe::actors::cuda
