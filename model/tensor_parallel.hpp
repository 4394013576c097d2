// A model's tensor-parallel group as the model code sees it: this rank's shard of the layout
// and the group's collectives. Training chunks (model/gpt_chunk.hpp) and inference models
// (model/inference/inference_model.hpp) take one.
//
//   TensorParallel tp{{rank, size}, /*sequence_parallel=*/false, group[rank].get()};
#pragma once

#include "kernels/collectives.hpp"
#include "model/param_layout.hpp"

namespace troupe {

struct TensorParallel {
  TensorShard shard;               // rank and size (--tensor-model-parallel-size)
  bool sequence_parallel = false;  // --sequence-parallel
  Collectives* comm = nullptr;     // the group's collectives (needed when shard.size > 1)
  // MoE expert parallelism (--expert-model-parallel-size, carved from the data ranks): this
  // rank's experts and the expert group's collectives (needed when expert.size > 1).
  ExpertShard expert{};
  Collectives* expert_comm = nullptr;
};

}  // namespace troupe
