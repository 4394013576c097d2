// GPT dataset indices, splits and blends against hand-worked examples of Megatron's
// algorithms, and numpy's RandomState shuffle against numpy's own test values.
#include <numeric>
#include <set>

#include "data/blended_dataset.hpp"
#include "data/data_splits.hpp"
#include "data/gpt_dataset.hpp"
#include "data/npy.hpp"
#include "data/numpy_random.hpp"
#include "tests/data/data_test_util.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

using I32 = std::vector<int32_t>;
using I64 = std::vector<int64_t>;

I64 to_vector(const IndexArray& a) {
  I64 v;
  for (int64_t i = 0; i < a.size(); ++i) v.push_back(a[i]);
  return v;
}

// --- numpy's RandomState ---------------------------------------------------------------------

// Expected values from numpy/random/tests/test_randomstate.py (TestRandomDist, seed 1234567890):
// test_shuffle and test_permutation.
TEST(NumpyRandomState, ShuffleMatchesNumpysTestSuite) {
  NumpyRandomState rng(1234567890);
  I64 list{1, 2, 3, 4, 5, 6, 7, 8, 9, 0};
  rng.shuffle(list);
  EXPECT_EQ(list, (I64{0, 1, 9, 6, 2, 4, 5, 8, 7, 3}));

  NumpyRandomState rng2(1234567890);
  I64 perm(10);
  std::iota(perm.begin(), perm.end(), 0);
  rng2.shuffle(perm);  // RandomState.permutation(10)
  EXPECT_EQ(perm, (I64{9, 0, 8, 5, 1, 3, 4, 7, 6, 2}));
}

TEST(NumpyRandomState, MegatronIndexBuildersUseTheSameShuffle) {
  // _build_document_index with one epoch is one RandomState.shuffle of the documents...
  NumpyRandomState rng(1234567890);
  EXPECT_EQ(build_document_index(I32{1, 2, 3, 4, 5, 6, 7, 8, 9, 0}, 1, rng, false),
            (I32{0, 1, 9, 6, 2, 4, 5, 8, 7, 3}));
  // ...and _build_shuffle_index shuffles numpy.arange(n).
  NumpyRandomState rng2(1234567890);
  EXPECT_EQ(build_shuffle_index(10, 10, rng2), (I64{9, 0, 8, 5, 1, 3, 4, 7, 6, 2}));
}

TEST(NumpyRandomState, IntervalStaysInRangeAndUsesTheMask) {
  NumpyRandomState a(5), b(5);
  for (uint64_t max : {1ull, 2ull, 3ull, 7ull, 100ull, 65535ull, 1ull << 31}) {
    for (int i = 0; i < 200; ++i) {
      const uint64_t v = a.interval(max);
      ASSERT_LE(v, max);
      // The same draw by hand: 32-bit outputs masked to the smallest all-ones mask >= max.
      uint64_t mask = 1;
      while (mask < max) mask = mask << 1 | 1;
      uint64_t w;
      while ((w = (b.next_uint32() & mask)) > max) {}
      ASSERT_EQ(v, w);
    }
  }
  EXPECT_EQ(a.interval(0), 0u);
}

// --- epochs and indices, worked by hand --------------------------------------------------------

// Three documents of 5, 3 and 4 tokens (12 per epoch), sequence length 4: a sample takes 5.
TEST(GptIndices, EpochsFromRequestedSamples) {
  EXPECT_EQ(gpt_num_epochs(12, std::nullopt, 4), 1);
  EXPECT_EQ(gpt_num_epochs(12, 2, 4), 1);  // 2 * 4 + 1 = 9 <= 12
  EXPECT_EQ(gpt_num_epochs(12, 3, 4), 2);  // 13 > 12
  EXPECT_EQ(gpt_num_epochs(12, 5, 4), 2);  // 21 <= 24
  EXPECT_EQ(gpt_num_epochs(12, 6, 4), 3);  // 25 > 24

  // 100 tokens per epoch, L = 4: 24 samples per epoch, (100 - 1) // 4.
  GptEpochPlan p = gpt_epoch_plan(100, 30, 4);  // 121 tokens -> 2 epochs
  EXPECT_EQ(p.num_epochs, 2);
  EXPECT_EQ(p.num_samples_sans_final_epoch, 24);
  EXPECT_TRUE(p.separate_final_epoch);  // 30 - 24 = 6 < int(0.8 * 24) = 19
  p = gpt_epoch_plan(100, 44, 4);       // 20 from the final epoch: not < 19
  EXPECT_EQ(p.num_epochs, 2);
  EXPECT_FALSE(p.separate_final_epoch);
  p = gpt_epoch_plan(100, 42, 4);  // 18 < 19
  EXPECT_TRUE(p.separate_final_epoch);
  EXPECT_FALSE(gpt_epoch_plan(100, 20, 4).separate_final_epoch);  // one epoch
}

TEST(GptIndices, SampleIndexOneEpoch) {
  const I32 sizes{5, 3, 4};
  // Sample 0: doc0[0:5]. Sample 1 starts on its last token (0, 4): doc0[4], doc1[0:3],
  // doc2[0] (5 tokens), so sample 2 starts at (2, 0). (12 - 1) // 4 = 2 samples.
  EXPECT_EQ(build_sample_index(sizes, I32{0, 1, 2}, 4, 1, 12, true), (I64{0, 0, 0, 4, 2, 0}));
}

TEST(GptIndices, SampleIndexTwoEpochs) {
  const I32 sizes{5, 3, 4};
  // Continuing over the second epoch (document index positions 3..5 = docs 0, 1, 2):
  // sample 2 = doc2[0:4] + doc0[0] -> next at (3, 0); sample 3 = doc0[0:5] -> (3, 4);
  // sample 4 = doc0[4], doc1, doc2[0] -> (5, 0). (24 - 1) // 4 = 5 samples.
  EXPECT_EQ(build_sample_index(sizes, I32{0, 1, 2, 0, 1, 2}, 4, 2, 12, true),
            (I64{0, 0, 0, 4, 2, 0, 3, 0, 3, 4, 5, 0}));
}

TEST(GptIndices, SampleIndexKeepsAPartialLastSample) {
  const I32 sizes{5, 3, 4};
  // Without dropping: ceil(11 / 4) = 3 samples; the third runs out of documents and its end
  // row is (2, 4 - 1).
  EXPECT_EQ(build_sample_index(sizes, I32{0, 1, 2}, 4, 1, 12, false), (I64{0, 0, 0, 4, 2, 0, 2, 3}));
}

TEST(GptIndices, DocumentIndexShufflesEpochsTogetherOrTheLastApart) {
  const I32 docs{0, 1, 2, 3, 4, 5, 6, 7};
  NumpyRandomState together(3);
  const I32 all = build_document_index(docs, 3, together, false);
  ASSERT_EQ(all.size(), 24u);
  std::multiset<int32_t> counts(all.begin(), all.end());
  for (int32_t d : docs) EXPECT_EQ(counts.count(d), 3u);

  NumpyRandomState apart(3);
  const I32 split = build_document_index(docs, 3, apart, true);
  ASSERT_EQ(split.size(), 24u);
  // The last epoch is a permutation of the documents on its own...
  std::set<int32_t> last(split.begin() + 16, split.end());
  EXPECT_EQ(last.size(), 8u);
  // ...drawn after the first two epochs' shuffle from the same stream.
  NumpyRandomState replay(3);
  I32 first(docs.begin(), docs.end());
  first.insert(first.end(), docs.begin(), docs.end());
  replay.shuffle(first);
  I32 tail = docs;
  replay.shuffle(tail);
  first.insert(first.end(), tail.begin(), tail.end());
  EXPECT_EQ(split, first);
}

TEST(GptIndices, ShuffleIndexPermutesTheFinalEpochSeparately) {
  NumpyRandomState rng(9);
  const I64 s = build_shuffle_index(6, 10, rng);
  ASSERT_EQ(s.size(), 10u);
  EXPECT_EQ(std::set<int64_t>(s.begin(), s.begin() + 6), (std::set<int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(std::set<int64_t>(s.begin() + 6, s.end()), (std::set<int64_t>{6, 7, 8, 9}));
}

// --- the dataset over an indexed dataset ------------------------------------------------------

std::shared_ptr<const IndexedDataset> tiny_dataset(const TempDir& dir, const std::vector<I32>& docs) {
  const std::string prefix = dir / "tiny";
  IndexedDatasetBuilder b(prefix, TokenDtype::u16);
  for (const I32& d : docs) b.add_document(d);
  b.finalize();
  return std::make_shared<const IndexedDataset>(IndexedDataset::open(prefix));
}

// Every sample is L + 1 consecutive tokens of the documents laid end to end in
// document-index order, sample j starting at token j * L; samples are read through the
// shuffle index.
void expect_samples_follow_the_stream(const GptDataset& ds) {
  const IndexedDataset& data = ds.indexed_dataset();
  I32 stream;
  for (int64_t p = 0; p < ds.document_index().size(); ++p) {
    const I32 doc = data.get(ds.document_index()[p]);
    stream.insert(stream.end(), doc.begin(), doc.end());
  }
  const int64_t L = ds.sequence_length();
  std::set<int64_t> seen;
  I32 sample(size_t(L + 1));
  for (int64_t k = 0; k < ds.size(); ++k) {
    const int64_t j = ds.shuffle_index()[k];
    seen.insert(j);
    ds.sample(k, sample.data());
    ASSERT_EQ(sample, I32(stream.begin() + j * L, stream.begin() + j * L + L + 1)) << "sample " << k;
  }
  EXPECT_EQ(int64_t(seen.size()), ds.size());  // a permutation
}

TEST(GptDataset, SamplesSpanDocumentsAndOverlapByOneToken) {
  TempDir dir;
  auto data = tiny_dataset(dir, {{10, 11, 12, 13, 14}, {20, 21, 22}, {30, 31, 32, 33}});
  GptDatasetConfig cfg;
  cfg.sequence_length = 4;
  cfg.use_cache = false;
  for (int64_t n : {2, 5, 9}) {
    GptDataset ds(data, Split::train, 0, 3, n, cfg);
    EXPECT_GE(ds.size(), n);
    expect_samples_follow_the_stream(ds);
  }
  // One epoch, with the document order numpy gives seed 1234 for 3 documents.
  GptDataset one(data, Split::train, 0, 3, std::nullopt, cfg);
  EXPECT_EQ(one.size(), 2);
  NumpyRandomState rng(1234);
  I32 order{0, 1, 2};
  rng.shuffle(order);
  EXPECT_EQ(to_vector(one.document_index()), I64(order.begin(), order.end()));
}

TEST(GptDataset, SplitRangeSelectsItsDocuments) {
  TempDir dir;
  std::vector<I32> docs;
  for (int d = 0; d < 10; ++d) docs.push_back(I32(7, 100 + d));
  auto data = tiny_dataset(dir, docs);
  GptDatasetConfig cfg;
  cfg.sequence_length = 3;
  cfg.use_cache = false;
  GptDataset valid(data, Split::valid, 6, 9, std::nullopt, cfg);
  std::set<int64_t> used;
  for (int64_t p = 0; p < valid.document_index().size(); ++p) used.insert(valid.document_index()[p]);
  EXPECT_EQ(used, (std::set<int64_t>{6, 7, 8}));
  expect_samples_follow_the_stream(valid);
}

TEST(GptDataset, CacheIsReusedAndRebuiltWhenTheDescriptionChanges) {
  TempDir dir;
  std::vector<I32> docs;
  for (int d = 0; d < 20; ++d) docs.push_back(I32(size_t(3 + d % 7), d));
  auto data = tiny_dataset(dir, docs);
  GptDatasetConfig cfg;
  cfg.sequence_length = 8;
  cfg.cache_dir = dir / "cache";

  GptDataset first(data, Split::train, 0, 20, 40, cfg);
  EXPECT_FALSE(first.loaded_from_cache());
  GptDataset again(data, Split::train, 0, 20, 40, cfg);
  EXPECT_TRUE(again.loaded_from_cache());
  EXPECT_EQ(again.cache_path_prefix(), first.cache_path_prefix());
  EXPECT_EQ(to_vector(again.document_index()), to_vector(first.document_index()));
  EXPECT_EQ(to_vector(again.sample_index()), to_vector(first.sample_index()));
  EXPECT_EQ(to_vector(again.shuffle_index()), to_vector(first.shuffle_index()));
  expect_samples_follow_the_stream(again);

  // Same indices as an in-memory build.
  GptDatasetConfig memory = cfg;
  memory.use_cache = false;
  GptDataset built(data, Split::train, 0, 20, 40, memory);
  EXPECT_EQ(to_vector(built.shuffle_index()), to_vector(first.shuffle_index()));
  EXPECT_EQ(to_vector(built.sample_index()), to_vector(first.sample_index()));

  // Another seed, length or sample count is another description: built fresh.
  GptDatasetConfig seeded = cfg;
  seeded.random_seed = 99;
  GptDataset other(data, Split::train, 0, 20, 40, seeded);
  EXPECT_FALSE(other.loaded_from_cache());
  EXPECT_NE(other.cache_path_prefix(), first.cache_path_prefix());
  EXPECT_FALSE(GptDataset(data, Split::train, 0, 20, 41, cfg).loaded_from_cache());

  // A damaged cache file is rebuilt, not trusted. (Replaced by rename, as our writers do:
  // truncating a file in place under a live mapping would fault the readers.)
  const std::string shuffle = first.cache_path_prefix() + "-shuffle_index.npy";
  write_bytes(shuffle + ".damaged", read_bytes(shuffle).substr(0, 100));
  std::filesystem::rename(shuffle + ".damaged", shuffle);
  GptDataset repaired(data, Split::train, 0, 20, 40, cfg);
  EXPECT_FALSE(repaired.loaded_from_cache());
  EXPECT_EQ(to_vector(repaired.shuffle_index()), to_vector(built.shuffle_index()));
  EXPECT_TRUE(GptDataset(data, Split::train, 0, 20, 40, cfg).loaded_from_cache());
}

// Preprocessed again into the same prefix: the same number of documents and tokens, other
// document lengths. The old cached indices would cut samples in the wrong places.
TEST(GptDataset, CacheIsRebuiltWhenTheDocumentLengthsChange) {
  TempDir dir;
  std::vector<I32> docs, moved;
  for (int d = 0; d < 20; ++d) docs.push_back(I32(size_t(3 + d % 7), d));
  moved = docs;
  moved[0].push_back(1);  // one token moves from the last document to the first
  moved[19].pop_back();
  GptDatasetConfig cfg;
  cfg.sequence_length = 8;
  cfg.cache_dir = dir / "cache";
  const std::string first_prefix =
      GptDataset(tiny_dataset(dir, docs), Split::train, 0, 20, 40, cfg).cache_path_prefix();
  GptDataset again(tiny_dataset(dir, moved), Split::train, 0, 20, 40, cfg);
  EXPECT_FALSE(again.loaded_from_cache());
  EXPECT_NE(again.cache_path_prefix(), first_prefix);
  expect_samples_follow_the_stream(again);
}

// A cache whose indices do not fit the data (written by hand here) is named in the error.
TEST(GptDataset, ABadCachedIndexNamesTheCache) {
  TempDir dir;
  std::vector<I32> docs;
  for (int d = 0; d < 20; ++d) docs.push_back(I32(size_t(3 + d % 7), d));
  auto data = tiny_dataset(dir, docs);
  GptDatasetConfig cfg;
  cfg.sequence_length = 8;
  cfg.cache_dir = dir / "cache";
  const std::string prefix = GptDataset(data, Split::train, 0, 20, 40, cfg).cache_path_prefix();
  // Sample index rows that span a whole epoch each: a sample far longer than 9 tokens.
  NpyArray smp = NpyArray::open(prefix + "-sample_index.npy");
  const int64_t rows = smp.shape()[0];
  std::vector<int64_t> wide(size_t(rows * 2), 0);
  for (int64_t r = 0; r < rows; ++r) wide[size_t(2 * r)] = std::min<int64_t>(r * 10, 19);
  write_npy(prefix + "-sample_index.tmp.npy", NpyDtype::i64, {rows, 2}, wide.data());
  std::filesystem::rename(prefix + "-sample_index.tmp.npy", prefix + "-sample_index.npy");
  GptDataset cached(data, Split::train, 0, 20, 40, cfg);
  ASSERT_TRUE(cached.loaded_from_cache());
  std::vector<int32_t> out(9);
  std::string what;
  for (int64_t i = 0; i < cached.size() && what.empty(); ++i) {
    try {
      cached.sample(i, out.data());
    } catch (const Error& e) {
      what = e.what();
    }
  }
  EXPECT_NE(what.find("read from the cache " + prefix), std::string::npos) << what;
  EXPECT_NE(what.find("--data-cache-path"), std::string::npos) << what;
}

TEST(GptDataset, CacheFilesAreNpyInMegatronsDtypes) {
  TempDir dir;
  auto data = tiny_dataset(dir, {{1, 2, 3, 4, 5}, {6, 7, 8}, {9, 10, 11, 12}});
  GptDatasetConfig cfg;
  cfg.sequence_length = 4;
  cfg.cache_dir = dir / "c";
  GptDataset ds(data, Split::train, 0, 3, 5, cfg);
  const std::string& base = ds.cache_path_prefix();
  EXPECT_NE(base.find("-GPTDataset-train"), std::string::npos);
  const NpyArray doc = NpyArray::open(base + "-document_index.npy");
  const NpyArray smp = NpyArray::open(base + "-sample_index.npy");
  const NpyArray shf = NpyArray::open(base + "-shuffle_index.npy");
  EXPECT_EQ(doc.dtype(), NpyDtype::i32);
  EXPECT_EQ(doc.shape(), (I64{6}));
  EXPECT_EQ(smp.dtype(), NpyDtype::i32);
  EXPECT_EQ(smp.shape(), (I64{6, 2}));
  EXPECT_EQ(shf.dtype(), NpyDtype::u32);
  EXPECT_EQ(shf.shape(), (I64{5}));
  const std::string header = read_bytes(base + "-sample_index.npy").substr(0, 128);
  EXPECT_EQ(header.substr(0, 6), "\x93NUMPY");
  EXPECT_NE(header.find("{'descr': '<i4', 'fortran_order': False, 'shape': (6, 2), }"), std::string::npos);
  EXPECT_EQ((10 + size_t(uint8_t(header[8]) | uint8_t(header[9]) << 8)) % 64, 0u);
  EXPECT_NE(read_bytes(base + "-description.txt").find("\"sequence_length\": 4"), std::string::npos);
}

TEST(GptDataset, EmptySplitAskedForNothingIsEmpty) {
  TempDir dir;
  auto data = tiny_dataset(dir, {{1, 2, 3, 4, 5}});
  GptDatasetConfig cfg;
  cfg.sequence_length = 4;
  cfg.use_cache = false;
  EXPECT_EQ(GptDataset(data, Split::test, 1, 1, 0, cfg).size(), 0);
  const std::string e = error_of([&] { GptDataset(data, Split::test, 1, 1, 3, cfg); });
  EXPECT_NE(e.find("too few for 3 samples"), std::string::npos) << e;
}

// --- splits ------------------------------------------------------------------------------------

TEST(Splits, ParseNormalizeAndRange) {
  const auto v = parse_split("969,30,1");
  EXPECT_DOUBLE_EQ(v[0], 0.969);
  EXPECT_DOUBLE_EQ(v[1], 0.030);
  EXPECT_DOUBLE_EQ(v[2], 0.001);
  const SplitMatrix m = split_matrix(v);
  EXPECT_EQ(split_range(m, Split::train, 1000), std::make_pair(int64_t(0), int64_t(969)));
  EXPECT_EQ(split_range(m, Split::valid, 1000), std::make_pair(int64_t(969), int64_t(999)));
  EXPECT_EQ(split_range(m, Split::test, 1000), std::make_pair(int64_t(999), int64_t(1000)));
  // 138 documents: round(133.722) = 134, round(137.862) = 138; the test split is empty.
  EXPECT_EQ(split_range(m, Split::train, 138), std::make_pair(int64_t(0), int64_t(134)));
  EXPECT_EQ(split_range(m, Split::valid, 138), std::make_pair(int64_t(134), int64_t(138)));
  EXPECT_EQ(split_range(m, Split::test, 138), std::make_pair(int64_t(138), int64_t(138)));

  // Missing numbers are zeros, and a zero share disables its split.
  const SplitMatrix two = split_matrix(parse_split("1,1"));
  EXPECT_FALSE(two[2].has_value());
  // Python's round() rounds halves to even: 1.5 -> 2, 2.5 -> 2.
  EXPECT_EQ(split_range(two, Split::train, 3), std::make_pair(int64_t(0), int64_t(2)));
  EXPECT_EQ(split_range(two, Split::train, 5), std::make_pair(int64_t(0), int64_t(2)));
  EXPECT_EQ(split_range(two, Split::valid, 5), std::make_pair(int64_t(2), int64_t(5)));
  EXPECT_FALSE(split_range(two, Split::test, 5).has_value());
  EXPECT_FALSE(split_matrix(parse_split("100,0,0"))[1].has_value());
  EXPECT_EQ(parse_split("99.5 0.5")[1], 0.005);

  EXPECT_NE(error_of([] { parse_split("1,2,3,4"); }).find("at most 3"), std::string::npos);
  EXPECT_NE(error_of([] { parse_split("0,0,0"); }).find("zero"), std::string::npos);
  EXPECT_NE(error_of([] { parse_split("1.2.3"); }).find("not a number"), std::string::npos);
  EXPECT_NE(error_of([] { parse_split("a,b,c"); }).find("'a' is not part of a weight list"), std::string::npos);
  EXPECT_NE(error_of([] { parse_split("98,1x,1"); }).find("'x'"), std::string::npos);
  EXPECT_EQ(parse_split("98/1/1")[0], 0.98);
}

TEST(Splits, NumpySumIsPairwiseFromEightValues) {
  EXPECT_EQ(numpy_sum(std::vector<double>{0.1, 0.2, 0.3}), (0.1 + 0.2) + 0.3);
  // 9 values: 8 accumulators, combined pairwise, then the 9th. 1e16 swallows each single 1
  // added to it one at a time, but not the pairs summed first.
  const std::vector<double> v{1e16, 1, 1, 1, 1, 1, 1, 1, 1};
  double sequential = 0;
  for (double x : v) sequential += x;
  const double pairwise = ((1e16 + 1.0) + (1.0 + 1.0)) + ((1.0 + 1.0) + (1.0 + 1.0)) + 1.0;
  EXPECT_EQ(numpy_sum(v), pairwise);
  EXPECT_NE(pairwise, sequential);
}

TEST(Splits, BlendArguments) {
  Blend b = parse_blend({"0.3", "a", "0.7", "b"});
  EXPECT_EQ(b.prefixes, (std::vector<std::string>{"a", "b"}));
  ASSERT_TRUE(b.weights.has_value());
  EXPECT_EQ(*b.weights, (std::vector<double>{0.3, 0.7}));
  b = parse_blend({"a", "b"});
  EXPECT_EQ(b.prefixes, (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(b.weights.has_value());
  b = parse_blend({"a", "b", "c"});
  EXPECT_EQ(b.prefixes.size(), 3u);
  EXPECT_FALSE(parse_blend({"only"}).weights.has_value());
  EXPECT_NE(error_of([] { parse_blend({"x", "a", "0.5", "b"}); }).find("mixes"), std::string::npos);

  // ceil(ceil(N * w) * 1.005) samples per dataset and split.
  const auto sizes = samples_per_dataset(std::vector<double>{0.3, 0.7}, {1000, 10, 0}, 0.005);
  EXPECT_EQ(sizes[0], (std::array<int64_t, 3>{302, 4, 0}));  // 300 -> 301.5; 3 -> 3.015
  EXPECT_EQ(sizes[1], (std::array<int64_t, 3>{704, 8, 0}));  // 700 -> 703.5; 7 -> 7.035
  EXPECT_EQ(samples_per_dataset(std::vector<double>{0.3, 0.7}, {1000, 10, 0})[0], (std::array<int64_t, 3>{300, 3, 0}));
}

// --- blending ----------------------------------------------------------------------------------

TEST(Blending, GreedyIndexForThirtySeventy) {
  // Worked by hand: at each i (n = max(i, 1)) the dataset with the largest w * n - taken wins.
  //   i: 0   1   2   3   4   5   6   7   8   9
  //   d: 1   0   1   1   0   1   1   0   1   1
  std::vector<int16_t> d(10);
  I64 s(10);
  build_blending_indices(std::vector<double>{0.3, 0.7}, 10, d, s);
  EXPECT_EQ(d, (std::vector<int16_t>{1, 0, 1, 1, 0, 1, 1, 0, 1, 1}));
  EXPECT_EQ(s, (I64{0, 0, 1, 2, 1, 3, 4, 2, 5, 6}));

  // Ties go to the lowest index.
  build_blending_indices(std::vector<double>{0.5, 0.5}, 4, d, s);
  EXPECT_EQ(std::vector<int16_t>(d.begin(), d.begin() + 4), (std::vector<int16_t>{0, 1, 0, 1}));

  // Over a long run, every prefix stays within one sample of its weight.
  const int64_t n = 10000;
  std::vector<int16_t> dd(n);
  I64 ss(n);
  build_blending_indices(std::vector<double>{0.3, 0.7}, n, dd, ss);
  int64_t taken0 = 0;
  for (int64_t i = 0; i < n; ++i) {
    taken0 += dd[size_t(i)] == 0;
    ASSERT_LE(std::abs(double(taken0) - 0.3 * double(i + 1)), 1.0) << i;
  }
  EXPECT_EQ(taken0, 3000);
}

TEST(Blending, ExhaustiveUsesEveryDatasetUp) {
  std::vector<int16_t> d(3);
  I64 s(3);
  build_exhaustive_blending_indices(I64{1, 2}, d, s);
  EXPECT_EQ(d, (std::vector<int16_t>{1, 0, 1}));
  EXPECT_EQ(s, (I64{0, 0, 1}));
}

class FixedSource final : public SampleSource {
 public:
  FixedSource(int32_t tag, int64_t n) : tag_(tag), n_(n) {}
  int64_t size() const override { return n_; }
  int64_t sequence_length() const override { return 2; }
  void sample(int64_t i, int32_t* out) const override {
    out[0] = tag_;
    out[1] = int32_t(i);
    out[2] = 0;
  }

 private:
  int32_t tag_;
  int64_t n_;
};

TEST(Blending, DatasetReadsThroughTheIndices) {
  auto a = std::make_shared<const FixedSource>(100, 5), b = std::make_shared<const FixedSource>(200, 10);
  BlendedDataset mix({a, b}, {3, 7}, 10);  // normalized to 0.3 / 0.7
  EXPECT_EQ(mix.size(), 10);
  I32 out(3);
  mix.sample(3, out.data());
  EXPECT_EQ(out, (I32{200, 2, 0}));
  mix.sample(4, out.data());
  EXPECT_EQ(out, (I32{100, 1, 0}));
  const std::string e = error_of([&] { BlendedDataset({a, b}, {0.9, 0.1}, 10); });
  EXPECT_NE(e.find("oversamples dataset 0: it asks for 9 samples, more than its 5"), std::string::npos) << e;
  BlendedDataset exact({a, b}, {2, 3}, std::nullopt);
  EXPECT_EQ(exact.size(), 5);
}

}  // namespace
}  // namespace troupe::test
