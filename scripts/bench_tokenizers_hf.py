#!/usr/bin/env python3
"""HF `tokenizers` (Rust) GPT-2 throughput on the corpora bench/preprocess_bench uses, and the
ratio of Troupe's numbers to it.

The reference: a BPE model from the bundled vocab.json/merges.txt with the ByteLevel
pre-tokenizer (add_prefix_space=False), i.e. GPT2TokenizerFast's pipeline, encoding the texts
(already in memory) with Tokenizer.encode_batch. It runs twice, each in a subprocess: with
parallelism off (TOKENIZERS_PARALLELISM=false, RAYON_NUM_THREADS=1: one thread) and on (all
cores). Every run builds a fresh Tokenizer (empty BPE cache); the best of --repeats counts;
building the tokenizer is not timed.

  build/bench/preprocess_bench --copies 8 --benchmark_repetitions=3 \
      --benchmark_out=/tmp/troupe.json --benchmark_out_format=json
  python3 scripts/bench_tokenizers_hf.py --copies 8 --troupe-json /tmp/troupe.json

Troupe's number for a case is its best repetition (Google Benchmark's JSON, one entry per
repetition), as HF's is its best of --repeats.

With --check PREFIX JSONL it also reads the dataset `troupe preprocess --append-eod` wrote for
JSONL (its .idx/.bin parsed here with struct, from Megatron's format description) and checks that
document d is HF's encoding of line d's text followed by the EOD id 50256.

Troupe's "tokenize" rows are the same work (texts in memory, fresh caches). Its "preprocess"
rows do more (read and parse the JSON lines, write .bin/.idx, load the tokenizer), so their
ratio to HF's tokenize-only time understates Troupe.

With --tokenizer-model PATH (repeatable: a folder holding tokenizer.json, or the file) it also
times HF's Tokenizer.from_file(tokenizer.json).encode_batch(texts, add_special_tokens=False), and
with --troupe-tokenizer-json (bench/tokenizer_bench's --benchmark_out JSON) gives the ratio of
Troupe's hf/<name>/encode_cold rows to it. tokenizer_bench reads one corpus once, so run both on
the same one:

  build/bench/tokenizer_bench --corpus assets/corpora/sotu.jsonl --threads 1,$(nproc) \
      --benchmark_filter='hf/' --benchmark_repetitions=3 \
      --benchmark_out=/tmp/tok.json --benchmark_out_format=json
  python3 scripts/bench_tokenizers_hf.py --corpora assets/corpora/sotu.jsonl --copies 1 \
      --tokenizer-model assets/tokenizers/llama3 --tokenizer-model assets/tokenizers/qwen3 \
      --tokenizer-model assets/tokenizers/mistral --troupe-tokenizer-json /tmp/tok.json
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_texts(corpora, copies):
    texts = []
    for _ in range(copies):
        for path in corpora:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    if line.strip():
                        texts.append(json.loads(line)["text"])
    return texts


def tokenizer_json(model):
    return model if model.endswith(".json") else os.path.join(model, "tokenizer.json")


def worker(args):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    import tokenizers

    texts = load_texts(args.corpora, args.copies)
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    best = None
    tokens = 0
    for _ in range(args.repeats):
        if args.model:  # an HF tokenizer.json, as Troupe's HfTokenizer encodes (no post-processor tokens)
            tok = Tokenizer.from_file(tokenizer_json(args.model))
            t0 = time.perf_counter()
            encs = tok.encode_batch(texts, add_special_tokens=False)
            s = time.perf_counter() - t0
            tokens = sum(len(e.ids) for e in encs)
            best = s if best is None else min(best, s)
            continue
        tok = Tokenizer(models.BPE.from_file(args.vocab, args.merges))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        t0 = time.perf_counter()
        encs = tok.encode_batch(texts)
        s = time.perf_counter() - t0
        tokens = sum(len(e.ids) for e in encs)
        best = s if best is None else min(best, s)
    print(json.dumps({"seconds": best, "bytes": nbytes, "documents": len(texts), "tokens": tokens,
                      "version": tokenizers.__version__}))


def read_troupe(path):
    """preprocess_bench's Google Benchmark JSON -> (copies, rows): per case (preprocess or tokenize,
    threads) its best repetition's bytes/s and the tokens of one pass."""
    to_s = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    with open(path) as f:
        data = json.load(f)
    best = {}
    for r in data["benchmarks"]:
        if r["run_type"] != "iteration" or r.get("error_occurred") or r.get("skipped"):
            continue
        parts = r["run_name"].split("/")  # preprocess/threads:N/real_time
        threads = [int(p.split(":")[1]) for p in parts if p.startswith("threads:")]
        if parts[0] not in ("preprocess", "tokenize") or not threads:
            continue
        seconds = r["real_time"] * to_s[r["time_unit"]]  # one pass
        row = {"what": parts[0], "threads": threads[0], "bytes_per_s": r["bytes"], "tokens": round(r["tokens"] * seconds)}
        key = (row["what"], row["threads"])
        if key not in best or row["bytes_per_s"] > best[key]["bytes_per_s"]:
            best[key] = row
    return int(data.get("context", {}).get("copies", -1)), list(best.values())


def read_indexed_dataset(prefix):
    """Megatron's MMIDIDX .idx/.bin, read from the format description (no Troupe code)."""
    import struct
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    assert idx[:9] == b"MMIDIDX\x00\x00", "bad magic"
    version, code, nseq, ndoc = struct.unpack_from("<QBQQ", idx, 9)
    assert version == 1, version
    fmt, size = {8: ("H", 2), 4: ("i", 4)}[code]
    lengths = struct.unpack_from(f"<{nseq}i", idx, 34)
    pointers = struct.unpack_from(f"<{nseq}q", idx, 34 + 4 * nseq)
    docs = struct.unpack_from(f"<{ndoc}q", idx, 34 + 12 * nseq)
    assert len(idx) == 34 + 12 * nseq + 8 * ndoc, "size"
    with open(prefix + ".bin", "rb") as f:
        data = f.read()
    out = []
    for d in range(ndoc - 1):
        ids = []
        for s in range(docs[d], docs[d + 1]):
            ids.extend(struct.unpack_from(f"<{lengths[s]}{fmt}", data, pointers[s]))
        out.append(ids)
    return out


def check_dataset(args, prefix, jsonl):
    from tokenizers import Tokenizer, models, pre_tokenizers
    tok = Tokenizer(models.BPE.from_file(args.vocab, args.merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    texts = load_texts([jsonl], 1)
    docs = read_indexed_dataset(prefix)
    assert len(docs) == len(texts), f"{len(docs)} documents, {len(texts)} lines"
    bad = [d for d, (t, e) in enumerate(zip(texts, tok.encode_batch(texts))) if docs[d] != e.ids + [50256]]
    print(f"check {prefix}: {len(docs)} documents, {sum(map(len, docs))} tokens, "
          f"{'all equal to HF + EOD' if not bad else f'{len(bad)} differ, first {bad[:5]}'}")
    return not bad


def read_troupe_tokenizer_bench(path):
    """tokenizer_bench's Google Benchmark JSON -> {(name, threads): best bytes/s} of hf/<name>/encode_cold."""
    with open(path) as f:
        data = json.load(f)
    best = {}
    for r in data["benchmarks"]:
        if r["run_type"] != "iteration" or r.get("error_occurred") or r.get("skipped"):
            continue
        parts = r["run_name"].split("/")  # hf/<name>/encode_cold/threads:N/real_time
        if len(parts) < 4 or parts[0] != "hf" or parts[2] != "encode_cold":
            continue
        key = (parts[1], int(parts[3].split(":")[1]))
        best[key] = max(best.get(key, 0.0), r["bytes"])
    return best


def run_mode(args, parallel, model=None):
    env = dict(os.environ)
    if parallel:
        env["TOKENIZERS_PARALLELISM"] = "true"
        env.pop("RAYON_NUM_THREADS", None)
    else:
        env["TOKENIZERS_PARALLELISM"] = "false"
        env["RAYON_NUM_THREADS"] = "1"
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--copies", str(args.copies),
           "--repeats", str(args.repeats), "--vocab", args.vocab, "--merges", args.merges, "--corpora", *args.corpora]
    if model:
        cmd += ["--model", model]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpora", nargs="+", default=[os.path.join(ROOT, "assets/corpora/moby-dick.jsonl"),
                                                    os.path.join(ROOT, "assets/corpora/sotu.jsonl")])
    p.add_argument("--copies", type=int, default=8, help="times the corpora are repeated (as preprocess_bench)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--vocab", default=os.path.join(ROOT, "assets/gpt2/gpt2-vocab.json"))
    p.add_argument("--merges", default=os.path.join(ROOT, "assets/gpt2/gpt2-merges.txt"))
    p.add_argument("--troupe-json", help="preprocess_bench's --benchmark_out JSON, for the ratios")
    p.add_argument("--check", nargs=2, action="append", metavar=("PREFIX", "JSONL"), default=[],
                   help="check a `troupe preprocess --append-eod` output against HF (repeatable)")
    p.add_argument("--tokenizer-model", action="append", default=[],
                   help="also time this HF tokenizer.json (a folder holding it, or the file; repeatable)")
    p.add_argument("--troupe-tokenizer-json", help="tokenizer_bench's --benchmark_out JSON, for the HF models' ratios")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)

    if args.tokenizer_model:
        troupe_hf = read_troupe_tokenizer_bench(args.troupe_tokenizer_json) if args.troupe_tokenizer_json else {}
        print(f"HF tokenizer.json models, encode_batch(add_special_tokens=False), {os.cpu_count()} cores:")
        print(f"{'model':<28} {'threads':>7} {'seconds':>9} {'MB/s':>9} {'tokens':>10}  troupe ratio")
        for model in args.tokenizer_model:
            name = os.path.basename(os.path.dirname(os.path.abspath(tokenizer_json(model))))
            for n, parallel in ((1, False), (os.cpu_count(), True)):
                r = run_mode(args, parallel, model)
                mbps = r["bytes"] / 1e6 / r["seconds"]
                ours = troupe_hf.get((name, n))
                ratio = f"{ours / 1e6:8.1f} MB/s = {ours / 1e6 / mbps:5.2f} x HF" if ours else ""
                print(f"{name:<28} {n:>7} {r['seconds']:>9.3f} {mbps:>9.1f} {r['tokens']:>10}  {ratio}")
        if not args.troupe_json and not args.check:
            return 0

    ok = all([check_dataset(args, prefix, jsonl) for prefix, jsonl in args.check])
    hf = {1: run_mode(args, False), os.cpu_count(): run_mode(args, True)}
    print(f"HF tokenizers {hf[1]['version']}: encode_batch over {hf[1]['documents']} documents, "
          f"{hf[1]['bytes'] / 1e6:.1f} MB of text ({args.copies} copies), {os.cpu_count()} cores")
    print(f"{'what':<22} {'threads':>7} {'seconds':>9} {'MB/s':>9} {'docs/s':>10} {'tokens/s':>12}")
    for n, r in hf.items():
        s = r["seconds"]
        print(f"{'hf encode_batch':<22} {n:>7} {s:>9.3f} {r['bytes'] / 1e6 / s:>9.1f} {r['documents'] / s:>10.0f} "
              f"{r['tokens'] / s:>12.0f}")
    if not args.troupe_json:
        return 0 if ok else 1
    copies, troupe = read_troupe(args.troupe_json)
    if copies != args.copies:
        print(f"warning: Troupe ran {copies} copies, HF {args.copies}", file=sys.stderr)
    print("ratio: Troupe MB/s over HF encode_batch MB/s (same thread count: 1, and all)")
    for r in troupe:
        n = r["threads"]
        ref = hf[1] if n == 1 else hf[os.cpu_count()]
        ratio = r["bytes_per_s"] / (ref["bytes"] / ref["seconds"])
        tok_note = ""
        if r["what"] == "tokenize" and r["tokens"] != ref["tokens"]:
            tok_note = f"  (token counts differ: {r['tokens']} vs {ref['tokens']})"
        print(f"  troupe {r['what']:<10} {n:>3} threads: {r['bytes_per_s'] / 1e6:8.1f} MB/s  "
              f"= {ratio:5.2f} x HF ({ref['bytes'] / 1e6 / ref['seconds']:.1f} MB/s){tok_note}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
