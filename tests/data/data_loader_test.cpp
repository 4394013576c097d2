// The data loader: sample tensors (labels shifted by one, loss mask, position ids),
// Megatron's pretraining-sampler order across data-parallel ranks and resuming from a
// consumed-sample count; and the end-to-end path of issue 3: `troupe preprocess` logic on both
// bundled corpora, then a 0.3/0.7 blend read back through the loader.
#include <set>

#include "data/blended_dataset.hpp"
#include "data/data_loader.hpp"
#include "data/gpt_data.hpp"
#include "data/gpt_dataset.hpp"
#include "data/preprocess.hpp"
#include "tests/data/data_test_util.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

using I32 = std::vector<int32_t>;

std::vector<int32_t> row_i32(const Tensor& t, int64_t b) {
  const int64_t T = t.dim(1);
  return I32(t.data_as<int32_t>() + b * T, t.data_as<int32_t>() + (b + 1) * T);
}
std::vector<float> row_f32(const Tensor& t, int64_t b) {
  const int64_t T = t.dim(1);
  return std::vector<float>(t.data_as<float>() + b * T, t.data_as<float>() + (b + 1) * T);
}

TEST(DataLoader, TrainingSampleMasksAndPositions) {
  const int32_t E = 50256;
  const I32 text{5, E, 7, 8, E, 9};
  I32 tokens(5), labels(5), pos(5);
  std::vector<float> mask(5);
  DataLoaderOptions plain;
  make_training_sample(text.data(), 5, plain, tokens.data(), labels.data(), mask.data(), pos.data());
  EXPECT_EQ(tokens, (I32{5, E, 7, 8, E}));
  EXPECT_EQ(labels, (I32{E, 7, 8, E, 9}));
  EXPECT_EQ(mask, (std::vector<float>{1, 1, 1, 1, 1}));
  EXPECT_EQ(pos, (I32{0, 1, 2, 3, 4}));

  DataLoaderOptions eod;
  eod.eod = E;
  eod.eod_mask_loss = true;
  eod.reset_position_ids = true;
  make_training_sample(text.data(), 5, eod, tokens.data(), labels.data(), mask.data(), pos.data());
  EXPECT_EQ(mask, (std::vector<float>{1, 0, 1, 1, 0}));  // where the *input* is EOD, as Megatron
  EXPECT_EQ(pos, (I32{0, 1, 0, 1, 2}));

  // Padding (a partial validation sample) becomes id 0 and is masked out.
  const I32 padded{1, 2, kPadTokenId, kPadTokenId};
  make_training_sample(padded.data(), 3, plain, tokens.data(), labels.data(), mask.data(), pos.data());
  EXPECT_EQ(I32(tokens.begin(), tokens.begin() + 3), (I32{1, 2, 0}));
  EXPECT_EQ(I32(labels.begin(), labels.begin() + 3), (I32{2, 0, 0}));
  EXPECT_EQ(std::vector<float>(mask.begin(), mask.begin() + 3), (std::vector<float>{1, 0, 0}));
}

// Sample i is [i, i + 1, ..., i + L].
class CountingSource final : public SampleSource {
 public:
  explicit CountingSource(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  int64_t sequence_length() const override { return 3; }
  void sample(int64_t i, int32_t* out) const override {
    for (int k = 0; k < 4; ++k) out[k] = int32_t(i + k);
  }

 private:
  int64_t n_;
};

TEST(DataLoader, MegatronSamplerOrderAcrossRanksAndResume) {
  auto src = std::make_shared<const CountingSource>(100);
  // MBS 3, DP 2: each step takes 6 consecutive samples, rank r the r-th group of 3.
  std::vector<std::vector<std::vector<int64_t>>> per_rank(2);
  for (int r = 0; r < 2; ++r) {
    DataLoader loader(src, {.micro_batch_size = 3, .data_parallel_rank = r, .data_parallel_size = 2});
    while (auto mb = loader.next()) {
      per_rank[size_t(r)].push_back(mb->sample_indices);
      EXPECT_EQ(row_i32(mb->tokens, 0)[0], int32_t(mb->sample_indices[0]));
      EXPECT_EQ(row_i32(mb->labels, 2), (I32{int32_t(mb->sample_indices[2]) + 1, int32_t(mb->sample_indices[2]) + 2,
                                             int32_t(mb->sample_indices[2]) + 3}));
    }
    EXPECT_EQ(loader.consumed_samples(), 96);  // 16 full steps; the last 4 samples are dropped
  }
  ASSERT_EQ(per_rank[0].size(), 16u);
  EXPECT_EQ(per_rank[0][0], (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(per_rank[1][0], (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(per_rank[0][1], (std::vector<int64_t>{6, 7, 8}));
  EXPECT_EQ(per_rank[1][15], (std::vector<int64_t>{93, 94, 95}));

  // Resumed at a step boundary: the same batches as the uninterrupted run.
  for (int r = 0; r < 2; ++r) {
    DataLoader resumed(
        src, {.micro_batch_size = 3, .data_parallel_rank = r, .data_parallel_size = 2, .consumed_samples = 42});
    for (size_t step = 7; step < 16; ++step) {
      auto mb = resumed.next();
      ASSERT_TRUE(mb.has_value());
      EXPECT_EQ(mb->sample_indices, per_rank[size_t(r)][step]);
    }
    EXPECT_FALSE(resumed.next().has_value());
  }
}

// --- end to end ---------------------------------------------------------------------------------

class EndToEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    for (const char* name : {"moby-dick", "sotu"}) {
      PreprocessOptions o;
      o.input = source_path(str_cat("assets/corpora/", name, ".jsonl"));
      o.output_prefix = *dir_ / name;
      o.tokenizer.vocab_file = source_path("assets/gpt2/gpt2-vocab.json");
      o.tokenizer.merge_file = source_path("assets/gpt2/gpt2-merges.txt");
      o.append_eod = true;
      o.workers = 2;
      preprocess_jsonl(o);
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  static GptDataOptions options() {
    GptDataOptions o;
    o.data_path = {"0.3", *dir_ / "moby-dick_text_document", "0.7", *dir_ / "sotu_text_document"};
    o.split = "969,30,1";
    o.sequence_length = 128;
    o.seed = 1234;
    o.cache_path = *dir_ / "cache";
    return o;
  }

  static TempDir* dir_;
};
TempDir* EndToEnd::dir_ = nullptr;

TEST_F(EndToEnd, BlendSharesMatchWeightsThroughTheLoader) {
  const auto splits = build_gpt_datasets(options(), {3000, 90, 0});
  ASSERT_NE(splits[0], nullptr);
  ASSERT_NE(splits[1], nullptr);
  ASSERT_NE(splits[2], nullptr);  // the test split exists (1/1000) but is asked for nothing
  EXPECT_EQ(splits[2]->size(), 0);
  const auto* train = dynamic_cast<const BlendedDataset*>(splits[0].get());
  ASSERT_NE(train, nullptr);
  EXPECT_EQ(train->size(), 3000);  // ceil(3000 * 0.3) + ceil(3000 * 0.7)
  EXPECT_EQ(splits[1]->size(), 90);
  // Each dataset was asked for its share plus Megatron's 0.5% surplus.
  const auto* moby = dynamic_cast<const GptDataset*>(train->datasets()[0].get());
  const auto* sotu = dynamic_cast<const GptDataset*>(train->datasets()[1].get());
  ASSERT_TRUE(moby && sotu);
  EXPECT_EQ(moby->num_samples_requested(), 905);   // ceil(900 * 1.005)
  EXPECT_EQ(sotu->num_samples_requested(), 2111);  // ceil(2100 * 1.005)
  EXPECT_GE(moby->size(), 905);
  EXPECT_GE(sotu->size(), 2111);
  // Moby-Dick's 138 chapters: train takes [0, 134) under 969,30,1.
  std::set<int64_t> moby_docs;
  for (int64_t p = 0; p < moby->document_index().size(); ++p) moby_docs.insert(moby->document_index()[p]);
  EXPECT_EQ(*moby_docs.begin(), 0);
  EXPECT_EQ(*moby_docs.rbegin(), 133);

  // Read everything back through two data-parallel loaders; count where each sample came from.
  const int64_t mbs = 4, dp = 2;
  int64_t from[2] = {0, 0};
  int64_t delivered = 0;
  for (int r = 0; r < dp; ++r) {
    DataLoader loader(splits[0], {.micro_batch_size = mbs,
                                  .data_parallel_rank = r,
                                  .data_parallel_size = dp,
                                  .eod = 50256,
                                  .eod_mask_loss = true});
    I32 text(129);
    while (auto mb = loader.next()) {
      for (int64_t b = 0; b < mbs; ++b) {
        const int64_t i = mb->sample_indices[size_t(b)];
        ++from[train->dataset_index(i)];
        ++delivered;
        splits[0]->sample(i, text.data());
        const I32 tokens = row_i32(mb->tokens, b), labels = row_i32(mb->labels, b);
        ASSERT_EQ(tokens, I32(text.begin(), text.end() - 1));
        ASSERT_EQ(labels, I32(text.begin() + 1, text.end()));
        const std::vector<float> mask = row_f32(mb->loss_mask, b);
        for (int64_t t = 0; t < 128; ++t) ASSERT_EQ(mask[size_t(t)], tokens[size_t(t)] == 50256 ? 0.0f : 1.0f);
        const I32 pos = row_i32(mb->position_ids, b);
        ASSERT_EQ(pos.front(), 0);
        ASSERT_EQ(pos.back(), 127);
      }
    }
  }
  EXPECT_EQ(delivered, 3000);
  EXPECT_EQ(from[0], 900);   // 0.3
  EXPECT_EQ(from[1], 2100);  // 0.7
  // And along the way: every prefix of the blend within one sample of the weights.
  int64_t moby_so_far = 0;
  for (int64_t i = 0; i < train->size(); ++i) {
    moby_so_far += train->dataset_index(i) == 0;
    ASSERT_LE(std::abs(double(moby_so_far) - 0.3 * double(i + 1)), 1.0) << i;
  }
}

TEST_F(EndToEnd, RestartReusesTheCacheAndResumesTheSameBatches) {
  const auto first = build_gpt_datasets(options(), {3000, 90, 0});
  const auto again = build_gpt_datasets(options(), {3000, 90, 0});  // a restart
  const auto* blend = dynamic_cast<const BlendedDataset*>(again[0].get());
  ASSERT_NE(blend, nullptr);
  for (const auto& part : blend->datasets())
    EXPECT_TRUE(dynamic_cast<const GptDataset*>(part.get())->loaded_from_cache());

  // Uninterrupted run on the first build; resumed run on the restart's, after 25 steps.
  const DataLoaderOptions base{.micro_batch_size = 2, .data_parallel_rank = 1, .data_parallel_size = 3};
  DataLoader full(first[0], base);
  std::vector<MicroBatch> seen;
  for (int step = 0; step < 40; ++step) seen.push_back(*full.next());
  DataLoaderOptions resumed_at = base;
  resumed_at.consumed_samples = 25 * 2 * 3;
  DataLoader resumed(again[0], resumed_at);
  for (int step = 25; step < 40; ++step) {
    auto mb = resumed.next();
    ASSERT_TRUE(mb.has_value());
    EXPECT_EQ(mb->sample_indices, seen[size_t(step)].sample_indices);
    for (int64_t b = 0; b < 2; ++b) {
      ASSERT_EQ(row_i32(mb->tokens, b), row_i32(seen[size_t(step)].tokens, b)) << "step " << step;
      ASSERT_EQ(row_i32(mb->labels, b), row_i32(seen[size_t(step)].labels, b));
    }
  }

  // Another seed reorders the samples (a new cache entry, not the old one).
  GptDataOptions other = options();
  other.seed = 4321;
  const auto reseeded = build_gpt_datasets(other, {3000, 90, 0});
  I32 a(129), b(129);
  first[0]->sample(0, a.data());
  reseeded[0]->sample(0, b.data());
  EXPECT_NE(a, b);
}

TEST_F(EndToEnd, SinglePrefixAndUnweightedBlend) {
  GptDataOptions single = options();
  single.data_path = {*dir_ / "moby-dick_text_document"};
  single.split = "100,0,0";
  const auto s = build_gpt_datasets(single, {500, std::nullopt, std::nullopt});
  ASSERT_NE(dynamic_cast<const GptDataset*>(s[0].get()), nullptr);  // no blend around one dataset
  EXPECT_GE(s[0]->size(), 500);
  EXPECT_EQ(s[1], nullptr);
  EXPECT_EQ(s[2], nullptr);

  // Prefixes without weights: one epoch each, weighted by their sample counts.
  GptDataOptions both = single;
  both.data_path = {*dir_ / "moby-dick_text_document", *dir_ / "sotu_text_document"};
  const auto u = build_gpt_datasets(both, {1000, std::nullopt, std::nullopt});
  const auto* blend = dynamic_cast<const BlendedDataset*>(u[0].get());
  ASSERT_NE(blend, nullptr);
  EXPECT_EQ(blend->size(), 1000);
  const double n0 = double(blend->datasets()[0]->size()), n1 = double(blend->datasets()[1]->size());
  EXPECT_NEAR(blend->weights()[0], n0 / (n0 + n1), 1e-12);
}

}  // namespace
}  // namespace troupe::test
