// The FP8 recipe: which formats the linear layers' GEMMs take and how their scales follow the
// amaxes. Megatron-LM's flags (Transformer Engine's DelayedScaling / Float8CurrentScaling):
//
//   --fp8-format e4m3|hybrid      e4m3 everywhere, or e4m3 forward (inputs, weights) and e5m2
//                                 for the output gradients
//   --fp8-recipe delayed|tensorwise
//                                 delayed: each tensor's scale from the amaxes of the last
//                                 --fp8-amax-history-len steps (--fp8-amax-compute-algo max) or
//                                 the newest (most_recent), updated after each optimizer step;
//                                 tensorwise: from the tensor's own amax at each cast
//   --fp8-margin N                scale = fp8_max / amax / 2^N (delayed only, as Megatron)
//   --no-fp8-wgrad                the weight-gradient GEMM in the compute dtype
//
//   Fp8Recipe r = fp8_recipe_from_flags({.format = "hybrid", .recipe = "delayed"});
#pragma once

#include <string>

#include "kernels/fp8.hpp"

namespace troupe {

enum class Fp8ScalingKind { delayed, tensorwise };

struct Fp8Recipe {
  bool enabled = false;                  // --fp8-format given
  Fp8Format forward = Fp8Format::e4m3;   // inputs and weights
  Fp8Format backward = Fp8Format::e4m3;  // output gradients (e5m2 under hybrid)
  Fp8ScalingKind scaling = Fp8ScalingKind::delayed;
  int amax_history_len = 1;
  bool amax_max = false;  // --fp8-amax-compute-algo max (else most_recent)
  int margin = 0;
  bool wgrad = true;  // the weight-gradient GEMM in FP8 (--no-fp8-wgrad: false)
  // Not a flag (tests compare both): the casts' amaxes folded into the casts, and the casts of
  // the linears' inputs into the ops that produce them (ln1, ln2, the GELU: Fp8Linears::
  // input_cast); false runs each amax and cast as a pass of its own. The same bytes either way.
  bool fuse_casts = true;
};

// The flags as given (Megatron's defaults where absent).
struct Fp8Flags {
  std::string format;  // "" (off), "e4m3" or "hybrid"
  std::string recipe = "delayed";
  int amax_history_len = 1;
  std::string amax_compute_algo = "most_recent";
  int margin = 0;
  bool no_wgrad = false;
};

// Throws naming the flag: an unknown or unimplemented value (mxfp8, blockwise, custom), a
// history length below 1, a margin with tensorwise (Megatron's current scaling takes none).
Fp8Recipe fp8_recipe_from_flags(const Fp8Flags& flags);
// "hybrid/delayed (history 16, max, margin 0)": for the log line at the start of a run.
std::string fp8_recipe_str(const Fp8Recipe& recipe);

}  // namespace troupe
