// Channels between two GPUs over NCCL send/recv (internal to actors/fabric/cuda/): both ends in this
// process (cuda::make_channel), or one end here and the other in another process
// (cuda::make_process_channel, through the Fabric).
#pragma once

#include <nccl.h>

#include <memory>

#include "actors/fabric/device_services.hpp"

namespace troupe::actors::cuda {

// Both ends here: `src` sends to `dst` (different devices).
std::unique_ptr<Channel> make_nccl_channel(int src, int dst, bool timing);
// One end here, on `device`: the sender (NCCL rank 0) or the receiver (rank 1) of a two-rank
// communicator whose other rank is in another process with the same id.
std::unique_ptr<Channel> make_nccl_channel_end(bool sending, int device, const ncclUniqueId& id, bool timing);

}  // namespace troupe::actors::cuda
