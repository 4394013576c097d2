// CLI11 validators for the commands' integer flags, refused at parse time with the flag's name
// and the value given: a size (layers, heads, batch) must be positive, a count or interval
// non-negative. No 0-as-unset surprise: `--num-layers 0` is an error, not the preset's layers.
//
//   cmd->add_option("--num-layers", o->num_layers)->check(positive_count());
//   cmd->add_option("--train-iters", o->train_iters)->check(non_negative_count());
#pragma once

#include <CLI/CLI.hpp>

namespace troupe::apps {

CLI::Validator positive_count();      // an integer >= 1
CLI::Validator non_negative_count();  // an integer >= 0

}  // namespace troupe::apps
