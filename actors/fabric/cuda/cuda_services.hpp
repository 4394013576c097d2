// The CUDA side of actors/fabric/device_services.hpp (defined in cuda_services.cpp, built only with
// the CUDA backend). Plain C++: callers never see a CUDA or NCCL type.
#pragma once

#include <cstdint>
#include <vector>

#include "actors/fabric/device_services.hpp"

namespace troupe::actors::cuda {

std::unique_ptr<CompletionQueue> make_completion_queue(const Context& ctx, bool timing,
                                                       std::chrono::steady_clock::time_point epoch);
Tensor buffer_alloc(const Context& ctx, DType dtype, Shape shape);
void buffer_free(const Context& ctx, const Tensor& t);
Tensor buffer_upload(const Context& ctx, const Tensor& host);
// Same device: a hand-over behind an event; different devices: NCCL.
std::unique_ptr<Channel> make_channel(const Context& from, const Context& to, bool timing);
// A fresh ncclUniqueId, as bytes: made by one process, handed to the others.
std::vector<uint8_t> nccl_unique_id();
// One end of a channel whose other end is in another process (NCCL send/recv on a two-rank
// communicator: rank 0 sends, rank 1 receives); both processes pass the same id.
std::unique_ptr<Channel> make_process_channel(bool sending, const Context& ctx, const std::vector<uint8_t>& id,
                                              bool timing);
// Work enqueued on ctx from now on waits for `event` (an Inbound's ready event, of any device).
void stream_wait(const Context& ctx, const std::shared_ptr<void>& event);
// Different devices: an NCCL all-reduce over a two-rank communicator.
std::unique_ptr<PairReducer> make_nccl_pair_reducer(const Context& rank0, const Context& rank1);

}  // namespace troupe::actors::cuda
