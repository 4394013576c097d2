// Renders chat templates with Hugging Face's @huggingface/jinja (the renderer transformers.js
// uses) for tests/data/chat_template_test.cpp. It tokenizes with trim_blocks and lstrip_blocks
// on, as transformers' Python environment does. Two modes, each printing JSON on stdout:
//
//   node render_chat.mjs conversations TEMPLATE_OR_- TOKENIZER_CONFIG CONVERSATIONS
//     Every conversation of the fixture rendered the way transformers' apply_chat_template
//     calls the template: messages, tools (null when absent), documents (null),
//     add_generation_prompt, the named special tokens of the tokenizer config, then the extra
//     variables. TEMPLATE "-" takes the config's chat_template. Prints
//     {"results": [{"name", "text"} | {"name", "error"}]}.
//   node render_chat.mjs snippets SNIPPETS
//     SNIPPETS: [{"template": ..., "vars": {...}}]; prints [{"text"} | {"error"}].
import { Template } from "@huggingface/jinja";
import fs from "node:fs";

// transformers 5's SPECIAL_TOKENS_ATTRIBUTES: the special_tokens_map entries a template sees.
const SPECIAL_TOKENS = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"];

function specialTokens(config) {
  const out = {};
  for (const key of SPECIAL_TOKENS) {
    const v = config[key];
    if (typeof v === "string") out[key] = v;
    else if (v && typeof v === "object" && typeof v.content === "string") out[key] = v.content;
  }
  return out;
}

function pickTemplate(chatTemplate, toolsGiven) {
  if (typeof chatTemplate === "string") return chatTemplate;
  const named = Object.fromEntries(chatTemplate.map((t) => [t.name, t.template]));
  if (toolsGiven && named.tool_use !== undefined) return named.tool_use;
  if (named.default !== undefined) return named.default;
  throw new Error("no default chat template");
}

function render(source, vars) {
  try {
    return { text: new Template(source).render(vars) };
  } catch (e) {
    return { error: String(e.message) };
  }
}

function conversations(templatePath, configPath, fixturePath) {
  const config = JSON.parse(fs.readFileSync(configPath, "utf8"));
  const fixture = JSON.parse(fs.readFileSync(fixturePath, "utf8"));
  const results = fixture.conversations.map((conv) => {
    const tools = conv.tools ?? null;
    const source = templatePath === "-" ? pickTemplate(config.chat_template, tools !== null) : fs.readFileSync(templatePath, "utf8");
    const vars = {
      ...specialTokens(config),
      ...(conv.extra ?? {}),
      messages: conv.messages,
      tools,
      documents: null,
      add_generation_prompt: conv.add_generation_prompt ?? true,
    };
    return { name: conv.name, ...render(source, vars) };
  });
  return { results };
}

function snippets(path) {
  return JSON.parse(fs.readFileSync(path, "utf8")).map((s) => render(s.template, s.vars ?? {}));
}

const [mode, ...args] = process.argv.slice(2);
let out;
if (mode === "conversations" && args.length === 3) out = conversations(...args);
else if (mode === "snippets" && args.length === 1) out = snippets(args[0]);
else {
  console.error("usage: render_chat.mjs conversations TEMPLATE|- TOKENIZER_CONFIG CONVERSATIONS | snippets SNIPPETS");
  process.exit(2);
}
process.stdout.write(JSON.stringify(out));
