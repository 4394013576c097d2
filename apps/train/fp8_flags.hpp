// `troupe train`'s FP8 flags (Megatron-LM's --fp8-*, Transformer Engine's recipes), read into
// TrainingConfig::fp8 (model/fp8/fp8_recipe.hpp says what each does). --fp8-param-gather,
// --first-last-layers-bf16 and the mxfp8 / blockwise recipes are refused by name.
//
//   Fp8Flags fp8;
//   add_fp8_flags(cmd, fp8);                   // registers the flags on `troupe train`
//   ... parse ...
//   cfg.fp8 = fp8_recipe_from_flags(fp8);      // throws naming a flag with a value not implemented
#pragma once

#include <CLI/CLI.hpp>

#include "model/fp8/fp8_recipe.hpp"

namespace troupe::apps {

void add_fp8_flags(CLI::App* cmd, Fp8Flags& flags);

}  // namespace troupe::apps
