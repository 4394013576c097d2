// `troupe generate --chat`'s conversation (apps/generate/chat_session.hpp) on a tiny random GPT-2
// with a ChatML-style template: each answer is what the engine alone generates from the
// rendering of the whole conversation so far (the earlier answers included), streamed to the
// output; the user lines are read until an empty one.
#include <cstdio>
#include <string>

#include "apps/generate/chat_session.hpp"
#include "model/inference/inference_engine.hpp"
#include "tests/serve_test_model.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

using ordered_json = nlohmann::ordered_json;

const char* const kTemplate =
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}";

// The text of a FILE* written so far.
std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  return out;
}

TEST(ChatSession, EachAnswerContinuesTheWholeConversation) {
  ServeTestModel m(256);
  const ChatTemplate chat = ChatTemplate::from_string(kTemplate, ordered_json::object(), "test");
  InferenceModel model(cpu(), m.config, DType::f32, {.max_tokens = 256, .max_sequences = 4});
  model.load_weights(m.weights);
  InferenceEngine engine(model, {.num_blocks = 64, .block_size = 8},
                         [&](std::span<const int32_t> t) { return m.tok.decode_skipping_special(t); });
  const SamplingParams params{.temperature = 0.0f, .max_tokens = 5, .stop_tokens = {m.tok.eod()}};
  apps::ChatSession session(engine, m.tok, chat, params, {.system = "Be brief.", .template_variables = nullptr});

  std::FILE* in = std::tmpfile();
  std::FILE* out = std::tmpfile();
  ASSERT_TRUE(in && out);
  std::fputs("Hello there\nAnd then?\n\nnever read\n", in);
  std::rewind(in);
  session.run(in, out);

  // Two turns, each the engine alone on the rendering of everything before it.
  const ordered_json& msgs = session.messages();
  ASSERT_EQ(msgs.size(), 5u);  // system, user, assistant, user, assistant
  ordered_json so_far = ordered_json::array({msgs[0], msgs[1]});
  std::string printed;
  for (size_t turn = 0; turn < 2; ++turn) {
    const std::vector<int32_t> ids = m.tok.encode(chat.render(so_far, {}));
    const std::string want = m.tok.decode_skipping_special(m.alone({ids, params}, 64));
    EXPECT_EQ(msgs[2 + 2 * turn]["role"], "assistant");
    EXPECT_EQ(msgs[2 + 2 * turn]["content"], want) << "turn " << turn;
    printed += want + "\n";
    so_far.push_back(msgs[2 + 2 * turn]);
    if (turn == 0) so_far.push_back(msgs[3]);
  }
  EXPECT_EQ(msgs[3]["content"], "And then?");
  EXPECT_EQ(contents(out), printed);
  std::fclose(in);
  std::fclose(out);
}

}  // namespace
}  // namespace troupe::test
