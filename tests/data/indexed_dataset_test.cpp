// Indexed dataset (.bin/.idx, Megatron's MMIDIDX format): what the builder writes, checked
// against bytes laid out by hand from the format description and with an independent reader
// written here (std::memcpy over the raw file, not our reader); the reader's round trip; and
// refusal, with clear messages, of truncated, mismatched and foreign files.
#include <cstring>
#include <random>

#include "data/indexed_dataset.hpp"
#include "tests/data/data_test_util.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

// --- an independent reader, from the format description ---------------------------------------

struct RawIndex {
  std::string magic;
  uint64_t version = 0;
  uint8_t dtype_code = 0;
  uint64_t sequences = 0, document_entries = 0;
  std::vector<int32_t> lengths;
  std::vector<int64_t> pointers, documents;
  size_t file_size = 0;
};

template <typename T>
T take(const std::string& bytes, size_t& at) {
  T v;
  EXPECT_LE(at + sizeof(T), bytes.size());
  std::memcpy(&v, bytes.data() + at, sizeof(T));
  at += sizeof(T);
  return v;
}

RawIndex parse_raw_index(const std::string& bytes) {
  RawIndex r;
  r.file_size = bytes.size();
  r.magic = bytes.substr(0, 9);
  size_t at = 9;
  r.version = take<uint64_t>(bytes, at);
  r.dtype_code = take<uint8_t>(bytes, at);
  r.sequences = take<uint64_t>(bytes, at);
  r.document_entries = take<uint64_t>(bytes, at);
  for (uint64_t i = 0; i < r.sequences; ++i) r.lengths.push_back(take<int32_t>(bytes, at));
  for (uint64_t i = 0; i < r.sequences; ++i) r.pointers.push_back(take<int64_t>(bytes, at));
  for (uint64_t i = 0; i < r.document_entries; ++i) r.documents.push_back(take<int64_t>(bytes, at));
  EXPECT_EQ(at, bytes.size()) << "trailing bytes after the document index";
  return r;
}

// Little-endian bytes of an integer, appended.
template <typename T>
void put(std::string& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(char(uint64_t(v) >> (8 * i) & 0xff));
}

// --- writer ------------------------------------------------------------------------------------

TEST(IndexedDataset, WriterBytesMatchTheFormatByHand) {
  TempDir dir;
  const std::string prefix = dir / "tiny";
  IndexedDatasetBuilder b(prefix, TokenDtype::u16);
  b.add_document(std::vector<int32_t>{1, 2, 3});                                  // doc 0: one sequence
  b.end_document();                                                               // doc 1: empty
  b.add_document(std::vector<int32_t>{65535, 0, 7}, std::vector<int32_t>{1, 2});  // doc 2: two sequences
  b.finalize();

  std::string idx("MMIDIDX\0\0", 9);
  put<uint64_t>(idx, 1);  // version
  put<uint8_t>(idx, 8);   // uint16 in Megatron's DType table
  put<uint64_t>(idx, 3);  // sequences
  put<uint64_t>(idx, 4);  // document-index entries
  for (int32_t n : {3, 1, 2}) put<int32_t>(idx, n);
  for (int64_t p : {0, 6, 8}) put<int64_t>(idx, p);  // byte offsets: 3 * 2, then + 1 * 2
  for (int64_t d : {0, 1, 1, 3}) put<int64_t>(idx, d);
  std::string bin;
  for (uint16_t t : {1, 2, 3, 65535, 0, 7}) put<uint16_t>(bin, t);

  EXPECT_EQ(read_bytes(prefix + ".idx"), idx);
  EXPECT_EQ(read_bytes(prefix + ".bin"), bin);
  EXPECT_EQ(dir.files(), (std::vector<std::string>{"tiny.bin", "tiny.idx"}));  // no .tmp left
}

TEST(IndexedDataset, IndependentReaderAgreesOnALargerDataset) {
  TempDir dir;
  for (TokenDtype dtype : {TokenDtype::u16, TokenDtype::i32}) {
    const std::string prefix = dir / token_dtype_name(dtype);
    std::mt19937 rng(7);
    std::vector<std::vector<int32_t>> docs;
    IndexedDatasetBuilder b(prefix, dtype);
    for (int d = 0; d < 200; ++d) {
      std::vector<int32_t> doc(rng() % 50);
      for (auto& t : doc) t = int32_t(rng() % (dtype == TokenDtype::u16 ? 65536 : 200000));
      if (doc.empty())
        b.end_document();  // Megatron's preprocess gives empty documents no sequence
      else
        b.add_document(doc);
      if (!doc.empty()) docs.push_back(doc);
    }
    b.finalize();

    const RawIndex raw = parse_raw_index(read_bytes(prefix + ".idx"));
    const std::string bin = read_bytes(prefix + ".bin");
    EXPECT_EQ(raw.magic, std::string("MMIDIDX\0\0", 9));
    EXPECT_EQ(raw.version, 1u);
    EXPECT_EQ(raw.dtype_code, dtype == TokenDtype::u16 ? 8 : 4);
    ASSERT_EQ(raw.sequences, docs.size());
    EXPECT_EQ(raw.document_entries, 201u);
    EXPECT_EQ(raw.file_size, 34 + 12 * docs.size() + 8 * 201);
    EXPECT_EQ(raw.documents.front(), 0);
    EXPECT_EQ(raw.documents.back(), int64_t(docs.size()));
    const size_t item = dtype == TokenDtype::u16 ? 2 : 4;
    int64_t expected_pointer = 0;
    for (size_t s = 0; s < docs.size(); ++s) {
      ASSERT_EQ(raw.lengths[s], int32_t(docs[s].size()));
      ASSERT_EQ(raw.pointers[s], expected_pointer);
      for (size_t t = 0; t < docs[s].size(); ++t) {
        int64_t v = 0;
        if (item == 2)
          v = uint8_t(bin[size_t(expected_pointer) + 2 * t]) | uint8_t(bin[size_t(expected_pointer) + 2 * t + 1]) << 8;
        else {
          int32_t x;
          std::memcpy(&x, bin.data() + expected_pointer + int64_t(4 * t), 4);
          v = x;
        }
        ASSERT_EQ(v, docs[s][t]) << "sequence " << s << " token " << t;
      }
      expected_pointer += int64_t(docs[s].size() * item);
    }
    EXPECT_EQ(bin.size(), size_t(expected_pointer));

    // Our reader agrees.
    const IndexedDataset ds = IndexedDataset::open(prefix);
    EXPECT_EQ(ds.dtype(), dtype);
    EXPECT_EQ(ds.num_sequences(), int64_t(docs.size()));
    EXPECT_EQ(ds.num_documents(), 200);
    for (size_t s = 0; s < docs.size(); ++s) ASSERT_EQ(ds.get(int64_t(s)), docs[s]);
    EXPECT_EQ(ds.get(3, 1, 2), std::vector<int32_t>(docs[3].begin() + 1, docs[3].begin() + 3));
    for (int64_t j = 0; j <= 200; ++j) ASSERT_EQ(ds.document_index(j), raw.documents[size_t(j)]);
  }
}

TEST(IndexedDataset, DtypeChoiceFollowsPreprocessData) {
  EXPECT_EQ(optimal_token_dtype(50257), TokenDtype::u16);
  EXPECT_EQ(optimal_token_dtype(65499), TokenDtype::u16);
  EXPECT_EQ(optimal_token_dtype(65500), TokenDtype::i32);
  EXPECT_EQ(optimal_token_dtype(128256), TokenDtype::i32);
  EXPECT_EQ(token_dtype_size(TokenDtype::u16), 2u);
  EXPECT_EQ(int(TokenDtype::i32), 4);
  EXPECT_EQ(int(TokenDtype::u16), 8);
}

TEST(IndexedDataset, TokenOutsideTheDtypeIsRefusedAndNothingIsLeft) {
  TempDir dir;
  {
    IndexedDatasetBuilder b(dir / "x", TokenDtype::u16);
    b.add_document(std::vector<int32_t>{1, 2});
    const std::string e = error_of([&] { b.add_document(std::vector<int32_t>{70000}); });
    EXPECT_NE(e.find("token id 70000 does not fit"), std::string::npos) << e;
  }  // destroyed without finalize()
  EXPECT_TRUE(dir.files().empty());
}

TEST(IndexedDataset, FinalizeReplacesAnOldDatasetCompletely) {
  TempDir dir;
  const std::string prefix = dir / "d";
  for (int round = 0; round < 2; ++round) {
    IndexedDatasetBuilder b(prefix, TokenDtype::i32);
    for (int d = 0; d <= round; ++d) b.add_document(std::vector<int32_t>{d, d + 1, d + 2});
    b.finalize();
    EXPECT_EQ(IndexedDataset::open(prefix).num_documents(), round + 1);
  }
  EXPECT_EQ(dir.files(), (std::vector<std::string>{"d.bin", "d.idx"}));
}

// --- refusing bad files ------------------------------------------------------------------------

class BadFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    prefix_ = dir_ / "good";
    IndexedDatasetBuilder b(prefix_, TokenDtype::u16);
    for (int d = 0; d < 5; ++d) b.add_document(std::vector<int32_t>(size_t(d + 2), d));
    b.finalize();
    idx_ = read_bytes(prefix_ + ".idx");
    bin_ = read_bytes(prefix_ + ".bin");
  }
  // Writes `idx` and `bin` under a new prefix and returns the error opening it gives.
  std::string open_error(const std::string& idx, const std::string& bin) {
    const std::string p = dir_ / ("case" + std::to_string(n_++));
    write_bytes(p + ".idx", idx);
    write_bytes(p + ".bin", bin);
    return error_of([&] { IndexedDataset::open(p); });
  }
  static void expect_has(const std::string& error, const std::string& part) {
    EXPECT_NE(error.find(part), std::string::npos) << "error: " << error << "\nexpected to contain: " << part;
  }

  TempDir dir_;
  std::string prefix_, idx_, bin_;
  int n_ = 0;
};

TEST_F(BadFiles, GoodFileOpens) { EXPECT_EQ(IndexedDataset::open(prefix_).num_sequences(), 5); }

TEST_F(BadFiles, ForeignFile) {
  const std::string e = open_error("{\"not\": \"an index\"}\n", bin_);
  expect_has(e, "case0.idx' is not a Megatron indexed dataset index");
  expect_has(open_error("MMI", bin_), "only 3 bytes");
}

TEST_F(BadFiles, TruncatedIndex) {
  expect_has(open_error(idx_.substr(0, 20), bin_), "shorter than the 34-byte header");
  // Cut anywhere inside the arrays: the header's counts no longer fit.
  for (size_t cut : {size_t(34), size_t(40), idx_.size() - 8, idx_.size() - 1}) {
    const std::string e = open_error(idx_.substr(0, cut), bin_);
    expect_has(e, str_cat("has ", cut, " bytes but its header (5 sequences, 6 document-index entries) needs ",
                          idx_.size(), ": the file is truncated"));
  }
}

TEST_F(BadFiles, WrongVersionOrDtype) {
  std::string v2 = idx_;
  v2[9] = 2;
  expect_has(open_error(v2, bin_), "unsupported index version 2");
  std::string code = idx_;
  code[17] = 9;
  expect_has(open_error(code, bin_), "unknown dtype code 9");
}

TEST_F(BadFiles, TruncatedOrMismatchedBin) {
  const std::string e = open_error(idx_, bin_.substr(0, bin_.size() - 2));
  expect_has(e, ".bin' is truncated or does not belong to its .idx: sequence 4");
  // A .bin of another dataset that is too short for this index.
  expect_has(open_error(idx_, std::string(10, '\0')), "is truncated or does not belong");
}

TEST_F(BadFiles, BrokenDocumentIndex) {
  // Entries start at 34 + 12 * 5 = 94; entry 2 set below entry 1.
  std::string dec = idx_;
  const int64_t zero = 0;
  std::memcpy(dec.data() + 94 + 2 * 8, &zero, 8);
  expect_has(open_error(dec, bin_), "the document index decreases at entry 2");
  std::string end = idx_;
  const int64_t four = 4;
  std::memcpy(end.data() + 94 + 5 * 8, &four, 8);
  expect_has(open_error(end, bin_), "the document index ends at 4 but there are 5 sequences");
}

TEST_F(BadFiles, MissingBin) {
  write_bytes(dir_ / "nobin.idx", idx_);
  const std::string e = error_of([&] { IndexedDataset::open(dir_ / "nobin"); });
  expect_has(e, "nobin.bin");
}

}  // namespace
}  // namespace troupe::test
