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
