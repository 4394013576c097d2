// The checkpoint flags several commands share: Megatron's --ckpt-step (the iteration --load
// reads instead of the tracker's) for `train`, `generate`, `serve` and `convert --to hf`; and,
// for `train`, --overwrite and the claim on --save's directory that goes with it
// (storage/checkpoint_ownership.hpp says who may save where).
//
//   add_ckpt_step_flag(cmd, o->ckpt_step);                       // after --load
//   const std::optional<int64_t> it = prepare_train_checkpoints(flags, *fabric);
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace troupe::actors {
class Fabric;
}  // namespace troupe::actors

namespace troupe::apps {

// --ckpt-step N: needs --load, which `cmd` must have already.
CLI::Option* add_ckpt_step_flag(CLI::App* cmd, std::optional<int64_t>& step);
// --ckpt-step and --overwrite, for `troupe train`.
void add_train_checkpoint_flags(CLI::App* cmd, std::optional<int64_t>& step, bool& overwrite);

struct TrainCheckpointFlags {
  std::string save = {}, load = {};                 // --save, --load
  std::optional<int64_t> ckpt_step = std::nullopt;  // --ckpt-step
  bool finetune = false;                            // --finetune: the run starts at iteration 0
  bool overwrite = false;                           // --overwrite
};

// Before a run: the iteration --load reads (nullopt without --load), once every process has
// checked that --save may write where it points; with --overwrite, process 0 then rewinds that
// directory's tracker (and prints what it did) while the others wait. Throws naming the
// directory, its newest checkpoint and the flags to use. Load that iteration explicitly: after
// a rewind the tracker may no longer name it.
std::optional<int64_t> prepare_train_checkpoints(const TrainCheckpointFlags& f, actors::Fabric& fabric);

}  // namespace troupe::apps
