// Drives `troupe serve` with the official OpenAI client for Node, as users' code does, and
// prints what it got as one JSON object (the C++ test checks it).
//   node openai_chat.mjs BASE_URL MODEL
// {models: [ids], plain: {content, finish_reason, usage, object, n}, streamed: {content,
//  chunks, finish_reason, role, usage}, two: [contents], error: {status, message, param}}
import OpenAI from "openai";

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 120000 });
const messages = [
  { role: "system", content: "You are a terse assistant." },
  { role: "user", content: "Name a whale." },
];
const out = {};

out.models = (await client.models.list()).data.map((m) => m.id);

const plain = await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0 });
out.plain = {
  object: plain.object,
  content: plain.choices[0].message.content,
  role: plain.choices[0].message.role,
  finish_reason: plain.choices[0].finish_reason,
  usage: plain.usage,
  n: plain.choices.length,
};

const stream = await client.chat.completions.create({
  model, messages, max_completion_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true },
});
out.streamed = { content: "", chunks: 0, finish_reason: null, role: null, usage: null };
for await (const chunk of stream) {
  out.streamed.chunks += 1;
  if (chunk.usage) out.streamed.usage = chunk.usage;
  for (const c of chunk.choices) {
    if (c.delta.role) out.streamed.role = c.delta.role;
    if (c.delta.content) out.streamed.content += c.delta.content;
    if (c.finish_reason) out.streamed.finish_reason = c.finish_reason;
  }
}

const two = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 1, seed: 5, n: 2 });
out.two = two.choices.map((c) => c.message.content);

try {
  await client.chat.completions.create({ model, messages, max_tokens: 4, tools: [{ type: "function",
    function: { name: "f", parameters: { type: "object", properties: {} } } }] });
  out.error = null;
} catch (e) {
  out.error = { status: e.status, message: e.message, param: e.param ?? e.error?.param ?? null };
}

console.log(JSON.stringify(out));
