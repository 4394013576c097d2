// copy_row_blocks on CUDA (kernels/row_blocks.hpp): the blocks' row ranges uploaded without the
// host waiting (host_upload.hpp), then one launch. Grid: x strides over a block's words, y is
// the block; 16-byte words where the rows and pointers allow, else bytes.
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/host_upload.hpp"
#include "kernels/cuda/stream_buffer.cuh"
#include "kernels/row_blocks.hpp"

namespace troupe::cuda {

namespace {

constexpr int kThreads = 256;
constexpr unsigned kMaxBlocksX = 64;

template <typename Word>
__global__ void copy_row_blocks_kernel(const Word* __restrict__ src, Word* __restrict__ dst,
                                       const RowBlock* __restrict__ blocks, int64_t row_words) {
  const RowBlock b = blocks[blockIdx.y];
  const int64_t n = b.rows * row_words;
  const Word* from = src + b.from * row_words;
  Word* to = dst + b.to * row_words;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    to[i] = from[i];
}

template <typename Word>
void launch(cudaStream_t stream, const Tensor& src, const Tensor& dst, const RowBlock* blocks, unsigned count,
            int64_t row_words, int64_t most_rows) {
  const int64_t words = most_rows * row_words;
  const unsigned x = unsigned(std::min<int64_t>((words + kThreads - 1) / kThreads, kMaxBlocksX));
  copy_row_blocks_kernel<Word><<<dim3(std::max(x, 1u), count), kThreads, 0, stream>>>(
      static_cast<const Word*>(src.data()), static_cast<Word*>(dst.data()), blocks, row_words);
  TROUPE_CUDA_CHECK_LAUNCH();
}

}  // namespace

void copy_row_blocks(const Context& ctx, const Tensor& src, const Tensor& dst, const std::vector<RowBlock>& blocks) {
  std::vector<RowBlock> work;
  int64_t most_rows = 0;
  for (const RowBlock& b : blocks)
    if (b.rows > 0) {
      work.push_back(b);
      most_rows = std::max(most_rows, b.rows);
    }
  if (work.empty()) return;
  cudaStream_t stream = stream_of(ctx);
  const int64_t row_bytes = src.dim(1) * int64_t(dtype_size(src.dtype()));
  StreamBuffer<RowBlock> device(stream, work.size());
  upload_async(ctx, device.get(), work.data(), work.size() * sizeof(RowBlock));
  const bool wide = row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(src.data()) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(dst.data()) % 16 == 0;
  for (size_t at = 0; at < work.size(); at += 65535) {  // the grid's y limit
    const unsigned count = unsigned(std::min<size_t>(65535, work.size() - at));
    if (wide)
      launch<uint4>(stream, src, dst, device.get() + at, count, row_bytes / 16, most_rows);
    else
      launch<unsigned char>(stream, src, dst, device.get() + at, count, row_bytes, most_rows);
  }
}

}  // namespace troupe::cuda
