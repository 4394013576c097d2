// Chat templates rendered by the C++ Jinja renderer (data/chat/) against Hugging Face's
// @huggingface/jinja 0.5.11 (tests/node/render_chat.mjs, the renderer transformers.js uses):
// every conversation of tests/data/chat_conversations.json with every real template, and
// snippets for each Jinja feature. Where @huggingface/jinja departs from Python Jinja (the
// renderer transformers uses, so the truth), the expected text is Python Jinja 3.1.6's in
// transformers' environment (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
// loopcontrols, its tojson), noted with what @huggingface/jinja gives instead.
// scripts/check_chat_template_hf.py compares the same fixture with transformers itself.
// Also: refusals (each names the construct and its line), the tokenizer_config loader, and
// float printing and tojson against Python.
#include <cctype>
#include <ctime>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "data/chat/chat_template.hpp"
#include "data/chat/jinja_error.hpp"
#include "data/chat/jinja_json.hpp"
#include "data/chat/jinja_repr.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

using nlohmann::ordered_json;

ordered_json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(bool(in)) << path;
  return ordered_json::parse(in);
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// What rendering gave: the text, the template's raise_exception message, or another error.
struct Outcome {
  std::string text, raised, error;
  bool ok() const { return raised.empty() && error.empty(); }
};

Outcome render_cpp(const ChatTemplate& t, const ordered_json& messages, const ChatTemplateOptions& options) {
  Outcome o;
  try {
    o.text = t.render(messages, options);
  } catch (const jinja::TemplateRaised& e) {
    o.raised = e.what();
  } catch (const Error& e) {
    o.error = e.what();
  }
  return o;
}

Outcome render_snippet(const std::string& source, const ordered_json& vars) {
  ChatTemplateOptions options;
  options.extra = vars;
  try {
    return render_cpp(ChatTemplate::from_string(source, ordered_json::object(), "snippet"), ordered_json::array(),
                      options);
  } catch (const Error& e) {  // a parse error
    Outcome o;
    o.error = e.what();
    return o;
  }
}

// ---------------------------------------------------------------------------------------
// Every conversation with every real template, C++ against @huggingface/jinja.

struct TemplateCase {
  const char* key;
  const char* config;  // tokenizer_config.json: special tokens (and the template when `jinja` is null)
  const char* jinja;   // a template file given on its own (--chat-template), or null
};

const TemplateCase kTemplates[] = {
    {"qwen3", "assets/tokenizers/qwen3/tokenizer_config.json", nullptr},
    {"llama3", "assets/tokenizers/llama3/tokenizer_config.json", nullptr},
};

ChatTemplate load(const TemplateCase& c) {
  if (!c.jinja) return ChatTemplate::from_tokenizer_config(source_path(c.config));
  return ChatTemplate::from_file(source_path(c.jinja), read_json(source_path(c.config)));
}

// @huggingface/jinja's tojson writes a float with an integral value as an integer (JSON.stringify
// of the JS number): Python's json.dumps writes 1.0. Rewrites the C++ (Python) form the JS way.
std::string js_float_form(const std::string& text) {
  static const std::regex one_point_zero(R"(([\[\s])1\.0([,\]\s]))");
  return std::regex_replace(text, one_point_zero, "$011$2");  // $01 (group 1), then the digit 1
}

class ChatTemplateConversations : public ::testing::TestWithParam<TemplateCase> {};

TEST_P(ChatTemplateConversations, MatchHuggingFaceJinja) {
  const TemplateCase& c = GetParam();
  const ChatTemplate tmpl = load(c);
  const ordered_json fixture = read_json(source_path("tests/data/chat_conversations.json"));
  const ordered_json node = ordered_json::parse(
      run_node("render_chat.mjs", {"conversations", c.jinja ? source_path(c.jinja) : "-", source_path(c.config),
                                   source_path("tests/data/chat_conversations.json")}));
  const auto& conversations = fixture.at("conversations");
  ASSERT_EQ(node.at("results").size(), conversations.size());
  int rendered = 0;
  for (size_t i = 0; i < conversations.size(); ++i) {
    const ordered_json& conv = conversations[i];
    const ordered_json& js = node["results"][i];
    const std::string name = conv.at("name");
    SCOPED_TRACE(std::string(c.key) + " / " + name);
    ChatTemplateOptions options;
    options.add_generation_prompt = conv.value("add_generation_prompt", true);
    if (conv.contains("tools")) options.tools = conv["tools"];
    if (conv.contains("extra")) options.extra = conv["extra"];
    const Outcome cpp = render_cpp(tmpl, conv.at("messages"), options);
    EXPECT_EQ(cpp.error, "") << "the renderer failed";
    if (cpp.ok() && js.contains("text")) {
      const std::string node_text = js["text"];
      if (cpp.text != node_text) {
        EXPECT_EQ(js_float_form(cpp.text), node_text);
      }
      ++rendered;
    } else if (!cpp.raised.empty() && js.contains("error")) {
      EXPECT_EQ(cpp.raised, js["error"].get<std::string>());  // both raise_exception(msg)
    } else if (!cpp.raised.empty()) {
      ADD_FAILURE() << "C++ raised '" << cpp.raised << "', node rendered";
    } else if (cpp.ok()) {
      ADD_FAILURE() << "C++ rendered, node failed: " << js.dump();
    }
  }
  EXPECT_GT(rendered, 0);
}

INSTANTIATE_TEST_SUITE_P(RealTemplates, ChatTemplateConversations, ::testing::ValuesIn(kTemplates),
                         [](const ::testing::TestParamInfo<TemplateCase>& info) {
                           std::string n = info.param.key;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// A few renders spelled out, as Python Jinja gives them (independent of the node reference).
TEST(ChatTemplate, QwenThinkingAndReasoning) {
  const ChatTemplate qwen =
      ChatTemplate::from_tokenizer_config(source_path("assets/tokenizers/qwen3/tokenizer_config.json"));
  ChatTemplateOptions options;
  options.extra["enable_thinking"] = false;
  EXPECT_EQ(qwen.render(ordered_json::parse(R"([{"role": "user", "content": "Quick answer: 1 + 1?"}])"), options),
            "<|im_start|>user\nQuick answer: 1 + 1?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  // Reasoning before the last user message is dropped; after it, kept in <think>.
  const ordered_json earlier = ordered_json::parse(R"([{"role": "user", "content": "What is 2 + 2?"},
      {"role": "assistant", "content": "4", "reasoning_content": "Simple addition."},
      {"role": "user", "content": "And 3 + 3?"}])");
  EXPECT_EQ(qwen.render(earlier, {}),
            "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nAnd 3 + "
            "3?<|im_end|>\n<|im_start|>assistant\n");
  ChatTemplateOptions no_prompt;
  no_prompt.add_generation_prompt = false;
  const ordered_json last = ordered_json::parse(R"([{"role": "user", "content": "Q"},
      {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nA"}])");
  EXPECT_EQ(qwen.render(last, no_prompt),
            "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\nhmm\n</think>\n\nA<|im_end|>\n");
}

TEST(ChatTemplate, LlamaBosAndTrim) {
  const ChatTemplate llama =
      ChatTemplate::from_tokenizer_config(source_path("assets/tokenizers/llama3/tokenizer_config.json"));
  EXPECT_EQ(
      llama.render(ordered_json::parse(R"([{"role": "system", "content": " Be brief. "},
                                                  {"role": "user", "content": "Hi\n"}])"),
                   {}),
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|"
      "end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

// ---------------------------------------------------------------------------------------
// Jinja features, one snippet each.

enum class Expect {
  node,    // the same text as @huggingface/jinja
  python,  // `expected`: Python Jinja's text (@huggingface/jinja differs, see the comment)
  error,   // Python Jinja raises; `expected` is its message, which the C++ error must contain
};

struct Snippet {
  const char* name;
  const char* source;
  const char* vars;  // JSON
  Expect expect;
  const char* expected;
};

// clang-format off
const Snippet kSnippets[] = {
    {"trim_blocks", "{% if true %}\nyes\n{% endif %}\nafter",
     "{}", Expect::node, nullptr},
    {"lstrip_blocks", "a\n    {% if true %}\n    b\n    {% endif %}\nc",
     "{}", Expect::node, nullptr},
    {"dash_strip_both_sides", "a   \n  {%- if true -%}  \n  b  \n  {%- endif -%}\n  c",
     "{}", Expect::node, nullptr},
    {"expression_dash_strip", "x  \n {{- 'y' -}} \n  z",
     "{}", Expect::node, nullptr},
    {"expression_no_lstrip", "a\n    {{ 'b' }}\n",
     "{}", Expect::node, nullptr},
    {"comment_trim", "a\n  {# note #}\nb {#- tight -#} c",
     "{}", Expect::node, nullptr},
    {"plus_disables_lstrip", "a\n    {%+ if true %}b{% endif %}",
     "{}",
     Expect::python, "a\n    b"},  // @huggingface/jinja: ERROR: Unknown statement, got UnaryOperator
    {"trailing_newline_dropped", "line\n",
     "{}", Expect::node, nullptr},
    {"crlf_normalized", "a\r\nb\rc",
     "{}",
     Expect::python, "a\nb\nc"},  // @huggingface/jinja: a\r\nb\rc
    {"raw_block", "{% raw %}{{ not evaluated }}{% endraw %}",
     "{}",
     Expect::python, "{{ not evaluated }}"},  // @huggingface/jinja: ERROR: Unknown statement type: raw
    {"number_printing", "{{ 1 }} {{ 1.0 }} {{ 0.5 }} {{ 2.50 }} {{ 1/3 }} {{ 10/5 }} {{ 123456789.125 }}",
     "{}", Expect::node, nullptr},
    {"number_printing_python", "{{ 1e3 }}",
     "{}",
     Expect::python, "1000.0"},  // @huggingface/jinja: ERROR: Parser Error: Expected closing expression token. Identifier !== CloseExpression.
    {"none_bool_printing", "{{ none }} {{ None }} {{ true }} {{ False }} [{{ undefined_name }}]",
     "{}",
     Expect::python, "None None True False []"},  // @huggingface/jinja:   true false []
    {"list_dict_printing", "{{ [1, 'a', none, true, 2.5] }} {{ {'k': 'v', 'n': [1]} }} {{ (1,) }} {{ (1, 'b') }}",
     "{}",
     Expect::python, "[1, 'a', None, True, 2.5] {'k': 'v', 'n': [1]} (1,) (1, 'b')"},  // @huggingface/jinja: [1, "a", null, true, 2.5] | {"k": "v", "n": [1]} | ERROR: Unexpected token: CloseParen | ERROR: C...
    {"string_repr_quotes", "{{ [\"it's\", 'say \"hi\"', 'both \\' \"', 'tab\\tnew\\nline'] }}",
     "{}",
     Expect::python, "[\"it's\", 'say \"hi\"', 'both \\' \"', 'tab\\tnew\\nline']"},  // @huggingface/jinja: ["it's", "say \"hi\"", "both ' \"", "tab\tnew\nline"]
    {"string_escapes", "{{ 'a\\tb\\\\c\\'d' }} {{ 'x' 'y' }}",
     "{}", Expect::node, nullptr},
    {"string_escapes_python", "{{ \"\\u00e9\\x41\\101\" }}",
     "{}",
     Expect::python, "éAA"},  // @huggingface/jinja: ERROR: Unexpected escaped character: 1
    {"input_floats", "{{ g }} {{ h }}",
     "{\"f\": 2.0, \"g\": 0.1, \"h\": -3.25}", Expect::node, nullptr},
    {"input_floats_python", "{{ f }}",
     "{\"f\": 2.0, \"g\": 0.1, \"h\": -3.25}",
     Expect::python, "2.0"},  // @huggingface/jinja: 2
    {"arithmetic", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ -2 }}",
     "{}", Expect::node, nullptr},
    {"string_concat", "{{ 'a' + 'b' }}",
     "{}", Expect::node, nullptr},
    {"string_concat_python", "{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 2 }}",
     "{}",
     Expect::python, "a1NoneTrue abab"},  // @huggingface/jinja: ERROR: Cannot perform operation on null values | ERROR: Unknown operator "*" between StringValue ...
    {"comparisons", "{{ 1 < 2 }} {{ 'a' < 'b' }} {{ [1, 2] == [1, 2] }} {{ 1 != 2 }} {{ 'b' >= 'a' }}",
     "{}",
     Expect::python, "True True True True True"},  // @huggingface/jinja: true | ERROR: Unknown operator "<" between StringValue and StringValue | false | true | ERROR: Un...
    {"membership", "{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }}",
     "{}",
     Expect::python, "True True True True"},  // @huggingface/jinja: true | true | true | true
    {"logic_values", "{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ [] or 'empty' }}",
     "{}", Expect::node, nullptr},
    {"logic_values_python", "{{ not 0 }}",
     "{}",
     Expect::python, "True"},  // @huggingface/jinja: true
    {"conditional_expression", "{{ 'yes' if 1 else 'no' }} {{ 'yes' if 0 else 'no' }} [{{ 'yes' if 0 }}]",
     "{}", Expect::node, nullptr},
    {"truthiness", "{% for v in [0, 1, '', 'a', [], [0], {}, none] %}{{ 't' if v else 'f' }}{% endfor %}",
     "{}", Expect::node, nullptr},
    {"attribute_and_item", "{{ m.role }} {{ m['content'] }} {{ m.missing }}|{{ l[0] }} {{ l[-1] }} {{ l.1 }}",
     "{\"m\": {\"role\": \"user\", \"content\": \"hi\"}, \"l\": [10, 20, 30]}", Expect::node, nullptr},
    {"slicing", "{{ l[1:] }} {{ l[:2] }} {{ l[::-1] }} {{ l[::2] }} {{ s[1:3] }} {{ s[::-1] }} {{ l[-2:] }}",
     "{\"l\": [1, 2, 3, 4], \"s\": \"héllo\"}", Expect::node, nullptr},
    {"dict_methods", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ d.keys()|list }} {{ d.values()|list }} {{ d.get('a') }} {{ d.get('z', 'dflt') }} {{ d.get('z') }}",
     "{\"d\": {\"a\": 1, \"b\": [2]}}",
     Expect::python, "a=1;b=[2];['a', 'b'] [1, [2]] 1 dflt None"},  // @huggingface/jinja: a=1;b=[2];["a", "b"] [1, [2]] 1 dflt 
    {"loop_variables", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}",
     "{}",
     Expect::python, "1032TrueFalse3|2121FalseFalse3|3210FalseTrue3|"},  // @huggingface/jinja: ERROR: Expected iterable or object type in for loop: got StringValue
    {"loop_else", "{% for x in [] %}x{% else %}empty{% endfor %}",
     "{}", Expect::node, nullptr},
    {"loop_filter", "{% for x in [1, 2, 3, 4, 5] if x is odd %}{{ loop.index }}:{{ x }} {% endfor %}",
     "{}", Expect::node, nullptr},
    {"loop_over_dict", "{% for k in {'b': 1, 'a': 2} %}{{ k }}{% endfor %}",
     "{}", Expect::node, nullptr},
    {"loop_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}",
     "{}", Expect::node, nullptr},
    {"loop_cycle_prev_next", "{% for x in [1, 2, 3] %}{{ loop.cycle('a', 'b') }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}",
     "{}",
     Expect::python, "a2;b13;a2;"},  // @huggingface/jinja: ERROR: Cannot call something that is not a function: got UndefinedValue
    {"nested_loops", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }} {% endfor %}{{ loop.index }}|{% endfor %}",
     "{}",
     Expect::python, "1x1 1y2 1|2x1 2y2 2|"},  // @huggingface/jinja: ERROR: Expected iterable or object type in for loop: got StringValue
    {"loop_tuple_unpack", "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }} {% endfor %}",
     "{}", Expect::node, nullptr},
    {"set_and_scoping", "{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}",
     "{}",
     Expect::python, "231"},  // @huggingface/jinja: 241
    {"namespace", "{% set ns = namespace(total=0, seen=false) %}{% for i in [1, 2, 3] %}{% set ns.total = ns.total + i %}{% endfor %}{{ ns.total }}",
     "{}", Expect::node, nullptr},
    {"block_set", "{% set greeting %}Hello {{ name }}!{% endset %}[{{ greeting }}]{% set up | upper %}quiet{% endset %}{{ up }}",
     "{\"name\": \"Ana\"}",
     Expect::python, "[Hello Ana!]QUIET"},  // @huggingface/jinja: ERROR: Invalid LHS inside assignment expression: {"type":"FilterExpression","operand":{"type":"Id...
    {"set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}",
     "{}", Expect::node, nullptr},
    {"with_block", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]",
     "{}",
     Expect::python, "3[]"},  // @huggingface/jinja: ERROR: Unknown statement type: with
    {"if_elif_else", "{% for v in [1, 2, 3] %}{% if v == 1 %}one{% elif v == 2 %}two{% else %}many{% endif %} {% endfor %}",
     "{}", Expect::node, nullptr},
    {"macro_defaults", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(name='C', punct='.') }}",
     "{}", Expect::node, nullptr},
    {"macro_caller", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold{% endcall %}",
     "{}", Expect::node, nullptr},
    {"filter_block", "{% filter upper %}shout {{ 'this' }}{% endfilter %}",
     "{}", Expect::node, nullptr},
    {"string_filters", "{{ 'hello world'|title }} {{ 'ABC'|lower }} {{ 'abc'|upper }} {{ '  x  '|trim }} {{ 'a-b c(d'|title }}",
     "{}", Expect::node, nullptr},
    {"string_filters_python", "{{ 'xxhixx'|trim('x') }} {{ 'hELLO'|capitalize }}",
     "{}",
     Expect::python, "hi Hello"},  // @huggingface/jinja: ERROR: Unknown StringValue filter: trim | HELLO
    {"replace_filter", "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }}",
     "{}", Expect::node, nullptr},
    {"length_filters", "{{ [1, 2]|length }} {{ 'héllo'|length }}",
     "{}", Expect::node, nullptr},
    {"length_filters_python", "{{ {'a': 1}|count }} {{ undefined_name|length }}",
     "{}",
     Expect::python, "1 0"},  // @huggingface/jinja: ERROR: Unknown ObjectValue filter: count | ERROR: Cannot apply filter "length" to type: Undefined...
    {"first_last_join", "{{ [3, 1, 2]|first }} {{ [3, 1, 2]|last }} {{ []|join }}",
     "{}", Expect::node, nullptr},
    {"first_last_join_python", "{{ [1, 'a', none]|join(', ') }} {{ 'abc'|first }}",
     "{}",
     Expect::python, "1, a, None a"},  // @huggingface/jinja: 1, a,  | ERROR: Unknown StringValue filter: first
    {"default_filter", "{{ missing|default('d') }} {{ ''|default('d', true) }}",
     "{}", Expect::node, nullptr},
    {"default_filter_python", "{{ none|default('d') }} {{ 0|d('zero', true) }}",
     "{}",
     Expect::python, "None zero"},  // @huggingface/jinja:  | ERROR: Cannot apply filter "d" to type: IntegerValue
    {"number_filters", "{{ '42'|int }} {{ '3.7'|int }} {{ 'x'|int }} {{ 'x'|int(5) }} {{ 3.9|int }} {{ 3|float }} {{ '2.5'|float }} {{ -3|abs }}",
     "{}", Expect::node, nullptr},
    {"number_filters_python", "{{ 2.5|round }} {{ 3.14159|round(2) }} {{ 2.1|round(0, 'ceil') }}",
     "{}",
     Expect::python, "2.0 3.14 3.0"},  // @huggingface/jinja: ERROR: Unknown NumericValue filter: round | ERROR: Cannot apply filter "round" to type: FloatValu...
    {"list_filters", "{{ [3, 1, 2]|sort }} {{ [3, 1, 2]|sort(reverse=true) }} {{ [1, 2, 1, 3]|unique|list }} {{ [1, 2, 3]|reverse|list }}",
     "{}", Expect::node, nullptr},
    {"list_filters_python", "{{ ['b', 'A', 'c']|sort }} {{ 'abc'|reverse }} {{ 'ab'|list }}",
     "{}",
     Expect::python, "['A', 'b', 'c'] cba ['a', 'b']"},  // @huggingface/jinja: ["A", "b", "c"] | ERROR: Unknown StringValue filter: reverse | ERROR: Unknown StringValue filter:...
    {"map_select", "{{ users|map(attribute='name')|join(',') }} {{ users|rejectattr('admin')|list|length }}",
     "{\"users\": [{\"name\": \"ann\", \"admin\": true}, {\"name\": \"bob\", \"admin\": false}]}", Expect::node, nullptr},
    {"map_select_python", "{{ users|selectattr('admin')|map(attribute='name')|list }} {{ [1, 2, 3, 4]|select('even')|list }} {{ [1, 2, 3]|reject('odd')|list }} {{ ['a', 'b']|map('upper')|list }}",
     "{\"users\": [{\"name\": \"ann\", \"admin\": true}, {\"name\": \"bob\", \"admin\": false}]}",
     Expect::python, "['ann'] [2, 4] [2] ['A', 'B']"},  // @huggingface/jinja: ["ann"] | ERROR: Unknown ArrayValue filter: select | ERROR: Unknown ArrayValue filter: reject | E...
    {"selectattr_equalto", "{{ ms|selectattr('role', 'equalto', 'user')|list|length }}",
     "{\"ms\": [{\"role\": \"user\"}, {\"role\": \"assistant\"}, {\"role\": \"user\"}]}", Expect::node, nullptr},
    {"selectattr_equalto_python", "{{ ms|selectattr('role', '==', 'tool')|list|length }}",
     "{\"ms\": [{\"role\": \"user\"}, {\"role\": \"assistant\"}, {\"role\": \"user\"}]}",
     Expect::python, "0"},  // @huggingface/jinja: ERROR: Unknown test: ==
    {"items_filter", "{% for k, v in d|items %}{{ k }}:{{ v }} {% endfor %}",
     "{\"d\": {\"x\": 1, \"y\": 2}}", Expect::node, nullptr},
    {"min_max_sum", "{{ [3, 1, 2]|min }} {{ [3, 1, 2]|max }} {{ [1, 2, 3]|sum }} {{ users|sum(attribute='n') }}",
     "{\"users\": [{\"n\": 2}, {\"n\": 5}]}",
     Expect::python, "1 3 6 7"},  // @huggingface/jinja: ERROR: Unknown ArrayValue filter: min | ERROR: Unknown ArrayValue filter: max | ERROR: Unknown Ar...
    {"dictsort_filter", "{% for k, v in {'b': 1, 'a': 2}|dictsort %}{{ k }}{{ v }}{% endfor %}",
     "{}", Expect::node, nullptr},
    {"indent_filter", "{{ 'a\\nb\\n\\nc'|indent(2) }} {{ 'a\\nb'|indent(2, true) }}",
     "{}", Expect::node, nullptr},
    {"indent_filter_python", "{{ 'a\\n\\nb'|indent('> ', blank=true) }}",
     "{}",
     Expect::python, "a\n> \n> b"},  // @huggingface/jinja: ERROR: width must be a number
    {"string_filter", "{{ 1|string }} {{ [1]|string }}",
     "{}", Expect::node, nullptr},
    {"string_filter_python", "{{ none|string }}",
     "{}",
     Expect::python, "None"},  // @huggingface/jinja: ERROR: Cannot apply filter "string" to type: NullValue
    {"escape_safe", "{{ '<b>'|safe }}",
     "{}", Expect::node, nullptr},
    {"escape_safe_python", "{{ '<a href=\"x\">&</a>'|e }} {{ '<b>'|escape|escape }}",
     "{}",
     Expect::python, "&lt;a href=&#34;x&#34;&gt;&amp;&lt;/a&gt; &lt;b&gt;"},  // @huggingface/jinja: ERROR: Unknown StringValue filter: e | ERROR: Unknown StringValue filter: escape
    {"tojson_basic", "{{ d|tojson }}",
     "{\"d\": {\"b\": 1, \"a\": [1, \"x\", null, true, false], \"c\": {\"nested\": \"é\"}}}", Expect::node, nullptr},
    {"tojson_unicode_escapes", "{{ s|tojson }} {{ s|tojson(ensure_ascii=true) }}",
     "{\"s\": \"é \\\"q\\\" \\\\ \\n\\t\\u0001 中 😀\"}", Expect::node, nullptr},
    {"tojson_indent", "{{ d|tojson(indent=2) }}",
     "{\"d\": {\"a\": [1, {\"b\": []}, {}], \"c\": \"x\"}}", Expect::node, nullptr},
    {"tojson_sort_separators", "{{ d|tojson(sort_keys=true) }} {{ d|tojson(separators=(',', ':')) }}",
     "{\"d\": {\"b\": 1, \"a\": [1, 2]}}", Expect::node, nullptr},
    {"tojson_string_and_scalars", "{{ 'a'|tojson }} {{ 5|tojson }} {{ none|tojson }} {{ true|tojson }}",
     "{}", Expect::node, nullptr},
    {"is_tests", "{{ x is defined }} {{ y is undefined }} {{ none is none }} {{ 'a' is string }} {{ {} is mapping }} {{ [] is iterable }} {{ 'a' is sequence }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 3 is number }} {{ true is boolean }} {{ false is false }} {{ 1 is integer }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ 2 is in [1, 2] }}",
     "{\"x\": 1}",
     Expect::python, "True True True True True True True True True True True True True True True True True"},  // @huggingface/jinja: true | true | true | true | true | true | true | true | true | ERROR: Parser Error: Expected clos...
    {"is_not", "{{ x is not none }} {{ x is not defined }} {{ not x is none }}",
     "{\"x\": 1}",
     Expect::python, "True False True"},  // @huggingface/jinja: true | false | true
    {"strip_methods", "[{{ '  a  '.strip() }}][{{ '\\n\\na\\n'.lstrip('\\n') }}][{{ 'xxaxx'.rstrip('x') }}][{{ 'abcba'.strip('ab') }}]",
     "{}",
     Expect::python, "[a][a\n][xxa][c]"},  // @huggingface/jinja: [a][a\n][xxaxx][abcba]
    {"split_methods", "{{ 'x</think>y</think>z'.split('</think>')[-1] }}",
     "{}", Expect::node, nullptr},
    {"split_methods_python", "{{ 'a,b,,c'.split(',') }} {{ '  a  b '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }}",
     "{}",
     Expect::python, "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b,c'] ['a,b', 'c']"},  // @huggingface/jinja: ["a", "b", "", "c"] | ["a", "b"] | ["a", "b,c"] | ERROR: Cannot call something that is not a func...
    {"startswith_endswith", "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith('lo') }} {{ 'hello'.startswith(('x', 'h')) }} {{ 'hello'.endswith('x') }}",
     "{}",
     Expect::python, "True True True False"},  // @huggingface/jinja: true | true | true | false
    {"case_methods", "{{ 'abc'.upper() }} {{ 'ABC'.lower() }} {{ 'hello world'.title() }}",
     "{}", Expect::node, nullptr},
    {"case_methods_python", "{{ 'hELLO'.capitalize() }}",
     "{}",
     Expect::python, "Hello"},  // @huggingface/jinja: HELLO
    {"other_str_methods", "{{ 'abcabc'.replace('b', 'x') }}",
     "{}", Expect::node, nullptr},
    {"other_str_methods_python", "{{ 'abc'.find('c') }} {{ 'abc'.find('z') }} {{ 'aXbXc'.count('X') }} {{ '-'.join(['a', 'b']) }} {{ '12'.isdigit() }}",
     "{}",
     Expect::python, "2 -1 2 a-b True"},  // @huggingface/jinja: ERROR: Cannot call something that is not a function: got UndefinedValue | ERROR: Cannot call some...
    {"unicode_methods", "{{ 'ÉCOLE'.lower() }} {{ 'straße'|length }} {{ 'naïve'.upper() }} {{ 'añb'[1] }}",
     "{}", Expect::node, nullptr},
    {"range_global", "{{ range(3)|list }} {{ range(1, 7, 2)|list }}",
     "{}", Expect::node, nullptr},
    {"raise_exception", "{{ raise_exception('Bad role: ' ~ role) }}",
     "{\"role\": \"robot\"}",
     Expect::error, "Bad role: robot"},  // @huggingface/jinja: ERROR: Bad role: robot
    {"dict_global", "{{ dict(a=1, b='x') }}",
     "{}",
     Expect::python, "{'a': 1, 'b': 'x'}"},  // @huggingface/jinja: ERROR: Cannot call something that is not a function: got UndefinedValue
    {"generation_tag", "{% for m in ms %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}|{% endfor %}",
     "{\"ms\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": \"a\"}]}", Expect::node, nullptr},
    {"lstrip_after_dash_end", "{% if true -%}\n   {% if true %}x{% endif %}{% endif %}",
     "{}", Expect::node, nullptr},
    {"no_lstrip_mid_line", "{{ 'a' }}   {% if true %}b{% endif %}",
     "{}", Expect::node, nullptr},
    {"lstrip_after_trimmed_newline", "{% if true %}\n   {% if true %}x{% endif %}\n{% endif %}",
     "{}", Expect::node, nullptr},
    {"lstrip_tab_and_comment", "\t{% if true %}x{% endif %}\n   {# c #}\nb",
     "{}", Expect::node, nullptr},
    {"raw_with_whitespace_control", "a {%- raw -%}  x  {%- endraw -%} b|\n  {% raw %}\n  {{x}}\n  {% endraw %}\nc",
     "{}",
     Expect::python, "axb|\n\n  {{x}}\nc"},  // @huggingface/jinja: ERROR: Unknown statement type: raw
    {"unicode_space_stripped", "a 　{%- if true %}b{% endif %}",
     "{}", Expect::node, nullptr},
    {"end_marker_in_string", "{{ '}}' }}{{ {'a': {'b': 1}} }}{{ '%}' ~ '{%' }}",
     "{}",
     Expect::python, "}}{'a': {'b': 1}}%}{%"},  // @huggingface/jinja: }}{"a": {"b": 1}}%}{%
    {"multiline_tag", "{% if\n  true\n  and 1 %}x{% endif %}",
     "{}", Expect::node, nullptr},
    {"none_attribute", "[{{ x.y }}]",
     "{\"x\": null}", Expect::node, nullptr},
    {"macro_varargs_kwargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k='v') }}",
     "{}",
     Expect::python, "1(2, 3){'k': 'v'}"},  // @huggingface/jinja: 1[2, 3]{"k": "v"}
    {"macro_missing_arg", "{% macro m(a, b) %}[{{ a }}][{{ b }}]{% endmacro %}{{ m(1) }}",
     "{}", Expect::node, nullptr},
    {"loop_changed", "{% for x in [1, 1, 2, 2, 3] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}",
     "{}",
     Expect::python, "123"},  // @huggingface/jinja: ERROR: Cannot call something that is not a function: got UndefinedValue
    {"list_and_tuple_ops", "{{ [1, 2] + [3] }}",
     "{}", Expect::node, nullptr},
    {"list_and_tuple_ops_python", "{{ (1,) + (2,) }} {{ [0] * 3 }} {{ 'ab' * 0 }}",
     "{}",
     Expect::python, "(1, 2) [0, 0, 0] "},  // @huggingface/jinja: ERROR: Unexpected token: CloseParen | ERROR: Unknown operator "*" between ArrayValue and IntegerV...
    {"dict_literal_duplicates", "{{ {'a': 1, 'b': 2, 'a': 3} }}",
     "{}",
     Expect::python, "{'a': 3, 'b': 2}"},  // @huggingface/jinja: {"a": 3, "b": 2}
    {"chained_comparisons", "{{ 1 < 2 < 3 }} {{ 3 > 2 > 5 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ (1, 2) == [1, 2] }}",
     "{}",
     Expect::python, "True False True True False"},  // @huggingface/jinja: ERROR: Unknown operator "<" between BooleanValue and IntegerValue | ERROR: Unknown operator ">" b...
    {"python_modulo", "{{ 10 % 3 }} {{ 7.5 // 2 }} {{ -7 // 2.0 }}",
     "{}", Expect::node, nullptr},
    {"python_modulo_python", "{{ -7 % 3 }} {{ 7 % -3 }} {{ -7.5 % 2 }}",
     "{}",
     Expect::python, "2 -2 0.5"},  // @huggingface/jinja: -1 | 1 | -1.5
    {"float_repr", "{{ 0.0001 }} {{ 0.1 + 0.2 }} {{ -0.0 }} {{ 100.0 }}",
     "{}", Expect::node, nullptr},
    {"float_repr_python", "{{ 1e16 }} {{ 1e15 }} {{ 1e-5 }} {{ 1e22 }} {{ 2.5e-10 }} {{ 1.5e300 * 1e10 }}",
     "{}",
     Expect::python, "1e+16 1000000000000000.0 1e-05 1e+22 2.5e-10 inf"},  // @huggingface/jinja: ERROR: Parser Error: Expected closing expression token. Identifier !== CloseExpression. | ERROR: ...
    {"loop_length_with_filter", "{% for x in range(10) if x > 6 %}{{ loop.length }}{{ loop.last }} {% endfor %}",
     "{}",
     Expect::python, "3False 3False 3True "},  // @huggingface/jinja: 3false 3false 3true 
    {"negative_index_message", "{{ msgs[-1].content }} {{ msgs|length }}",
     "{\"msgs\": [{\"content\": \"a\"}, {\"content\": \"b\"}]}", Expect::node, nullptr},
    {"tojson_tab_indent_and_ascii_positional", "{{ d|tojson(indent='\\t') }} {{ 'é'|tojson(true) }}",
     "{\"d\": {\"a\": [1]}}",
     Expect::python, "{\n\t\"a\": [\n\t\t1\n\t]\n} \"\\u00e9\""},  // @huggingface/jinja: ERROR: If set, indent must be a number | "é"
    {"center_and_split_none", "[{{ 'abc'|center(9) }}] {{ ' a b '.split(none, 1) }} {{ 'a\\nb\\r\\nc'.splitlines() }}",
     "{}",
     Expect::python, "[   abc   ] ['a', 'b '] ['a', 'b', 'c']"},  // @huggingface/jinja: ERROR: Unknown StringValue filter: center
    {"join_attribute", "{{ [1, 'a']|join }}",
     "{\"users\": [{\"name\": \"x\"}, {\"name\": \"y\"}]}", Expect::node, nullptr},
    {"join_attribute_python", "{{ users|join(', ', attribute='name') }}",
     "{\"users\": [{\"name\": \"x\"}, {\"name\": \"y\"}]}",
     Expect::python, "x, y"},  // @huggingface/jinja: [object Map], [object Map]
    {"views_and_objects_printing", "{{ ns }}",
     "{}", Expect::node, nullptr},
    {"views_and_objects_printing_python", "{{ {'a': 1}.items() }} {{ {'a': 1}.keys() }} {{ range(3) }} {{ range(0, 10, 2) }}",
     "{}",
     Expect::python, "dict_items([('a', 1)]) dict_keys(['a']) range(0, 3) range(0, 10, 2)"},  // @huggingface/jinja: [["a", 1]] | ["a"] | [0, 1, 2] | [0, 2, 4, 6, 8]
    {"map_filter_by_name", "{{ [1, 2]|map('string')|list }} {{ [1.5, 2]|map('int')|list }}",
     "{}",
     Expect::python, "['1', '2'] [1, 2]"},  // @huggingface/jinja: ERROR: `map` expressions without `attribute` set are not currently supported. | ERROR: `map` expr...
    {"repr_escapes", "{{ ['é', '\\x01', '\\x7f', 'a\\\\b', '\\u2028'] }}",
     "{}",
     Expect::python, "['é', '\\x01', '\\x7f', 'a\\\\b', '\\u2028']"},  // @huggingface/jinja: ["\xe9", "\\u0001", "\x7f", "a\\\\b", "\u2028"]
    {"undefined_first_and_iteration", "[{{ x|first }}][{% for i in x %}{{ i }}{% endfor %}][{{ x|list }}]",
     "{}",
     Expect::python, "[][][[]]"},  // @huggingface/jinja: ERROR: Cannot apply filter "first" to type: UndefinedValue
    {"is_sequence_and_iterable", "{{ {} is sequence }} {{ 1 is sequence }} {{ [1]|map('abs') is sequence }} {{ [1]|map('abs') is iterable }} {{ none is iterable }}",
     "{}",
     Expect::python, "True False False True False"},  // @huggingface/jinja: true | false | ERROR: `map` expressions without `attribute` set are not currently supported. | ER...
    {"number_is_float_tests", "{{ 1.0 is float }} {{ 1 is float }} {{ true is number }} {{ true is integer }}",
     "{}",
     Expect::python, "True False True False"},  // @huggingface/jinja: ERROR: Unknown test: float | ERROR: Unknown test: float | false | false
    {"string_compare_unicode", "{{ 'é' > 'z' }} {{ ['b', 'a', 'é', 'Z']|sort }}",
     "{}",
     Expect::python, "True ['a', 'b', 'Z', 'é']"},  // @huggingface/jinja: ERROR: Unknown operator ">" between StringValue and StringValue | ["a", "b", "Z", "é"]
    {"generator_used_once", "{% set g = [1, 2, 3]|select %}{{ g|first }}{{ g|list }}{{ g|list }}",
     "{}",
     Expect::python, "1[2, 3][]"},  // @huggingface/jinja: ERROR: Unknown ArrayValue filter: select
    {"items_of_namespace_attr", "{% set ns = namespace(d={'k': 'v'}) %}{% for k, v in ns.d.items() %}{{ k }}{{ v }}{% endfor %}",
     "{}", Expect::node, nullptr},
    {"set_in_if_at_top_level", "{% if true %}{% set x = 5 %}{% endif %}{{ x }}",
     "{}", Expect::node, nullptr},
    {"loop_set_does_not_leak", "{% for i in [1] %}{% set inner = i %}{% endfor %}[{{ inner }}]",
     "{}", Expect::node, nullptr},
    {"macro_sees_later_global", "{% set g = 1 %}{% macro m() %}{{ g }}{% endmacro %}{% set g = 2 %}{{ m() }}",
     "{}", Expect::node, nullptr},
    {"string_in_number_error", "{{ 1 in 'abc' }}",
     "{}",
     Expect::error, "'in <string>' requires string as left operand, not int"},  // @huggingface/jinja: ERROR: Unknown operator "in" between IntegerValue and StringValue
    {"concat_precedence_error", "{{ 'a' ~ 1 + 2 }}",
     "{}",
     Expect::error, "can only concatenate str (not \"int\") to str"},  // @huggingface/jinja: a12
    {"undefined_attribute_error", "{{ a.b.c }}",
     "{\"a\": {}}",
     Expect::error, "'dict object' has no attribute 'b'"},  // @huggingface/jinja: 
    {"call_undefined_error", "{{ nothing() }}",
     "{}",
     Expect::error, "'nothing' is undefined"},  // @huggingface/jinja: ERROR: Cannot call something that is not a function: got UndefinedValue
    {"compare_types_error", "{{ 1 < 'a' }}",
     "{}",
     Expect::error, "'<' not supported between instances of 'int' and 'str'"},  // @huggingface/jinja: ERROR: Unknown operator "<" between IntegerValue and StringValue
    {"unpack_error", "{% for a, b in [[1, 2, 3]] %}{% endfor %}",
     "{}",
     Expect::error, "too many values to unpack (expected 2)"},  // @huggingface/jinja: ERROR: Too many items to unpack
    {"none_iteration_error", "{% for x in none %}{% endfor %}",
     "{}",
     Expect::error, "'NoneType' object is not iterable"},  // @huggingface/jinja: ERROR: Expected iterable or object type in for loop: got NullValue
    {"add_str_int_error", "{{ 'a' + 1 }}",
     "{}",
     Expect::error, "can only concatenate str (not \"int\") to str"},  // @huggingface/jinja: a1
};
// clang-format on

TEST(ChatTemplate, SnippetsMatchPythonJinja) {
  TempDir dir("chat_snippets");
  ordered_json for_node = ordered_json::array();
  for (const Snippet& s : kSnippets)
    for_node.push_back({{"template", s.source}, {"vars", ordered_json::parse(s.vars)}});
  write_file(dir / "snippets.json", for_node.dump());
  const ordered_json node = ordered_json::parse(run_node("render_chat.mjs", {"snippets", dir / "snippets.json"}));
  ASSERT_EQ(node.size(), std::size(kSnippets));
  int compared_with_node = 0;
  for (size_t i = 0; i < std::size(kSnippets); ++i) {
    const Snippet& s = kSnippets[i];
    SCOPED_TRACE(s.name);
    const Outcome cpp = render_snippet(s.source, ordered_json::parse(s.vars));
    switch (s.expect) {
      case Expect::node:
        ASSERT_TRUE(node[i].contains("text")) << node[i].dump();
        EXPECT_EQ(cpp.error, "");
        EXPECT_EQ(cpp.text, node[i]["text"].get<std::string>());
        ++compared_with_node;
        break;
      case Expect::python:
        EXPECT_EQ(cpp.error, "");
        EXPECT_EQ(cpp.ok() ? cpp.text : cpp.raised, s.expected);
        break;
      case Expect::error:
        EXPECT_FALSE(cpp.ok()) << "rendered: " << cpp.text;
        EXPECT_NE((cpp.error + cpp.raised).find(s.expected), std::string::npos) << cpp.error << cpp.raised;
        break;
    }
  }
  EXPECT_GT(compared_with_node, 50);
}

// ---------------------------------------------------------------------------------------
// Refusals: a construct the renderer does not support is an error naming it and its place.

void expect_refused(const std::string& source, const std::string& what, const std::string& where,
                    const std::string& vars = "{}") {
  const Outcome o = render_snippet(source, ordered_json::parse(vars));
  EXPECT_FALSE(o.ok()) << source << " rendered " << o.text;
  EXPECT_NE(o.error.find(what), std::string::npos) << source << ": " << o.error;
  EXPECT_NE(o.error.find(where), std::string::npos) << source << ": " << o.error;
  EXPECT_NE(o.error.find("chat template 'snippet'"), std::string::npos) << o.error;
}

TEST(ChatTemplate, RefusesWhatItDoesNotSupport) {
  expect_refused("{{ x | frobnicate }}", "unknown filter 'frobnicate'", "line 1, column 8");
  expect_refused("a\n{{ x }}\n  {{ y | wordwrap(3) }}", "filter 'wordwrap' is not supported", "line 3, column 10");
  expect_refused("{% if x is frobbed %}{% endif %}", "unknown test 'frobbed'", "line 1");
  expect_refused("{% frob %}", "unknown statement 'frob'", "line 1, column 4");
  expect_refused("\n\n{% include 'other.jinja' %}", "'include' statements are not supported", "line 3");
  expect_refused("{% extends 'base' %}", "'extends' statements are not supported", "line 1");
  expect_refused("{% for x in y recursive %}{% endfor %}", "recursive for loops are not supported", "line 1");
  expect_refused("{% break %}", "'break' outside of a loop", "line 1");
  expect_refused("{{ f(*args) }}", "*args and **kwargs", "line 1");
  expect_refused("{{ '%s' % 1 }}", "string formatting with %", "line 1");
  expect_refused("{{ 2 ** 70 }}", "integer overflow", "line 1");
  expect_refused("{% set l = [1] %}{{ l.append(2) }}", "list.append is not allowed", "line 1");
  expect_refused("{{ 'a{}'.format(1) }}", "str.format() is not supported", "line 1");
  expect_refused("{% macro m() %}{% endmacro %}{{ m }}", "printing a 'function' object is not supported", "line 1");
  expect_refused("{{ [1] | map('abs') }}", "printing an iterator", "line 1");
  expect_refused("{{ 'straße' | upper }}", "case mapping of U+00DF is not supported", "line 1");
  expect_refused("{{ x }}", "beyond the 64-bit range", "", R"({"x": 18446744073709551615})");
  expect_refused("\n{{ x ", "unexpected end of template", "line 2");
  expect_refused("{% if x %}never closed", "expected 'elif' or 'else' or 'endif'", "line 1");
  expect_refused("{{ 'unterminated }}", "unterminated string literal", "line 1, column 4");
  expect_refused("{{ a[1, 2] }}", "tuple subscripts", "line 1");
  expect_refused("{{ x is sameas 3 }}", "'sameas' is only supported", "line 1", R"({"x": 3})");
}

TEST(ChatTemplate, RaiseExceptionKeepsTheMessage) {
  const ChatTemplate t = ChatTemplate::from_string(
      "{{ raise_exception('Only user and assistant roles are supported!') }}", ordered_json::object(), "mistral");
  try {
    t.render(ordered_json::array(), {});
    ADD_FAILURE() << "rendered";
  } catch (const jinja::TemplateRaised& e) {
    EXPECT_STREQ(e.what(), "Only user and assistant roles are supported!");
  }
}

// ---------------------------------------------------------------------------------------
// Loading templates.

TEST(ChatTemplate, ConfigWithoutTemplateIsRefusedByName) {
  const std::string path = source_path("assets/tokenizers/mistral/tokenizer_config.json");
  try {
    ChatTemplate::from_tokenizer_config(path);
    ADD_FAILURE() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("has no chat_template"), std::string::npos) << e.what();
  }
  TempDir dir("chat_config");
  EXPECT_THROW(ChatTemplate::from_tokenizer_config(dir / "missing.json"), Error);
  write_file(dir / "bad.json", "{not json");
  try {
    ChatTemplate::from_tokenizer_config(dir / "bad.json");
    ADD_FAILURE() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos) << e.what();
  }
}

TEST(ChatTemplate, NamedTemplatesAndSpecialTokens) {
  TempDir dir("chat_named");
  const ordered_json config = {
      {"bos_token", {{"__type", "AddedToken"}, {"content", "<s>"}}},
      {"eos_token", "</s>"},
      {"unk_token", nullptr},
      {"additional_special_tokens", {"<x>"}},
      {"chat_template",
       {{{"name", "default"}, {"template", "D{{ bos_token }}{{ eos_token }}{{ unk_token is defined }}"}},
        {{"name", "tool_use"}, {"template", "T{{ tools | length }}{{ additional_special_tokens is defined }}"}}}}};
  write_file(dir / "tokenizer_config.json", config.dump());
  const ChatTemplate t = ChatTemplate::from_tokenizer_config(dir / "tokenizer_config.json");
  EXPECT_EQ(t.render(ordered_json::array(), {}), "D<s></s>False");
  ChatTemplateOptions with_tools;
  with_tools.tools = ordered_json::array({{{"type", "function"}}});
  EXPECT_EQ(t.render(ordered_json::array(), with_tools), "T1False");
  // A chat_template.jinja beside the config replaces its chat_template, as in transformers.
  write_file(dir / "chat_template.jinja", "J{{ bos_token }}\n");
  EXPECT_EQ(ChatTemplate::from_tokenizer_config(dir / "tokenizer_config.json").render(ordered_json::array(), {}),
            "J<s>");
}

TEST(ChatTemplate, VariablesAsTransformersPassesThem) {
  const ChatTemplate t = ChatTemplate::from_string(
      "{{ tools }}|{{ documents }}|{{ add_generation_prompt }}|{{ messages | length }}|{{ flag }}|{{ "
      "strftime_now('%Y') }}",
      ordered_json::object(), "vars");
  ChatTemplateOptions options;
  options.add_generation_prompt = false;
  options.extra["flag"] = true;
  const std::time_t now = std::time(nullptr);
  char year[8];
  std::strftime(year, sizeof year, "%Y", std::localtime(&now));
  EXPECT_EQ(t.render(ordered_json::parse(R"([{"role": "user", "content": "x"}])"), options),
            std::string("None|None|False|1|True|") + year);
  ChatTemplateOptions clash;
  clash.extra["messages"] = 1;
  EXPECT_THROW(t.render(ordered_json::array(), clash), Error);
}

// ---------------------------------------------------------------------------------------
// Number printing and json.dumps, against Python 3.11.

TEST(ChatTemplate, FloatReprAsPython) {
  const std::pair<double, const char*> cases[] = {
      {1.0, "1.0"},
      {0.5, "0.5"},
      {0.1 + 0.2, "0.30000000000000004"},
      {1e16, "1e+16"},
      {1e15, "1000000000000000.0"},
      {1e-5, "1e-05"},
      {0.0001, "0.0001"},
      {-2.5e-10, "-2.5e-10"},
      {123456789.125, "123456789.125"},
      {1.5e300, "1.5e+300"},
      {-0.0, "-0.0"},
      {2.0 / 3, "0.6666666666666666"},
      {1e22, "1e+22"},
      {5e-324, "5e-324"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
  };
  for (const auto& [x, expected] : cases) EXPECT_EQ(jinja::float_repr(x), expected);
}

TEST(ChatTemplate, TojsonAsJsonDumps) {
  const jinja::Value v =
      jinja::from_json(ordered_json::parse(R"({"b": [1, 2.0, "é\u0001\"", null, true], "a": {}, "c": []})"));
  jinja::JsonDumpOptions plain;
  EXPECT_EQ(jinja::to_json(v, plain), R"({"b": [1, 2.0, "é\u0001\"", null, true], "a": {}, "c": []})");
  jinja::JsonDumpOptions indented;
  indented.indent = "  ";
  EXPECT_EQ(jinja::to_json(v, indented),
            "{\n  \"b\": [\n    1,\n    2.0,\n    \"\xc3\xa9\\u0001\\\"\",\n    null,\n    true\n  ],\n  \"a\": {},\n  "
            "\"c\": []\n}");
  jinja::JsonDumpOptions ascii_sorted;
  ascii_sorted.ensure_ascii = true;
  ascii_sorted.sort_keys = true;
  ascii_sorted.separators = std::make_pair(std::string(","), std::string(":"));
  EXPECT_EQ(jinja::to_json(v, ascii_sorted), R"({"a":{},"b":[1,2.0,"\u00e9\u0001\"",null,true],"c":[]})");
  EXPECT_EQ(jinja::to_json(jinja::Value::string("\xf0\x9f\x98\x80"), ascii_sorted), R"("\ud83d\ude00")");
  EXPECT_THROW(jinja::to_json(jinja::Value::undefined("x"), plain), jinja::JinjaError);
}

}  // namespace
}  // namespace troupe::test
