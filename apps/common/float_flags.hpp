// CLI11 validators for the commands' float flags. An inf or NaN learning rate, epsilon,
// beta, dropout or init std trains a model of NaNs (or nothing, every step skipped): such a
// value is refused when the flags are parsed, with the flag's name. The run computes in
// 32-bit floats, so a value past their range (1e39) counts as inf.
//
//   cmd->add_option("--lr", o->lr)->check(finite_float());
//   cmd->add_option("--adam-eps", o->adam_eps)->check(positive_finite_float());
#pragma once

#include <CLI/CLI.hpp>

namespace troupe::apps {

CLI::Validator finite_float();
CLI::Validator positive_finite_float();      // also > 0
CLI::Validator non_negative_finite_float();  // also >= 0

}  // namespace troupe::apps
