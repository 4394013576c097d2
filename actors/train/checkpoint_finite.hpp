// A checkpoint of a diverged model is refused: before the checkpoint writer actor writes
// anything of a save, it scans the snapshot (host copies already, pinned memory) for inf/NaN,
// so a run whose weights went non-finite never replaces the last good checkpoint.
//
//   for (ChunkState& c : job.chunks) check_chunk_state_finite(c);   // throws naming the tensor
//   CheckpointWriter writer(job.root, job.iteration);               // only then
#pragma once

#include "actors/train/checkpoint_shards.hpp"

namespace troupe::actors {

// Throws troupe::Error naming the first tensor (prefix + parameter name, as the checkpoint
// would store it) holding an inf or NaN among the parameters' elements of `state`
// (the flat buffer's alignment padding, never stored, is not looked at).
void check_chunk_state_finite(const ChunkState& state);

}  // namespace troupe::actors
