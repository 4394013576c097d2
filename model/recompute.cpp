#include "model/recompute.hpp"

#include <algorithm>

#include "base/check.hpp"

namespace troupe {

namespace {

// Megatron's recompute modules that recompute parts this model does not have yet.
struct MissingModule {
  const char* name;
  const char* why;
};
constexpr MissingModule kMissingModules[] = {
    {"moe", "mixture of experts layers are not recomputed (the MoE MLP keeps its activations)"},
    {"moe_act", "mixture of experts layers are not recomputed (the MoE MLP keeps its activations)"},
    {"shared_experts", "mixture of experts layers are not recomputed (the MoE MLP keeps its activations)"},
    {"mla_up_proj", "multi-latent attention is not implemented"},
    {"gdn_norm_out", "gated delta-net attention is not implemented"},
    {"gdp_in_proj", "gated delta-product attention is not implemented"},
    {"gdp_qkv", "gated delta-product attention is not implemented"},
    {"mhc", "hyper-connections are not implemented"},
};

RecomputeModules modules_from_names(const std::vector<std::string>& names) {
  RecomputeModules m;
  for (const std::string& name : names) {
    if (name == "core_attn") {
      m.core_attn = true;
    } else if (name == "layernorm") {
      m.layernorm = true;
    } else if (name == "mlp") {
      m.mlp = true;
    } else {
      for (const MissingModule& missing : kMissingModules)
        TROUPE_CHECK(name != missing.name, "--recompute-modules ", name, ": ", missing.why,
                     ", so there is nothing to recompute; use core_attn, layernorm or mlp");
      TROUPE_FAIL("--recompute-modules ", name,
                  " is not a module Troupe can recompute: use core_attn, layernorm or mlp");
    }
  }
  return m;
}

}  // namespace

RecomputeConfig recompute_config_from_flags(const RecomputeFlags& f) {
  RecomputeConfig r;
  if (f.recompute_activations) {
    // Megatron's --recompute-activations sets selective; a full granularity beside it would be
    // silently overridden there: refused here.
    TROUPE_CHECK(f.granularity.empty() || f.granularity == "selective", "--recompute-activations (selective) and ",
                 "--recompute-granularity ", f.granularity, " conflict: give one of them");
    r.granularity = RecomputeGranularity::selective;
  } else if (f.granularity == "full") {
    r.granularity = RecomputeGranularity::full;
  } else if (f.granularity == "selective") {
    r.granularity = RecomputeGranularity::selective;
  } else {
    TROUPE_CHECK(f.granularity.empty(), "--recompute-granularity ", f.granularity, ": use full or selective");
  }
  const bool full = r.granularity == RecomputeGranularity::full;
  const bool selective = r.granularity == RecomputeGranularity::selective;

  if (!f.method.empty()) {
    TROUPE_CHECK(f.method == "uniform" || f.method == "block", "--recompute-method ", f.method,
                 ": use uniform or block");
    TROUPE_CHECK(full, "--recompute-method ", f.method,
                 " needs --recompute-granularity full (selective recompute works on every layer)");
    r.method = f.method == "uniform" ? RecomputeMethod::uniform : RecomputeMethod::block;
  }
  if (f.num_layers) {
    TROUPE_CHECK(full, "--recompute-num-layers ", *f.num_layers, " needs --recompute-granularity full");
    TROUPE_CHECK(*f.num_layers >= 1, "--recompute-num-layers must be at least 1, got ", *f.num_layers);
    r.num_layers = *f.num_layers;
  }
  if (full) {
    TROUPE_CHECK(r.method != RecomputeMethod::none,
                 "--recompute-granularity full needs --recompute-method uniform or block");
    TROUPE_CHECK(r.num_layers > 0, "--recompute-granularity full needs --recompute-num-layers N (",
                 r.method == RecomputeMethod::uniform ? "layers per recomputed group" : "layers recomputed per chunk",
                 ")");
  }
  if (!f.modules.empty()) {
    r.modules = modules_from_names(f.modules);  // names checked first: "moe" is refused as such
    TROUPE_CHECK(selective, "--recompute-modules needs --recompute-granularity selective (or --recompute-activations)");
  } else if (selective) {
    r.modules.core_attn = true;  // Megatron's default
  }
  return r;
}

void check_recompute(const RecomputeConfig& r, int most_chunk_layers) {
  if (r.granularity != RecomputeGranularity::full) return;
  TROUPE_CHECK(r.num_layers >= 1, "--recompute-num-layers must be at least 1, got ", r.num_layers);
  // Uniform groups longer than the chunk are the whole chunk (Megatron's); block counts layers.
  TROUPE_CHECK(r.method != RecomputeMethod::block || r.num_layers <= most_chunk_layers, "--recompute-num-layers ",
               r.num_layers, " with --recompute-method block is more than the ", most_chunk_layers,
               " layers of a pipeline chunk: use at most ", most_chunk_layers);
}

std::string recompute_description(const RecomputeConfig& r) {
  switch (r.granularity) {
    case RecomputeGranularity::none:
      return "none";
    case RecomputeGranularity::full:
      return std::string("full ") + (r.method == RecomputeMethod::uniform ? "uniform " : "block ") +
             std::to_string(r.num_layers);
    case RecomputeGranularity::selective:
      break;
  }
  std::string s = "selective";
  if (r.modules.core_attn) s += " core_attn";
  if (r.modules.layernorm) s += " layernorm";
  if (r.modules.mlp) s += " mlp";
  return s;
}

std::vector<LayerRecompute> recompute_plan(const RecomputeConfig& r, int chunk_layers) {
  TROUPE_CHECK(r.granularity != RecomputeGranularity::full || r.num_layers >= 1,
               "--recompute-num-layers must be at least 1, got ", r.num_layers);
  std::vector<LayerRecompute> plan(size_t(std::max(chunk_layers, 0)));
  for (int i = 0; i < chunk_layers; ++i) {
    LayerRecompute& p = plan[size_t(i)];
    RecomputedTensors& t = p.tensors;
    if (r.granularity == RecomputeGranularity::full) {
      if (r.method == RecomputeMethod::uniform) {
        p.full = true;
        p.group_begin = i / r.num_layers * r.num_layers;
        p.group_end = std::min(p.group_begin + r.num_layers, chunk_layers);
      } else if (i < r.num_layers) {
        p.full = true;
        p.group_begin = i;
        p.group_end = i + 1;
      }
      if (p.full) {
        t = {.input = i > p.group_begin,
             .output = i + 1 < p.group_end,
             .ln1 = true,
             .qkv = true,
             .core_attn = true,
             .x_mid = true,
             .ln2 = true,
             .mlp = true};
        p.slot = i - p.group_begin;
      }
    } else if (r.granularity == RecomputeGranularity::selective) {
      p.modules = r.modules;
      t.core_attn = r.modules.core_attn;
      t.ln1 = r.modules.layernorm;
      // The MLP recomputes from the residual after attention: the pre-MLP norm too.
      t.ln2 = r.modules.layernorm || r.modules.mlp;
      t.mlp = r.modules.mlp;
    }
  }
  return plan;
}

void assign_recomputed(const RecomputedTensors& which, const LayerActivations& from, LayerActivations& to) {
  if (which.ln1) {
    to.ln1 = from.ln1;
    to.ln1_mean = from.ln1_mean;
    to.ln1_rstd = from.ln1_rstd;
  }
  if (which.qkv) {
    to.qkv = from.qkv;
    to.qk = from.qk;
    to.q_rstd = from.q_rstd;
    to.k_rstd = from.k_rstd;
  }
  if (which.core_attn) {
    to.attn = from.attn;
    to.lse = from.lse;
  }
  if (which.x_mid) to.x_mid = from.x_mid;
  if (which.ln2) {
    to.ln2 = from.ln2;
    to.ln2_mean = from.ln2_mean;
    to.ln2_rstd = from.ln2_rstd;
  }
  if (which.mlp) {
    to.fc1 = from.fc1;
    to.act = from.act;
  }
}

}  // namespace troupe
