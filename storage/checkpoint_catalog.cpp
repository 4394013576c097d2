#include "storage/checkpoint_catalog.hpp"

#include <algorithm>
#include <filesystem>

#include "base/check.hpp"
#include "storage/checkpoint_format.hpp"
#include "storage/checkpoint_reader.hpp"
#include "storage/checkpoint_writer.hpp"

namespace troupe {

namespace fs = std::filesystem;

std::vector<int64_t> checkpoint_iterations(const std::string& root) {
  std::vector<int64_t> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.rfind("iter_", 0) != 0) continue;
    const std::string digits = name.substr(5);
    if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    out.push_back(std::stoll(digits));
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool checkpoint_complete(const std::string& root, int64_t iteration) {
  return fs::exists(fs::path(root) / checkpoint_iteration_dir_name(iteration) / kCheckpointMetadataName);
}

std::optional<int64_t> find_checkpoint_tracker(const std::string& root) {
  if (!fs::exists(fs::path(root) / kCheckpointTrackerName)) return std::nullopt;
  return read_checkpoint_tracker(root);
}

bool holds_checkpoints(const std::string& root) {
  return fs::exists(fs::path(root) / kCheckpointTrackerName) || !checkpoint_iterations(root).empty();
}

std::string checkpoint_iterations_str(const std::string& root) {
  std::string out;
  for (int64_t it : checkpoint_iterations(root))
    out += str_cat(out.empty() ? "" : ", ", it, checkpoint_complete(root, it) ? "" : " (incomplete)");
  return out.empty() ? "none" : out;
}

std::string checkpoint_defect(const std::string& root, int64_t iteration) {
  try {
    (void)CheckpointReader::open_iteration(root, iteration);
    return "";
  } catch (const std::exception& e) {  // troupe::Error, or a file system error
    return e.what();
  }
}

std::optional<int64_t> newest_intact_checkpoint(const std::string& root, std::optional<int64_t> except) {
  std::vector<int64_t> its = checkpoint_iterations(root);
  // Newest first; only the metadata of those tried is read, so this stops at the first good one.
  for (auto it = its.rbegin(); it != its.rend(); ++it) {
    if (except && *it == *except) continue;
    if (checkpoint_complete(root, *it) && checkpoint_defect(root, *it).empty()) return *it;
  }
  return std::nullopt;
}

std::string intact_checkpoint_hint(const std::string& root, std::optional<int64_t> broken) {
  const std::optional<int64_t> good = newest_intact_checkpoint(root, broken);
  if (!good) return str_cat("'", root, "' holds no other intact checkpoint");
  return str_cat("iteration ", *good, " is the newest intact checkpoint in '", root, "': pass --ckpt-step ", *good,
                 " to load it");
}

int64_t resolve_checkpoint_iteration(const std::string& root, std::optional<int64_t> step) {
  TROUPE_CHECK(fs::is_directory(root), "no checkpoint directory '", root, "'");
  if (!step) {
    if (!fs::exists(fs::path(root) / kCheckpointTrackerName) && newest_intact_checkpoint(root))
      TROUPE_FAIL("'", root, "' has no tracker (", kCheckpointTrackerName, "): ", intact_checkpoint_hint(root, {}));
    const int64_t tracked = read_checkpoint_tracker(root);
    const std::vector<int64_t> its = checkpoint_iterations(root);
    TROUPE_CHECK(std::find(its.begin(), its.end(), tracked) != its.end(), "checkpoint tracker '",
                 (fs::path(root) / kCheckpointTrackerName).string(), "' names iteration ", tracked, " but '",
                 (fs::path(root) / checkpoint_iteration_dir_name(tracked)).string(),
                 "' does not exist (dangling tracker): ", intact_checkpoint_hint(root, tracked));
    return tracked;
  }
  TROUPE_CHECK(*step >= 0, "--ckpt-step must be >= 0, got ", *step);
  const std::vector<int64_t> its = checkpoint_iterations(root);
  TROUPE_CHECK(std::find(its.begin(), its.end(), *step) != its.end(), "--ckpt-step ", *step, ": '", root,
               "' has no checkpoint of iteration ", *step, " (it holds iterations ", checkpoint_iterations_str(root),
               ")");
  return *step;
}

}  // namespace troupe
