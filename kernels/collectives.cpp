#include "kernels/collectives.hpp"

#include "base/check.hpp"

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
  if (ctx.is_cuda()) {
    const Tensor send_dev = Tensor::empty(ctx, DType::i64, {size}), recv_dev = Tensor::empty(ctx, DType::i64, {size});
    copy(ctx, send, send_dev);
    comm.all_to_all(ctx, send_dev, recv_dev);
    copy(ctx, recv_dev, recv);
    ctx.synchronize();  // recv (and send, still being read) belong to us again
  } else {
    comm.all_to_all(ctx, send, recv);
  }
  const auto* got = recv.data_as<int64_t>();
  return {got, got + size};
}

}  // namespace troupe
