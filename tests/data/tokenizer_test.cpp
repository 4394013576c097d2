// GPT-2 BPE tokenizer: ids against HF tokenizers (expected values produced by
// scripts/check_tokenizer_hf.py on a machine with HF installed), pre-tokenizer rules,
// round trips over the bundled corpora, both merge loops, load errors; and NullTokenizer.
#include <fstream>
#include <functional>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "data/byte_unicode.hpp"
#include "data/gpt2_pretokenize.hpp"
#include "data/gpt2_tokenizer.hpp"
#include "data/null_tokenizer.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

using Ids = std::vector<int32_t>;
using namespace std::string_view_literals;

const Gpt2Tokenizer& gpt2() {
  static const Gpt2Tokenizer tok =
      Gpt2Tokenizer::from_files(source_path("assets/gpt2/gpt2-vocab.json"), source_path("assets/gpt2/gpt2-merges.txt"));
  return tok;
}

const Gpt2Tokenizer& gpt2_as_text() {
  static const Gpt2Tokenizer tok = Gpt2Tokenizer::from_files(
      source_path("assets/gpt2/gpt2-vocab.json"), source_path("assets/gpt2/gpt2-merges.txt"), SpecialTokens::as_text);
  return tok;
}

std::vector<std::string> corpus_texts(const std::string& relative, size_t max_docs) {
  std::ifstream in(source_path(relative));
  EXPECT_TRUE(bool(in)) << relative;
  std::vector<std::string> texts;
  std::string line;
  while (texts.size() < max_docs && std::getline(in, line))
    texts.push_back(nlohmann::json::parse(line).at("text").get<std::string>());
  return texts;
}

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view p : gpt2_pretokenize(text)) out.emplace_back(p);
  return out;
}

// ---------------------------------------------------------------------------------------
// Known ids, produced by HF tokenizers 0.23.2 from the bundled vocab/merges files
// (scripts/check_tokenizer_hf.py, report.json: a BPE model with the ByteLevel pre-tokenizer and
// "<|endoftext|>" as an added special token; transformers 5.17 GPT2TokenizerFast.encode gives
// the same ids for all of them).

struct Known {
  std::string_view text;  // may hold NUL
  Ids ids;
};

// SpecialTokens::recognize (HF's default).
const std::vector<Known>& known() {
  static const std::vector<Known> k = {
      {"Hello world", {15496, 995}},
      {" Hello", {18435}},
      {"Hello", {15496}},
      {"hello world!", {31373, 995, 0}},
      {"Hello, World! How are you?", {15496, 11, 2159, 0, 1374, 389, 345, 30}},
      {"The quick brown fox jumps over the lazy dog.", {464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13}},
      {"a  b", {64, 220, 275}},
      {"a   b", {64, 220, 220, 275}},
      {"a    b", {64, 220, 220, 220, 275}},
      {"a\n\n b", {64, 628, 275}},
      {"a\n\nb", {64, 198, 198, 65}},
      {"a \n b", {64, 220, 198, 275}},
      {"a\n \nb", {64, 198, 220, 198, 65}},
      {"trailing   ", {9535, 4386, 220, 220, 220}},
      {"trailing ", {9535, 4386, 220}},
      {"   leading", {220, 220, 3756}},
      {" ", {220}},
      {"  ", {220, 220}},
      {"   ", {220, 220, 220}},
      {"\n", {198}},
      {"\n\n", {628}},
      {"\t", {197}},
      {"\t\tx", {197, 197, 87}},
      {"a\t b", {64, 197, 275}},
      {"a \tb", {64, 220, 197, 65}},
      {"x\r\n\r\ny", {87, 201, 198, 201, 198, 88}},
      {"line1\nline2\n", {1370, 16, 198, 1370, 17, 198}},
      {"tabs\t\t\tand  spaces \t \n", {8658, 82, 197, 197, 197, 392, 220, 9029, 220, 197, 220, 198}},
      {"\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n", {628, 628, 628, 628, 628, 628, 628, 628, 628, 628}},
      {"x\t \n\t \n\t \n\t \n\t \n\t \n\t \n\t \n\t \n\t \ny",
       {87,  197, 220, 198, 197, 220, 198, 197, 220, 198, 197, 220, 198, 197, 220, 198,
        197, 220, 198, 197, 220, 198, 197, 220, 198, 197, 220, 198, 197, 220, 198, 88}},
      {"end with newline\n", {437, 351, 649, 1370, 198}},
      {"  two leading", {220, 734, 3756}},
      {"\n\nparagraph\n\n\n", {198, 198, 20360, 628, 198}},
      {"don't", {9099, 470}},
      {"I'm", {40, 1101}},
      {"we'll", {732, 1183}},
      {"they've", {9930, 1053}},
      {"you're", {5832, 821}},
      {"he'd", {258, 1549}},
      {"it's", {270, 338}},
      {"IT'S", {2043, 6, 50}},
      {"I'M", {40, 6, 44}},
      {"DON'T", {41173, 6, 51}},
      {"'s", {338}},
      {"'stop", {338, 4852}},
      {"''s", {7061, 82}},
      {"rock'n'roll", {10823, 6, 77, 6, 2487}},
      {"don\u2019t", {9099, 447, 247, 83}},
      {"it\u2019s", {270, 447, 247, 82}},
      {"O'Neil's", {46, 6, 29354, 338}},
      {"'", {6}},
      {"a'b", {64, 6, 65}},
      {" 's", {705, 82}},
      {"'re'", {821, 6}},
      {"'ll've", {1183, 1053}},
      {"dogs' tails", {22242, 6, 30514}},
      {"'d'", {1549, 6}},
      {"x'S y'T", {87, 6, 50, 331, 6, 51}},
      {"12345", {10163, 2231}},
      {"3.14159", {18, 13, 1415, 19707}},
      {"1,000,000", {16, 11, 830, 11, 830}},
      {"2024-01-01", {1238, 1731, 12, 486, 12, 486}},
      {" 42", {5433}},
      {"x42y", {87, 3682, 88}},
      {"42nd", {3682, 358}},
      {"\uFF11\uFF12\uFF13", {171, 120, 239, 171, 120, 240, 171, 120, 241}},
      {"\u0663\u0664\u0665", {149, 96, 149, 97, 149, 98}},
      {"\u216B", {158, 227, 104}},
      {"\u00BD \u00BC", {23141, 1587, 120}},
      {"\u00B2\u00B3", {31185, 126, 111}},
      {"1111111111111111111111111111111111111111",
       {26259, 26259, 26259, 26259, 26259, 26259, 26259, 26259, 26259, 26259}},
      {"$100.00 and 50%", {3, 3064, 13, 405, 290, 2026, 4}},
      {"caf\u00E9", {66, 1878, 2634}},
      {"cafe\u0301", {66, 8635, 136, 223}},
      {"na\u00EFve r\u00E9sum\u00E9", {2616, 38776, 40560, 16345, 2634}},
      {"\u00C6r\u00F8sk\u00F8bing", {127, 228, 81, 24172, 8135, 24172, 4623}},
      {"Stra\u00DFe", {41347, 39683, 68}},
      {"\u0130stanbul", {128, 108, 24179}},
      {"e\u0301\u0301\u0301", {68, 136, 223, 136, 223, 136, 223}},
      {" \u0301", {220, 136, 223}},
      {"a\u0308o\u0308u\u0308", {64, 136, 230, 78, 136, 230, 84, 136, 230}},
      {"\u65E5\u672C\u8A9E\u306E\u30C6\u30AD\u30B9\u30C8",
       {33768, 98, 17312, 105, 45739, 252, 5641, 24336, 25084, 43302}},
      {"\u4E2D\u6587 \u6D4B\u8BD5", {40792, 23877, 229, 10545, 113, 233, 46237, 243}},
      {"\uD55C\uAD6D\uC5B4 \uD14D\uC2A4\uD2B8",
       {47991, 250, 166, 113, 255, 168, 244, 112, 220, 169, 227, 235, 168, 232, 97, 169, 232, 116}},
      {"\u041F\u0440\u0438\u0432\u0435\u0442, \u043C\u0438\u0440!",
       {140, 253, 21169, 18849, 38857, 16843, 20375, 11, 12466, 120, 18849, 21169, 0}},
      {"\u0393\u03B5\u03B9\u03AC \u03C3\u03BF\u03C5 \u039A\u03CC\u03C3\u03BC\u03B5",
       {138, 241, 30950, 29945, 138, 105, 18074, 225, 26517, 139, 227, 7377, 248, 139, 234, 38392, 34703, 30950}},
      {"\u05E9\u05DC\u05D5\u05DD \u05E2\u05D5\u05DC\u05DD",
       {50227, 40010, 27072, 147, 251, 14360, 95, 27072, 40010, 147, 251}},
      {"\u0645\u0631\u062D\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
       {25405, 26897, 148, 255, 39848, 12919, 17550, 101, 23525, 44690, 23525, 25405}},
      {"\u0939\u093F\u0928\u094D\u0926\u0940", {11976, 117, 11976, 123, 11976, 101, 24231, 235, 11976, 99, 24231, 222}},
      {"\u0E44\u0E17\u0E22", {31479, 226, 19567, 245, 19567, 95}},
      {"mixed English \u0438 \u0440\u0443\u0441\u0441\u043A\u0438\u0439 \u65E5\u672C",
       {76, 2966, 3594, 12466, 116, 220, 21169, 35072, 21727, 21727, 31583, 18849, 140, 117, 10545, 245, 98, 17312,
        105}},
      {"\U0001D518\U0001D52B\U0001D526\U0001D520\U0001D52C\U0001D521\U0001D522",
       {47728, 242,   246, 47728, 242,   104, 47728, 242,   99,  47728, 242,
        254,   47728, 242, 105,   47728, 242, 94,    47728, 242, 95}},
      {"\u01C5 titlecase", {131, 227, 3670, 7442}},
      {"\u1F88", {157, 122, 230}},
      {"\U0001F600", {47249, 222}},
      {"\U0001F44D\U0001F3FD", {41840, 235, 8582, 237, 121}},
      {"\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466",
       {41840, 101, 447, 235, 41840, 102, 447, 235, 41840, 100, 447, 235, 41840, 99}},
      {"\U0001F1FA\U0001F1F8", {8582, 229, 118, 8582, 229, 116}},
      {"a\U0001F600b", {64, 47249, 222, 65}},
      {" \U0001F600 ", {30325, 222, 220}},
      {"\u2764\uFE0F", {32391, 97, 37929}},
      {"I \u2764\uFE0F NY", {40, 43074, 97, 37929, 6645}},
      {"non\u00A0breaking", {13159, 1849, 13395}},
      {"a\u00A0\u00A0b", {64, 1849, 1849, 65}},
      {"ideographic\u3000space", {485, 6826, 5099, 222, 13200}},
      {"a\u3000 b", {64, 5099, 222, 275}},
      {"en\u2002space", {268, 447, 224, 13200}},
      {"line\u2028sep", {1370, 447, 101, 325, 79}},
      {"para\u2029sep", {1845, 64, 447, 102, 325, 79}},
      {"nel\302\205x", {4954, 126, 227, 87}},
      {"zw\u200Bsp", {89, 86, 9525, 2777}},
      {"bom\uFEFFx", {65, 296, 171, 119, 123, 87}},
      {"mvs\u180Ex", {76, 14259, 157, 254, 236, 87}},
      {"x\034y\035z\036y\037w", {87, 216, 88, 217, 89, 218, 88, 219, 86}},
      {"\013\014", {199, 200}},
      {"a\013 b", {64, 199, 275}},
      {"\u1680ogham", {157, 248, 222, 46664, 321}},
      {"\u205Fmath", {46256, 253, 11018}},
      {"\u202Fnarrow", {447, 107, 77, 6018}},
      {"\000null"sv, {188, 8423}},
      {"ctrl\001\002\177", {44755, 189, 190, 221}},
      {"soft\u00ADhyphen", {4215, 3907, 36362, 831}},
      {"<|endoftext|>", {50256}},
      {"a<|endoftext|>b", {64, 50256, 65}},
      {"Hello <|endoftext|> world", {15496, 220, 50256, 995}},
      {"<|endoftext|><|endoftext|>", {50256, 50256}},
      {"<|endoftext", {27, 91, 437, 1659, 5239}},
      {"<|endoftext|>\n\nNext", {50256, 198, 198, 10019}},
      {" <|endoftext|>", {220, 50256}},
      {"<|ENDOFTEXT|>", {27, 91, 10619, 46, 9792, 13918, 91, 29}},
      {"http://example.com/path?q=1&r=2", {4023, 1378, 20688, 13, 785, 14, 6978, 30, 80, 28, 16, 5, 81, 28, 17}},
      {"foo@bar.com", {21943, 31, 5657, 13, 785}},
      {"#hashtag @mention", {2, 17831, 12985, 2488, 434, 295}},
      {"C++ and C#", {34, 4880, 290, 327, 2}},
      {"==> --- ***", {855, 29, 11420, 17202}},
      {"...", {986}},
      {"!!!???", {10185, 28358}},
      {"(parenthesized)", {7, 8000, 956, 1143, 8}},
      {"[1, 2, 3]", {58, 16, 11, 362, 11, 513, 60}},
      {"{\"json\": true}", {4895, 17752, 1298, 2081, 92}},
      {"def f(x):\n    return x  # ok\n",
       {4299, 277, 7, 87, 2599, 198, 220, 220, 220, 1441, 2124, 220, 1303, 12876, 198}},
      {"\u201Cquoted\u201D \u2014 dash \u2013 en", {447, 250, 421, 5191, 447, 251, 851, 14470, 784, 551}},
      {"\u00AB\u00BB\u2039\u203A", {24328, 17730, 447, 117, 447, 118}},
  };
  return k;
}

// SpecialTokens::as_text, where it differs: the strings holding "<|endoftext|>".
const std::vector<Known>& known_as_text() {
  static const std::vector<Known> k = {
      {"<|endoftext|>", {27, 91, 437, 1659, 5239, 91, 29}},
      {"a<|endoftext|>b", {64, 27, 91, 437, 1659, 5239, 91, 29, 65}},
      {"Hello <|endoftext|> world", {15496, 1279, 91, 437, 1659, 5239, 91, 29, 995}},
      {"<|endoftext|><|endoftext|>", {27, 91, 437, 1659, 5239, 91, 6927, 91, 437, 1659, 5239, 91, 29}},
      {"<|endoftext|>\n\nNext", {27, 91, 437, 1659, 5239, 91, 29, 198, 198, 10019}},
      {" <|endoftext|>", {1279, 91, 437, 1659, 5239, 91, 29}},
  };
  return k;
}

TEST(Gpt2Tokenizer, KnownIdsMatchHf) {
  for (const Known& k : known()) {
    const std::string text(k.text);
    EXPECT_EQ(gpt2().encode(text), k.ids) << "text: " << nlohmann::json(text).dump();
    EXPECT_EQ(gpt2().decode(k.ids), text);
    if (text.find("<|endoftext|>") == std::string::npos) {
      EXPECT_EQ(gpt2_as_text().encode(text), k.ids) << "as_text: " << nlohmann::json(text).dump();
    }
  }
  for (const Known& k : known_as_text()) {
    EXPECT_EQ(gpt2_as_text().encode(k.text), k.ids) << "as_text: " << nlohmann::json(std::string(k.text)).dump();
    EXPECT_EQ(gpt2_as_text().decode(k.ids), k.text);
  }
}

// Runs of one token, from the same HF run (the strings are too long for the table).
Ids runs(std::initializer_list<std::pair<int32_t, int>> parts) {
  Ids ids;
  for (const auto& [id, count] : parts) ids.insert(ids.end(), size_t(count), id);
  return ids;
}

TEST(Gpt2Tokenizer, LongRunsMatchHf) {
  // Pieces longer than the word cache takes (64 bytes) and the scan merge loop (128 bytes).
  EXPECT_EQ(gpt2().encode("a" + std::string(50, ' ') + "b"), runs({{64, 1}, {220, 49}, {275, 1}}));
  EXPECT_EQ(gpt2().encode(std::string(300, 'x')), runs({{24223, 37}, {12343, 1}}));
  std::string ab, e_acute;
  for (int i = 0; i < 200; ++i) ab += "ab";
  for (int i = 0; i < 100; ++i) e_acute += "\u00E9";
  EXPECT_EQ(gpt2().encode(ab), runs({{397, 200}}));
  EXPECT_EQ(gpt2().encode(std::string(1000, '1')), runs({{26259, 250}}));
  EXPECT_EQ(gpt2().encode(std::string(500, ' ')), runs({{220, 500}}));
  EXPECT_EQ(gpt2().encode(std::string(129, '=')), runs({{23926, 2}, {28, 1}}));
  EXPECT_EQ(gpt2().encode(e_acute), runs({{2634, 100}}));
}

TEST(Gpt2Tokenizer, VocabularyAndEod) {
  EXPECT_EQ(gpt2().vocab_size(), 50257);
  EXPECT_EQ(gpt2().eod(), 50256);
  EXPECT_EQ(gpt2().model().num_merges(), 50000);
  EXPECT_EQ(gpt2().model().token_id("\xC4\xA0world"), 995);  // "Ġworld"
  EXPECT_EQ(gpt2().decode(Ids{50256}), "<|endoftext|>");
  EXPECT_TRUE(gpt2().encode("").empty());
}

TEST(Gpt2Tokenizer, EndOfTextIsSpecialByDefaultAndTextOnRequest) {
  EXPECT_EQ(gpt2().encode("<|endoftext|>"), Ids{50256});
  EXPECT_EQ(gpt2().encode("a<|endoftext|>b"), (Ids{64, 50256, 65}));
  // Megatron's GPT2BPETokenizer: ordinary text.
  EXPECT_EQ(gpt2_as_text().encode("<|endoftext|>"), (Ids{27, 91, 437, 1659, 5239, 91, 29}));
  std::vector<int32_t> ids;
  gpt2().encode_ordinary_append("<|endoftext|>", ids);
  EXPECT_EQ(ids, gpt2_as_text().encode("<|endoftext|>"));
  // Both decode back to the same text.
  EXPECT_EQ(gpt2().decode(gpt2().encode("x <|endoftext|>\ny")), "x <|endoftext|>\ny");
}

// ---------------------------------------------------------------------------------------
// Pre-tokenizer rules (the regex, case by case).

TEST(Gpt2Pretokenize, WhitespaceRuns) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(pieces("a  b"), (V{"a", " ", " b"}));
  EXPECT_EQ(pieces("a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(pieces("a\n\n b"), (V{"a", "\n\n", " b"}));
  EXPECT_EQ(pieces("a\n\nb"), (V{"a", "\n", "\n", "b"}));
  EXPECT_EQ(pieces("a \n b"), (V{"a", " \n", " b"}));
  EXPECT_EQ(pieces("trailing   "), (V{"trailing", "   "}));
  EXPECT_EQ(pieces("   leading"), (V{"  ", " leading"}));
  EXPECT_EQ(pieces("\t\tx"), (V{"\t", "\t", "x"}));
  EXPECT_EQ(pieces(" "), (V{" "}));
  EXPECT_EQ(pieces("x\r\n\r\ny"), (V{"x", "\r\n\r", "\n", "y"}));
}

TEST(Gpt2Pretokenize, OnlyU0020AttachesToAWord) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("a\tb"), (V{"a", "\t", "b"}));
  EXPECT_EQ(pieces("non\u00A0breaking"), (V{"non", "\u00A0", "breaking"}));
  EXPECT_EQ(pieces("a\u3000 b"), (V{"a", "\u3000", " b"}));
  EXPECT_EQ(pieces("line\u2028sep"), (V{"line", "\u2028", "sep"}));
  // Not White_Space: zero-width space, BOM, the C0 separators.
  EXPECT_EQ(pieces("zw\u200Bsp"), (V{"zw", "\u200B", "sp"}));
  EXPECT_EQ(pieces("x\x1Cy"), (V{"x", "\x1C", "y"}));
  EXPECT_EQ(pieces(" \x1C"), (V{" \x1C"}));
}

TEST(Gpt2Pretokenize, ContractionsDigitsAndPunctuation) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("don't I'll we've"), (V{"don", "'t", " I", "'ll", " we", "'ve"}));
  EXPECT_EQ(pieces("IT'S"), (V{"IT", "'", "S"}));  // upper case is no contraction
  EXPECT_EQ(pieces("'stop"), (V{"'s", "top"}));
  EXPECT_EQ(pieces("''s"), (V{"''", "s"}));
  EXPECT_EQ(pieces("don\u2019t"), (V{"don", "\u2019", "t"}));
  EXPECT_EQ(pieces("x42y 7"), (V{"x", "42", "y", " 7"}));
  EXPECT_EQ(pieces("3.14"), (V{"3", ".", "14"}));
  EXPECT_EQ(pieces("\u00BD\u00B2 \u216B"), (V{"\u00BD\u00B2", " \u216B"}));  // No, No, Nl
  EXPECT_EQ(pieces("Hi!!! ...ok"), (V{"Hi", "!!!", " ...", "ok"}));
  EXPECT_EQ(pieces("cafe\u0301s"), (V{"cafe", "\u0301", "s"}));  // a mark is not a letter
  EXPECT_EQ(pieces("\u65E5\u672C\u8A9E"), (V{"\u65E5\u672C\u8A9E"}));
}

TEST(Gpt2Pretokenize, KnowsUnicode16LettersAndDigitsAsHfDoes) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("a\u1C89 1\U0001CCF0"), (V{"a\u1C89", " 1\U0001CCF0"}));  // Cyrillic TJE; outlined digit 0
  EXPECT_EQ(pieces("a\u1C8B"), (V{"a", "\u1C8B"}));                          // still unassigned
}

TEST(Gpt2Pretokenize, IllFormedUtf8IsOneOtherCharacterPerByte) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("a\xFF\xFE b"), (V{"a", "\xFF\xFE", " b"}));
  EXPECT_EQ(pieces("ab\xC3"), (V{"ab", "\xC3"}));                  // truncated 2-byte sequence
  EXPECT_EQ(pieces(" \xED\xA0\x80x"), (V{" \xED\xA0\x80", "x"}));  // encoded surrogate
}

// ---------------------------------------------------------------------------------------
// Round trips and internal consistency.

TEST(Gpt2Tokenizer, RoundTripsTheBundledCorpora) {
  for (const char* corpus : {"assets/corpora/moby-dick.jsonl", "assets/corpora/sotu.jsonl"}) {
    const auto texts = corpus_texts(corpus, 12);
    ASSERT_FALSE(texts.empty());
    for (size_t d = 0; d < texts.size(); ++d) {
      const Ids ids = gpt2().encode(texts[d]);
      EXPECT_LT(ids.size(), texts[d].size() / 2) << corpus << " doc " << d;
      EXPECT_EQ(gpt2().decode(ids), texts[d]) << corpus << " doc " << d;
    }
  }
}

TEST(Gpt2Tokenizer, RoundTripsArbitraryBytes) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::string s(size_t(rng() % 64), '\0');
    for (char& c : s) c = char(rng() % 256);
    EXPECT_EQ(gpt2().decode(gpt2().encode(s)), s) << "trial " << trial;
  }
}

TEST(Gpt2Tokenizer, DecodeKeepsPartialUtf8AsBytes) {
  // U+1F600 is F0 9F 98 80: HF's ids {47249, 222} split it after its third byte.
  EXPECT_EQ(gpt2().decode(Ids{47249}), "\xF0\x9F\x98");
  EXPECT_EQ(gpt2().decode(Ids{222}), "\x80");
  EXPECT_EQ(gpt2().decode(Ids{47249, 222}), "\U0001F600");
}

TEST(Gpt2Tokenizer, CacheClonesAndLongWordsAgree) {
  const auto texts = corpus_texts("assets/corpora/moby-dick.jsonl", 3);
  const Gpt2Tokenizer fresh =
      Gpt2Tokenizer::from_files(source_path("assets/gpt2/gpt2-vocab.json"), source_path("assets/gpt2/gpt2-merges.txt"));
  const auto clone = fresh.clone();
  for (const auto& t : texts) {
    const Ids first = fresh.encode(t);
    EXPECT_EQ(fresh.encode(t), first);   // now from the cache
    EXPECT_EQ(clone->encode(t), first);  // own cache
  }
  EXPECT_GT(fresh.cached_words(), 100u);
  // Past the cached and the scan lengths.
  for (const std::string& s : {std::string(300, 'x'), std::string(1000, '1'), std::string(129, '=')})
    EXPECT_EQ(gpt2().decode(gpt2().encode(s)), s);
}

TEST(BpeModel, ScanAndHeapMergeLoopsAgree) {
  const BpeModel& m = gpt2().model();
  std::vector<std::string> words;
  for (const auto& t : corpus_texts("assets/corpora/sotu.jsonl", 2))
    for (std::string_view p : gpt2_pretokenize(t)) words.emplace_back(p);
  std::mt19937 rng(3);
  for (int i = 0; i < 300; ++i) {  // random runs of a few letters: many equal-rank ties
    std::string w(size_t(1 + rng() % 128), 'a');
    for (char& c : w) c = "aabnr "[rng() % 6];
    words.push_back(w);
  }
  for (const auto& w : words) {
    if (w.size() > 128) continue;
    Ids scan, heap;
    m.encode_word(w, scan, BpeModel::MergeLoop::scan);
    m.encode_word(w, heap, BpeModel::MergeLoop::heap);
    ASSERT_EQ(scan, heap) << nlohmann::json(w).dump();
  }
}

TEST(ByteUnicode, MapIsABijectionOntoPrintableCodePoints) {
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const char32_t cp = byte_to_unicode(uint8_t(b));
    EXPECT_EQ(unicode_to_byte(cp), b);
    seen.insert(cp);
  }
  EXPECT_EQ(seen.size(), 256u);
  EXPECT_EQ(byte_to_unicode(' '), U'\u0120');
  EXPECT_EQ(byte_to_unicode('\n'), U'\u010A');
  EXPECT_EQ(byte_to_unicode('A'), U'A');
  EXPECT_EQ(unicode_to_byte(U'\u4E00'), -1);
  EXPECT_EQ(bytes_to_unicode_string(" hi\n"), "\u0120hi\u010A");
  EXPECT_EQ(unicode_string_to_bytes("\u0120hi\u010A"), " hi\n");
}

// ---------------------------------------------------------------------------------------
// Load errors name the file and the problem.

// A tiny byte-level vocabulary: the 256 byte tokens, "<|endoftext|>", "ab", "abc".
std::string tiny_vocab(bool with_eot = true, bool with_all_bytes = true) {
  nlohmann::json v = nlohmann::json::object();
  int id = 0;
  for (int b = 0; b < 256; ++b)
    if (with_all_bytes || b != 'z') v[bytes_to_unicode_string(std::string(1, char(b)))] = id++;
  v["ab"] = id++;
  v["abc"] = id++;
  if (with_eot) v["<|endoftext|>"] = id++;
  return v.dump();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Expects troupe::Error with a message containing `part`.
#define EXPECT_ERROR(message, part)                                   \
  do {                                                                \
    const std::string m_ = (message);                                 \
    EXPECT_NE(m_.find(part), std::string::npos) << "message: " << m_; \
  } while (0)

TEST(Gpt2Tokenizer, TinyVocabularyWorks) {
  const Gpt2Tokenizer tok = Gpt2Tokenizer::from_strings(tiny_vocab(), "#version: 0.2\na b\nab c\n");
  EXPECT_EQ(tok.vocab_size(), 259);
  EXPECT_EQ(tok.eod(), 258);
  EXPECT_EQ(tok.encode("abc abx"), (Ids{257, 32, 256, 'x'}));  // "abc", " " "ab" "x"
}

TEST(Gpt2Tokenizer, LoadErrorsNameTheFile) {
  EXPECT_ERROR(error_of([] { Gpt2Tokenizer::from_files("/no/such/vocab.json", "/no/such/merges.txt"); }),
               "/no/such/vocab.json");
  const std::string vocab = source_path("assets/gpt2/gpt2-vocab.json");
  EXPECT_ERROR(error_of([&] { Gpt2Tokenizer::from_files(vocab, "/no/such/merges.txt"); }),
               "cannot open merge file '/no/such/merges.txt'");
  EXPECT_ERROR(error_of([] { Gpt2Tokenizer::from_strings("{\"a\": 1,", "", SpecialTokens::recognize, "v.json"); }),
               "vocab file v.json: malformed JSON");
  EXPECT_ERROR(error_of([] { Gpt2Tokenizer::from_strings("[1, 2]", "", SpecialTokens::recognize, "v.json"); }),
               "expected a JSON object");
  EXPECT_ERROR(error_of([] { Gpt2Tokenizer::from_strings("{\"a\": \"x\"}", "", SpecialTokens::recognize, "v.json"); }),
               "is not an integer");
  EXPECT_ERROR(error_of([] { Gpt2Tokenizer::from_strings(tiny_vocab(true, false), ""); }), "no token for byte 0x7a");
  EXPECT_ERROR(error_of([] { Gpt2Tokenizer::from_strings(tiny_vocab(false), "", SpecialTokens::recognize, "v.json"); }),
               "no \"<|endoftext|>\" token");
  EXPECT_ERROR(error_of([] {
                 Gpt2Tokenizer::from_strings(tiny_vocab(), "#version: 0.2\na b\nab c d\n", SpecialTokens::recognize,
                                             "v.json", "m.txt");
               }),
               "merge file m.txt:3: expected two tokens");
  EXPECT_ERROR(error_of([] {
                 Gpt2Tokenizer::from_strings(tiny_vocab(), "a b\nb c\n", SpecialTokens::recognize, "v.json", "m.txt");
               }),
               "merge file m.txt:2: merged token \"bc\" is not in vocab file v.json");
  EXPECT_ERROR(error_of([] {
                 Gpt2Tokenizer::from_strings(tiny_vocab(), "\na b\n", SpecialTokens::recognize, "v.json", "m.txt");
               }),
               "m.txt:1:");
  EXPECT_ERROR(error_of([] { gpt2().decode(Ids{50257}); }), "cannot decode id 50257");
  EXPECT_ERROR(error_of([] { gpt2().decode(Ids{-1}); }), "cannot decode id -1");
}

// ---------------------------------------------------------------------------------------
// NullTokenizer and the factory.

TEST(NullTokenizer, IdsAsText) {
  const NullTokenizer tok(100);
  EXPECT_EQ(tok.vocab_size(), 101);
  EXPECT_EQ(tok.eod(), 100);
  EXPECT_EQ(tok.encode("3 14\n15\t 92  100"), (Ids{3, 14, 15, 92, 100}));
  EXPECT_EQ(tok.encode("  "), Ids{});
  EXPECT_EQ(tok.encode("+7"), Ids{7});
  EXPECT_EQ(tok.decode(Ids{3, 14, 100}), "3 14 100");
  EXPECT_EQ(tok.encode(tok.decode(Ids{0, 1, 2})), (Ids{0, 1, 2}));
}

TEST(NullTokenizer, Errors) {
  const NullTokenizer tok(100);
  EXPECT_ERROR(error_of([&] { tok.encode("3 x4"); }), "\"x4\" at byte 2 is not an integer");
  EXPECT_ERROR(error_of([&] { tok.encode("1.5"); }), "not an integer");
  EXPECT_ERROR(error_of([&] { tok.encode("101"); }), "id 101 at byte 0 is outside [0, 101)");
  EXPECT_ERROR(error_of([&] { tok.encode("-1"); }), "outside");
  EXPECT_ERROR(error_of([&] { tok.encode("99999999999999999999999"); }), "outside");
  EXPECT_ERROR(error_of([&] { tok.decode(Ids{101}); }), "cannot decode id 101");
  EXPECT_ERROR(error_of([] { NullTokenizer bad(0); }), "--vocab-size");
}

TEST(BuildTokenizer, MegatronTypes) {
  TokenizerOptions o;
  o.vocab_file = source_path("assets/gpt2/gpt2-vocab.json");
  o.merge_file = source_path("assets/gpt2/gpt2-merges.txt");
  auto gpt = build_tokenizer(o);
  EXPECT_EQ(gpt->encode("Hello world"), (Ids{15496, 995}));
  EXPECT_EQ(gpt->clone()->encode("Hello world"), (Ids{15496, 995}));
  o.type = "NullTokenizer";
  o.vocab_size = 512;
  auto null = build_tokenizer(o);
  EXPECT_EQ(null->eod(), 512);
  o.type = "SentencePieceTokenizer";
  EXPECT_ERROR(error_of([&] { build_tokenizer(o); }), "not supported");
  TokenizerOptions no_vocab;
  EXPECT_ERROR(error_of([&] { build_tokenizer(no_vocab); }), "needs --vocab-file");
}

}  // namespace
}  // namespace troupe::test
