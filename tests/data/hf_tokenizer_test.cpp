// HfTokenizer (data/hf_tokenizer/) against Hugging Face's JavaScript tokenizers
// (@huggingface/tokenizers 0.2.0, run by tests/node/hf_tokenize.mjs, one node process per
// tokenizer): ids with and without the post-processor's tokens and decode(ids), for the Llama 3,
// Qwen3 and Mistral tokenizer.json files in assets/tokenizers, on every document of both bundled
// corpora, tests/data/tokenizer_hard_cases.jsonl, every added token of each tokenizer in running
// text and next to words and spaces, and ill-formed UTF-8 (bytes written here; the reference
// gets TextDecoder's U+FFFD-replaced string, which must equal ours).
// The reference is computed without shortcuts except one: for Mistral, documents past the first
// ten of Moby-Dick are encoded by it with pieces cut before each "▁" that follows another
// character (hf_tokenize.mjs proves that safe for that vocabulary; its whole-document BPE runs
// at 0.15 MB/s otherwise), as HfTokenizer does for every Mistral text; the hard cases, added
// tokens and those ten documents run uncut, so the cut is checked too.
// Then the parts the three files do not exercise, against HF's Rust behaviour as its source and
// tests state it: Split behaviours, Metaspace, Digits, Whitespace, ByteFallback; the refusals
// (unknown component types and fields, dropout, unsupported regex constructs, missing eos);
// build_tokenizer.
#include <future>
#include <map>
#include <mutex>

#include <nlohmann/json.hpp>

#include "data/byte_unicode.hpp"
#include "data/hf_tokenizer/decoder.hpp"
#include "data/hf_tokenizer/hf_tokenizer.hpp"
#include "data/hf_tokenizer/onig_regex.hpp"
#include "data/hf_tokenizer/pre_tokenizer.hpp"
#include "data/tokenizer.hpp"
#include "tests/data/data_test_util.hpp"

namespace troupe::test {
namespace {

using Ids = std::vector<int32_t>;
using nlohmann::json;

const std::vector<std::string> kTokenizers = {"llama3", "qwen3", "mistral"};

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    lines.push_back(text.substr(pos, eol - pos));
    pos = eol + 1;
  }
  return lines;
}

std::string tokenizer_dir(const std::string& name) { return source_path("assets/tokenizers/" + name); }

const HfTokenizer& tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<HfTokenizer>> cache;
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  auto& t = cache[name];
  if (!t) t = std::make_unique<HfTokenizer>(HfTokenizer::from_path(tokenizer_dir(name)));
  return *t;
}

std::vector<std::string> jsonl_texts(const std::string& relative) {
  std::vector<std::string> out;
  for (const std::string& line : split_lines(read_bytes(source_path(relative))))
    if (!line.empty()) out.push_back(json::parse(line).at("text").get<std::string>());
  return out;
}

// Ill-formed UTF-8: truncated, overlong, surrogates, stray continuation bytes, bytes that never
// occur, inside words and added tokens.
const std::vector<std::string>& invalid_utf8() {
  static const std::vector<std::string> cases = {"\xE2\x82",
                                                 std::string("a\xE2\x82") + "b",
                                                 "\xED\xA0\x80x",
                                                 "\xC0\xAF",
                                                 "\xF0\x9F\x98",
                                                 "\xF0\x9F\x98 ok",
                                                 "\x80\x80",
                                                 "\xFF\xFE",
                                                 "\xF4\x90\x80\x80",
                                                 "\xF5\x80",
                                                 "\xE0\x80\x80",
                                                 "\xE0\xA0",
                                                 "caf\xE9",
                                                 "\xC2",
                                                 "\xEF\xBF",
                                                 "\xF1\x80\x80",
                                                 "\xED\x9F\xBF\xED\xA0",
                                                 "Hello \xE4\xB8\x96\xE7 world",
                                                 "\xC3\x28",
                                                 "\xA0\xA1",
                                                 "\xE2\x28\xA1",
                                                 "\xF0\x28\x8C\xBC",
                                                 "\xF8\x88\x80\x80\x80",
                                                 "<|im_\xFFstart|>",
                                                 "<|im_start|>\x80<|im_end|>",
                                                 "<s\x80>",
                                                 "\x80<s>\x80",
                                                 "<|begin_of_text|>\xC3",
                                                 "\xE2\x96\x81\xE2\x96",
                                                 std::string("nul\0\xFF", 5)};
  return cases;
}

// Texts with every added token of a tokenizer: alone, inside words, between spaces, doubled,
// at line ends, and all of them in one running text.
std::vector<std::string> added_token_texts(const std::string& name) {
  const json j = json::parse(read_bytes(tokenizer_dir(name) + "/tokenizer.json"));
  std::vector<std::string> texts;
  std::string running = "Start.";
  for (const json& t : j.at("added_tokens")) {
    const std::string c = t.at("content").get<std::string>();
    for (const std::string& s : {c, "a" + c + "b", " " + c + " ", c + c, "x\n" + c + "\n\ny", "Hello" + c + ", world",
                                 c + "Hello", "  " + c + "\t"})
      texts.push_back(s);
    running += " word " + c + "word" + c + "\n";
  }
  texts.push_back(running);
  return texts;
}

// One line of the reference: what hf_tokenize.mjs printed for it, and what it was.
struct RefLine {
  std::string label;  // for failure messages
  std::string bytes;  // the input as given to HfTokenizer
  json reference;     // {"ids", "special_ids", "text", ["input"]}
};

struct Reference {
  std::vector<RefLine> lines;
  std::map<std::string, std::pair<size_t, size_t>> groups;  // group -> [first, last) line
};

// Runs hf_tokenize.mjs once for a tokenizer over every group of texts.
Reference compute_reference(const std::string& name) {
  TempDir dir("hf_tokenize_" + name);
  Reference ref;
  std::string input;
  // cut_from: the texts from this one on are encoded with the "▁" cut (see the top of the file).
  auto add_group = [&](const std::string& group, const std::vector<std::string>& texts, bool hex, bool full,
                       size_t cut_from) {
    const size_t first = ref.lines.size();
    for (size_t i = 0; i < texts.size(); ++i) {
      json line = hex ? json{{"hex", ""}} : json{{"text", texts[i]}};
      if (hex) {
        std::string h;
        for (unsigned char c : texts[i]) h += str_cat("0123456789abcdef"[c >> 4], "0123456789abcdef"[c & 15]);
        line["hex"] = h;
      }
      if (full) line["full"] = true;
      if (i >= cut_from) line["cut"] = true;
      input += line.dump() + "\n";
      ref.lines.push_back({str_cat(group, "[", i, "]"), texts[i], json()});
    }
    ref.groups[group] = {first, ref.lines.size()};
  };
  const size_t never = SIZE_MAX, cut = name == "mistral" ? 0 : never;  // for the corpora
  add_group("hard", jsonl_texts("tests/data/tokenizer_hard_cases.jsonl"), false, true, never);
  add_group("added", added_token_texts(name), false, true, never);
  add_group("invalid_utf8", invalid_utf8(), true, true, never);
  add_group("moby-dick", jsonl_texts("assets/corpora/moby-dick.jsonl"), false, false, cut == 0 ? 10 : never);
  add_group("sotu", jsonl_texts("assets/corpora/sotu.jsonl"), false, false, cut);
  write_bytes(dir / "input.jsonl", input);
  const std::string out = run_node("hf_tokenize.mjs", {tokenizer_dir(name), dir / "input.jsonl"});
  const std::vector<std::string> lines = split_lines(out);
  TROUPE_CHECK(lines.size() >= ref.lines.size(), "hf_tokenize.mjs printed ", lines.size(), " lines for ",
               ref.lines.size(), " inputs");
  for (size_t i = 0; i < ref.lines.size(); ++i) ref.lines[i].reference = json::parse(lines[i]);
  return ref;
}

// The three references, computed in parallel (one node process each) on first use.
const Reference& reference(const std::string& name) {
  static std::map<std::string, std::shared_future<Reference>> futures = [] {
    std::map<std::string, std::shared_future<Reference>> f;
    for (const std::string& n : kTokenizers) f[n] = std::async(std::launch::async, compute_reference, n).share();
    return f;
  }();
  return futures.at(name).get();
}

std::string show(const std::string& s) { return json(utf8_lossy(s)).dump().substr(0, 160); }

// Compares HfTokenizer with the reference on one group; reports the first few mismatches.
void expect_group_matches(const std::string& name, const std::string& group) {
  const Reference& ref = reference(name);
  const auto [first, last] = ref.groups.at(group);
  const HfTokenizer& tok = tokenizer(name);
  size_t bad = 0;
  for (size_t i = first; i < last; ++i) {
    const RefLine& line = ref.lines[i];
    const json& r = line.reference;
    if (r.contains("input")) {
      EXPECT_EQ(utf8_lossy(line.bytes), r["input"].get<std::string>()) << line.label << ": U+FFFD replacement";
    }
    const Ids ids = tok.encode(line.bytes);
    Ids special;
    tok.encode_with_special_tokens_append(line.bytes, special);
    const bool ok_ids = ids == r["ids"].get<Ids>();
    const bool ok_special = special == r["special_ids"].get<Ids>();
    const std::string decoded = tok.decode(ids);
    const bool ok_text = decoded == r["text"].get<std::string>();
    if (ok_ids && ok_special && ok_text) continue;
    if (++bad <= 5)
      ADD_FAILURE() << name << " " << line.label << " " << show(line.bytes) << ":"
                    << (ok_ids ? ""
                               : "\n  ids: ours " + json(ids).dump().substr(0, 300) + "\n       ref  " +
                                     r["ids"].dump().substr(0, 300))
                    << (ok_special ? ""
                                   : "\n  with special tokens: ours " + json(special).dump().substr(0, 200) +
                                         "\n       ref " + r["special_ids"].dump().substr(0, 200))
                    << (ok_text ? "" : "\n  decode: ours " + show(decoded) + "\n          ref  " + r["text"].dump());
  }
  EXPECT_EQ(bad, 0u) << name << " " << group << ": " << bad << " of " << last - first << " texts differ";
}

class HfTokenizerVsJs : public ::testing::TestWithParam<std::string> {};

TEST_P(HfTokenizerVsJs, HardCases) { expect_group_matches(GetParam(), "hard"); }
TEST_P(HfTokenizerVsJs, AddedTokens) { expect_group_matches(GetParam(), "added"); }
TEST_P(HfTokenizerVsJs, InvalidUtf8) { expect_group_matches(GetParam(), "invalid_utf8"); }
TEST_P(HfTokenizerVsJs, MobyDick) { expect_group_matches(GetParam(), "moby-dick"); }
TEST_P(HfTokenizerVsJs, Sotu) { expect_group_matches(GetParam(), "sotu"); }

INSTANTIATE_TEST_SUITE_P(Tokenizers, HfTokenizerVsJs, ::testing::ValuesIn(kTokenizers),
                         [](const auto& info) { return info.param; });

// ---------------------------------------------------------------------------------------
// Properties of the three files.

TEST(HfTokenizer, SizesIdsAndSpecialTokens) {
  const HfTokenizer& llama = tokenizer("llama3");
  EXPECT_EQ(llama.vocab_size(), 128256);
  EXPECT_EQ(llama.eod(), 128001);  // "<|end_of_text|>"
  EXPECT_EQ(llama.bos(), 128000);
  EXPECT_EQ(llama.encode("Hello world"), (Ids{9906, 1917}));
  EXPECT_EQ(llama.token_id("<|eot_id|>"), 128009);
  EXPECT_EQ(llama.token_id("\xC4\xA0world"), 1917);  // "Ġworld"
  EXPECT_EQ(llama.token_id("no such token"), std::nullopt);
  EXPECT_TRUE(llama.is_special(128009));
  EXPECT_FALSE(llama.is_special(1917));

  const HfTokenizer& qwen = tokenizer("qwen3");
  EXPECT_EQ(qwen.vocab_size(), 151669);
  EXPECT_EQ(qwen.eod(), 151645);  // "<|im_end|>"
  EXPECT_EQ(qwen.bos(), std::nullopt);
  EXPECT_FALSE(qwen.is_special(*qwen.token_id("<think>")));  // an added token that is not special
  EXPECT_TRUE(qwen.is_special(*qwen.token_id("<|im_start|>")));

  const HfTokenizer& mistral = tokenizer("mistral");
  EXPECT_EQ(mistral.vocab_size(), 32000);
  EXPECT_EQ(mistral.eod(), 2);
  EXPECT_EQ(mistral.bos(), 1);
  Ids with_bos;
  mistral.encode_with_special_tokens_append("Hello", with_bos);
  EXPECT_EQ(with_bos, (Ids{1, 22557}));
  EXPECT_EQ(mistral.decode(Ids{1, 22557, 13}), "<s> Hello\n");
  EXPECT_EQ(mistral.decode_skipping_special(Ids{1, 22557, 13}), "Hello\n");
}

TEST(HfTokenizer, DecodingAnIncompleteCharacterGivesReplacementCharacters) {
  // Byte-level: the bytes of all tokens, then one U+FFFD per maximal ill-formed subpart.
  const HfTokenizer& llama = tokenizer("llama3");
  const Ids emoji = llama.encode("\U0001F600");
  ASSERT_EQ(emoji, (Ids{76460, 222}));  // F0 9F 98 | 80
  EXPECT_EQ(llama.decode(emoji), "\U0001F600");
  EXPECT_EQ(llama.decode(Ids{76460}), "\xEF\xBF\xBD");
  EXPECT_EQ(llama.decode(Ids{222, 76460, 76460, 222}), "\xEF\xBF\xBD\xEF\xBF\xBD\U0001F600");
  const Ids one = llama.encode("\xF0\x9F\x98");  // encoded as U+FFFD
  EXPECT_EQ(llama.decode(one), "\xEF\xBF\xBD");
  // Mistral's ByteFallback: a run of byte tokens that is not UTF-8 gives one U+FFFD per byte (the
  // JavaScript port gives one per maximal subpart; HF's Rust code and this follow byte_fallback.rs).
  const HfTokenizer& mistral = tokenizer("mistral");
  const int32_t e5 = *mistral.token_id("<0xE5>"), x8f = *mistral.token_id("<0x8F>"), xab = *mistral.token_id("<0xAB>");
  EXPECT_EQ(mistral.decode(Ids{e5, x8f, xab}), "\u53EB");
  EXPECT_EQ(mistral.decode(Ids{e5, x8f}), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(mistral.decode(Ids{e5, x8f, *mistral.token_id("a")}),
            "\xEF\xBF\xBD\xEF\xBF\xBD"
            "a");
}

TEST(HfTokenizer, ClonesShareTheFilesAndKeepTheirOwnCache) {
  const auto texts = jsonl_texts("assets/corpora/moby-dick.jsonl");
  for (const std::string& name : kTokenizers) {
    const HfTokenizer fresh = HfTokenizer::from_path(tokenizer_dir(name) + "/tokenizer.json");
    const std::unique_ptr<Tokenizer> clone = fresh.clone();
    for (size_t d = 0; d < 3; ++d) {
      const Ids first = fresh.encode(texts[d]);
      EXPECT_EQ(fresh.encode(texts[d]), first) << name;  // now from the cache
      EXPECT_EQ(clone->encode(texts[d]), first) << name;
    }
    EXPECT_GT(fresh.cached_words(), 100u) << name;
  }
}

TEST(HfTokenizer, LongRunsUseTheHeapMergeLoop) {
  for (const std::string& name : kTokenizers) {
    const HfTokenizer& tok = tokenizer(name);
    for (const std::string& s :
         {std::string(100000, ' '), std::string(20000, '7'), std::string(3000, 'x') + "\n", std::string(200000, '\n')})
      EXPECT_EQ(tok.decode(tok.encode(s)), s) << name;
  }
}

// ---------------------------------------------------------------------------------------
// Components the three files do not exercise, against HF's Rust behaviour (its tests' cases).

std::vector<std::string> pieces(const json& pre_tokenizer, const std::string& text) {
  const hf::PreTokenizer p = hf::PreTokenizer::parse(pre_tokenizer, "test.json");
  hf::EncodeScratch s;
  p.pre_tokenize(text, true, s);
  std::vector<std::string> out;
  for (const hf::TextSpan& span : s.spans) out.emplace_back(s.pieces_text.substr(span.begin, span.end - span.begin));
  return out;
}

using Strings = std::vector<std::string>;

TEST(HfPreTokenizer, SplitBehaviours) {
  // tokenizers/src/pre_tokenizers/split.rs, test "basic".
  auto split = [](const char* behavior) {
    return json{
        {"type", "Split"}, {"pattern", {{"Regex", "\\w+|[^\\w\\s]+"}}}, {"behavior", behavior}, {"invert", true}};
  };
  const std::string text = "How are you doing?";
  EXPECT_EQ(pieces(split("Removed"), text), (Strings{"How", "are", "you", "doing", "?"}));
  EXPECT_EQ(pieces(split("Isolated"), text), (Strings{"How", " ", "are", " ", "you", " ", "doing", "?"}));
  EXPECT_EQ(pieces(split("MergedWithPrevious"), text), (Strings{"How ", "are ", "you ", "doing", "?"}));
  EXPECT_EQ(pieces(split("MergedWithNext"), text), (Strings{"How", " are", " you", " doing", "?"}));
  EXPECT_EQ(pieces(split("Contiguous"), text), (Strings{"How", " ", "are", " ", "you", " ", "doing?"}));
  // A String pattern, not inverted.
  const json space = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Removed"}, {"invert", false}};
  EXPECT_EQ(pieces(space, "Hey, man!"), (Strings{"Hey,", "man!"}));
}

TEST(HfPreTokenizer, MetaspaceDigitsWhitespaceByteLevel) {
  const json meta = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}, {"split", true}};
  EXPECT_EQ(pieces(meta, "Hey friend!"), (Strings{"\u2581Hey", "\u2581friend!"}));
  EXPECT_EQ(pieces(meta, "Hey   friend!"), (Strings{"\u2581Hey", "\u2581", "\u2581", "\u2581friend!"}));
  EXPECT_EQ(pieces({{"type", "Digits"}, {"individual_digits", false}}, "Hey 123 friend!"),
            (Strings{"Hey ", "123", " friend!"}));
  EXPECT_EQ(pieces({{"type", "Digits"}, {"individual_digits", true}}, "Hey 123 friend!"),
            (Strings{"Hey ", "1", "2", "3", " friend!"}));
  EXPECT_EQ(pieces({{"type", "Whitespace"}}, "How are you doing?"), (Strings{"How", "are", "you", "doing", "?"}));
  EXPECT_EQ(pieces({{"type", "WhitespaceSplit"}}, "Hey, man,\u3000Good?"), (Strings{"Hey,", "man,", "Good?"}));
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  EXPECT_EQ(pieces(byte_level, "Hello my friend, how is your day going?"),
            (Strings{" Hello", " my", " friend", ",", " how", " is", " your", " day", " going", "?"}));
}

TEST(HfDecoder, ByteFallbackStripAndMetaspace) {
  // tokenizers/src/decoders/byte_fallback.rs and strip.rs, test cases.
  const json fallback = {{"type", "ByteFallback"}};
  const hf::Decoder d = hf::Decoder::parse(fallback, "test.json");
  EXPECT_EQ(d.decode({"<0x61>"}), "a");
  EXPECT_EQ(d.decode({"<0xE5>"}), "\xEF\xBF\xBD");
  EXPECT_EQ(d.decode({"<0xE5>", "<0x8f>", "<0xab>", "a"}),
            "\u53EB"
            "a");
  const hf::Decoder strip =
      hf::Decoder::parse({{"type", "Strip"}, {"content", "H"}, {"start", 1}, {"stop", 0}}, "test.json");
  EXPECT_EQ(strip.decode({"Hey", " friend!", "HHH"}), "ey friend!HH");
  const hf::Decoder meta =
      hf::Decoder::parse({{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}}, "test.json");
  EXPECT_EQ(meta.decode({"\u2581Hey", "\u2581friend!"}), "Hey friend!");
}

TEST(HfRegex, OnigurumaTranslation) {
  hf::RegexScratch s;
  std::vector<hf::Regex::Match> m;
  // \s is White_Space (U+0085 included), {,n} is {0,n}.
  hf::Regex::oniguruma("\\s+", "t").find_all("a\xC2\x85 b", s, m);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].begin, 1u);
  EXPECT_EQ(m[0].end, 4u);
  hf::Regex::oniguruma("a{,2}", "t").find_all("aaa", s, m);
  ASSERT_EQ(m.size(), 2u);  // "aa", "a" (no empty match right after a match)
  EXPECT_EQ(m[1].end, 3u);
  // Unicode 15 letters PCRE2's own tables (Unicode 14) lack are letters: Kawi U+11F04.
  hf::Regex::oniguruma("\\p{L}+", "t").find_all("\U00011F04\U00011F05", s, m);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].end, 8u);
  for (const char* refused : {"\\bword", "(?m:.)", "[[:alpha:]]", "[a&&b]", "\\1", "\\G", "a{1,2}+"})
    EXPECT_NE(error_of([&] { hf::Regex::oniguruma(refused, "pre_tokenizer (Split)"); }).find("not translated"),
              std::string::npos)
        << refused;
}

// ---------------------------------------------------------------------------------------
// Refusals and load errors: a small tokenizer.json, changed one field at a time.

json tiny_tokenizer() {
  return json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [{"id": 5, "content": "<eos>", "single_word": false, "lstrip": false, "rstrip": false,
                      "normalized": false, "special": true}],
    "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": null,
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
              "vocab": {"a": 0, "b": 1, "ab": 2, " ": 3, "c": 4}, "merges": ["a b"]}
  })");
}

const std::string kTinyConfig = R"({"eos_token": "<eos>"})";

std::string load_error(const json& tokenizer, std::optional<std::string> config = kTinyConfig) {
  return error_of([&] {
    HfTokenizer::from_strings(tokenizer.dump(), config ? std::optional<std::string_view>(*config) : std::nullopt,
                              "tiny/tokenizer.json", "tiny/tokenizer_config.json");
  });
}

#define EXPECT_CONTAINS(text, part)                                   \
  do {                                                                \
    const std::string& t_ = (text);                                   \
    EXPECT_NE(t_.find(part), std::string::npos) << "message: " << t_; \
  } while (0)

TEST(HfTokenizer, TinyTokenizerWorks) {
  const HfTokenizer tok = HfTokenizer::from_strings(tiny_tokenizer().dump(), kTinyConfig);
  EXPECT_EQ(tok.encode("ab c<eos>ba"), (Ids{2, 3, 4, 5, 1, 0}));
  EXPECT_EQ(tok.decode(Ids{2, 3, 4}), "ab   c");  // no decoder: HF joins tokens with spaces
  EXPECT_EQ(tok.vocab_size(), 6);
  EXPECT_EQ(tok.eod(), 5);
  EXPECT_CONTAINS(error_of([&] { tok.decode(Ids{6}); }), "cannot decode id 6");
}

TEST(HfTokenizer, RefusesWhatItDoesNotImplement) {
  json t = tiny_tokenizer();
  t["normalizer"] = {{"type", "BertNormalizer"}, {"lowercase", true}};
  std::string e = load_error(t);
  EXPECT_CONTAINS(e, "tiny/tokenizer.json");
  EXPECT_CONTAINS(e, "normalizer");
  EXPECT_CONTAINS(e, "\"BertNormalizer\" is not implemented");

  t = tiny_tokenizer();
  t["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "StripAccents"}}}}};
  EXPECT_CONTAINS(load_error(t), "normalizer.normalizers[1]");

  t = tiny_tokenizer();
  t["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "MergedWithBoth"}, {"invert", false}};
  e = load_error(t);
  EXPECT_CONTAINS(e, "pre_tokenizer (Split)");
  EXPECT_CONTAINS(e, "\"MergedWithBoth\" is not implemented");

  t = tiny_tokenizer();
  t["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Removed"}, {"invert", false}, {"max_splits", 3}};
  EXPECT_CONTAINS(load_error(t), "the field \"max_splits\" (3) is not implemented");

  t = tiny_tokenizer();
  t["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "\\bx"}}}, {"behavior", "Removed"}, {"invert", false}};
  EXPECT_CONTAINS(load_error(t), "uses the escape \\b");

  t = tiny_tokenizer();
  t["pre_tokenizer"] = {{"type", "Punctuation"}, {"behavior", "Isolated"}};
  EXPECT_CONTAINS(load_error(t), "\"Punctuation\" is not implemented");

  t = tiny_tokenizer();
  t["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers", {{{"type", "ByteLevel"}}, {{"type", "Digits"}, {"individual_digits", true}}}}};
  EXPECT_CONTAINS(load_error(t), "a step after ByteLevel");

  t = tiny_tokenizer();
  t["model"]["dropout"] = 0.1;
  EXPECT_CONTAINS(load_error(t), "dropout 0.1 is not implemented");
  t["model"]["dropout"] = 0.0;  // HF skips dropout 0
  EXPECT_EQ(load_error(t), "");

  t = tiny_tokenizer();
  t["model"]["continuing_subword_prefix"] = "##";
  EXPECT_CONTAINS(load_error(t), "continuing_subword_prefix \"##\" is not implemented");

  t = tiny_tokenizer();
  t["model"]["type"] = "Unigram";
  EXPECT_CONTAINS(load_error(t), "the model type \"Unigram\" is not implemented");

  t = tiny_tokenizer();
  t["decoder"] = {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}};
  EXPECT_CONTAINS(load_error(t), "the decoder type \"WordPiece\" is not implemented");

  t = tiny_tokenizer();
  t["post_processor"] = {{"type", "RobertaProcessing"}};
  EXPECT_CONTAINS(load_error(t), "the post-processor type \"RobertaProcessing\" is not implemented");

  t = tiny_tokenizer();
  t["truncation"] = {{"max_length", 8}};
  EXPECT_CONTAINS(load_error(t), "truncation");

  t = tiny_tokenizer();
  t["extra"] = 1;
  EXPECT_CONTAINS(load_error(t), "the field \"extra\" is not implemented");

  t = tiny_tokenizer();
  t["added_tokens"][0]["id"] = 9;
  EXPECT_CONTAINS(load_error(t), "has id 9 in the file, but HF tokenizers would give it id 5");

  t = tiny_tokenizer();
  t["model"]["merges"] = {"a c"};
  EXPECT_CONTAINS(load_error(t), "merges[0]: merged token \"ac\" is not in");
}

// A character-level tokenizer with a Lowercase normalizer and the given added tokens (ids after
// the characters', in order): its ids show which stretches the added tokens took.
struct CharTokenizer {
  std::string chars;
  std::unique_ptr<HfTokenizer> tok;
  int32_t id(const std::string& c) const { return *tok->token_id(c); }
  Ids ids(const std::string& text) const {
    Ids out;
    for (size_t i = 0; i < text.size();) {
      char32_t cp;
      const int len = decode_utf8(text, i, cp);
      out.push_back(id(text.substr(i, size_t(len))));
      i += size_t(len);
    }
    return out;
  }
};

CharTokenizer char_tokenizer(const std::vector<json>& added) {
  CharTokenizer c;
  json t = tiny_tokenizer();
  t["normalizer"] = {{"type", "Lowercase"}};
  json vocab = json::object();
  const std::string chars = "abcdefghijklmnopqrstuvwxyz ,-\t\u25CC\u0330\u2000<>";
  for (size_t i = 0; i < chars.size();) {
    char32_t cp;
    const int len = decode_utf8(chars, i, cp);
    vocab[chars.substr(i, size_t(len))] = vocab.size();
    i += size_t(len);
  }
  t["model"]["vocab"] = vocab;
  t["model"]["merges"] = json::array();
  t["added_tokens"] = json::array();
  for (json a : added) {
    a["id"] = vocab.size() + t["added_tokens"].size();
    for (const char* flag : {"single_word", "lstrip", "rstrip", "special"})
      if (!a.contains(flag)) a[flag] = false;
    if (!a.contains("normalized")) a["normalized"] = !a["special"].get<bool>();
    t["added_tokens"].push_back(a);
  }
  const std::string config = json{{"eos_token", added.back()["content"]}}.dump();
  c.tok = std::make_unique<HfTokenizer>(HfTokenizer::from_strings(t.dump(), config));
  return c;
}

Ids cat(std::initializer_list<Ids> parts) {
  Ids out;
  for (const Ids& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(HfTokenizer, AddedTokenOptionsAsInHf) {
  // tokenizers/src/tokenizer/added_vocabulary.rs, tests options_use_cases,
  // test_single_word_is_correct, test_single_word_is_unicode_correct, test_lstrip_unicode_space.
  {
    const CharTokenizer c = char_tokenizer({{{"content", "my"}, {"lstrip", true}, {"rstrip", true}},
                                            {{"content", "name"}},
                                            {{"content", "ony"}, {"single_word", true}},
                                            {{"content", "[CLS]"}, {"special", true}},
                                            {{"content", "[SEP]"}, {"special", true}}});
    EXPECT_EQ(c.tok->encode("[CLS] My name is Anthony [SEP]"),
              cat({{c.id("[CLS]"), c.id("my"), c.id("name")}, c.ids(" is anthony "), {c.id("[SEP]")}}));
  }
  {
    const CharTokenizer c = char_tokenizer({{{"content", "<mask>"}, {"single_word", true}}});
    const int32_t mask = c.id("<mask>");
    EXPECT_EQ(c.tok->encode("<mask> My name <mask> A<mask> <mask>ony <mask>"),
              cat({{mask}, c.ids(" my name "), {mask}, c.ids(" a<mask> <mask>ony "), {mask}}));
    EXPECT_EQ(c.tok->encode("<mask>, <mask>- \u25CC\u0330<mask>"),
              cat({{mask}, c.ids(", "), {mask}, c.ids("- \u25CC\u0330<mask>")}));
  }
  {
    const CharTokenizer c =
        char_tokenizer({{{"content", "<mask>"}, {"lstrip", true}, {"rstrip", true}, {"single_word", true}}});
    const int32_t mask = c.id("<mask>");
    EXPECT_EQ(c.tok->encode("Hi <mask> there\t<mask>\t<mask>\u2000"),
              cat({c.ids("hi"), {mask}, c.ids("there"), {mask, mask}}));
  }
}

TEST(HfTokenizer, TheEndOfDocumentTokenMustBeNamed) {
  EXPECT_CONTAINS(load_error(tiny_tokenizer(), std::nullopt), "tiny/tokenizer_config.json is missing");
  std::string e = load_error(tiny_tokenizer(), R"({"bos_token": "<eos>"})");
  EXPECT_CONTAINS(e, "tiny/tokenizer_config.json");
  EXPECT_CONTAINS(e, "no eos_token");
  EXPECT_CONTAINS(load_error(tiny_tokenizer(), R"({"eos_token": "</s>"})"), "eos_token \"</s>\" is not a token");
  EXPECT_EQ(load_error(tiny_tokenizer(), R"({"eos_token": {"content": "<eos>", "lstrip": false}})"), "");
  // On disk: a tokenizer.json without tokenizer_config.json beside it.
  TempDir dir("hf_no_config");
  write_bytes(dir / "tokenizer.json", tiny_tokenizer().dump());
  e = error_of([&] { HfTokenizer::from_path(dir.path().string()); });
  EXPECT_CONTAINS(e, (dir.path() / "tokenizer_config.json").string());
  EXPECT_CONTAINS(e, "eos_token");
  EXPECT_CONTAINS(error_of([] { HfTokenizer::from_path("/no/such/dir"); }), "/no/such/dir");
}

TEST(BuildTokenizer, HuggingFaceTokenizer) {
  TokenizerOptions o;
  o.type = "HuggingFaceTokenizer";
  o.tokenizer_model = tokenizer_dir("qwen3");
  const auto from_dir = build_tokenizer(o);
  o.tokenizer_model = tokenizer_dir("qwen3") + "/tokenizer.json";
  const auto from_file = build_tokenizer(o);
  EXPECT_EQ(from_dir->encode("Hello world"), (Ids{9707, 1879}));
  EXPECT_EQ(from_file->clone()->encode("Hello world"), (Ids{9707, 1879}));
  EXPECT_EQ(from_dir->eod(), 151645);
  o.tokenizer_model.clear();
  EXPECT_CONTAINS(error_of([&] { build_tokenizer(o); }), "needs --tokenizer-model");
  o.type = "SentencePieceTokenizer";
  EXPECT_CONTAINS(error_of([&] { build_tokenizer(o); }), "HuggingFaceTokenizer");
}

}  // namespace
}  // namespace troupe::test
