#!/usr/bin/env python3
"""Checks Troupe's GPT-2 tokenizer (bench/tokenize_tool) against a reference, id for id.

References, built from the bundled vocab.json/merges.txt (no network):
  hf      HF `tokenizers`: a BPE model with the ByteLevel pre-tokenizer (add_prefix_space=False),
          with "<|endoftext|>" as an added special token for --special recognize and without
          for --special as_text; plus transformers' GPT2TokenizerFast(vocab_file, merges_file),
          whose encode(text) default is reported against both.
  openai  OpenAI's encoder.py algorithm (Python `regex` + rank-ordered BPE), when `tokenizers`
          is not installed. It never treats "<|endoftext|>" as special.

What is compared:
  1. a list of hard strings (whitespace runs, contractions, digits, scripts, emoji, marks,
     exotic spaces, "<|endoftext|>") in both --special modes;
  2. every document of the given corpora (both modes), with decode(encode(text)) == text;
  3. --fuzz N random strings joined from an alphabet of hard pieces (both modes);
  4. the pre-tokenizer's pieces for a sweep over 204k code points (each in a fixed context),
     which checks the letter/number/whitespace class of every code point.

  python3 scripts/check_tokenizer_hf.py --tool build-tok/bench/tokenize_tool [--out DIR]

With --tokenizer-model PATH (repeatable: a folder holding tokenizer.json, or the file) it checks
Troupe's HF tokenizer instead (tokenize_tool --tokenizer-model) against HF `tokenizers`'
Tokenizer.from_file: ids with add_special_tokens False and True, and decode(ids,
skip_special_tokens=False), on the hard strings, tests/data/tokenizer_hard_cases.jsonl, each added
token of the tokenizer in text, --fuzz strings (the alphabet plus the added tokens) and the
corpora; also Tokenizer.encode's single-thread speed, for scale:

  python3 scripts/check_tokenizer_hf.py --tool build/bench/tokenize_tool \
      --tokenizer-model assets/tokenizers/llama3 --tokenizer-model assets/tokenizers/qwen3 \
      --tokenizer-model assets/tokenizers/mistral

Exit status 1 when anything differs. With --out (default $OUT), writes report.json (the hard
strings with the reference ids, which tests/data/tokenizer_test.cpp holds; for sweep
mismatches the reference's class ranges), mismatches.txt, and sweep_reference.json.gz, which
--sweep-reference FILE compares against later on a machine without HF.

Last run (tokenizers 0.23.2, transformers 5.17.0, H200 host): 150 hard strings, 371 documents
(2.37M tokens), 20000 fuzz strings, each in both modes, 0 mismatches; GPT2TokenizerFast.encode
equal to --special recognize on all hard strings; sweep: 5004 mismatches (code points new in
Unicode 16.0), 0 against that run's saved pieces once data/gpt2_pretokenize.cpp got its table.
"""
import argparse
import collections
import gzip
import json
import os
import random
import subprocess
import sys
import tempfile

HARD_STRINGS = [
    # basics
    "Hello world", " Hello", "Hello", "hello world!", "Hello, World! How are you?",
    "The quick brown fox jumps over the lazy dog.",
    # whitespace runs
    "a  b", "a   b", "a    b", "a\n\n b", "a\n\nb", "a \n b", "a\n \nb", "trailing   ", "trailing ",
    "   leading", " ", "  ", "   ", "\n", "\n\n", "\t", "\t\tx", "a\t b", "a \tb", "x\r\n\r\ny",
    "line1\nline2\n", "tabs\t\t\tand  spaces \t \n", "a" + " " * 50 + "b", "\n" * 20, "x" + "\t \n" * 10 + "y",
    "end with newline\n", "  two leading", "\n\nparagraph\n\n\n",
    # contractions and apostrophes
    "don't", "I'm", "we'll", "they've", "you're", "he'd", "it's", "IT'S", "I'M", "DON'T", "'s", "'stop",
    "''s", "rock'n'roll", "don\u2019t", "it\u2019s", "O'Neil's", "'", "a'b", " 's", "'re'", "'ll've",
    "dogs' tails", "'d'", "x'S y'T",
    # digits
    "12345", "3.14159", "1,000,000", "2024-01-01", " 42", "x42y", "42nd", "\uff11\uff12\uff13",
    "\u0663\u0664\u0665", "\u216b", "\u00bd \u00bc", "\u00b2\u00b3", "1" * 40, "$100.00 and 50%",
    # accents, combining marks
    "caf\u00e9", "cafe\u0301", "na\u00efve r\u00e9sum\u00e9", "\u00c6r\u00f8sk\u00f8bing", "Stra\u00dfe",
    "\u0130stanbul", "e\u0301\u0301\u0301", " \u0301", "a\u0308o\u0308u\u0308",
    # scripts
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8", "\u4e2d\u6587 \u6d4b\u8bd5",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8", "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!",
    "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5", "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645", "\u0939\u093f\u0928\u094d\u0926\u0940",
    "\u0e44\u0e17\u0e22", "mixed English \u0438 \u0440\u0443\u0441\u0441\u043a\u0438\u0439 \u65e5\u672c",
    "\U0001d518\U0001d52b\U0001d526\U0001d520\U0001d52c\U0001d521\U0001d522", "\u01c5 titlecase", "\u1f88",
    # emoji
    "\U0001f600", "\U0001f44d\U0001f3fd", "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",
    "\U0001f1fa\U0001f1f8", "a\U0001f600b", " \U0001f600 ", "\u2764\ufe0f", "I \u2764\ufe0f NY",
    # exotic spaces and controls
    "non\u00a0breaking", "a\u00a0\u00a0b", "ideographic\u3000space", "a\u3000 b", "en\u2002space",
    "line\u2028sep", "para\u2029sep", "nel\u0085x", "zw\u200bsp", "bom\ufeffx", "mvs\u180ex",
    "x\u001cy\u001dz\u001ey\u001fw", "\x0b\x0c", "a\x0b b", "\u1680ogham", "\u205fmath", "\u202fnarrow",
    "\u0000null", "ctrl\x01\x02\x7f", "soft\u00adhyphen",
    # special token
    "<|endoftext|>", "a<|endoftext|>b", "Hello <|endoftext|> world", "<|endoftext|><|endoftext|>",
    "<|endoftext", "<|endoftext|>\n\nNext", " <|endoftext|>", "<|ENDOFTEXT|>",
    # punctuation, code, urls
    "http://example.com/path?q=1&r=2", "foo@bar.com", "#hashtag @mention", "C++ and C#", "==> --- ***",
    "...", "!!!???", "(parenthesized)", "[1, 2, 3]", "{\"json\": true}", "def f(x):\n    return x  # ok\n",
    "\u201cquoted\u201d \u2014 dash \u2013 en", "\u00ab\u00bb\u2039\u203a",
    # long pieces (past the word cache and the scan merge loop)
    "x" * 300, "ab" * 200, "1" * 1000, " " * 500, "=" * 129, "\u00e9" * 100,
]

FUZZ_ALPHABET = [
    "a", "b", "Z", "x", "\u00e9", "\u00df", "\u0436", "\u65e5", "\u672c", "\ud55c", "\u0627", "\u01c5", "1", "2", "0",
    "\u0663", "\u00bd", "\u216b", " ", " ", " ", "  ", "\t", "\n", "\n\n", "\r\n", "\u00a0", "\u3000", "\u2028", "\x0b",
    "\x1c", "\u0085", "\u200b", "'", "'", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "\u2019", ".", ",", "!", "?",
    "-", "_", "(", ")", "\"", "#", "$", "\u20ac", "\U0001f600", "\U0001f44d\U0001f3fd", "\u200d", "\u0301", "\ufe0f",
    "<|endoftext|>", "<|", "|>", "endoftext", "\x00", "\x7f", "the", " the", "ing", "don", "1999", " 42",
]

SWEEP_RANGES = [(0x0, 0xD800), (0xE000, 0x323B0), (0xE0000, 0xE01F0), (0xF0000, 0xF0010), (0x10FFF0, 0x110000)]


def sweep_text(cp):
    c = chr(cp)
    return "a" + c + "1" + c + "." + c + " " + c + c + "\n" + c + "'s" + c


def write_jsonl(path, texts):
    with open(path, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")


def run_tool(tool, jsonl, special, pretokenize=False, roundtrip=False, vocab=None, merges=None):
    cmd = [tool, "--encode-jsonl", jsonl, "--special", special]
    if vocab:
        cmd += ["--vocab-file", vocab, "--merge-file", merges]
    if pretokenize:
        cmd.append("--pretokenize")
    if roundtrip:
        cmd.append("--check-roundtrip")
    p = subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8")
    if p.returncode != 0:
        print(f"tool failed ({' '.join(cmd)}):\n{p.stderr[-4000:]}", file=sys.stderr)
    lines = p.stdout.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if pretokenize:
        return [l.split(" ") if l else [] for l in lines], p.returncode
    return [[int(x) for x in l.split()] for l in lines], p.returncode


# --- references ---------------------------------------------------------------------------

class HfReference:
    name = "hf"

    def __init__(self, vocab, merges):
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers
        import tokenizers

        def make(special):
            t = Tokenizer(models.BPE.from_file(vocab, merges))
            t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
            t.decoder = decoders.ByteLevel()
            if special:
                t.add_special_tokens(["<|endoftext|>"])
            return t

        self.version = f"tokenizers {tokenizers.__version__}"
        self.tok = {"recognize": make(True), "as_text": make(False)}
        self.fast = None
        try:
            # from_pretrained on a local folder works in transformers 4 and 5 (5 ignores the
            # vocab_file=/merges_file= constructor arguments and builds an empty vocabulary).
            import shutil
            import transformers
            from transformers import GPT2TokenizerFast
            folder = tempfile.mkdtemp()
            shutil.copy(vocab, os.path.join(folder, "vocab.json"))
            shutil.copy(merges, os.path.join(folder, "merges.txt"))
            self.fast = GPT2TokenizerFast.from_pretrained(folder)
            self.version += f", transformers {transformers.__version__}"
        except Exception as e:  # report, carry on with tokenizers alone
            print(f"GPT2TokenizerFast unavailable: {e!r}")

    def encode(self, texts, special):
        return [e.ids for e in self.tok[special].encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids):
        return self.tok["as_text"].decode(ids)

    def pretokenize(self, text):
        return [p for p, _ in self.tok["as_text"].pre_tokenizer.pre_tokenize_str(text)]


def char_class(ref, c):
    """The regex class of character c as `ref`'s pre-tokenizer sees it: L, N, space or other."""
    if len(ref.pretokenize("a" + c)) == 1:
        return "L"
    if len(ref.pretokenize("1" + c)) == 1:
        return "N"
    if len(ref.pretokenize("x" + c + c + "x")) == 3 and len(ref.pretokenize(c + c + " x")) == 2:
        return "space"
    return "other"


def class_ranges(cps, classes):
    """[[first, last, class], ...] over runs of consecutive code points of one class."""
    out = []
    for cp, k in zip(cps, classes):
        if out and out[-1][1] == cp - 1 and out[-1][2] == k:
            out[-1][1] = cp
        else:
            out.append([cp, cp, k])
    return out


class OpenAiReference:
    """encoder.py from openai/gpt-2, restated: no special tokens."""
    name = "openai"

    def __init__(self, vocab, merges):
        import regex
        self.version = f"regex {regex.__version__}"
        self.pat = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
        self.encoder = json.load(open(vocab, encoding="utf-8"))
        self.decoder = {v: k for k, v in self.encoder.items()}
        lines = open(merges, encoding="utf-8").read().split("\n")
        pairs = [tuple(l.split()) for l in lines if l and not l.startswith("#version")]
        self.ranks = dict(zip(pairs, range(len(pairs))))
        bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
            list(range(ord("\xae"), ord("\xff") + 1))
        cs = bs[:]
        n = 0
        for b in range(256):
            if b not in bs:
                bs.append(b)
                cs.append(256 + n)
                n += 1
        self.byte_encoder = dict(zip(bs, map(chr, cs)))
        self.byte_decoder = {v: k for k, v in self.byte_encoder.items()}
        self.cache = {}

    def bpe(self, token):
        if token in self.cache:
            return self.cache[token]
        word = list(token)
        while len(word) > 1:
            pairs = {(word[i], word[i + 1]) for i in range(len(word) - 1)}
            bigram = min(pairs, key=lambda p: self.ranks.get(p, float("inf")))
            if bigram not in self.ranks:
                break
            first, second = bigram
            new, i = [], 0
            while i < len(word):
                if i < len(word) - 1 and word[i] == first and word[i + 1] == second:
                    new.append(first + second)
                    i += 2
                else:
                    new.append(word[i])
                    i += 1
            word = new
        self.cache[token] = word
        return word

    def encode(self, texts, special):
        out = []
        for text in texts:
            ids = []
            for tok in self.pat.findall(text):
                ids.extend(self.encoder[t] for t in self.bpe("".join(self.byte_encoder[b] for b in tok.encode("utf-8"))))
            out.append(ids)
        return out

    def decode(self, ids):
        return bytearray(self.byte_decoder[c] for c in "".join(self.decoder[i] for i in ids)).decode("utf-8", "replace")

    def pretokenize(self, text):
        return ["".join(self.byte_encoder[b] for b in t.encode("utf-8")) for t in self.pat.findall(text)]


def run_hf_tool(tool, model, jsonl, *flags):
    """tokenize_tool --tokenizer-model: one list of ids (or, with --decode, one string) per line."""
    cmd = [tool, "--tokenizer-model", model, "--encode-jsonl", jsonl, *flags]
    p = subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8")
    if p.returncode != 0:
        raise RuntimeError(f"tool failed ({' '.join(cmd)}):\n{p.stderr[-4000:]}")
    lines = p.stdout.split("\n")[:-1]
    if "--decode" in flags:
        return [json.loads(l) for l in lines]
    return [[int(x) for x in l.split()] for l in lines]


def check_hf_model(args, model, corpora, tmp):
    """Troupe's HfTokenizer against tokenizers.Tokenizer.from_file; returns (summary, mismatch lines)."""
    import time
    from tokenizers import Tokenizer
    import tokenizers
    json_path = model if model.endswith(".json") else os.path.join(model, "tokenizer.json")
    ref = Tokenizer.from_file(json_path)
    added = [t["content"] for t in json.load(open(json_path, encoding="utf-8"))["added_tokens"]]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    hard_file = os.path.join(root, "tests/data/tokenizer_hard_cases.jsonl")
    groups = {"hard": HARD_STRINGS + [json.loads(l)["text"] for l in open(hard_file, encoding="utf-8") if l.strip()],
              "added": [s for t in added for s in (t, "a" + t + "b", " " + t + " ", t + t, "x\n" + t + "\n\ny")]}
    if args.fuzz > 0:
        rng = random.Random(1234)
        alphabet = FUZZ_ALPHABET + added[:64] + ["\u2581", "\u2581\u2581", "<0x0A>"]
        groups["fuzz"] = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 16))) for _ in range(args.fuzz)]
    for path in corpora:
        groups[os.path.basename(path)] = [json.loads(l)["text"] for l in open(path, encoding="utf-8") if l.strip()]
    summary = {"reference": f"tokenizers {tokenizers.__version__}"}
    mismatches = []
    for name, texts in groups.items():
        jsonl = os.path.join(tmp, f"hf_{name}.jsonl")
        write_jsonl(jsonl, texts)
        ours = {"plain": run_hf_tool(args.tool, model, jsonl), "special": run_hf_tool(args.tool, model, jsonl,
                                                                                      "--add-special-tokens"),
                "decode": run_hf_tool(args.tool, model, jsonl, "--decode")}
        refs = {"plain": [e.ids for e in ref.encode_batch(texts, add_special_tokens=False)],
                "special": [e.ids for e in ref.encode_batch(texts, add_special_tokens=True)]}
        refs["decode"] = ref.decode_batch(refs["plain"], skip_special_tokens=False)
        bad = 0
        for i, text in enumerate(texts):
            for what in ("plain", "special", "decode"):
                a = ours[what][i] if i < len(ours[what]) else None
                b = refs[what][i]
                if a != b:
                    bad += 1
                    if isinstance(b, list) and a is not None:
                        k = first_diff(a, b)
                        a, b = a[max(0, k - 3):k + 5], b[max(0, k - 3):k + 5]
                    mismatches.append(f"{model} {name}[{i}] {what} {text[:80]!r}: ours {str(a)[:200]} ref {str(b)[:200]}")
        summary[name] = {"texts": len(texts), "mismatched": bad}
        print(f"{model} {name}: {len(texts)} texts, mismatched {bad}")
        if name in map(os.path.basename, corpora):
            t0 = time.perf_counter()
            for t in texts:
                ref.encode(t, add_special_tokens=False)
            dt = time.perf_counter() - t0
            mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
            summary[name]["hf_encode_MBps_1thread"] = round(mb / dt, 2)
            print(f"  HF Tokenizer.encode one document at a time: {mb / dt:.1f} MB/s")
    return summary, mismatches


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tool", required=True, help="path of bench/tokenize_tool")
    ap.add_argument("--vocab", default="assets/gpt2/gpt2-vocab.json")
    ap.add_argument("--merges", default="assets/gpt2/gpt2-merges.txt")
    ap.add_argument("--corpus", action="append", help="JSON lines corpus (repeatable)")
    ap.add_argument("--reference", choices=["auto", "hf", "openai"], default="auto")
    ap.add_argument("--no-sweep", action="store_true", help="skip the code point sweep")
    ap.add_argument("--sweep-reference", help="compare the sweep with sweep_reference.json.gz of an earlier run")
    ap.add_argument("--fuzz", type=int, default=20000, help="random strings from a hard alphabet (0: none)")
    ap.add_argument("--out", default=os.environ.get("OUT"), help="folder for report.json and mismatches.txt")
    ap.add_argument("--tokenizer-model", action="append", default=[],
                    help="check this HF tokenizer (folder with tokenizer.json, or the file) instead of GPT-2")
    args = ap.parse_args()
    corpora = args.corpus or ["assets/corpora/moby-dick.jsonl", "assets/corpora/sotu.jsonl"]

    if args.tokenizer_model:
        tmp = tempfile.mkdtemp()
        report, mismatches = {}, []
        for model in args.tokenizer_model:
            report[model], bad = check_hf_model(args, model, corpora, tmp)
            mismatches += bad
        for m in mismatches[:60]:
            print("  " + m)
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            with open(os.path.join(args.out, "report_hf_models.json"), "w", encoding="utf-8") as f:
                json.dump(report, f, ensure_ascii=True, indent=1)
            with open(os.path.join(args.out, "mismatches_hf_models.txt"), "w", encoding="utf-8") as f:
                f.write("\n".join(mismatches) + "\n")
        print("FAILED" if mismatches else "OK")
        return 1 if mismatches else 0

    if args.reference in ("auto", "hf"):
        try:
            ref = HfReference(args.vocab, args.merges)
        except ImportError:
            if args.reference == "hf":
                raise
            ref = OpenAiReference(args.vocab, args.merges)
    else:
        ref = OpenAiReference(args.vocab, args.merges)
    print(f"reference: {ref.name} ({ref.version})")
    modes = ["recognize", "as_text"] if ref.name == "hf" else ["as_text"]

    report = {"reference": f"{ref.name} ({ref.version})", "hard_strings": [], "summary": {}}
    mismatches = []
    failed = False
    tmp = tempfile.mkdtemp()

    # 1. hard strings
    hard = os.path.join(tmp, "hard.jsonl")
    write_jsonl(hard, HARD_STRINGS)
    ref_ids = {m: ref.encode(HARD_STRINGS, m) for m in modes}
    ours = {m: run_tool(args.tool, hard, m, roundtrip=True, vocab=args.vocab, merges=args.merges)[0] for m in modes}
    for i, text in enumerate(HARD_STRINGS):
        entry = {"text": text}
        for m in modes:
            entry[m] = ref_ids[m][i]
            if ours[m][i] != ref_ids[m][i]:
                mismatches.append(f"hard[{i}] {m} {text!r}: ours {ours[m][i]} ref {ref_ids[m][i]}")
        report["hard_strings"].append(entry)
    n_bad = sum(1 for i in range(len(HARD_STRINGS)) if any(ours[m][i] != ref_ids[m][i] for m in modes))
    report["summary"]["hard_strings"] = {"count": len(HARD_STRINGS), "mismatched": n_bad}
    print(f"hard strings: {len(HARD_STRINGS)}, mismatched: {n_bad}")
    failed |= n_bad > 0

    if ref.name == "hf" and ref.fast is not None:
        fast_ids = [ref.fast.encode(t) for t in HARD_STRINGS]
        diff = {m: sum(1 for i in range(len(HARD_STRINGS)) if fast_ids[i] != ref_ids[m][i]) for m in modes}
        report["summary"]["GPT2TokenizerFast.encode_vs"] = diff
        report["summary"]["GPT2TokenizerFast.encode('<|endoftext|>')"] = ref.fast.encode("<|endoftext|>")
        report["summary"]["GPT2TokenizerFast.encode('a<|endoftext|>b')"] = ref.fast.encode("a<|endoftext|>b")
        print(f"GPT2TokenizerFast.encode differs from the references on: {diff} strings; "
              f"encode('<|endoftext|>') = {ref.fast.encode('<|endoftext|>')}")
    dec_bad = [i for i, t in enumerate(HARD_STRINGS) if ref.decode(ref_ids["as_text"][i]) != t]
    report["summary"]["reference_decode_mismatches"] = dec_bad

    # 2. corpora
    for path in corpora:
        texts = [json.loads(l)["text"] for l in open(path, encoding="utf-8") if l.strip()]
        for m in modes:
            ref_c = ref.encode(texts, m)
            ours_c, rc = run_tool(args.tool, path, m, roundtrip=True, vocab=args.vocab, merges=args.merges)
            bad = 0
            for d, (a, b) in enumerate(zip(ours_c, ref_c)):
                if a != b:
                    bad += 1
                    k = first_diff(a, b)
                    mismatches.append(f"{path} doc {d} {m}: first diff at token {k}: ours {a[max(0, k - 3):k + 5]} "
                                      f"ref {b[max(0, k - 3):k + 5]}")
            bad += abs(len(ours_c) - len(ref_c))
            ntok = sum(len(x) for x in ref_c)
            if ref.name == "hf" and m == "recognize":  # single-threaded reference speed, for scale
                import time
                t0 = time.perf_counter()
                for t in texts:
                    ref.tok[m].encode(t, add_special_tokens=False)
                dt = time.perf_counter() - t0
                mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
                report["summary"][f"{os.path.basename(path)}:hf_encode_MBps_1thread"] = round(mb / dt, 2)
                print(f"{path}: HF Tokenizer.encode one document at a time: {mb / dt:.1f} MB/s")
            report["summary"][f"{os.path.basename(path)}:{m}"] = {
                "documents": len(texts), "tokens": ntok, "mismatched": bad, "roundtrip_rc": rc}
            print(f"{path} [{m}]: {len(texts)} documents, {ntok} tokens, mismatched {bad}, round-trip rc {rc}")
            failed |= bad > 0 or rc != 0

    # 2b. random strings over an alphabet of hard pieces
    if args.fuzz > 0:
        rng = random.Random(1234)
        fuzz = ["".join(rng.choice(FUZZ_ALPHABET) for _ in range(rng.randint(1, 16))) for _ in range(args.fuzz)]
        path = os.path.join(tmp, "fuzz.jsonl")
        write_jsonl(path, fuzz)
        for m in modes:
            ref_f = ref.encode(fuzz, m)
            ours_f, rc = run_tool(args.tool, path, m, roundtrip=True, vocab=args.vocab, merges=args.merges)
            bad = [i for i in range(len(fuzz)) if i >= len(ours_f) or ours_f[i] != ref_f[i]]
            for i in bad[:30]:
                mismatches.append(f"fuzz[{i}] {m} {fuzz[i]!r}: ours {ours_f[i] if i < len(ours_f) else None} "
                                  f"ref {ref_f[i]}")
            report["summary"][f"fuzz:{m}"] = {"strings": len(fuzz), "mismatched": len(bad), "roundtrip_rc": rc}
            print(f"fuzz [{m}]: {len(fuzz)} strings, mismatched {len(bad)}, round-trip rc {rc}")
            failed |= len(bad) > 0 or rc != 0

    # 3. code point sweep of the pre-tokenizer
    if not args.no_sweep:
        cps = [cp for lo, hi in SWEEP_RANGES for cp in range(lo, hi)]
        texts = [sweep_text(cp) for cp in cps]
        sweep = os.path.join(tmp, "sweep.jsonl")
        write_jsonl(sweep, texts)
        ours_p, _ = run_tool(args.tool, sweep, "as_text", pretokenize=True, vocab=args.vocab, merges=args.merges)
        if args.sweep_reference:  # pieces saved by an earlier run with the real reference
            with gzip.open(args.sweep_reference, "rt", encoding="utf-8") as f:
                saved = json.load(f)
            ref_p = saved["pieces"]
            report["summary"]["sweep_reference"] = saved["reference"]
        else:
            ref_p = [ref.pretokenize(t) for t in texts]
            if args.out:
                os.makedirs(args.out, exist_ok=True)
                with gzip.open(os.path.join(args.out, "sweep_reference.json.gz"), "wt", encoding="utf-8") as f:
                    json.dump({"reference": report["reference"], "pieces": ref_p}, f)
        bad_cps = []
        for cp, text, a, b in zip(cps, texts, ours_p, ref_p):
            if a != b:
                bad_cps.append(cp)
                if len(bad_cps) <= 200:
                    mismatches.append(f"sweep U+{cp:04X}: ours {a} ref {b}")
        import unicodedata
        ref_classes = ["?" if args.sweep_reference else char_class(ref, chr(c)) for c in bad_cps]
        report["summary"]["sweep"] = {
            "code_points": len(cps), "mismatched": len(bad_cps),
            "python_unicodedata": unicodedata.unidata_version,
            "python_categories_of_mismatched": dict(collections.Counter(unicodedata.category(chr(c)) for c in bad_cps)),
            "reference_class_ranges_of_mismatched": [[f"U+{a:04X}", f"U+{b:04X}", k]
                                                     for a, b, k in class_ranges(bad_cps, ref_classes)]}
        print(f"code point sweep: {len(cps)} code points, mismatched {len(bad_cps)}"
              + (f" (first: {', '.join(f'U+{c:04X}' for c in bad_cps[:20])})" if bad_cps else ""))
        failed |= len(bad_cps) > 0

    for m in mismatches[:60]:
        print("  " + m)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "report.json"), "w", encoding="utf-8") as f:
            json.dump(report, f, ensure_ascii=True, indent=1)
        with open(os.path.join(args.out, "mismatches.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(mismatches) + "\n")
    print("FAILED" if failed else "OK")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
