#include "storage/checkpoint_ownership.hpp"

#include <filesystem>
#include <vector>

#include "base/check.hpp"
#include "storage/atomic_file.hpp"
#include "storage/checkpoint_catalog.hpp"
#include "storage/checkpoint_format.hpp"

namespace troupe {

namespace fs = std::filesystem;

namespace {

// The iteration a run that goes on in `root` must not fall behind: the tracker's, or without
// one the newest complete checkpoint's; nullopt when there is neither.
std::optional<int64_t> newest_checkpoint(const std::string& root) {
  if (std::optional<int64_t> t = find_checkpoint_tracker(root)) return t;
  std::optional<int64_t> newest;
  for (int64_t it : checkpoint_iterations(root))
    if (checkpoint_complete(root, it)) newest = it;
  return newest;
}

std::string newest_str(const std::string& root, std::optional<int64_t> newest) {
  if (newest) return str_cat("its newest: iteration ", *newest);
  return str_cat("iterations ", checkpoint_iterations_str(root), ", none complete");
}

}  // namespace

bool same_checkpoint_dir(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return a == b;
  auto key = [](const std::string& p) {
    std::error_code ec;
    fs::path c = fs::weakly_canonical(fs::absolute(p), ec);  // through symbolic links, "..", "."
    if (ec) c = fs::absolute(p);
    return (c / "").lexically_normal();  // "ckpt" and "ckpt/" alike
  };
  return key(a) == key(b);
}

SaveDirClaim claim_checkpoint_save_dir(const SaveDirRequest& r) {
  SaveDirClaim claim;
  if (r.save.empty() || !holds_checkpoints(r.save)) return claim;
  const std::optional<int64_t> newest = newest_checkpoint(r.save);
  const bool from_here = !r.load.empty() && same_checkpoint_dir(r.load, r.save);
  if (from_here && (!newest || r.start >= *newest)) return claim;  // the same run, going on

  if (!from_here) {
    TROUPE_CHECK(r.overwrite, "--save ", r.save, " already holds another run's checkpoints (",
                 newest_str(r.save, newest), ") and this run ",
                 r.load.empty() ? std::string("does not load them") : str_cat("loads from ", r.load, " instead"),
                 ": resume that run with --load ", r.save, ", save into a new directory, or pass --overwrite to let ",
                 "this run replace its iterations");
  } else {
    const std::string start = r.loaded && *r.loaded != r.start ? str_cat("starts at iteration ", r.start,
                                                                         " from the weights of iteration ", *r.loaded)
                                                               : str_cat("goes on from iteration ", r.start);
    TROUPE_CHECK(r.overwrite, "--save ", r.save, ": this run ", start, ", but the newest checkpoint there is ",
                 "iteration ", *newest, " and saving would move the tracker back past it: save into a new directory, ",
                 "or pass --overwrite to rewind ", r.save, " to iteration ", r.start, " (the iterations after it are ",
                 "replaced as this run saves them)");
  }
  // --overwrite: this run's line starts here; what comes after stays until its saves replace it.
  claim.rewind = true;
  if (from_here && r.loaded == r.start) claim.tracker = r.start;
  const std::string was = find_checkpoint_tracker(r.save) ? str_cat(" (it named iteration ", *newest, ")") : "";
  claim.note = claim.tracker
                   ? str_cat("--overwrite: the tracker of ", r.save, " now names iteration ", *claim.tracker, was,
                             "; the iterations after it stay on disk until this run's saves replace them")
                   : str_cat("--overwrite: ", r.save, " has no tracker any more", was,
                             "; its iterations stay on disk until this run's saves replace them");
  return claim;
}

void rewind_checkpoint_tracker(const std::string& root, std::optional<int64_t> iteration) {
  const std::string tracker = (fs::path(root) / kCheckpointTrackerName).string();
  if (iteration) {
    TROUPE_CHECK(checkpoint_complete(root, *iteration), "cannot point the tracker of ", root, " at iteration ",
                 *iteration, ": it is not a complete checkpoint there");
    const std::string text = str_cat(*iteration, "\n");  // Megatron writes the bare number
    write_file_atomic(tracker, text.data(), text.size());
    return;
  }
  std::error_code ec;
  fs::remove(tracker, ec);
  TROUPE_CHECK(!ec, "cannot remove the checkpoint tracker '", tracker, "': ", ec.message());
  fsync_directory(root);
}

void check_no_checkpoints(const std::string& root, const std::string& advice) {
  if (!holds_checkpoints(root)) return;
  TROUPE_FAIL("'", root, "' already holds checkpoints (", newest_str(root, newest_checkpoint(root)), "): ", advice);
}

}  // namespace troupe
