// Drives `troupe serve --served-model-name NAME ALIAS --api-key KEY` with the official OpenAI
// client for Node: models, completions (text, token ids, logprobs, streamed), chat (plain,
// logprobs, streamed), and the errors a client sees (a wrong key, an unknown model, a value out
// of range). Prints what it got as one JSON object (tests/apps/openai_node_test.cpp checks it).
//   node openai_clients.mjs BASE_URL MODEL KEY
import OpenAI from "openai";

const [baseURL, model, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120000 });
const out = {};

async function error_of(f) {
  try {
    await f();
    return null;
  } catch (e) {
    return { status: e.status ?? null, message: e.message, param: e.param ?? e.error?.param ?? null };
  }
}

out.models = (await client.models.list()).data.map((m) => m.id);

const c = await client.completions.create({
  model, prompt: "Hello there", max_tokens: 6, temperature: 0, logprobs: 2, frequency_penalty: 0.5,
  presence_penalty: 0.1, logit_bias: { "13": 1 }, user: "u", seed: 3,
});
out.completion = {
  object: c.object, text: c.choices[0].text, finish_reason: c.choices[0].finish_reason, usage: c.usage,
  model: c.model, top: c.choices[0].logprobs.top_logprobs.map((t) => Object.keys(t).length),
};
const ids = await client.completions.create({ model, prompt: [[15496, 612], "x"], max_tokens: 3, temperature: 0, n: 2 });
out.ids = ids.choices.map((ch) => ch.index);

const cs = await client.completions.create({
  model, prompt: "Hello there", max_tokens: 6, temperature: 0, logprobs: 2, frequency_penalty: 0.5,
  presence_penalty: 0.1, logit_bias: { "13": 1 }, seed: 3, stream: true, stream_options: { include_usage: true },
});
out.completion_streamed = { text: "", usage: null, finish_reason: null };
for await (const chunk of cs) {
  if (chunk.usage) out.completion_streamed.usage = chunk.usage;
  for (const ch of chunk.choices) {
    out.completion_streamed.text += ch.text;
    if (ch.finish_reason) out.completion_streamed.finish_reason = ch.finish_reason;
  }
}

const messages = [{ role: "user", content: "Name a whale." }];
const chat = await client.chat.completions.create({
  model: "alias", messages, max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 2, presence_penalty: 0.2,
  store: false, metadata: { k: "v" }, parallel_tool_calls: false,
});
out.chat = {
  content: chat.choices[0].message.content, model: chat.model, finish_reason: chat.choices[0].finish_reason,
  logprobs: chat.choices[0].logprobs.content.map((t) => t.top_logprobs.length), usage: chat.usage,
};
const chs = await client.chat.completions.create({ model, messages, max_tokens: 5, temperature: 0, stream: true,
  presence_penalty: 0.2 });
out.chat_streamed = "";
for await (const chunk of chs) for (const ch of chunk.choices) out.chat_streamed += ch.delta.content ?? "";
const plain = await client.chat.completions.create({ model, messages, max_tokens: 5, temperature: 0,
  presence_penalty: 0.2 });
out.chat_plain = plain.choices[0].message.content;

const wrong = new OpenAI({ baseURL, apiKey: "wrong", maxRetries: 0 });
out.wrong_key = await error_of(() => wrong.models.list());
out.unknown_model = await error_of(() => client.completions.create({ model: "gpt-4", prompt: "x", max_tokens: 1 }));
out.out_of_range = await error_of(() =>
  client.completions.create({ model, prompt: "x", max_tokens: 1, frequency_penalty: 5 }));

console.log(JSON.stringify(out));
