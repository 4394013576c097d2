#include "kernels/collectives.hpp"

#include <cstddef>

#include "base/check.hpp"
#if TROUPE_HAVE_CUDA
#include "kernels/cuda/stream_alloc.hpp"
#endif

namespace troupe {

// Defaults for groups that do not move tokens (test doubles wrapping one collective): the
// backends in actors/fabric/ override both.
void Collectives::all_to_all(const Context& /*ctx*/, const Tensor& in, const Tensor& /*out*/) {
  TROUPE_FAIL("all_to_all of ", in.str(), ": this collective group does not implement it");
}

void Collectives::all_to_all_v(const Context& /*ctx*/, const Tensor& in, const std::vector<int64_t>& /*send_counts*/,
                               const Tensor& /*out*/, const std::vector<int64_t>& /*recv_counts*/) {
  TROUPE_FAIL("all_to_all_v of ", in.str(), ": this collective group does not implement it");
}

namespace {

// Runs `op` on device copies of the host tensors `in` and `out` (ctx a GPU), then brings `out`
// back and waits for ctx's stream; on the CPU on the tensors themselves. The copies live in
// stream-ordered memory (kernels/cuda/stream_alloc.hpp): a Tensor's cudaFree would wait for the
// whole device, its other streams' collectives (overlapped gradient reduction) included.
template <typename Op>
void through_device(const Context& ctx, const Tensor& in, const Tensor& out, const char* what, Op op) {
  TROUPE_CHECK(in.defined() && !in.is_cuda() && out.defined() && !out.is_cuda(), what, ": ",
               in.defined() ? in.str() : "(undefined)", " and ", out.defined() ? out.str() : "(undefined)",
               " must be host tensors");
  if (!ctx.is_cuda()) {
    op(in, out);
    return;
  }
#if TROUPE_HAVE_CUDA
  const bool in_place = in.data() == out.data();
  const size_t out_at = (in.nbytes() + 255) / 256 * 256;  // out's copy aligned as an allocation's start
  struct Block {
    const Context& ctx;
    void* ptr;
    ~Block() { cuda::stream_free(ctx, ptr); }
  } block{ctx, cuda::stream_alloc(ctx, in_place ? in.nbytes() : out_at + out.nbytes())};
  const Tensor in_dev = Tensor::wrap(block.ptr, in.dtype(), in.shape(), DeviceKind::cuda, ctx.device_index());
  const Tensor out_dev = in_place ? in_dev
                                  : Tensor::wrap(static_cast<std::byte*>(block.ptr) + out_at, out.dtype(), out.shape(),
                                                 DeviceKind::cuda, ctx.device_index());
  copy(ctx, in, in_dev);
  op(in_dev, out_dev);
  copy(ctx, out_dev, out);
  ctx.synchronize();  // out (and in, still being read) belong to the host again
#else
  TROUPE_FAIL(what, ": a GPU context in a build without CUDA");
#endif
}

}  // namespace

void host_all_to_all(const Context& ctx, Collectives& comm, const Tensor& in, const Tensor& out) {
  through_device(ctx, in, out, "host_all_to_all",
                 [&](const Tensor& i, const Tensor& o) { comm.all_to_all(ctx, i, o); });
}

void host_all_reduce(const Context& ctx, Collectives& comm, const Tensor& t, ReduceOp op) {
  through_device(ctx, t, t, "host_all_reduce", [&](const Tensor& i, const Tensor&) { comm.all_reduce(ctx, i, op); });
}

std::vector<int64_t> exchange_counts(const Context& ctx, Collectives& comm, const std::vector<int64_t>& send_counts) {
  const int64_t size = comm.size();
  TROUPE_CHECK(int64_t(send_counts.size()) == size, "exchange_counts: ", send_counts.size(),
               " send counts for a group of ", size, " members (one per member)");
  Tensor send = Tensor::host(DType::i64, {size}), recv = Tensor::host(DType::i64, {size});
  for (int64_t q = 0; q < size; ++q) {
    TROUPE_CHECK(send_counts[size_t(q)] >= 0, "exchange_counts: send count ", send_counts[size_t(q)], " for member ", q,
                 " is negative");
    send.data_as<int64_t>()[q] = send_counts[size_t(q)];
  }
  host_all_to_all(ctx, comm, send, recv);
  const auto* got = recv.data_as<int64_t>();
  return {got, got + size};
}

}  // namespace troupe
