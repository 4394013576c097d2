#include "apps/common/checkpoint_flags.hpp"

#include <cstdio>

#include "actors/fabric/fabric.hpp"
#include "base/check.hpp"
#include "storage/checkpoint_catalog.hpp"
#include "storage/checkpoint_ownership.hpp"

namespace troupe::apps {

CLI::Option* add_ckpt_step_flag(CLI::App* cmd, std::optional<int64_t>& step) {
  return cmd
      ->add_option("--ckpt-step", step,
                   "the checkpoint iteration --load reads (default: the newest, which the tracker names)")
      ->needs(cmd->get_option("--load"));
}

void add_train_checkpoint_flags(CLI::App* cmd, std::optional<int64_t>& step, bool& overwrite) {
  add_ckpt_step_flag(cmd, step);
  cmd->add_flag("--overwrite", overwrite,
                "let --save write into a directory with checkpoints this run does not go on from (another run's, "
                "or newer than the --ckpt-step loaded): its tracker is rewound to where this run starts and its "
                "iterations are replaced as this run saves them");
}

std::optional<int64_t> prepare_train_checkpoints(const TrainCheckpointFlags& f, actors::Fabric& fabric) {
  TROUPE_CHECK(!f.overwrite || !f.save.empty(), "--overwrite needs --save");
  std::optional<int64_t> loaded;
  if (!f.load.empty()) loaded = resolve_checkpoint_iteration(f.load, f.ckpt_step);
  const SaveDirClaim claim = claim_checkpoint_save_dir({.save = f.save,
                                                        .load = f.load,
                                                        .loaded = loaded,
                                                        .start = loaded && !f.finetune ? *loaded : 0,
                                                        .overwrite = f.overwrite});
  if (claim.rewind) {  // every process agrees: they all read the directory before it changes
    fabric.barrier();
    if (fabric.process() == 0) {
      rewind_checkpoint_tracker(f.save, claim.tracker);
      std::printf("%s\n", claim.note.c_str());
      std::fflush(stdout);
    }
    fabric.barrier();
  }
  return loaded;
}

}  // namespace troupe::apps
