// Encodes and decodes texts with Hugging Face's JavaScript tokenizers (@huggingface/tokenizers),
// the reference for tests/data/hf_tokenizer_test.cpp.
//   node hf_tokenize.mjs TOKENIZER_DIR INPUT.jsonl
// TOKENIZER_DIR holds tokenizer.json and tokenizer_config.json. Each input line is
//   {"text": "..."}            a string, or
//   {"hex": "e282ac41"}        bytes, made a string by TextDecoder (U+FFFD for ill-formed UTF-8),
// with optional flags
//   "full": true   also run encode(text, {add_special_tokens: true}) and check it against the
//                  post-processor applied to the tokens of the plain encode (what every line's
//                  "special_ids" is, to save a second encode);
//   "cut": true    encode with pieces cut before each "▁" that follows another character, which
//                  gives the same ids when the tokenizer has no pre-tokenizer, its BPE ignores no
//                  merges and no vocabulary token holds such a "▁" (checked here; the script
//                  fails otherwise) and is much faster on long documents.
// Prints one JSON object per input line:
//   {"ids": [...], "special_ids": [...], "text": decode(ids), "input": the string encoded}
// ("input" only for "hex" lines). decode() is tokenizers' decode(ids, skip_special_tokens=False)
// without transformers' clean_up_tokenization_spaces.
import { Tokenizer } from "@huggingface/tokenizers";
import fs from "fs";

const [dir, input] = process.argv.slice(2);
const tokenizerJson = JSON.parse(fs.readFileSync(`${dir}/tokenizer.json`, "utf8"));
const configJson = JSON.parse(fs.readFileSync(`${dir}/tokenizer_config.json`, "utf8"));
const tok = new Tokenizer(tokenizerJson, configJson);

const META = "\u2581";
let cutChecked = false;
function checkCut() {
  if (cutChecked) return;
  const m = tokenizerJson.model;
  if (tok.pre_tokenizer !== null || m.type !== "BPE" || m.ignore_merges) throw new Error("cut: the tokenizer does not qualify");
  for (const t of Object.keys(m.vocab))
    for (let i = t.indexOf(META, 1); i >= 0; i = t.indexOf(META, i + 1))
      if (!t.slice(0, i).endsWith(META)) throw new Error(`cut: token ${JSON.stringify(t)} holds "▁" after a character`);
  cutChecked = true;
}
const cutPreTokenizer = (text) => text.split(/(?<!\u2581)(?=\u2581)/u).filter((p) => p.length > 0);

const toIds = (tokens) =>
  tokens.map((t) => tok.added_tokens_map.get(t)?.id ?? tok.model.tokens_to_ids.get(t) ?? tok.model.unk_token_id);
const decoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
const out = [];
for (const line of fs.readFileSync(input, "utf8").split("\n")) {
  if (!line) continue;
  const item = JSON.parse(line);
  const text = item.hex !== undefined ? decoder.decode(Buffer.from(item.hex, "hex")) : item.text;
  const preTokenizer = tok.pre_tokenizer;
  if (item.cut) {
    checkCut();
    tok.pre_tokenizer = cutPreTokenizer;
  }
  const enc = tok.encode(text, { add_special_tokens: false });
  tok.pre_tokenizer = preTokenizer;
  const special = tok.post_processor ? tok.post_processor(enc.tokens, null, true).tokens : enc.tokens;
  const specialIds = toIds(special);
  if (item.full) {
    const full = tok.encode(text, { add_special_tokens: true }).ids;
    if (JSON.stringify(full) !== JSON.stringify(specialIds)) throw new Error(`special ids differ for ${line}`);
  }
  const decoded = enc.ids.length === 0 ? "" : tok.decode(enc.ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  const o = { ids: enc.ids, special_ids: specialIds, text: decoded };
  if (item.hex !== undefined) o.input = text;
  out.push(JSON.stringify(o));
}
process.stdout.write(out.join("\n") + "\n");
