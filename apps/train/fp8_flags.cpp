#include "apps/train/fp8_flags.hpp"

namespace troupe::apps {

// The values are checked by fp8_recipe_from_flags, which names what is not implemented
// (mxfp8, blockwise) apart from what does not exist.
void add_fp8_flags(CLI::App* cmd, Fp8Flags& f) {
  cmd->option_defaults()->group("FP8 training (docs/train.md#fp8-training)");
  cmd->add_option("--fp8-format", f.format,
                  "run the transformer layers' linear GEMMs in FP8: e4m3, or hybrid (e5m2 output gradients)");
  cmd->add_option("--fp8-recipe", f.recipe, "delayed (scales from an amax history) or tensorwise (current scaling)");
  cmd->add_option("--fp8-amax-history-len", f.amax_history_len, "steps of amax history (delayed)");
  cmd->add_option("--fp8-amax-compute-algo", f.amax_compute_algo, "max (over the history) or most_recent (delayed)");
  cmd->add_option("--fp8-margin", f.margin, "scale = fp8 max / amax / 2^margin (delayed)");
  cmd->add_flag("--no-fp8-wgrad", f.no_wgrad, "compute the weight gradients in the compute dtype, not FP8");
}

}  // namespace troupe::apps
