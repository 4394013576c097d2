// kernels/cuda/host_upload.hpp.
#include <algorithm>
#include <cstring>

#include "kernels/cuda/cuda_state.cuh"
#include "kernels/cuda/host_upload.hpp"

namespace troupe::cuda {

namespace {

// Under the 4 KiB of parameters a kernel takes, with room for the other two.
constexpr size_t kUploadChunk = 3072;

struct UploadChunk {
  unsigned char bytes[kUploadChunk];
};

__global__ void write_chunk(UploadChunk src, unsigned char* dst, unsigned n) {
  for (unsigned i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src.bytes[i];
}

}  // namespace

void upload_async(const Context& ctx, void* dst, const void* src, size_t bytes) {
  auto* to = static_cast<unsigned char*>(dst);
  const auto* from = static_cast<const unsigned char*>(src);
  for (size_t at = 0; at < bytes; at += kUploadChunk) {
    const size_t n = std::min(kUploadChunk, bytes - at);
    UploadChunk chunk;
    std::memcpy(chunk.bytes, from + at, n);
    write_chunk<<<1, 256, 0, stream_of(ctx)>>>(chunk, to + at, unsigned(n));
    TROUPE_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace troupe::cuda
