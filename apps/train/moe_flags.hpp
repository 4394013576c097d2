// `troupe train`'s mixture-of-experts flags (Megatron-LM's --num-experts and --moe-*), read into
// GptConfig::moe. What a run refuses of them lives beside the other layout checks: expert
// and expert-tensor parallelism's layouts (actors/train/training_run.cpp), the experts' widths
// under tensor parallelism (GptConfig::validate_tensor_parallel).
//
//   MoeFlags moe;
//   add_moe_flags(cmd, moe);                  // registers the flags on `troupe train`
//   ... parse ...
//   config.moe = moe_config_from_flags(moe);  // throws naming a flag given without --num-experts
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "model/moe/moe_config.hpp"

namespace troupe::apps {

struct MoeFlags {
  int num_experts = 0;
  int expert_model_parallel_size = 1;         // --expert-model-parallel-size: experts split over data ranks
  int expert_tensor_parallel_size = 0;        // --expert-tensor-parallel-size; 0: --tensor-model-parallel-size
  bool shared_expert_overlap = false;         // --moe-shared-expert-overlap
  bool all_to_all_on_compute_stream = false;  // --moe-all-to-all-on-compute-stream
  bool overlap_expert_parallel_comm = false;  // --overlap-moe-expert-parallel-comm
  int topk = 2;
  std::string load_balancing = "aux_loss";
  float aux_loss_coeff = 0.0f;
  float z_loss_coeff = 0.0f;
  int ffn_hidden_size = 0;
  int shared_expert_intermediate_size = 0;
  bool shared_expert_gate = false;
  std::string layer_freq = "1";
  std::string score_function = "softmax";
  bool pre_softmax = false;
  bool enable_expert_bias = false;
  float bias_update_rate = 1e-3f;
  float topk_scaling_factor = 0.0f;
  std::optional<double> capacity_factor;
  bool pad_to_capacity = false;
  std::string token_drop_policy = "probs";
  std::vector<const CLI::Option*> options;  // every --moe-* option: which ones a command line gave
};

void add_moe_flags(CLI::App* cmd, MoeFlags& flags);
// Throws naming the flag: a --moe-* flag without --num-experts, a value that is not one.
MoeConfig moe_config_from_flags(const MoeFlags& flags);

}  // namespace troupe::apps
