#!/usr/bin/env python3
"""Checks Troupe's chat-template renderer (bench/chat_template_tool) against transformers'
apply_chat_template, byte for byte, on every conversation of tests/data/chat_conversations.json
with every template Troupe tests:

  qwen3         assets/tokenizers/qwen3 (its tokenizer_config.json chat_template)
  llama3        assets/tokenizers/llama3

For each: AutoTokenizer.from_pretrained(folder) (no network), then
  tokenizer.apply_chat_template(messages, tools=..., add_generation_prompt=..., tokenize=False,
                                [chat_template=FILE's text,] **extra)
against `chat_template_tool --tokenizer-config FOLDER/tokenizer_config.json [--template FILE]`.
A conversation matches when both render the same bytes, or both raise the template's
raise_exception with the same message. Also checks that assets/tokenizers/mistral (no
chat_template) is refused by both.

  python3 scripts/check_chat_template_hf.py --tool build/bench/chat_template_tool

Prints a table; exit status 1 on any mismatch (the differing conversations are printed, and
written with both texts to $OUT/chat_template_mismatches.json when --out or $OUT is set).
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = [
    ("qwen3", "assets/tokenizers/qwen3", None),
    ("llama3", "assets/tokenizers/llama3", None),
]


def run_tool(tool, folder, template, conversations):
    cmd = [tool, "--tokenizer-config", os.path.join(ROOT, folder, "tokenizer_config.json"),
           "--conversations", conversations]
    if template:
        cmd += ["--template", os.path.join(ROOT, template)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return None, proc.stderr.strip()
    return {r["name"]: r for r in json.loads(proc.stdout)["results"]}, ""


def render_hf(tokenizer, conv, chat_template):
    import jinja2

    kwargs = dict(conv.get("extra", {}))
    if chat_template is not None:
        kwargs["chat_template"] = chat_template
    try:
        text = tokenizer.apply_chat_template(conv["messages"], tools=conv.get("tools"),
                                             add_generation_prompt=conv.get("add_generation_prompt", True),
                                             tokenize=False, **kwargs)
        return {"text": text}
    except jinja2.exceptions.TemplateError as e:
        # raise_exception() raises TemplateError itself; Jinja's own errors are subclasses.
        if type(e) is jinja2.exceptions.TemplateError:
            return {"raised": str(e)}
        return {"error": f"{type(e).__name__}: {e}"}
    except Exception as e:  # noqa: BLE001 - a template error of another kind (TypeError, ...)
        return {"error": f"{type(e).__name__}: {e}"}


def compare(hf, cpp):
    """'same', 'same-raise', 'both-fail' (an error other than raise_exception on both sides) or 'DIFF'."""
    if "text" in hf and "text" in cpp:
        return "same" if hf["text"] == cpp["text"] else "DIFF"
    if "raised" in hf and "raised" in cpp:
        return "same-raise" if hf["raised"] == cpp["raised"] else "DIFF"
    if "error" in hf and "error" in cpp:
        return "both-fail"
    return "DIFF"


def check_case(tool, key, folder, template, fixture, conversations_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(os.path.join(ROOT, folder))
    chat_template = open(os.path.join(ROOT, template), encoding="utf-8").read() if template else None
    cpp, err = run_tool(tool, folder, template, conversations_path)
    if cpp is None:
        return {"template": key, "tool_error": err, "counts": {}, "mismatches": []}
    counts, mismatches = {}, []
    for conv in fixture["conversations"]:
        hf = render_hf(tokenizer, conv, chat_template)
        mine = cpp.get(conv["name"], {"error": "missing from the tool's output"})
        verdict = compare(hf, mine)
        counts[verdict] = counts.get(verdict, 0) + 1
        if verdict == "DIFF":
            mismatches.append({"template": key, "conversation": conv["name"], "transformers": hf, "troupe": mine})
    return {"template": key, "counts": counts, "mismatches": mismatches}


def check_refusal(tool, conversations_path):
    """assets/tokenizers/mistral has no chat_template: transformers and the tool both refuse."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(os.path.join(ROOT, "assets/tokenizers/mistral"))
    hf_refuses = getattr(tokenizer, "chat_template", None) is None
    cpp, err = run_tool(tool, "assets/tokenizers/mistral", None, conversations_path)
    return hf_refuses and cpp is None and "chat_template" in err, err


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tool", default=os.path.join(ROOT, "build/bench/chat_template_tool"))
    parser.add_argument("--conversations", default=os.path.join(ROOT, "tests/data/chat_conversations.json"))
    parser.add_argument("--out", default=os.environ.get("OUT"))
    args = parser.parse_args()

    import transformers

    fixture = json.load(open(args.conversations, encoding="utf-8"))
    print(f"transformers {transformers.__version__}, {len(fixture['conversations'])} conversations")
    print(f"{'template':14s} {'same':>5s} {'raise':>6s} {'fail':>5s} {'DIFF':>5s}")
    all_mismatches, failed = [], False
    for key, folder, template in CASES:
        r = check_case(args.tool, key, folder, template, fixture, args.conversations)
        if "tool_error" in r:
            print(f"{key:14s} chat_template_tool failed: {r['tool_error']}")
            failed = True
            continue
        c = r["counts"]
        print(f"{key:14s} {c.get('same', 0):5d} {c.get('same-raise', 0):6d} {c.get('both-fail', 0):5d} "
              f"{c.get('DIFF', 0):5d}")
        all_mismatches += r["mismatches"]
    refused, message = check_refusal(args.tool, args.conversations)
    print(f"mistral (no chat_template) refused by both: {refused}" + ("" if refused else f" ({message})"))
    failed = failed or not refused or bool(all_mismatches)
    for m in all_mismatches:
        print(f"\nDIFF {m['template']} / {m['conversation']}")
        print("  transformers:", json.dumps(m["transformers"], ensure_ascii=False)[:2000])
        print("  troupe:      ", json.dumps(m["troupe"], ensure_ascii=False)[:2000])
    if args.out and all_mismatches:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "chat_template_mismatches.json"), "w", encoding="utf-8") as f:
            json.dump(all_mismatches, f, ensure_ascii=False, indent=1)
    print("chat templates:", "MISMATCH" if failed else "all identical")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
