#!/usr/bin/env python3
"""Writes the text seed inputs of the fuzz targets, cut down from real files of the repository
(the bundled tokenizers and corpora, the HF config test files) so each run stays fast:
text_seeds.py OUT_DIR makes OUT_DIR/<target>/*."""
import json
import pathlib
import sys

root = pathlib.Path(__file__).resolve().parent.parent
out = pathlib.Path(sys.argv[1])


def put(target, name, text):
    d = out / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text(text, encoding="utf-8")


# JSON lines: the first documents of each corpus, their text cut short; the tokenizer's hard cases.
for corpus in sorted((root / "assets/corpora").glob("*.jsonl")):
    lines = []
    with corpus.open(encoding="utf-8") as f:
        for line, _ in zip(f, range(8)):
            doc = json.loads(line)
            doc["text"] = doc["text"][:200]
            lines.append(json.dumps(doc, ensure_ascii=False))
    put("jsonl", corpus.name, "\n".join(lines) + "\n")
hard = (root / "tests/data/tokenizer_hard_cases.jsonl").read_text(encoding="utf-8").splitlines()
for i in range(0, len(hard), 20):
    put("jsonl", f"hard_cases_{i}.jsonl", "\n".join(hard[i:i + 20]) + "\n")

# HF config.json: the test files as they are.
for cfg in sorted((root / "tests/model/hf/configs").glob("*.json")):
    put("hf_config", cfg.name, cfg.read_text(encoding="utf-8"))

# tokenizer.json: each bundled tokenizer with its vocabulary cut to the first ids and the merges
# among them; chat templates: each tokenizer_config.json's template.
for tok_dir in sorted((root / "assets/tokenizers").iterdir()):
    if not tok_dir.is_dir():
        continue
    tok = json.loads((tok_dir / "tokenizer.json").read_text(encoding="utf-8"))
    model = tok["model"]
    vocab = {k: v for k, v in model["vocab"].items() if v < 400}
    merges = []
    for m in model.get("merges", []):
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
    model["vocab"], model["merges"] = vocab, merges
    tok["added_tokens"] = tok["added_tokens"][:4]
    put("hf_tokenizer", tok_dir.name + ".json", json.dumps(tok, ensure_ascii=False))
    config = json.loads((tok_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    template = config.get("chat_template")
    if isinstance(template, str):
        put("chat_template", tok_dir.name + ".jinja", template)

# Config files: TOML (--config) and Megatron's YAML (--yaml-cfg).
put("config_file", "train.toml",
    "# model\nnum_layers = 2\nhidden-size = 64\n[train]\nbf16 = true\n"
    "data_path = [\"0.3\", 'a', \"0.7\", b]\n[serve]\nport = 8000\n")
put("config_file", "megatron.yaml",
    "language_model:\n  num_layers: 2\n  hidden_size: 64\nmodel_parallel:\n  tensor_model_parallel_size: 1\n"
    "bf16: True\ndata_path: [\"0.5\", a, \"0.5\", b]\nseed: null\n")

# troupe serve's request bodies (api_body): the ones tests/node/openai_clients.mjs,
# tests/actors/serve/openai_fields_test.cpp and chat_api_test.cpp send, accepted and refused.
api_bodies = {
    "completion_logprobs.json": {"model": "troupe", "prompt": "Hello there", "max_tokens": 6, "temperature": 0,
                                 "logprobs": 2, "frequency_penalty": 0.5, "presence_penalty": 0.1,
                                 "logit_bias": {"13": 1}, "user": "u", "seed": 3},
    "completion_ids.json": {"model": "troupe", "prompt": [[15496, 612], "x"], "max_tokens": 3, "temperature": 0,
                            "n": 2},
    "completion_stream.json": {"model": "troupe", "prompt": "Hello there", "max_tokens": 6, "stream": True,
                               "stream_options": {"include_usage": True}, "logit_bias": {"13": 1}, "seed": 3},
    "completion_vllm.json": {"prompt": "Hi", "max_tokens": 5, "temperature": 0, "logit_bias": {"50256": 100},
                             "min_tokens": 2, "ignore_eos": False, "stop_token_ids": [13], "stop": ["\n", "."],
                             "repetition_penalty": 1.1, "top_k": 40, "echo": True, "best_of": 1,
                             "metadata": {"k": "v"}, "store": False, "service_tier": "auto"},
    "completion_refused.json": {"prompt": "Hi", "max_tokens": 4, "suffix": "end", "logprobs": 21,
                                "logit_bias": {"abc": 1, "5": 101}, "stop_token_ids": [-1], "top_p": 0.5},
    "chat_logprobs.json": {"model": "troupe", "messages": [{"role": "user", "content": "Name a whale."}],
                           "max_tokens": 5, "temperature": 0, "logprobs": True, "top_logprobs": 2,
                           "presence_penalty": 0.2, "store": False, "metadata": {"k": "v"},
                           "parallel_tool_calls": False},
    "chat_turns.json": {"messages": [{"role": "system", "content": "Be brief."},
                                     {"role": "user", "content": [{"type": "text", "text": "Hi"},
                                                                  {"type": "text", "text": "there"}]},
                                     {"role": "assistant", "content": "Hello."},
                                     {"role": "user", "content": "Bye"}],
                        "max_completion_tokens": 8, "temperature": 1.5, "seed": 3, "n": 3, "stream": True,
                        "stream_options": {"include_usage": True}, "chat_template_kwargs": {"enable_thinking": False},
                        "add_generation_prompt": True, "tool_choice": "none", "response_format": {"type": "text"}},
    "chat_refused.json": {"messages": [{"role": "wizard", "content": [{"type": "image_url"}]}],
                          "tools": [{"type": "function", "function": {"name": "f"}}], "max_tokens": 4,
                          "max_completion_tokens": 4, "continue_final_message": True},
    "megatron.json": {"prompts": ["Hello there", "Once upon"], "tokens_to_generate": 8, "temperature": 0.7,
                      "top_k": 4, "logprobs": True, "random_seed": 5, "stop_token": 50256},
    "megatron_refused.json": {"prompts": ["x"], "max_len": 4, "tokens_to_generate": 0, "top_p": 0.9, "top_k": 2},
}
for name, body in api_bodies.items():
    put("api_body", name, json.dumps(body))
