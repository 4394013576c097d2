// cuda::upload_async (kernels/cuda/host_upload.hpp): host bytes of any length, across the 3 KiB
// launches and at odd offsets, land on the device as they were, and the host buffer may be
// overwritten as soon as the call returns.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cuda/host_upload.hpp"
#include "kernels/tensor.hpp"

namespace troupe {
namespace {

TEST(HostUploadCuda, BytesArriveAsTheyWere) {
  const Context ctx = Context::cuda(0);
  for (const int64_t n : {int64_t(1), int64_t(7), int64_t(3071), int64_t(3072), int64_t(3073), int64_t(10000)}) {
    for (const int64_t offset : {int64_t(0), int64_t(5)}) {
      const Tensor dst = Tensor::empty(ctx, DType::u8, {n + offset});
      std::vector<uint8_t> host(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) host[size_t(i)] = uint8_t((i * 131 + n) % 251);
      cuda::upload_async(ctx, static_cast<uint8_t*>(dst.data()) + offset, host.data(), size_t(n));
      const std::vector<uint8_t> sent = host;
      std::fill(host.begin(), host.end(), uint8_t(0));  // reused at once
      const Tensor back = Tensor::host(DType::u8, {n + offset});
      copy(ctx, dst, back);
      ctx.synchronize();
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(back.data_as<uint8_t>()[offset + i], sent[size_t(i)])
            << n << " bytes at offset " << offset << ", byte " << i;
    }
  }
  cuda::upload_async(ctx, nullptr, nullptr, 0);  // nothing to do
}

}  // namespace
}  // namespace troupe
