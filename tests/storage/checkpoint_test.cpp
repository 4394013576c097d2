// Checkpoint format: row-sharded saves read back whole and under other row slicings with
// exact bytes, crash safety of the tracker, and rejection of corrupt checkpoints with
// errors naming the file and the tensor (and the newest intact iteration to load instead);
// --ckpt-step's iteration, and who may save into a checkpoint directory.
#include <algorithm>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "storage/atomic_file.hpp"
#include "storage/checkpoint_catalog.hpp"
#include "storage/checkpoint_format.hpp"
#include "storage/checkpoint_ownership.hpp"
#include "storage/checkpoint_reader.hpp"
#include "storage/checkpoint_writer.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

namespace fs = std::filesystem;

class Checkpoint : public ::testing::Test {
 protected:
  std::string root() const { return dir_.string(); }
  fs::path iter_dir(int64_t it) const { return dir_ / checkpoint_iteration_dir_name(it); }

  TempDir tmp_{"ckpt"};
  const fs::path& dir_ = tmp_.path();
};

template <typename Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown; expected one mentioning '" << *parts.begin() << "'";
  } catch (const Error& e) {
    for (const std::string& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

// A bf16 tensor with arbitrary bit patterns (exact bytes matter, not values).
Tensor random_bf16(Shape shape, uint64_t seed) {
  Tensor t = Tensor::host(DType::bf16, shape);
  uint16_t* p = t.data_as<uint16_t>();
  uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    p[i] = uint16_t(x);
  }
  return t;
}

// Rows [b, e) of a host tensor, as a view.
Tensor rows_of(const Tensor& t, int64_t b, int64_t e) {
  const int64_t row = t.numel() / t.dim(0);
  Shape s = t.shape();
  s[0] = e - b;
  return t.slice(b * row, s);
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// A small GPT-like parameter set: f32 and bf16, 1-d and 2-d, row counts not divisible by 3.
std::vector<std::pair<std::string, Tensor>> model_tensors() {
  return {{"wte", random_normal({64, 16}, 1)},
          {"h.0.attn.qkv.weight", random_bf16({48, 16}, 2)},
          {"h.0.ln_1.weight", random_normal({16}, 3)},
          {"h.0.mlp.fc.weight", random_bf16({64, 16}, 4)},
          {"lm_head.bias", random_normal({8}, 5)}};
}

CheckpointMetadata meta_for(int64_t it) {
  CheckpointMetadata m;
  m.iteration = it;
  m.consumed_samples = it * 8;
  m.model_config = {{"num_layers", 1}, {"hidden_size", 16}};
  m.parallel_layout = {{"tp", 1}, {"pp", 2}, {"dp", 2}};
  m.rng_state = {{"seed", 1234}, {"philox_offset", it * 7}};
  return m;
}

// Saves every tensor cut by rows into `writers` shards, writer w holding the w-th cut,
// each writer on its own thread.
void save_sharded(const std::string& root, int64_t it, int writers,
                  const std::vector<std::pair<std::string, Tensor>>& tensors) {
  CheckpointWriter w(root, it);
  std::vector<std::thread> threads;
  for (int r = 0; r < writers; ++r) {
    threads.emplace_back([&, r] {
      for (const auto& [name, t] : tensors) {
        const int64_t n = t.dim(0), b = n * r / writers, e = n * (r + 1) / writers;
        w.add_rows(r, name, t.shape(), b, rows_of(t, b, e));
      }
    });
  }
  for (auto& th : threads) th.join();
  w.commit(meta_for(it));
}

// ---- format --------------------------------------------------------------------------------

TEST(CheckpointFormat, Xxh64MatchesReferenceVectors) {
  EXPECT_EQ(xxh64("", 0), 0xEF46DB3751D8E999ULL);
  EXPECT_EQ(xxh64("abc", 3), 0x44BC2CF5AD770999ULL);
}

TEST(CheckpointFormat, MegatronNames) {
  EXPECT_EQ(checkpoint_iteration_dir_name(100), "iter_0000100");
  EXPECT_EQ(std::string(kCheckpointTrackerName), "latest_checkpointed_iteration.txt");
}

// ---- round trips ---------------------------------------------------------------------------

TEST_F(Checkpoint, TwoAndFourWritersReadBackWholeWithExactBytes) {
  const auto tensors = model_tensors();
  for (int writers : {2, 4}) {
    const int64_t it = 100 * writers;
    save_sharded(root(), it, writers, tensors);
    CheckpointReader r = CheckpointReader::open(root());
    EXPECT_EQ(r.iteration(), it);
    EXPECT_EQ(r.metadata().consumed_samples, it * 8);
    EXPECT_EQ(r.metadata().parallel_layout["pp"], 2);
    EXPECT_EQ(r.metadata().rng_state["philox_offset"], it * 7);
    EXPECT_EQ(r.metadata().model_config["hidden_size"], 16);
    ASSERT_EQ(r.names().size(), tensors.size());
    for (const auto& [name, t] : tensors) {
      EXPECT_EQ(r.info(name).shards.size(), size_t(writers)) << name;
      EXPECT_TRUE(same_bytes(r.read(name), t)) << name << " from " << writers << " writers";
    }
    for (int w = 0; w < writers; ++w) EXPECT_TRUE(fs::exists(iter_dir(it) / checkpoint_shard_file_name(w)));
  }
}

TEST_F(Checkpoint, FourShardsReadAsThreeRangesAndAnyRange) {
  const auto tensors = model_tensors();
  save_sharded(root(), 10, 4, tensors);
  CheckpointReader r = CheckpointReader::open(root(), 10);
  for (const auto& [name, t] : tensors) {
    const int64_t n = t.dim(0);
    for (int k = 0; k < 3; ++k) {  // a TP=3 / PP=3 reader of a 4-way save
      const int64_t b = n * k / 3, e = n * (k + 1) / 3;
      EXPECT_TRUE(same_bytes(r.read_slice(name, b, e), rows_of(t, b, e))) << name << " rows " << b << ".." << e;
    }
    for (int64_t b = 0; b <= n; b += 3)
      for (int64_t e = b; e <= n; e += 5) EXPECT_TRUE(same_bytes(r.read_slice(name, b, e), rows_of(t, b, e))) << name;
  }
}

TEST_F(Checkpoint, ColumnShardsAssembleAndBoxesRead) {
  Tensor t = random_normal({6, 10}, 9);
  CheckpointWriter w(root(), 1);
  for (int c = 0; c < 2; ++c) {  // a TP column split: shard c holds columns [5c, 5c+5)
    Tensor part = Tensor::host(DType::f32, {6, 5});
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j < 5; ++j) part.at(i * 5 + j) = t.at(i * 10 + 5 * c + j);
    w.add_shard(c, "w", {6, 10}, ShardSlice{{0, 5 * c}, {6, 5}}, part);
  }
  w.commit(meta_for(1));
  CheckpointReader r = CheckpointReader::open(root());
  EXPECT_TRUE(same_bytes(r.read("w"), t));
  EXPECT_TRUE(same_bytes(r.read_slice("w", 2, 5), rows_of(t, 2, 5)));
  Tensor box = r.read_box("w", ShardSlice{{1, 3}, {2, 4}});
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(box.at(i * 4 + j), t.at((1 + i) * 10 + 3 + j));
}

// ---- crash safety --------------------------------------------------------------------------

TEST_F(Checkpoint, CrashBeforeCommitLeavesPreviousCheckpointLatest) {
  const auto tensors = model_tensors();
  save_sharded(root(), 100, 2, tensors);
  // A child process writes shards of iteration 200 and dies before commit (no destructors).
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    try {
      auto* w = new CheckpointWriter(root(), 200);
      for (const auto& [name, t] : tensors) w->add_rows(0, name, t.shape(), 0, t);
    } catch (...) {
      ::_exit(2);
    }
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_TRUE(fs::exists(iter_dir(200) / checkpoint_shard_file_name(0)));

  EXPECT_EQ(read_checkpoint_tracker(root()), 100);
  CheckpointReader r = CheckpointReader::open(root());
  EXPECT_EQ(r.iteration(), 100);
  EXPECT_TRUE(same_bytes(r.read("wte"), tensors[0].second));
  expect_error([&] { CheckpointReader::open(root(), 200); }, {"incomplete", "iter_0000200"});

  // Saving 200 again clears the leftovers; a complete checkpoint is never overwritten.
  save_sharded(root(), 200, 4, tensors);
  EXPECT_EQ(CheckpointReader::open(root()).iteration(), 200);
  expect_error([&] { CheckpointWriter w(root(), 200); }, {"iter_0000200", "refusing to overwrite"});
}

TEST_F(Checkpoint, CommitRefusesATensorWithAMissingShard) {
  Tensor t = random_normal({8, 4}, 1);
  CheckpointWriter w(root(), 5);
  w.add_rows(0, "wte", {8, 4}, 0, rows_of(t, 0, 4));  // rows 4..8 never written
  expect_error([&] { w.commit(meta_for(5)); }, {"wte", "a shard is missing"});
  EXPECT_FALSE(fs::exists(dir_ / kCheckpointTrackerName));
}

TEST_F(Checkpoint, WriterRejectsInconsistentShards) {
  CheckpointWriter w(root(), 5);
  w.add_rows(0, "wte", {8, 4}, 0, random_normal({4, 4}, 1));
  expect_error([&] { w.add_rows(1, "wte", {9, 4}, 4, random_normal({4, 4}, 2)); }, {"wte", "global shape"});
  expect_error([&] { w.add_rows(1, "wte", {8, 4}, 6, random_normal({4, 4}, 2)); }, {"wte", "outside shape"});
  expect_error([&] { w.add_rows(1, "wte", {8, 4}, 4, random_bf16({4, 4}, 2)); }, {"wte", "dtype"});
}

// ---- corruption ----------------------------------------------------------------------------

TEST_F(Checkpoint, MissingAndDanglingTrackerAreNamed) {
  expect_error([&] { CheckpointReader::open(root()); }, {"latest_checkpointed_iteration.txt"});
  std::ofstream(dir_ / kCheckpointTrackerName) << "300\n";
  expect_error([&] { CheckpointReader::open(root()); }, {"dangling", "iter_0000300"});
  // Resolving the tracker (what --load does before it opens) refuses it already, and says so
  // without naming a --ckpt-step that was not given.
  try {
    resolve_checkpoint_iteration(root(), std::nullopt);
    ADD_FAILURE() << "a dangling tracker resolved";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dangling"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("--ckpt-step 300"), std::string::npos) << e.what();
  }
}

TEST_F(Checkpoint, TruncatedShardIsRejectedNamingTheFile) {
  save_sharded(root(), 7, 2, model_tensors());
  const fs::path shard = iter_dir(7) / checkpoint_shard_file_name(1);
  fs::resize_file(shard, fs::file_size(shard) - 10);
  expect_error([&] { CheckpointReader::open(root()); }, {shard.string(), "truncated"});
}

TEST_F(Checkpoint, MissingShardFileIsRejectedNamingTheFile) {
  save_sharded(root(), 7, 2, model_tensors());
  const fs::path shard = iter_dir(7) / checkpoint_shard_file_name(0);
  fs::remove(shard);
  expect_error([&] { CheckpointReader::open(root()); }, {shard.string(), "missing"});
}

TEST_F(Checkpoint, FlippedByteIsAChecksumMismatchNamingFileAndTensor) {
  const auto tensors = model_tensors();
  save_sharded(root(), 7, 2, tensors);
  CheckpointReader clean = CheckpointReader::open(root());
  // Corrupt the shard holding the second half of the rows (shard records are in the order
  // the writer threads happened to add them).
  const auto& shards = clean.info("h.0.mlp.fc.weight").shards;
  const auto second =
      std::find_if(shards.begin(), shards.end(), [](const ShardRecord& r) { return r.slice.offset.at(0) > 0; });
  ASSERT_NE(second, shards.end());
  const ShardRecord& s = *second;
  const fs::path shard = iter_dir(7) / s.file;
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(std::streamoff(s.byte_offset + 3));
    char c = 0;
    f.read(&c, 1);
    c = char(c ^ 0x40);
    f.seekp(std::streamoff(s.byte_offset + 3));
    f.write(&c, 1);
  }
  CheckpointReader r = CheckpointReader::open(root());        // sizes still right: opens
  EXPECT_TRUE(same_bytes(r.read("wte"), tensors[0].second));  // other tensors unaffected
  expect_error([&] { r.read("h.0.mlp.fc.weight"); }, {"checksum mismatch", shard.string(), "h.0.mlp.fc.weight"});
  const int64_t n = tensors[3].second.dim(0);
  EXPECT_TRUE(same_bytes(r.read_slice("h.0.mlp.fc.weight", 0, n / 2), rows_of(tensors[3].second, 0, n / 2)));
  expect_error([&] { r.read_slice("h.0.mlp.fc.weight", n / 2, n); }, {"checksum mismatch", "h.0.mlp.fc.weight"});
}

TEST_F(Checkpoint, MissingTensorAndShapeMismatchAreNamed) {
  save_sharded(root(), 7, 2, model_tensors());
  CheckpointReader r = CheckpointReader::open(root());
  expect_error([&] { r.read("h.1.attn.qkv.weight"); }, {"h.1.attn.qkv.weight", "metadata.json"});
  expect_error([&] { r.expect("wte", {64, 32}); }, {"wte", "[64, 16]", "[64, 32]"});
  EXPECT_TRUE(same_bytes(r.expect("wte", {64, 16}), model_tensors()[0].second));
}

TEST_F(Checkpoint, MetadataOfAnotherVersionIsRejected) {
  save_sharded(root(), 7, 2, model_tensors());
  const fs::path mp = iter_dir(7) / kCheckpointMetadataName;
  nlohmann::json j = nlohmann::json::parse(std::ifstream(mp));
  j["version"] = 99;
  std::ofstream(mp) << j.dump();
  expect_error([&] { CheckpointReader::open(root()); }, {mp.string(), "version 99"});
}

}  // namespace
}  // namespace troupe::test

namespace troupe::test {
namespace {

// Two processes' writers (separate CheckpointWriters, disjoint writer ids) and one commit of
// both indices: one checkpoint, read back whole; a stale shard file of a crashed save under
// more writers is removed by the commit.
TEST_F(Checkpoint, WritersOfSeveralProcessesCommitOnce) {
  const auto tensors = model_tensors();
  fs::create_directories(iter_dir(300));
  { std::ofstream(iter_dir(300) / checkpoint_shard_file_name(7)) << "left by a crashed save"; }
  std::vector<std::string> indices;
  for (int p = 0; p < 2; ++p) {
    CheckpointWriter w(root(), 300);
    for (const auto& [name, t] : tensors) {
      const int64_t n = t.dim(0), b = n * p / 2, e = n * (p + 1) / 2;
      w.add_rows(p, name, t.shape(), b, rows_of(t, b, e));
    }
    indices.push_back(w.finish());
  }
  // A part missing: refused, nothing committed.
  expect_error([&] { commit_checkpoint(root(), meta_for(300), {indices[0]}); }, {"a shard is missing"});
  EXPECT_FALSE(fs::exists(iter_dir(300) / kCheckpointMetadataName));
  commit_checkpoint(root(), meta_for(300), indices);
  EXPECT_FALSE(fs::exists(iter_dir(300) / checkpoint_shard_file_name(7)));
  const CheckpointReader r = CheckpointReader::open(root());
  EXPECT_EQ(r.iteration(), 300);
  for (const auto& [name, t] : tensors) EXPECT_TRUE(same_bytes(r.read(name), t)) << name;
  expect_error([&] { commit_checkpoint(root(), meta_for(300), {indices[0], indices[0]}); }, {"two writers"});
}

// A complete checkpoint the tracker does not name (a crash between metadata.json and the
// tracker) is replaced by the next save of its iteration; the tracker's own is not.
TEST_F(Checkpoint, OrphanCompleteCheckpointIsReplaced) {
  const auto tensors = model_tensors();
  save_sharded(root(), 100, 1, tensors);
  save_sharded(root(), 200, 2, tensors);
  write_file_atomic(root() + "/" + kCheckpointTrackerName, "100\n", 4);
  save_sharded(root(), 200, 3, tensors);
  EXPECT_EQ(CheckpointReader::open(root()).iteration(), 200);
  expect_error([&] { CheckpointWriter w(root(), 200); }, {"refusing to overwrite"});
}

// Retention counts the checkpoints up to the tracker's; those after it (a crash before the
// tracker moved, an --overwrite rewind) are neither counted nor removed.
TEST_F(Checkpoint, RetentionKeepsTheNewestUpToTheTracker) {
  const auto tensors = model_tensors();
  for (int64_t it : {10, 20, 30, 40, 50}) save_sharded(root(), it, 1, tensors);
  fs::create_directories(iter_dir(5));   // an incomplete save older than the tracker's
  fs::create_directories(iter_dir(45));  // and one after it
  write_file_atomic(root() + "/" + kCheckpointTrackerName, "40\n", 3);
  prune_checkpoints(root(), 2);
  EXPECT_FALSE(fs::exists(iter_dir(5)));
  EXPECT_FALSE(fs::exists(iter_dir(10)));
  EXPECT_FALSE(fs::exists(iter_dir(20)));
  EXPECT_TRUE(fs::exists(iter_dir(30)));
  EXPECT_TRUE(fs::exists(iter_dir(40)));  // the tracker's
  EXPECT_TRUE(fs::exists(iter_dir(45)));
  EXPECT_TRUE(fs::exists(iter_dir(50)));
  EXPECT_EQ(CheckpointReader::open(root()).iteration(), 40);
}

// ---- --ckpt-step and what to load instead (storage/checkpoint_catalog.hpp) -----------------

TEST_F(Checkpoint, CkptStepOpensThatIterationAndAMissingOneListsThosePresent) {
  const auto tensors = model_tensors();
  for (int64_t it : {10, 20, 30}) save_sharded(root(), it, 1, tensors);
  fs::create_directories(iter_dir(40));  // a save that did not finish
  EXPECT_EQ(checkpoint_iterations(root()), (std::vector<int64_t>{10, 20, 30, 40}));
  EXPECT_EQ(CheckpointReader::open(root()).iteration(), 30);
  EXPECT_EQ(CheckpointReader::open(root(), 20).iteration(), 20);
  EXPECT_EQ(resolve_checkpoint_iteration(root(), std::nullopt), 30);
  EXPECT_EQ(resolve_checkpoint_iteration(root(), 10), 10);
  expect_error([&] { CheckpointReader::open(root(), 25); },
               {"--ckpt-step 25", root(), "it holds iterations 10, 20, 30, 40 (incomplete)"});
  expect_error([&] { CheckpointReader::open(root(), 40); }, {"incomplete", "iteration 30 is the newest intact"});
  expect_error([&] { resolve_checkpoint_iteration(root(), -1); }, {"--ckpt-step must be >= 0"});
  expect_error([&] { resolve_checkpoint_iteration((dir_ / "nowhere").string(), 1); }, {"nowhere"});
}

TEST_F(Checkpoint, BrokenNewestNamesTheNewestIntactIteration) {
  const auto tensors = model_tensors();
  for (int64_t it : {10, 20, 30}) save_sharded(root(), it, 2, tensors);
  const fs::path shard30 = iter_dir(30) / checkpoint_shard_file_name(1);
  fs::resize_file(shard30, fs::file_size(shard30) - 10);
  EXPECT_EQ(newest_intact_checkpoint(root()), std::optional<int64_t>(20));
  EXPECT_NE(checkpoint_defect(root(), 30).find("truncated"), std::string::npos);
  EXPECT_EQ(checkpoint_defect(root(), 20), "");
  expect_error([&] { CheckpointReader::open(root()); },
               {shard30.string(), "truncated", "iteration 20 is the newest intact checkpoint", "--ckpt-step 20"});
  EXPECT_TRUE(same_bytes(CheckpointReader::open(root(), 20).read("wte"), tensors[0].second));

  // 20 unreadable too (its metadata.json not JSON): 10 is named.
  std::ofstream(iter_dir(20) / kCheckpointMetadataName) << "{not json";
  expect_error([&] { CheckpointReader::open(root()); }, {"iteration 10 is the newest intact", "--ckpt-step 10"});
  expect_error([&] { CheckpointReader::open(root(), 20); }, {"not valid JSON", "--ckpt-step 10"});
  // A dangling tracker, and none at all.
  write_file_atomic(root() + "/" + kCheckpointTrackerName, "99\n", 3);
  expect_error([&] { CheckpointReader::open(root()); }, {"dangling", "--ckpt-step 10"});
  fs::remove(dir_ / kCheckpointTrackerName);
  expect_error([&] { CheckpointReader::open(root()); }, {kCheckpointTrackerName, "--ckpt-step 10"});
  // Nothing intact left.
  fs::remove(iter_dir(10) / checkpoint_shard_file_name(0));
  EXPECT_EQ(newest_intact_checkpoint(root()), std::nullopt);
  expect_error([&] { CheckpointReader::open(root(), 30); }, {"holds no other intact checkpoint"});
}

TEST_F(Checkpoint, ChecksumMismatchNamesAnotherIntactIteration) {
  const auto tensors = model_tensors();
  for (int64_t it : {10, 20}) save_sharded(root(), it, 1, tensors);
  const CheckpointReader clean = CheckpointReader::open(root());
  const ShardRecord& s = clean.info("wte").shards.at(0);
  {
    std::fstream f(iter_dir(20) / s.file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(std::streamoff(s.byte_offset + 1));
    const char c = char(f.get() ^ 0x40);
    f.seekp(std::streamoff(s.byte_offset + 1));
    f.put(c);
  }
  const CheckpointReader r = CheckpointReader::open(root());  // sizes right: it opens
  expect_error([&] { r.read("wte"); }, {"checksum mismatch", "iteration 10 is the newest intact", "--ckpt-step 10"});
}

// ---- who may save where (storage/checkpoint_ownership.hpp) -----------------------------------

SaveDirClaim claim(const std::string& save, const std::string& load = "", std::optional<int64_t> loaded = {},
                   int64_t start = 0, bool overwrite = false) {
  return claim_checkpoint_save_dir(
      {.save = save, .load = load, .loaded = loaded, .start = start, .overwrite = overwrite});
}

TEST_F(Checkpoint, SaveDirectoryBelongsToTheRunThatGoesOnFromIt) {
  const std::string fresh = (dir_ / "fresh").string();
  EXPECT_FALSE(claim(fresh).rewind);  // nothing there yet
  const auto tensors = model_tensors();
  for (int64_t it : {10, 20, 30}) save_sharded(root(), it, 1, tensors);

  // A run from scratch, or from another directory: refused, or --overwrite removes the tracker.
  expect_error([&] { claim(root()); }, {"--save " + root(), "iteration 30", "--load " + root(), "--overwrite"});
  expect_error([&] { claim(root(), fresh, 30, 30); }, {"loads from " + fresh, "--overwrite"});
  const SaveDirClaim scratch = claim(root(), "", {}, 0, /*overwrite=*/true);
  EXPECT_TRUE(scratch.rewind);
  EXPECT_EQ(scratch.tracker, std::nullopt);

  // The same run going on, however the directory is spelt: allowed, nothing to do.
  for (const std::string& load :
       {root(), root() + "/", (dir_ / "." / "").string(),
        (dir_.parent_path() / ".." / dir_.parent_path().filename() / dir_.filename()).string()})
    EXPECT_FALSE(claim(root(), load, 30, 30).rewind) << load;
  // An older iteration (--ckpt-step 20), or --finetune (start 0): the tracker would move back.
  expect_error([&] { claim(root(), root(), 20, 20); },
               {"--save " + root(), "iteration 20", "iteration 30", "--overwrite"});
  expect_error([&] { claim(root(), root(), 30, 0); }, {"starts at iteration 0 from the weights of iteration 30"});
  const SaveDirClaim rewind = claim(root(), root(), 20, 20, /*overwrite=*/true);
  ASSERT_TRUE(rewind.rewind);
  EXPECT_EQ(rewind.tracker, std::optional<int64_t>(20));
  EXPECT_NE(rewind.note.find("now names iteration 20 (it named iteration 30)"), std::string::npos) << rewind.note;
  rewind_checkpoint_tracker(root(), rewind.tracker);
  EXPECT_EQ(read_checkpoint_tracker(root()), 20);
  EXPECT_TRUE(fs::exists(iter_dir(30) / kCheckpointMetadataName));  // left until a save replaces it
  EXPECT_FALSE(claim(root(), root(), 20, 20).rewind);
  rewind_checkpoint_tracker(root(), std::nullopt);
  EXPECT_FALSE(fs::exists(dir_ / kCheckpointTrackerName));
  expect_error([&] { rewind_checkpoint_tracker(root(), 25); }, {"iteration 25", "not a complete checkpoint"});

  // Iteration directories alone (no tracker, none complete) belong to a run too.
  const std::string crashed = (dir_ / "crashed").string();
  fs::create_directories(fs::path(crashed) / checkpoint_iteration_dir_name(2));
  expect_error([&] { claim(crashed); }, {"iterations 2 (incomplete), none complete"});
}

TEST_F(Checkpoint, SameDirectoryAfterCanonicalisation) {
  fs::create_directories(dir_ / "a");
  fs::create_directory_symlink(dir_ / "a", dir_ / "link");
  const std::string a = (dir_ / "a").string();
  EXPECT_TRUE(same_checkpoint_dir(a, a + "/"));
  EXPECT_TRUE(same_checkpoint_dir(a, (dir_ / "b" / ".." / "a").string()));
  EXPECT_TRUE(same_checkpoint_dir(a, (dir_ / "link").string()));
  EXPECT_TRUE(same_checkpoint_dir((dir_ / "new").string(), (dir_ / "new" / "").string()));  // not there yet
  EXPECT_FALSE(same_checkpoint_dir(a, (dir_ / "new").string()));
}

TEST_F(Checkpoint, NoCheckpointsCheckNamesTheNewest) {
  check_no_checkpoints(root(), "unused");  // empty: fine
  save_sharded(root(), 7, 1, model_tensors());
  expect_error([&] { check_no_checkpoints(root(), "pass another --save"); },
               {root(), "its newest: iteration 7", "pass another --save"});
}

}  // namespace
}  // namespace troupe::test
