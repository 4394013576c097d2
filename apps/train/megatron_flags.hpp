// Megatron-LM flags of `pretrain_gpt.py` that `troupe train` accepts without implementing them:
// ONE table (flag -> status -> note) that registers them on the command line, checks what a run
// gave (a note for each flag that changes nothing here, an error for one that would change the
// math and is not implemented) and writes docs/megatron-flags.md (megatron_flags_markdown()).
// The flags Troupe implements are ordinary options of apps/train_command.cpp.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace troupe::apps {

enum class MegatronFlagStatus {
  no_effect,    // accepted: a kernel-fusion switch, an implementation choice, Troupe's default
  only_values,  // accepted with one of `values` (no effect then); any other value is an error
  refused,      // changes the math and is not implemented: an error naming it
};

struct MegatronFlag {
  const char* name;  // "--use-flash-attn"
  int arity;         // 0: a switch; n > 0: n values; -1: one or more values
  MegatronFlagStatus status;
  const char* values;  // only_values: the accepted values, "a|b"
  const char* note;    // why it has no effect, or what to do instead
};

// The table, in the order of docs/megatron-flags.md.
const std::vector<MegatronFlag>& megatron_flags();

// What a command line gave of the table's flags: name -> values ("" for a switch).
using GivenMegatronFlags = std::map<std::string, std::vector<std::string>>;

// Registers every flag of the table on `cmd` (in the "Megatron compatibility" help group).
void add_megatron_compat_flags(CLI::App* cmd, const std::shared_ptr<GivenMegatronFlags>& given);

// Fails naming the first refused flag (or a value not accepted); returns one note line per
// accepted flag, "note: --X has no effect here: ...".
std::vector<std::string> check_megatron_flags(const GivenMegatronFlags& given);

// docs/megatron-flags.md, generated from the table (a test keeps the file up to date).
std::string megatron_flags_markdown();

}  // namespace troupe::apps
