// Who may save into a checkpoint directory, so that no run loses another's checkpoints.
//
// A directory of checkpoints belongs to the run that wrote it. `troupe train --save DIR` into a
// directory that already holds checkpoints (a tracker or an iter_* directory) is allowed only
// when the run goes on from it: it loads from DIR (--load DIR, the same directory after
// canonicalisation) and starts at or after DIR's newest checkpoint (the tracker's), so the
// tracker never moves back past a saved iteration. Anything else, a fresh run, a run loading
// another directory, --finetune, or --ckpt-step of an older iteration, is refused unless
// --overwrite is given. --overwrite rewinds DIR to where this run starts before it saves: the
// tracker names the loaded iteration (or is removed for a run that starts from iteration 0);
// the later iterations stay on disk, no longer named, until this run's saves replace them.
// `troupe convert --from hf --save DIR` never writes into a directory with checkpoints.
//
//   SaveDirClaim c = claim_checkpoint_save_dir({.save = "ckpt", .load = "ckpt", .loaded = 4, .start = 4});
//   if (c.rewind) rewind_checkpoint_tracker("ckpt", c.tracker);  // one process, before the first save
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace troupe {

struct SaveDirRequest {
  std::string save = {};                         // --save DIR
  std::string load = {};                         // --load DIR; "" without
  std::optional<int64_t> loaded = std::nullopt;  // the iteration read from --load
  int64_t start = 0;                             // where the run goes on from: `loaded`, or 0 (--finetune)
  bool overwrite = false;                        // --overwrite
};

struct SaveDirClaim {
  bool rewind = false;                            // (--overwrite) move the tracker before the first save
  std::optional<int64_t> tracker = std::nullopt;  // to this iteration; nullopt: remove it
  std::string note = {};                          // what the rewind does, one sentence for the log
};

// Whether the run `r` describes may save into r.save; throws when it may not, naming the
// directory, its newest checkpoint and the flags to use. Reads only.
SaveDirClaim claim_checkpoint_save_dir(const SaveDirRequest& r);

// Points the tracker of `root` at `iteration` (atomically), or removes it with nullopt.
void rewind_checkpoint_tracker(const std::string& root, std::optional<int64_t> iteration);

// Whether two paths name one directory (after canonicalisation; either may not exist yet).
bool same_checkpoint_dir(const std::string& a, const std::string& b);

// Throws unless `root` holds no checkpoints (no tracker, no iter_* directory), naming its newest
// one and `advice` (what to do instead).
void check_no_checkpoints(const std::string& root, const std::string& advice);

}  // namespace troupe
