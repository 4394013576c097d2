// Activation recomputation (Megatron's --recompute-* flags): which layers of a chunk, or which
// modules of every layer, keep only their inputs per microbatch and run their forward again right
// before their backward. Recomputed tensors live in one workspace per chunk (one stream, one
// backward at a time), so activation memory per microbatch in flight shrinks; the recomputed
// forward is bit-identical (dropout masks are counter-based: seed + offset).
//
//   RecomputeConfig r = recompute_config_from_flags({.granularity = "full", .method = "uniform",
//                                                    .num_layers = 1});
//   check_recompute(r, most_layers_of_a_chunk);             // refuses what no chunk can do
//   std::vector<LayerRecompute> plan = recompute_plan(r, layers_per_chunk);
//
// Megatron's semantics (megatron/core/recompute.py, transformer_config.py):
// - full + uniform N: the chunk's layers in groups of N (the last may be shorter); only each
//   group's input is kept, the whole group is recomputed before its backward.
// - full + block N: the first N layers of each chunk (virtual pipeline chunk) are recomputed one
//   by one from their inputs; the others keep everything.
// - selective: every layer recomputes the named modules: core_attn (the attention kernel's output
//   and log-sum-exp, from q, k, v), layernorm (both norms' outputs and statistics, from their
//   inputs), mlp (the pre-MLP norm, fc1 and the activation, from the residual after attention).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "model/activations.hpp"

namespace troupe {

enum class RecomputeGranularity { none, full, selective };
enum class RecomputeMethod { none, uniform, block };

struct RecomputeModules {
  bool core_attn = false, layernorm = false, mlp = false;
  bool any() const { return core_attn || layernorm || mlp; }
};

struct RecomputeConfig {
  RecomputeGranularity granularity = RecomputeGranularity::none;
  RecomputeMethod method = RecomputeMethod::none;  // full only
  int num_layers = 0;                              // full: uniform's group size, block's layers per chunk
  RecomputeModules modules{};                      // selective only
  bool enabled() const { return granularity != RecomputeGranularity::none; }
};

// The flags as given (empty / nullopt: not given), checked against each other.
struct RecomputeFlags {
  bool recompute_activations = false;  // --recompute-activations: selective
  std::string granularity{};           // --recompute-granularity full|selective
  std::string method{};                // --recompute-method uniform|block
  std::optional<int> num_layers{};     // --recompute-num-layers N
  std::vector<std::string> modules{};  // --recompute-modules core_attn layernorm mlp
};

// Fails naming the flag of a conflict (method or layers without full granularity, modules without
// selective, full without a method or a layer count, a module that is no module of this model).
RecomputeConfig recompute_config_from_flags(const RecomputeFlags& flags);

// Fails naming --recompute-num-layers when block recompute asks for more layers than any chunk
// has. (A chunk of an uneven pipeline split with fewer recomputes all of its layers, as Megatron.)
void check_recompute(const RecomputeConfig& config, int most_chunk_layers);

// "full uniform 1", "selective core_attn mlp", "none": for the run header.
std::string recompute_description(const RecomputeConfig& config);

// Which of a layer's activations are recomputed (not kept per microbatch).
struct RecomputedTensors {
  bool input = false;      // the layer's input, residual[i] (full: not the group's first layer)
  bool output = false;     // the layer's output, residual[i + 1] (full: not the group's last layer)
  bool ln1 = false;        // ln1, ln1_mean, ln1_rstd
  bool qkv = false;        // qkv, qk, q_rstd, k_rstd
  bool core_attn = false;  // attn, lse
  bool x_mid = false;      // the residual after attention
  bool ln2 = false;        // ln2, ln2_mean, ln2_rstd
  bool mlp = false;        // fc1, act
  bool any() const { return input || output || ln1 || qkv || core_attn || x_mid || ln2 || mlp; }
  void add(const RecomputedTensors& o) {
    input |= o.input, output |= o.output, ln1 |= o.ln1, qkv |= o.qkv, core_attn |= o.core_attn;
    x_mid |= o.x_mid, ln2 |= o.ln2, mlp |= o.mlp;
  }
};

struct LayerRecompute {
  bool full = false;                   // the whole layer runs again from its group's input
  int group_begin = 0, group_end = 0;  // full: chunk-local layers [begin, end) recomputed together
  RecomputeModules modules;            // selective: the modules recomputed
  RecomputedTensors tensors;           // what is not kept per microbatch
  int slot = 0;                        // the workspace slot of its recomputed tensors (full: i - begin)
};

// One entry per chunk-local layer (block recompute of more layers than the chunk has: all of them).
std::vector<LayerRecompute> recompute_plan(const RecomputeConfig& config, int chunk_layers);

// `to`'s recomputed tensors (per `which`) set to `from`'s: the workspace's before a layer runs,
// empty ones (from = {}) after.
void assign_recomputed(const RecomputedTensors& which, const LayerActivations& from, LayerActivations& to);

}  // namespace troupe
