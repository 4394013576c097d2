// `troupe preprocess` logic (data/preprocess.hpp): output identical for any worker count and
// equal to tokenizing each document directly; errors naming file:line; skipped lines; keys,
// sentence lists, empty documents, "<|endoftext|>", NullTokenizer.
#include <fstream>

#include <nlohmann/json.hpp>

#include "data/preprocess.hpp"
#include "tests/data/data_test_util.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

using I32 = std::vector<int32_t>;

PreprocessOptions gpt2_options(const std::string& input, const std::string& prefix) {
  PreprocessOptions o;
  o.input = input;
  o.output_prefix = prefix;
  o.tokenizer.vocab_file = source_path("assets/gpt2/gpt2-vocab.json");
  o.tokenizer.merge_file = source_path("assets/gpt2/gpt2-merges.txt");
  return o;
}

PreprocessOptions null_options(const std::string& input, const std::string& prefix, int64_t vocab = 1000) {
  PreprocessOptions o;
  o.input = input;
  o.output_prefix = prefix;
  o.tokenizer.type = "NullTokenizer";
  o.tokenizer.vocab_size = vocab;
  return o;
}

std::vector<I32> read_documents(const std::string& prefix) {
  const IndexedDataset ds = IndexedDataset::open(prefix);
  std::vector<I32> docs;
  for (int64_t d = 0; d < ds.num_documents(); ++d) {
    I32 doc;
    for (int64_t s = ds.document_index(d); s < ds.document_index(d + 1); ++s) {
      const I32 seq = ds.get(s);
      doc.insert(doc.end(), seq.begin(), seq.end());
    }
    docs.push_back(doc);
  }
  return docs;
}

TEST(Preprocess, SameBytesForAnyWorkerCountAndEqualToDirectTokenizing) {
  TempDir dir;
  const std::string corpus = source_path("assets/corpora/moby-dick.jsonl");
  std::string first_bin, first_idx;
  for (int workers : {1, 4}) {
    for (size_t chunk : {size_t(1) << 20, size_t(4096)}) {
      PreprocessOptions o = gpt2_options(corpus, dir / str_cat("w", workers, "c", chunk));
      o.append_eod = true;
      o.workers = workers;
      o.chunk_bytes = chunk;
      const PreprocessResult r = preprocess_jsonl(o);
      EXPECT_EQ(r.documents, 138);
      ASSERT_EQ(r.outputs.size(), 1u);
      EXPECT_EQ(r.outputs[0].dtype, TokenDtype::u16);
      const std::string prefix = preprocess_output_prefix(o.output_prefix, "text");
      EXPECT_EQ(r.outputs[0].path_prefix, prefix);
      const std::string bin = read_bytes(prefix + ".bin"), idx = read_bytes(prefix + ".idx");
      if (first_bin.empty()) {
        first_bin = bin;
        first_idx = idx;
      } else {
        EXPECT_TRUE(bin == first_bin) << workers << " workers, chunks of " << chunk;
        EXPECT_TRUE(idx == first_idx) << workers << " workers, chunks of " << chunk;
      }
    }
  }

  // Document d is the tokenizer's encoding of line d's text, then the EOD.
  TokenizerOptions t;
  t.vocab_file = source_path("assets/gpt2/gpt2-vocab.json");
  t.merge_file = source_path("assets/gpt2/gpt2-merges.txt");
  const auto tok = build_tokenizer(t);
  const std::vector<I32> docs = read_documents(preprocess_output_prefix(dir / "w1c1048576", "text"));
  std::ifstream in(corpus);
  std::string line;
  size_t d = 0;
  while (std::getline(in, line)) {
    I32 expected = tok->encode(nlohmann::json::parse(line).at("text").get<std::string>());
    expected.push_back(50256);
    ASSERT_LT(d, docs.size());
    ASSERT_EQ(docs[d], expected) << "document " << d;
    ++d;
  }
  EXPECT_EQ(d, docs.size());
}

// Writes `lines` joined by newlines.
std::string write_jsonl(const TempDir& dir, const std::string& name, const std::vector<std::string>& lines) {
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  write_bytes(dir / name, text);
  return dir / name;
}

TEST(Preprocess, BadLinesStopWithFileAndLine) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"text\": \"1 2\"", "invalid JSON"},
      {"{\"text\": 1e99999}", "invalid JSON: number overflow"},  // nlohmann's out_of_range, not a parse_error
      {"{\"body\": \"1 2\"}", "no key \"text\""},
      {"{\"text\": 12}", "key \"text\" is a number, not a string"},
      {"{\"text\": [\"1\", null]}", "key \"text\": element 1 is a null, not a string"},
      {"[\"text\"]", "not a JSON object (a array)"},
      {"{\"text\": \"1 \xff 2\"}", "invalid UTF-8 (byte 0xFF at column 13)"},
      {"{\"text\": \"1 \xed\xa0\x80\"}", "invalid UTF-8 (byte 0xED at column 13)"},  // a surrogate
      {"{\"text\": \"1 x\"}", "cannot tokenize"},                                    // NullTokenizer wants integers
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    // 300 good lines (and a blank one), the bad one at line 302, more good ones after.
    std::vector<std::string> lines;
    for (int i = 0; i < 300; ++i) lines.push_back(str_cat("{\"text\": \"", i, " ", i + 1, "\"}"));
    lines.push_back("");
    lines.push_back(cases[c].first);
    for (int i = 0; i < 50; ++i) lines.push_back("{\"text\": \"5\"}");
    const std::string input = write_jsonl(dir, str_cat("bad", c, ".jsonl"), lines);
    for (int workers : {1, 3}) {
      PreprocessOptions o = null_options(input, dir / str_cat("out", c));
      o.workers = workers;
      o.chunk_bytes = 512;  // the bad line lands in a late chunk
      const std::string e = error_of([&] { preprocess_jsonl(o); });
      EXPECT_NE(e.find(input + ":302: " + cases[c].second), std::string::npos) << "case " << c << ": " << e;
      EXPECT_NE(e.find("--skip-bad-lines"), std::string::npos) << e;
    }
  }
  // Nothing but the inputs is left: no partial output, no temporary file.
  for (const std::string& f : dir.files()) EXPECT_NE(f.find(".jsonl"), std::string::npos) << f;
}

TEST(Preprocess, SkipBadLinesCountsThemAndKeepsTheRest) {
  TempDir dir;
  const std::string input =
      write_jsonl(dir, "mixed.jsonl",
                  {"{\"text\": \"1 2\"}", "oops", "{\"text\": \"3\"}", "{\"text\": 4}", "{\"text\": \"5 6 7\"}"});
  std::string first;
  for (int workers : {1, 2}) {
    PreprocessOptions o = null_options(input, dir / str_cat("out", workers));
    o.skip_bad_lines = true;
    o.workers = workers;
    o.chunk_bytes = 8;
    const PreprocessResult r = preprocess_jsonl(o);
    EXPECT_EQ(r.documents, 3);
    EXPECT_EQ(r.skipped_lines, 2);
    ASSERT_EQ(r.skipped_examples.size(), 2u);
    EXPECT_NE(r.skipped_examples[0].find("mixed.jsonl:2: invalid JSON"), std::string::npos) << r.skipped_examples[0];
    EXPECT_NE(r.skipped_examples[1].find("mixed.jsonl:4: key \"text\" is a number"), std::string::npos);
    const std::string prefix = preprocess_output_prefix(o.output_prefix, "text");
    EXPECT_EQ(read_documents(prefix), (std::vector<I32>{{1, 2}, {3}, {5, 6, 7}}));
    if (workers == 1)
      first = read_bytes(prefix + ".bin") + read_bytes(prefix + ".idx");
    else
      EXPECT_EQ(read_bytes(prefix + ".bin") + read_bytes(prefix + ".idx"), first);
  }
}

TEST(Preprocess, KeysSentencesEmptyDocumentsAndEod) {
  TempDir dir;
  const std::string input = write_jsonl(dir, "in.jsonl",
                                        {
                                            R"({"text": "1 2", "title": "9"})",
                                            R"({"text": "", "title": "8 8"})",              // empty document
                                            R"({"text": ["3 4", "", "5"], "title": "7"})",  // sentences
                                            "   ",                                          // blank line
                                            R"({"title": "6", "text": "0"})",
                                        });
  PreprocessOptions o = null_options(input, dir / "multi", 100);  // EOD = 100
  o.json_keys = {"text", "title"};
  o.append_eod = true;
  const PreprocessResult r = preprocess_jsonl(o);
  EXPECT_EQ(r.documents, 4);
  EXPECT_EQ(r.blank_lines, 1);
  ASSERT_EQ(r.outputs.size(), 2u);

  const IndexedDataset text = IndexedDataset::open(dir / "multi_text_document");
  EXPECT_EQ(text.num_documents(), 4);
  // Sequences: [1 2 EOD], (none), [3 4], [5 EOD], [0 EOD]; the empty sentence is dropped.
  EXPECT_EQ(text.num_sequences(), 4);
  EXPECT_EQ(text.get(0), (I32{1, 2, 100}));
  EXPECT_EQ(text.get(1), (I32{3, 4}));
  EXPECT_EQ(text.get(2), (I32{5, 100}));
  EXPECT_EQ(text.get(3), (I32{0, 100}));
  for (int64_t j = 0; j <= 4; ++j) EXPECT_EQ(text.document_index(j), (std::vector<int64_t>{0, 1, 1, 3, 4})[size_t(j)]);
  EXPECT_EQ(read_documents(dir / "multi_title_document"),
            (std::vector<I32>{{9, 100}, {8, 8, 100}, {7, 100}, {6, 100}}));
}

TEST(Preprocess, EndOfTextIsTheEodIdAsInMegatronOrTextOnRequest) {
  TempDir dir;
  const std::string input = write_jsonl(dir, "eot.jsonl", {R"({"text": "a<|endoftext|>b"})"});
  PreprocessOptions o = gpt2_options(input, dir / "eot");
  preprocess_jsonl(o);
  EXPECT_EQ(IndexedDataset::open(dir / "eot_text_document").get(0), (I32{64, 50256, 65}));
  o.tokenizer.special_tokens = SpecialTokens::as_text;
  o.output_prefix = dir / "astext";
  preprocess_jsonl(o);
  const I32 ids = IndexedDataset::open(dir / "astext_text_document").get(0);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 50256), 0);
  EXPECT_GT(ids.size(), 3u);
}

TEST(Preprocess, DtypeFollowsTheVocabularySize) {
  TempDir dir;
  const std::string input = write_jsonl(dir, "ids.jsonl", {R"({"text": "70000 1"})"});
  PreprocessOptions o = null_options(input, dir / "big", 100000);
  const PreprocessResult r = preprocess_jsonl(o);
  EXPECT_EQ(r.outputs[0].dtype, TokenDtype::i32);
  EXPECT_EQ(IndexedDataset::open(dir / "big_text_document").get(0), (I32{70000, 1}));
}

TEST(Preprocess, EmptyInputGivesEmptyDatasets) {
  TempDir dir;
  write_bytes(dir / "empty.jsonl", "");
  const PreprocessResult r = preprocess_jsonl(null_options(dir / "empty.jsonl", dir / "e"));
  EXPECT_EQ(r.documents, 0);
  const IndexedDataset ds = IndexedDataset::open(dir / "e_text_document");
  EXPECT_EQ(ds.num_documents(), 0);
  EXPECT_EQ(ds.num_sequences(), 0);
}

TEST(Preprocess, MissingInputAndDuplicateKeys) {
  TempDir dir;
  EXPECT_NE(error_of([&] { preprocess_jsonl(null_options(dir / "nope.jsonl", dir / "x")); }).find("nope.jsonl"),
            std::string::npos);
  PreprocessOptions o = null_options(dir / "nope.jsonl", dir / "x");
  o.json_keys = {"text", "text"};
  EXPECT_NE(error_of([&] { preprocess_jsonl(o); }).find("given twice"), std::string::npos);
}

}  // namespace
}  // namespace troupe::test
