// A stream-ordered device buffer for an op's scratch (sort keys, pointer arrays): allocated
// with cudaMallocAsync on the context's stream and released there when it goes out of scope,
// so it costs no device synchronization (a plain Tensor's cudaFree would wait for the GPU).
#pragma once

#include <cstddef>

#include "kernels/cuda/cuda_state.cuh"

namespace troupe::cuda {

template <typename T>
class StreamBuffer {
 public:
  StreamBuffer(cudaStream_t stream, size_t count) : stream_(stream) {
    if (count > 0) TROUPE_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&ptr_), count * sizeof(T), stream_));
  }
  ~StreamBuffer() {
    if (ptr_) cudaFreeAsync(ptr_, stream_);  // no throw from a destructor
  }
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  T* get() const { return ptr_; }

 private:
  cudaStream_t stream_;
  T* ptr_ = nullptr;
};

}  // namespace troupe::cuda
