// What a checkpoint directory holds, read without loading any tensor: its iteration
// directories, the tracker, which checkpoints are intact, and which iteration a `--load`
// reads (Megatron's `--ckpt-step N`, else the tracker's). For the errors that tell a user
// what to load instead, and for the rule of who may save into a directory
// (storage/checkpoint_ownership.hpp).
//
//   checkpoint_iterations("ckpt");             // {2, 4, 6}: every iter_NNNNNNN directory
//   resolve_checkpoint_iteration("ckpt", 4);   // 4, or an error listing those present
//   newest_intact_checkpoint("ckpt", 6);       // 4 when iter_0000004 passes the reader's checks
//
// "Intact" is what CheckpointReader::open checks (metadata.json present and valid, every shard
// file present with its recorded size, each tensor's shards tiling it), not the checksums:
// those are verified when the bytes are read.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace troupe {

// The iterations of the iter_NNNNNNN directories in `root`, ascending, complete or not; none
// when `root` does not exist.
std::vector<int64_t> checkpoint_iterations(const std::string& root);
// Whether iteration `iteration` of `root` has its metadata.json (a save that finished).
bool checkpoint_complete(const std::string& root, int64_t iteration);
// The tracker's iteration; nullopt without a tracker file. Throws on one that holds no number.
std::optional<int64_t> find_checkpoint_tracker(const std::string& root);
// Whether `root` holds anything of a run: a tracker or an iteration directory.
bool holds_checkpoints(const std::string& root);

// "2, 4, 6 (incomplete)": the iteration directories of `root`, for messages; "none" if empty.
std::string checkpoint_iterations_str(const std::string& root);

// Why iteration `iteration` of `root` is not intact, in one sentence; "" when it is.
std::string checkpoint_defect(const std::string& root, int64_t iteration);
// The newest intact checkpoint of `root` other than `except`; nullopt when there is none.
std::optional<int64_t> newest_intact_checkpoint(const std::string& root, std::optional<int64_t> except = {});
// What to load instead of the broken checkpoint `broken` of `root`: "iteration 4 is the newest
// intact checkpoint in 'ckpt': pass --ckpt-step 4 to load it", or that there is none.
std::string intact_checkpoint_hint(const std::string& root, std::optional<int64_t> broken);

// The iteration `--load root` reads: `step` (--ckpt-step) when given, which must be an
// iteration directory of `root` (the error lists those present), else the tracker's (an error
// without one). Checks nothing inside the directory: opening it does.
int64_t resolve_checkpoint_iteration(const std::string& root, std::optional<int64_t> step);

}  // namespace troupe
