// What an iteration of an MoE model reports about its routers (Megatron's track_moe_metrics):
// the chunks' per-layer sums (GptChunk::take_moe_stats) over microbatches and data-parallel
// replicas, turned into the log line's numbers.
//
//   MoeIterationStats s = summarize_moe_stats(chunk.take_moe_stats());
//   s.load_balancing_loss;   // mean over MoE layers and microbatches of aux_loss / coeff
#pragma once

#include <cstdint>
#include <vector>

#include "model/gpt_chunk.hpp"

namespace troupe {

// One MoE layer's expert load over an iteration.
struct MoeExpertLoad {
  int layer = 0;           // global
  int64_t tokens_max = 0;  // the most (token, choice) pairs one expert got in one microbatch
  double tokens_mean = 0;  // the mean per expert and microbatch
};

struct MoeIterationStats {
  double load_balancing_loss = 0;            // Megatron's load_balancing_loss (0 without a load-balancing loss)
  double z_loss = 0;                         // Megatron's z_loss (0 without --moe-z-loss-coeff)
  std::vector<MoeExpertLoad> expert_load{};  // per MoE layer, in layer order; empty: a dense model
  bool any() const { return !expert_load.empty(); }
};

// `per_layer`: every chunk's take_moe_stats() of the iteration (replicas of a layer are summed).
MoeIterationStats summarize_moe_stats(const std::vector<MoeLayerStats>& per_layer);

}  // namespace troupe
