#include "model/fp8/fp8_recipe.hpp"

#include "base/check.hpp"

namespace troupe {

Fp8Recipe fp8_recipe_from_flags(const Fp8Flags& f) {
  Fp8Recipe r;
  if (f.format.empty()) return r;
  TROUPE_CHECK(f.format == "e4m3" || f.format == "hybrid", "--fp8-format ", f.format, " is not one of e4m3, hybrid");
  r.enabled = true;
  r.backward = f.format == "hybrid" ? Fp8Format::e5m2 : Fp8Format::e4m3;
  if (f.recipe == "delayed") {
    r.scaling = Fp8ScalingKind::delayed;
  } else if (f.recipe == "tensorwise") {
    r.scaling = Fp8ScalingKind::tensorwise;
    TROUPE_CHECK(f.margin == 0, "--fp8-margin ", f.margin,
                 " with --fp8-recipe tensorwise: Megatron's current scaling takes no margin");
  } else {
    TROUPE_CHECK(f.recipe != "mxfp8" && f.recipe != "blockwise" && f.recipe != "custom", "--fp8-recipe ", f.recipe,
                 " is not implemented: use delayed or tensorwise");
    TROUPE_FAIL("--fp8-recipe ", f.recipe, " is not one of delayed, tensorwise");
  }
  TROUPE_CHECK(f.amax_history_len >= 1, "--fp8-amax-history-len must be at least 1, got ", f.amax_history_len);
  TROUPE_CHECK(f.amax_compute_algo == "max" || f.amax_compute_algo == "most_recent", "--fp8-amax-compute-algo ",
               f.amax_compute_algo, " is not one of max, most_recent");
  r.amax_history_len = f.amax_history_len;
  r.amax_max = f.amax_compute_algo == "max";
  r.margin = f.margin;
  r.wgrad = !f.no_wgrad;
  return r;
}

std::string fp8_recipe_str(const Fp8Recipe& r) {
  if (!r.enabled) return "off";
  std::string s = r.backward == Fp8Format::e5m2 ? "hybrid" : "e4m3";
  if (r.scaling == Fp8ScalingKind::tensorwise) {
    s += "/tensorwise";
  } else {
    s += str_cat("/delayed (history ", r.amax_history_len, ", ", r.amax_max ? "max" : "most_recent", ", margin ",
                 r.margin, ")");
  }
  if (!r.wgrad) s += ", weight gradients in the compute dtype";
  return s;
}

}  // namespace troupe
