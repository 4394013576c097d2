#!/usr/bin/env python3
"""Troupe's reliability report (issue 23, docs/reliability.md).

Runs hostile inputs against the built `troupe` on tiny CPU setups and classifies every outcome:

  clear error         the documented exit code (1 or 2; an HTTP 4xx) and a message naming the word
                      the case gives (the flag, file, key or field)
  accepted correctly  valid input, exit 0, and the case's check of the result passes
  vague error         refused with a documented code, but the message does not name what was wrong
  refused valid input a valid input refused
  crash               killed by a signal, an undocumented exit code, an abort message, HTTP 5xx, or
                      a server that stopped answering
  hang                still running at the case's timeout
  silent wrong        exit 0 (HTTP 2xx) where an error was due, or a wrong result
  data lost           after a kill, the newest checkpoint does not load

    scripts/reliability_report.py --troupe build/apps/troupe            # the full battery
    scripts/reliability_report.py --fast                                # the CI subset (ctest -L reliability)
    scripts/reliability_report.py --kill-trials 20                      # and 2-process mpirun kill trials
    scripts/reliability_report.py --kill-trials 20 --write              # rewrite docs/reliability.md's figures

Exit status 1 when any case is a crash, hang, silent wrong or data lost, except the known gaps
(KNOWN_GAPS, below), or when a known gap passes. Standard library only.
"""
import argparse
import dataclasses
import datetime
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from typing import Callable, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = os.path.join(ROOT, "assets/gpt2/gpt2-vocab.json")
MERGES = os.path.join(ROOT, "assets/gpt2/gpt2-merges.txt")
DOC = os.path.join(ROOT, "docs/reliability.md")
BEGIN, END = "<!-- reliability-figures:begin -->", "<!-- reliability-figures:end -->"

CLASSES = ["clear error", "accepted correctly", "vague error", "refused valid input", "crash", "hang",
           "silent wrong", "data lost"]
BROKEN = {"crash", "hang", "silent wrong", "data lost"}  # what the promise rules out
DOCUMENTED_CODES = {0, 1, 2, 130}  # docs/troubleshooting.md
ABORT_WORDS = ("terminate called", "Segmentation fault", "core dumped", "AddressSanitizer", "Assertion `",
               "std::bad_alloc", "stack smashing", "*** Process received signal ***")
# Cases that show a defect not fixed yet (docs/reliability.md, "Known gaps"): counted in the figures
# as what they are, but they do not fail the run. One that starts passing fails it until it is
# taken off this list, so the list stays true.
KNOWN_GAPS: dict = {}
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


# ---------------------------------------------------------------------------------------------
# Cases and outcomes

@dataclasses.dataclass
class Expect:
    """An error naming one of `words` ("a|b": either) with one of `codes`, or success passing `check`."""
    words: str = ""
    codes: tuple = (1, 2)
    check: Optional[Callable[[str], Optional[str]]] = None  # output -> None when right, else why not

    @property
    def error(self):
        return self.check is None


def error(words, codes=(1, 2)):
    return Expect(words=words, codes=codes)


def ok(check=lambda out: None):
    return Expect(check=check)


@dataclasses.dataclass
class Case:
    group: str
    name: str
    run: Callable[[], "Outcome"]
    fast: bool = False  # in the CI subset


@dataclasses.dataclass
class Outcome:
    klass: str
    detail: str = ""


def names_word(text, words):
    low = text.lower()
    return any(w.lower() in low for w in words.split("|"))


def classify_exit(rc, out, expect: Expect):
    """The class of a finished (or timed-out: rc None) command against what was expected."""
    lines = out.strip().splitlines()
    errors = [line for line in lines if "error" in line.lower()]
    tail = (errors or lines or [""])[0 if errors else -1][:200]
    if rc is None:
        return Outcome("hang", "still running at the timeout")
    if rc < 0 or rc not in DOCUMENTED_CODES or any(w in out for w in ABORT_WORDS):
        return Outcome("crash", f"exit {rc}: {tail}")
    if expect.error:
        if rc == 0:
            return Outcome("silent wrong", f"exit 0 where an error naming {expect.words!r} was due")
        if rc in expect.codes and names_word(out, expect.words):
            return Outcome("clear error", tail)
        return Outcome("vague error", f"exit {rc}, no {expect.words!r}: {tail}")
    if rc != 0:
        return Outcome("refused valid input", f"exit {rc}: {tail}")
    why = expect.check(out)
    return Outcome("silent wrong", why) if why else Outcome("accepted correctly")


class Runner:
    """Runs `troupe` as a child in its own process group (killed whole at the timeout)."""

    def __init__(self, troupe, work):
        self.troupe, self.work = troupe, work
        self.env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")

    def start(self, args, log, launcher=(), env=None):
        out = open(log, "wb")
        return subprocess.Popen(list(launcher) + [self.troupe] + [str(a) for a in args], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.work,
                                env=dict(self.env, **(env or {})), start_new_session=True)

    def run(self, args, timeout=60):
        """(exit code or None at the timeout, output)."""
        log = os.path.join(self.work, "last.log")
        p = self.start(args, log)
        try:
            rc = p.wait(timeout)
        except subprocess.TimeoutExpired:
            kill_group(p)
            rc = None
        return rc, read_text(log)


def kill_group(p):
    """SIGCONT then SIGKILL to the process group of `p` (a child this script started)."""
    for sig in (signal.SIGCONT, signal.SIGKILL):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
    p.wait()


def read_text(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def write_bytes(path, data):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


# ---------------------------------------------------------------------------------------------
# File formats: Megatron's .idx, safetensors

def idx_counts(path):
    """(sequences, documents) of a Megatron .idx file."""
    d = read_bytes(path)
    return struct.unpack_from("<QQ", d, 18)


def st_read(path):
    d = read_bytes(path)
    n = struct.unpack_from("<Q", d)[0]
    return json.loads(d[8:8 + n]), d[8 + n:]


def st_write(path, header, body):
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    write_bytes(path, struct.pack("<Q", len(h)) + h + body)


# ---------------------------------------------------------------------------------------------
# The fixtures every group starts from: a dataset, a trained checkpoint, its HF folder, a server

class Fixtures:
    def __init__(self, runner: Runner, root):
        self.r, self.root = runner, root
        self.n = 0

    def fresh(self, name):
        self.n += 1
        path = os.path.join(self.root, f"{self.n:03d}_{name}")
        os.makedirs(path)
        return path

    def build(self):
        words = ("the whale ship sea captain harpoon deck sail wind storm crew boat island ocean rope night "
                 "morning voyage sailor mast").split()
        rnd = random.Random(23)
        self.docs = [" ".join(rnd.choice(words) for _ in range(60)) for _ in range(40)]
        self.jsonl = os.path.join(self.root, "corpus.jsonl")
        write_bytes(self.jsonl, "".join(json.dumps({"text": d}) + "\n" for d in self.docs).encode())
        self.prefix = os.path.join(self.root, "data/corpus")
        os.makedirs(os.path.dirname(self.prefix))
        rc, out = self.r.run(["preprocess", "--input", self.jsonl, "--output-prefix", self.prefix, "--vocab-file",
                              VOCAB, "--merge-file", MERGES, "--append-eod", "--quiet"])
        assert rc == 0, "preprocess of the fixture failed:\n" + out
        self.data = self.prefix + "_text_document"
        self.ckpt = os.path.join(self.root, "ckpt")
        rc, out = self.r.run(self.train(["--mock-data", "--train-iters", "2", "--save", self.ckpt, "--save-interval",
                                         "1"]), timeout=120)
        assert rc == 0, "training the fixture checkpoint failed:\n" + out
        self.hf = os.path.join(self.root, "hf")
        rc, out = self.r.run(["convert", "--to", "hf", "--load", self.ckpt, "--output", self.hf])
        assert rc == 0, "exporting the fixture checkpoint failed:\n" + out

    @staticmethod
    def train(extra):
        """`troupe train` of the tiny GPT-2 on the CPU: sequence 32, one sample, one iteration."""
        base = {"--model": "gpt2-tiny", "--device": "cpu", "--vocab-file": VOCAB, "--merge-file": MERGES,
                "--seq-length": "32", "--micro-batch-size": "1", "--global-batch-size": "1", "--train-iters": "1",
                "--eval-iters": "0", "--log-interval": "1"}
        args = ["train"]
        given = {extra[i] for i in range(len(extra)) if str(extra[i]).startswith("--")}
        for flag, value in base.items():
            if flag not in given:
                args += [flag, value]
        return args + list(extra)

    def copy_ckpt(self, name):
        path = self.fresh(name)
        shutil.rmtree(path)
        shutil.copytree(self.ckpt, path)
        return path

    def copy_hf(self, name):
        path = self.fresh(name)
        shutil.rmtree(path)
        shutil.copytree(self.hf, path)
        return path

    def copy_data(self, name):
        """A copy of the dataset: its prefix (PREFIX.bin and PREFIX.idx)."""
        prefix = os.path.join(self.fresh(name), "data")
        shutil.copy(self.data + ".bin", prefix + ".bin")
        shutil.copy(self.data + ".idx", prefix + ".idx")
        return prefix


def trains(iters):
    """A check: the log shows the last iteration and a summary."""
    def check(out):
        if f"{iters}/" not in out or "summary:" not in out:
            return f"no iteration {iters} or summary in the log"
        if re.search(r"lm loss: (nan|inf)", out, re.I):
            return "a non-finite loss was logged"
        return None
    return check


# ---------------------------------------------------------------------------------------------
# The groups of cases (tables, turned into cases by small generators)

def command_case(group, name, fx: Fixtures, args, expect, fast=False, timeout=60):
    def run():
        a = args() if callable(args) else args
        rc, out = fx.r.run(a, timeout)
        return classify_exit(rc, out, expect)
    return Case(group, name, run, fast)


BAD_POSITIVE_INT = ["0", "-3", "abc", "2.5", "99999999999999999999", ""]
BAD_NONNEGATIVE_INT = ["-1", "ten", "1e999"]
BAD_FINITE_FLOAT = ["nan", "inf", "-inf", "abc", "1e999"]
TRAIN_POSITIVE = ["--micro-batch-size", "--seq-length", "--num-layers", "--hidden-size", "--num-attention-heads",
                  "--tensor-model-parallel-size", "--log-interval"]
TRAIN_NONNEGATIVE = ["--train-iters", "--eval-iters", "--save-interval", "--lr-warmup-iters", "--global-batch-size"]
TRAIN_FINITE = ["--lr", "--clip-grad", "--weight-decay", "--adam-beta1", "--init-method-std"]


def flag_cases(fx):
    g = "bad flags and values"
    cases = []
    for flag in TRAIN_POSITIVE:
        for v in BAD_POSITIVE_INT:
            cases.append(command_case(g, f"train {flag} {v!r}", fx, fx.train(["--mock-data", flag, v]), error(flag),
                                      fast=v in ("0", "abc")))
    for flag in TRAIN_NONNEGATIVE:
        for v in BAD_NONNEGATIVE_INT:
            cases.append(command_case(g, f"train {flag} {v!r}", fx, fx.train(["--mock-data", flag, v]), error(flag),
                                      fast=v == "-1"))
    for flag in TRAIN_FINITE:
        for v in BAD_FINITE_FLOAT:
            cases.append(command_case(g, f"train {flag} {v!r}", fx, fx.train(["--mock-data", flag, v]), error(flag),
                                      fast=v == "nan"))
    others = [
        ("train", ["--lr-decay-style", "cosinus"], "--lr-decay-style"),
        ("train", ["--adam-eps", "0"], "--adam-eps"),
        ("train", ["--lr-warmup-fraction", "1.5"], "--lr-warmup-fraction"),
        ("train", ["--metrics-port", "70000"], "--metrics-port"),
        ("train", ["--op-timeout", "0"], "--op-timeout"),
        ("train", ["--op-timeout", "nan"], "--op-timeout"),
        ("train", ["--micro-batch-size", "100000000", "--global-batch-size", "100000000"], "batch|memory"),
        ("train", ["--split", "a,b,c"], "--split"),
        ("train", ["--split", "0,0,0"], "--split"),
        ("train", ["--window-size", "left,right"], "--window-size"),
        ("train", ["--nonexistent-flag", "3"], "--nonexistent-flag"),
        ("train", ["--micro-batch-size"], "--micro-batch-size"),
        ("generate", ["--max-tokens", "-1"], "--max-tokens"),
        ("generate", ["--temperature", "nan"], "temperature"),
        ("generate", ["--temperature", "-1"], "temperature"),
        ("generate", ["--top-p", "1.5"], "--top-p|top_p"),
        ("generate", ["--top-k", "-2"], "--top-k|top_k"),
        ("generate", ["--kv-cache-gb", "0"], "--kv-cache-gb"),
        ("generate", ["--kv-cache-gb", "nan"], "--kv-cache-gb"),
        ("generate", ["--inference-max-seq-length", "-5"], "--inference-max-seq-length"),
        ("generate", ["--kv-block-size", "0"], "--kv-block-size"),
        ("generate", ["--dtype", "f8"], "--dtype"),
        ("generate", ["--seed", "-1"], "--seed"),
        ("generate", ["--tensor-model-parallel-size", "3"], "--tensor-model-parallel-size|head"),
        ("serve", ["--port", "70000"], "--port|port"),
        ("serve", ["--port", "-2"], "--port|port"),
        ("serve", ["--port", "http"], "--port"),
        ("serve", ["--max-request-bytes", "0"], "--max-request-bytes"),
        ("serve", ["--idle-timeout", "nan"], "--idle-timeout"),
        ("serve", ["--http-threads", "-1"], "--http-threads"),
        ("preprocess", ["--workers", "0"], "--workers"),
        ("preprocess", ["--tokenizer-type", "SentencePieceTokenizer"], "--tokenizer-type"),
        ("convert", ["--dtype", "int8"], "--dtype"),
        ("convert", ["--to", "onnx"], "--to"),
    ]
    for command, extra, word in others:
        if command == "train":  # --split applies to a real dataset only (as in Megatron)
            args = fx.train((["--data-path", fx.data] if extra[0] == "--split" else ["--mock-data"]) + extra)
        elif command in ("generate", "serve"):
            args = [command, "--load", fx.ckpt, "--device", "cpu", "--prompt", "hi", "--max-tokens", "2"] + extra
            if command == "serve":
                args = [command, "--load", fx.ckpt, "--device", "cpu", "--host", "127.0.0.1"] + extra
        elif command == "preprocess":
            args = ["preprocess", "--input", fx.jsonl, "--output-prefix", os.path.join(fx.root, "flagcase"),
                    "--vocab-file", VOCAB, "--merge-file", MERGES] + extra
        else:
            args = ["convert", "--to", "hf", "--load", fx.ckpt, "--output", os.path.join(fx.root, "flagcase_hf")] + extra
            if extra[0] == "--to":
                args = ["convert", "--load", fx.ckpt, "--output", os.path.join(fx.root, "flagcase_hf")] + extra
        if command == "serve":
            cases.append(serve_flag_case(g, f"serve {' '.join(extra)}", fx, args, word))
        else:
            cases.append(command_case(g, f"{command} {' '.join(extra)}", fx, args, error(word),
                                      fast=command != "train"))
    # Valid edge values: accepted, and the run does what they say.
    valid = [(["--mock-data", "--micro-batch-size", "1", "--global-batch-size", "2", "--train-iters", "2"], 2),
             (["--mock-data", "--lr", "0"], 1),
             (["--mock-data", "--clip-grad", "0"], 1),
             (["--mock-data", "--train-iters", "3", "--lr-decay-style", "WSD", "--lr-wsd-decay-iters", "1"], 3),
             (["--mock-data", "--seed", "4294967295"], 1)]
    for extra, iters in valid:
        cases.append(command_case(g, "valid: train " + " ".join(extra[1:]), fx, fx.train(extra), ok(trains(iters))))
    return cases


def serve_flag_case(group, name, fx, args, word):
    """`troupe serve` with a bad value: still serving after 20 s means the value was taken."""
    def run():
        rc, out = fx.r.run(args, 20)
        if rc is None and "serving" in out:
            return Outcome("silent wrong", f"accepted: it started serving")
        return classify_exit(rc, out, error(word))
    return Case(group, name, run, fast=False)


def layout_cases(fx):
    g = "impossible parallel layouts"
    table = [
        (["--devices", "2", "--tensor-model-parallel-size", "4"], "--tensor-model-parallel-size|devices"),
        (["--devices", "3", "--tensor-model-parallel-size", "2"], "--devices|divisible|multiple"),
        (["--devices", "8", "--pipeline-model-parallel-size", "8"], "--pipeline-model-parallel-size|layers"),
        (["--devices", "3", "--tensor-model-parallel-size", "3"], "head|--tensor-model-parallel-size"),
        (["--devices", "2", "--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "3"],
         "--num-layers-per-virtual-pipeline-stage|layers"),
        (["--micro-batch-size", "2", "--global-batch-size", "3"], "--global-batch-size"),
        (["--devices", "2", "--global-batch-size", "1"], "--global-batch-size|batch"),
        (["--group-query-attention", "--num-query-groups", "3"], "--num-query-groups|query groups"),
        (["--hidden-size", "130"], "--hidden-size|--num-attention-heads"),
        (["--seq-length", "64", "--max-position-embeddings", "32"], "--max-position-embeddings|--seq-length"),
        (["--devices", "2", "--pipeline-model-parallel-size", "2", "--num-layers", "3"], "--num-layers|layers"),
        (["--devices", "4", "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "4"],
         "--pipeline-model-parallel-size|devices"),
        (["--context-parallel-size", "3"], "--context-parallel-size"),  # seq 32 is not a multiple of 2 x 3
        (["--num-experts", "4"], "--num-experts"),
        (["--device", "cuda"], "cuda|GPU"),
    ]
    cases = [command_case(g, " ".join(extra), fx, fx.train(["--mock-data"] + extra), error(word), fast=i % 3 == 0)
             for i, (extra, word) in enumerate(table)]
    valid = [["--devices", "2", "--tensor-model-parallel-size", "2"],
             ["--devices", "2", "--pipeline-model-parallel-size", "2"],
             ["--devices", "2", "--global-batch-size", "2", "--use-distributed-optimizer"],
             ["--sequence-parallel"],
             ["--context-parallel-size", "2"]]
    cases += [command_case(g, "valid: " + " ".join(extra), fx, fx.train(["--mock-data"] + extra), ok(trains(1)),
                           timeout=120) for extra in valid]
    return cases


# Lines of a JSON-lines file: (name, the bytes of the file, expected). Line 2 is the bad one.
GOOD_LINE = b'{"text": "the whale and the sea"}\n'
JSON_LINES = [
    ("truncated object", b'{"text": "cut', "error"),
    ("array", b"[1, 2, 3]", "error"),
    ("number", b"42", "error"),
    ("bare string", b'"text"', "error"),
    ("missing key", b'{"body": "x"}', "error"),
    ("text null", b'{"text": null}', "error"),
    ("text number", b'{"text": 7}', "error"),
    ("text list holding a number", b'{"text": ["a", 5]}', "error"),
    ("text object", b'{"text": {"a": 1}}', "error"),
    ("invalid UTF-8", b'{"text": "\xff\xfe bad"}', "error"),
    ("trailing garbage", b'{"text": "a"} tail', "error"),
    ("two objects", b'{"text": "a"}{"text": "b"}', "error"),
    ("raw control character", b'{"text": "a\x01b"}', "error"),
    ("unterminated escape", b'{"text": "a\\', "error"),
    ("bad escape", b'{"text": "\\q"}', "error"),
    ("NUL byte", b'{"text": "a\x00b"}', "error"),
    ("single quotes", b"{'text': 'a'}", "error"),
    ("huge exponent", b'{"text": 1e99999}', "error"),
    ("deep nesting", b'{"text": ' + b"[" * 100000 + b"]" * 100000 + b"}", "error"),
    # accepted: the dataset holds the documents given
    ("unicode text", '{"text": "Ahab — 白鯨 🐋"}'.encode(), 3),
    ("escaped quotes and newline", b'{"text": "say \\"hi\\"\\nthen go"}', 3),
    ("extra keys", b'{"text": "a b", "meta": {"x": [1, 2]}}', 3),
    ("text a list of strings (one document)", b'{"text": ["a sentence.", "another one."]}', 3),
    ("long line", b'{"text": "' + b"sea " * 250000 + b'"}', 3),
]


def json_line_cases(fx):
    g = "JSON lines to preprocess"
    cases = []
    for i, (name, line, expected) in enumerate(JSON_LINES):
        def run(line=line, expected=expected, name=name):
            d = fx.fresh("jsonl")
            path = os.path.join(d, "docs.jsonl")
            write_bytes(path, GOOD_LINE + line + b"\n" + GOOD_LINE)
            prefix = os.path.join(d, "out")
            rc, out = fx.r.run(["preprocess", "--input", path, "--output-prefix", prefix, "--vocab-file", VOCAB,
                                "--merge-file", MERGES, "--quiet"])
            if expected == "error":
                return classify_exit(rc, out, error("docs.jsonl:2"))
            return classify_exit(rc, out, ok(lambda _: docs_check(prefix + "_text_document.idx", expected)))
        cases.append(Case(g, name, run, fast=i % 3 == 0))

    def run_crlf():
        d = fx.fresh("jsonl")
        path = os.path.join(d, "docs.jsonl")
        write_bytes(path, GOOD_LINE.replace(b"\n", b"\r\n") * 2)
        rc, out = fx.r.run(["preprocess", "--input", path, "--output-prefix", os.path.join(d, "out"), "--vocab-file",
                            VOCAB, "--merge-file", MERGES, "--quiet"])
        return classify_exit(rc, out, ok(lambda _: docs_check(os.path.join(d, "out_text_document.idx"), 2)))
    cases.append(Case(g, "CRLF line ends", run_crlf, fast=True))

    def run_skip():
        d = fx.fresh("jsonl")
        path = os.path.join(d, "docs.jsonl")
        write_bytes(path, GOOD_LINE + b"{bad\n" + b'{"text": 5}\n' + GOOD_LINE + b"\xff\n")
        rc, out = fx.r.run(["preprocess", "--input", path, "--output-prefix", os.path.join(d, "out"), "--vocab-file",
                            VOCAB, "--merge-file", MERGES, "--skip-bad-lines", "--quiet"])
        return classify_exit(rc, out, ok(lambda o: docs_check(os.path.join(d, "out_text_document.idx"), 2) or
                                         (None if re.search(r"\b3\b", o) else "the 3 skipped lines are not counted")))
    cases.append(Case(g, "--skip-bad-lines counts and skips", run_skip, fast=True))
    for name, args, word in [
        ("missing input", ["--input", "/nonexistent/docs.jsonl"], "/nonexistent/docs.jsonl"),
        ("input is a directory", ["--input", "/tmp"], "/tmp"),
        ("missing --json-keys key everywhere", ["--input", fx.jsonl, "--json-keys", "body"], "body"),
        ("output in a missing folder", ["--input", fx.jsonl, "--output-prefix", "/nonexistent/dir/out"],
         "/nonexistent/dir"),
    ]:
        full = ["preprocess", "--vocab-file", VOCAB, "--merge-file", MERGES, "--quiet"]
        if "--output-prefix" not in args:
            full += ["--output-prefix", os.path.join(fx.root, "pp_out")]
        cases.append(command_case(g, name, fx, full + args, error(word), fast=True))
    return cases


def docs_check(idx, expected_docs):
    try:
        sequences, documents = idx_counts(idx)
    except (OSError, struct.error) as e:
        return f"no readable {idx}: {e}"
    if documents - 1 != expected_docs:
        return f"{documents - 1} documents in the dataset, {expected_docs} given"
    return None


def idx_patch(offset, fmt, value):
    def patch(prefix):
        d = bytearray(read_bytes(prefix + ".idx"))
        struct.pack_into(fmt, d, offset, value)
        write_bytes(prefix + ".idx", bytes(d))
    return patch


def truncate(path_suffix, keep):
    """keep: bytes to keep (negative: all but that many)."""
    def patch(prefix):
        d = read_bytes(prefix + path_suffix)
        write_bytes(prefix + path_suffix, d[:keep] if keep >= 0 else d[:len(d) + keep])
    return patch


def remove(path_suffix):
    return lambda prefix: os.remove(prefix + path_suffix)


def tokens_past_vocab(value):
    """Every 16th token becomes `value` (uint16 ids), so every sample holds some."""
    def patch(prefix):
        d = bytearray(read_bytes(prefix + ".bin"))
        for at in range(0, len(d) - 1, 32):
            struct.pack_into("<H", d, at, value)
        write_bytes(prefix + ".bin", bytes(d))
    return patch


def idx_last_pointer_past_end(prefix):
    d = bytearray(read_bytes(prefix + ".idx"))
    sequences = struct.unpack_from("<Q", d, 18)[0]
    pointers = 34 + 4 * sequences
    struct.pack_into("<q", d, pointers + 8 * (sequences - 1), 10 ** 9)
    write_bytes(prefix + ".idx", bytes(d))


def idx_size_huge(prefix):
    d = bytearray(read_bytes(prefix + ".idx"))
    struct.pack_into("<i", d, 34, 2 ** 31 - 1)
    write_bytes(prefix + ".idx", bytes(d))


def idx_size_negative(prefix):
    d = bytearray(read_bytes(prefix + ".idx"))
    struct.pack_into("<i", d, 34, -5)
    write_bytes(prefix + ".idx", bytes(d))


DATASET_CORRUPTIONS = [
    ("empty .idx", truncate(".idx", 0), ".idx"),
    ("header-only .idx", truncate(".idx", 20), ".idx"),
    (".idx cut short", truncate(".idx", -8), ".idx"),
    ("bad magic", idx_patch(0, "<4s", b"XXXX"), ".idx"),
    ("version 2", idx_patch(9, "<Q", 2), ".idx|version"),
    ("dtype code 99", idx_patch(17, "<B", 99), ".idx|dtype"),
    ("dtype int32 over uint16 tokens", idx_patch(17, "<B", 4), ".bin|.idx"),
    ("2^40 sequences", idx_patch(18, "<Q", 2 ** 40), ".idx"),
    ("2^40 documents", idx_patch(26, "<Q", 2 ** 40), ".idx"),
    ("a sequence of 2^31-1 tokens", idx_size_huge, ".idx|.bin"),
    ("a negative sequence length", idx_size_negative, ".idx"),
    ("a pointer past the .bin", idx_last_pointer_past_end, ".bin|.idx"),
    ("empty .bin", truncate(".bin", 0), ".bin"),
    (".bin cut in half", truncate(".bin", 1000), ".bin"),
    ("missing .bin", remove(".bin"), ".bin"),
    ("missing .idx", remove(".idx"), ".idx"),
]


def dataset_cases(fx):
    g = "corrupt .bin/.idx and token ids"
    cases = []

    def case(name, patch, word, extra=(), fast=False, expect=None):
        def run():
            prefix = fx.copy_data("data")
            patch(prefix)
            rc, out = fx.r.run(fx.train(["--data-path", prefix, "--split", "100,0,0"] + list(extra)), 120)
            return classify_exit(rc, out, expect or error(word, (1,)))
        cases.append(Case(g, name, run, fast))
    for i, (name, patch, word) in enumerate(DATASET_CORRUPTIONS):
        case(name, patch, word, fast=i % 4 == 0)
    tp2 = ["--devices", "2", "--tensor-model-parallel-size", "2"]
    case("token id 65535 (TP=1)", tokens_past_vocab(65535), "token|vocab", fast=True)
    case("token id 65535 (TP=2)", tokens_past_vocab(65535), "token|vocab", tp2, fast=True)
    case("token id 50304, the padded vocabulary (TP=1)", tokens_past_vocab(50304), "token|vocab")
    case("token id 50304, the padded vocabulary (TP=2)", tokens_past_vocab(50304), "token|vocab", tp2)
    case("the untouched dataset (TP=2)", lambda p: None, "", tp2, expect=ok(trains(1)))
    for name, paths, word in [("missing prefix", ["/nonexistent/data"], "/nonexistent/data"),
                              ("odd weights list", ["0.5", "{d}", "0.5"], "0.5"),
                              ("negative weight", ["-1", "{d}"], "--data-path|weight"),
                              ("NaN weight", ["nan", "{d}"], "--data-path|weight")]:
        args = fx.train(["--data-path"] + [p.format(d=fx.data) for p in paths] + ["--split", "100,0,0"])
        cases.append(command_case(g, name, fx, args, error(word), fast=True))
    return cases


def ckpt_patch_tracker(text):
    return lambda ck: write_bytes(os.path.join(ck, "latest_checkpointed_iteration.txt"), text)


def ckpt_file(name):
    return lambda ck: os.path.join(ck, "iter_0000002", name)


def ckpt_truncate(name, keep):
    def patch(ck):
        path = ckpt_file(name)(ck)
        d = read_bytes(path)
        write_bytes(path, d[:keep] if keep >= 0 else d[:len(d) + keep])
    return patch


def ckpt_flip(tensor):
    """One bit of a model tensor's first shard (a weight every command reads) flipped."""
    def patch(ck):
        m = json.loads(read_bytes(ckpt_file("metadata.json")(ck)))
        shard = m["tensors"][tensor]["shards"][0]
        path = os.path.join(ck, "iter_0000002", shard["file"])
        d = bytearray(read_bytes(path))
        d[shard["byte_offset"] + 5] ^= 0x40
        write_bytes(path, bytes(d))
    return patch


def ckpt_metadata(edit):
    def patch(ck):
        path = ckpt_file("metadata.json")(ck)
        m = json.loads(read_bytes(path))
        edit(m)
        write_bytes(path, json.dumps(m).encode())
    return patch


def first_tensor(m):
    return m["tensors"][sorted(m["tensors"])[0]]


CHECKPOINT_CORRUPTIONS = [
    ("tracker says 'abc'", ckpt_patch_tracker(b"abc"), "latest_checkpointed_iteration"),
    ("tracker names a missing iteration", ckpt_patch_tracker(b"999"), "999|iter_0000999"),
    ("empty tracker", ckpt_patch_tracker(b""), "latest_checkpointed_iteration"),
    ("tracker says -1", ckpt_patch_tracker(b"-1"), "latest_checkpointed_iteration|-1"),
    ("metadata.json missing", lambda ck: os.remove(ckpt_file("metadata.json")(ck)), "metadata.json"),
    ("metadata.json cut short", ckpt_truncate("metadata.json", 300), "metadata.json"),
    ("metadata.json is []", lambda ck: write_bytes(ckpt_file("metadata.json")(ck), b"[]"), "metadata.json"),
    ("a tensor's shape changed", ckpt_metadata(lambda m: first_tensor(m).update(shape=[64])), "shape|metadata"),
    ("a tensor's dtype unknown", ckpt_metadata(lambda m: first_tensor(m).update(dtype="f9")), "dtype|f9"),
    ("a shard's offset past its file",
     ckpt_metadata(lambda m: first_tensor(m)["shards"][0].update(byte_offset=10 ** 12)), "shard_0000.bin"),
    ("a tensor missing", ckpt_metadata(lambda m: m["tensors"].pop(sorted(m["tensors"])[0])), "decoder|tensor"),
    ("format renamed", ckpt_metadata(lambda m: m.update(format="other")), "format|metadata.json"),
    ("shard cut short", ckpt_truncate("shard_0000.bin", -1000), "shard_0000.bin"),
    ("shard empty", ckpt_truncate("shard_0000.bin", 0), "shard_0000.bin"),
    ("a bit flipped in the final norm", ckpt_flip("decoder.final_layernorm.bias"), "shard_0000.bin|checksum"),
    ("a bit flipped in the embedding", ckpt_flip("embedding.word_embeddings.weight"), "shard_0000.bin|checksum"),
    ("shard missing", lambda ck: os.remove(ckpt_file("shard_0000.bin")(ck)), "shard_0000.bin"),
    ("iteration folder missing", lambda ck: shutil.rmtree(os.path.join(ck, "iter_0000002")),
     "iteration 2|iter_0000002"),
    ("vocab.json corrupt", lambda ck: write_bytes(ckpt_file("vocab.json")(ck), b"{\"a\": "), "vocab.json"),
]


def checkpoint_cases(fx):
    g = "corrupt or truncated checkpoints"
    cases = []
    for i, (name, patch, word) in enumerate(CHECKPOINT_CORRUPTIONS):
        for how in ("generate", "train --load"):
            if how == "train --load" and "vocab" in name:
                continue  # training reads the tokenizer from its flags

            def run(patch=patch, word=word, how=how):
                ck = fx.copy_ckpt("ckpt")
                patch(ck)
                if how == "generate":
                    args = ["generate", "--load", ck, "--device", "cpu", "--prompt", "hi", "--max-tokens", "2"]
                else:
                    args = fx.train(["--mock-data", "--load", ck, "--train-iters", "3"])
                rc, out = fx.r.run(args, 120)
                return classify_exit(rc, out, error(word, (1,)))
            cases.append(Case(g, f"{name} ({how})", run, fast=i % 4 == 0 and how == "generate"))
    cases.append(command_case(g, "--ckpt-step 1, an older checkpoint", fx,
                              ["generate", "--load", fx.ckpt, "--ckpt-step", "1", "--device", "cpu", "--prompt", "hi",
                               "--max-tokens", "2"], ok(lambda o: None if "finish" in o else "no completion printed")))
    cases.append(command_case(g, "--ckpt-step 7, not saved", fx,
                              ["generate", "--load", fx.ckpt, "--ckpt-step", "7", "--device", "cpu", "--prompt", "hi"],
                              error("7|iter_0000007", (1,)), fast=True))
    cases.append(command_case(g, "--load a folder with no checkpoint", fx,
                              ["generate", "--load", fx.root, "--device", "cpu", "--prompt", "hi"],
                              error("latest_checkpointed_iteration|checkpoint", (1,)), fast=True))
    cases.append(command_case(g, "resume with another --hidden-size", fx,
                              fx.train(["--mock-data", "--load", fx.ckpt, "--train-iters", "3", "--hidden-size", "64"]),
                              error("hidden", (1, 2))))
    return cases


def hf_config_edit(edit):
    def patch(d):
        path = os.path.join(d, "config.json")
        c = json.loads(read_bytes(path))
        edit(c)
        write_bytes(path, json.dumps(c).encode())
    return patch


def hf_tensor_value(name, value):
    def patch(d):
        path = os.path.join(d, "model.safetensors")
        header, body = st_read(path)
        body = bytearray(body)
        struct.pack_into("<f", body, header[name]["data_offsets"][0] + 16, value)
        st_write(path, header, bytes(body))
    return patch


def hf_header_edit(edit):
    def patch(d):
        path = os.path.join(d, "model.safetensors")
        header, body = st_read(path)
        edit(header)
        st_write(path, header, body)
    return patch


def hf_tensors(edit):
    """Rewrites model.safetensors from {name: (dtype, shape, bytes)} after `edit` changes it."""
    def patch(d):
        path = os.path.join(d, "model.safetensors")
        header, body = st_read(path)
        tensors = {k: (v["dtype"], v["shape"], body[v["data_offsets"][0]:v["data_offsets"][1]])
                   for k, v in header.items() if k != "__metadata__"}
        edit(tensors)
        new_header, data, at = {"__metadata__": header.get("__metadata__", {})}, b"", 0
        for name, (dtype, shape, raw) in tensors.items():
            new_header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + len(raw)]}
            data, at = data + raw, at + len(raw)
        st_write(path, new_header, data)
    return patch


def hf_raw(data):
    return lambda d: write_bytes(os.path.join(d, "model.safetensors"), data)


QKV = "transformer.h.0.attn.c_attn.weight"
HF_CORRUPTIONS = [
    ("unknown config key", hf_config_edit(lambda c: c.update(my_custom_scaling=2.0)), "my_custom_scaling"),
    ("scale_attn_by_inverse_layer_idx true", hf_config_edit(lambda c: c.update(scale_attn_by_inverse_layer_idx=True)),
     "scale_attn_by_inverse_layer_idx"),
    ("activation_function relu", hf_config_edit(lambda c: c.update(activation_function="relu")),
     "activation_function|relu"),
    ("model_type bert", hf_config_edit(lambda c: c.update(model_type="bert")), "model_type|bert"),
    ("n_layer 0", hf_config_edit(lambda c: c.update(n_layer=0)), "n_layer"),
    ("n_layer as a string", hf_config_edit(lambda c: c.update(n_layer="4")), "n_layer"),
    ("n_head 3", hf_config_edit(lambda c: c.update(n_head=3)), "n_head|n_embd"),
    ("vocab_size not the embedding's", hf_config_edit(lambda c: c.update(vocab_size=100)), "vocab_size|wte|shape"),
    ("n_positions not the table's", hf_config_edit(lambda c: c.update(n_positions=16)), "n_positions|wpe|shape"),
    ("untied without lm_head", hf_config_edit(lambda c: c.update(tie_word_embeddings=False)),
     "lm_head|tie_word_embeddings"),
    ("config.json not JSON", lambda d: write_bytes(os.path.join(d, "config.json"), b"{model_type: gpt2"),
     "config.json"),
    ("config.json missing", lambda d: os.remove(os.path.join(d, "config.json")), "config.json"),
    ("NaN weight", hf_tensor_value(QKV, float("nan")), QKV + "|finite|NaN"),
    ("inf weight", hf_tensor_value(QKV, float("inf")), QKV + "|finite|inf"),
    ("a tensor missing", hf_tensors(lambda t: t.pop(QKV)), QKV),
    ("an unknown tensor", hf_tensors(lambda t: t.update({"transformer.h.0.extra.weight": t[QKV]})),
     "transformer.h.0.extra.weight"),
    ("a tensor's shape wrong", hf_header_edit(lambda h: h[QKV].update(shape=[64, 384])), QKV),
    ("dtype F8_E4M3", hf_header_edit(lambda h: h[QKV].update(dtype="F8_E4M3")), "F8_E4M3|dtype"),
    ("offsets past the file", hf_header_edit(lambda h: h[QKV].update(data_offsets=[0, 10 ** 12])),
     "model.safetensors|" + QKV),
    ("safetensors cut short", lambda d: write_bytes(os.path.join(d, "model.safetensors"),
                                                    read_bytes(os.path.join(d, "model.safetensors"))[:5000]),
     "model.safetensors"),
    ("header length 2^60", hf_raw(struct.pack("<Q", 2 ** 60) + b"{}"), "model.safetensors"),
    ("header not JSON", hf_raw(struct.pack("<Q", 8) + b"notjson!"), "model.safetensors"),
    ("empty safetensors", hf_raw(b""), "model.safetensors"),
    ("safetensors missing", lambda d: os.remove(os.path.join(d, "model.safetensors")), "model.safetensors|safetensors"),
]


def hf_cases(fx):
    g = "HF folders"
    cases = []
    for i, (name, patch, word) in enumerate(HF_CORRUPTIONS):
        def run(patch=patch, word=word):
            d = fx.copy_hf("hf")
            patch(d)
            rc, out = fx.r.run(["convert", "--from", "hf", "--input", d, "--save", os.path.join(d, "imported")])
            return classify_exit(rc, out, error(word, (1,)))
        cases.append(Case(g, name, run, fast=i % 3 == 0))

    def run_nan_generate():
        d = fx.copy_hf("hf")
        hf_tensor_value(QKV, float("nan"))(d)
        rc, out = fx.r.run(["generate", "--hf", d, "--device", "cpu", "--prompt", "hi", "--max-tokens", "2"])
        return classify_exit(rc, out, error(QKV + "|finite|NaN", (1,)))
    cases.append(Case(g, "NaN weight (generate --hf)", run_nan_generate))

    def run_round_trip():
        d = fx.copy_hf("hf")
        rc, out = fx.r.run(["convert", "--from", "hf", "--input", d, "--save", os.path.join(d, "imported")])
        if rc == 0:
            rc2, out2 = fx.r.run(["convert", "--to", "hf", "--load", os.path.join(d, "imported"), "--output",
                                  os.path.join(d, "again")])
            same = rc2 == 0 and st_read(os.path.join(d, "model.safetensors"))[1] == \
                st_read(os.path.join(d, "again", "model.safetensors"))[1]
            return classify_exit(rc, out, ok(lambda _: None if same else "the round trip changed the weights"))
        return classify_exit(rc, out, ok())
    cases.append(Case(g, "valid: import and export round trip", run_round_trip, fast=True))
    return cases


CONFIG_FILES = [
    ("toml", "unknown key", "[train]\nmicro_batch_sise = 2\n", "micro_batch_sise"),
    ("toml", "bad syntax", "[train\nlr = 0.1\n", "config.toml"),
    ("toml", "value of the wrong type", "[train]\nmicro_batch_size = \"many\"\n", "micro_batch_size|micro-batch-size"),
    ("toml", "out of range", "[train]\nmicro_batch_size = -4\n", "micro_batch_size|micro-batch-size"),
    ("toml", "NaN learning rate", "[train]\nlr = nan\n", "lr"),
    ("toml", "binary garbage", "\x00\x01\x02\xff\xfe", "config.toml"),
    ("yaml", "list at the top", "- 1\n- 2\n", "config.yaml|mapping"),
    ("yaml", "unknown key", "micro_batch_sise: 2\n", "micro_batch_sise"),
    ("yaml", "bad indentation", "a:\n  b: 1\n c: 2\n", "config.yaml"),
    ("yaml", "self-referencing alias", "a: &x [*x]\n", "config.yaml"),
    ("yaml", "huge integer", "micro_batch_size: 999999999999999999999999\n", "micro_batch_size|micro-batch-size"),
]


def config_cases(fx):
    g = "bad config files"
    cases = []
    for i, (kind, name, text, word) in enumerate(CONFIG_FILES):
        def args(kind=kind, text=text):
            d = fx.fresh("config")
            path = os.path.join(d, "config." + kind)
            write_bytes(path, text.encode("latin-1"))
            return without_flags(fx.train(["--mock-data"]), text) + ["--config" if kind == "toml" else "--yaml-cfg",
                                                                       path]
        cases.append(command_case(g, f"{kind}: {name}", fx, args, error(word), fast=i % 2 == 0))
    cases.append(command_case(g, "missing file", fx, fx.train(["--mock-data", "--config", "/nonexistent/c.toml"]),
                              error("/nonexistent/c.toml"), fast=True))

    for name, text, iters in [("valid: a [train] section", "[train]\ntrain_iters = 2\n", 2),
                              ("valid: another command's section is left to it", "[serve]\nport = 5\n", 1)]:
        def valid_args(text=text):
            d = fx.fresh("config")
            path = os.path.join(d, "config.toml")
            write_bytes(path, text.encode())
            return without_flags(fx.train(["--mock-data"]), text) + ["--config", path]
        cases.append(command_case(g, name, fx, valid_args, ok(trains(iters))))
    return cases


def without_flags(args, config_text):
    """`args` without the flags a config file's text sets (command-line flags would win over it)."""
    keys = {"--" + k.replace("_", "-") for k in re.findall(r"^\s*([A-Za-z_][\w-]*)\s*[=:]", config_text, re.M)}
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in keys:
            skip = True
        else:
            out.append(a)
    return out


# ---------------------------------------------------------------------------------------------
# HTTP: one `troupe serve` on the fixture checkpoint

class Server:
    def __init__(self, fx: Fixtures):
        self.fx = fx
        self.log = os.path.join(fx.root, "serve.log")
        self.p = fx.r.start(["serve", "--load", fx.ckpt, "--device", "cpu", "--host", "127.0.0.1", "--port", "0",
                             "--max-request-bytes", "65536", "--header-timeout", "2", "--body-timeout", "2",
                             "--idle-timeout", "3", "--shutdown-timeout", "5"], self.log)
        deadline = time.time() + 60
        self.port = None
        while time.time() < deadline and self.p.poll() is None:
            m = re.search(r"on http://127\.0\.0\.1:(\d+)", read_text(self.log))
            if m:
                self.port = int(m.group(1))
                break
            time.sleep(0.1)
        assert self.port, "troupe serve did not start:\n" + read_text(self.log)

    def alive(self):
        if self.p.poll() is not None:
            return False
        status, _, _ = http_raw(self.port, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 10)
        return status == 200

    def stop(self):
        """SIGTERM; the exit code (None if it did not exit within 40 s)."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        try:
            return self.p.wait(40)
        except subprocess.TimeoutExpired:
            kill_group(self.p)
            return None


def http_raw(port, data, timeout, pause_after=None, pause=0.0):
    """Sends `data` (pausing `pause` s after `pause_after` bytes); (status or None, body, seconds until the
    server answered or closed). None status with a short time: the server closed without answering."""
    start = time.time()
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        if pause_after is not None:
            s.sendall(data[:pause_after])
            time.sleep(pause)
            try:
                s.sendall(data[pause_after:])
            except OSError:
                pass
        else:
            try:
                s.sendall(data)
            except OSError:
                pass
        chunks = []
        while True:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                return None, b"".join(chunks).decode("utf-8", "replace"), None  # no answer, not closed: hang
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        s.close()
    raw = b"".join(chunks).decode("utf-8", "replace")
    m = re.match(r"HTTP/1\.[01] (\d{3})", raw)
    return (int(m.group(1)) if m else None), raw, time.time() - start


def request(method, path, body=b"", headers=None):
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    h = {"Host": "127.0.0.1", "Connection": "close", "Content-Type": "application/json",
         "Content-Length": str(len(body))}
    h.update(headers or {})
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items() if v is not None)
    return head.encode() + b"\r\n" + body


def completion(**fields):
    return request("POST", "/v1/completions", dict({"prompt": "hi", "max_tokens": 2}, **fields))


# (name, raw request, expected status, word; or a check of the body for 200)
HTTP_CASES = [
    ("malformed JSON", request("POST", "/v1/completions", b"{\"prompt\": "), 400, "JSON"),
    ("empty body", request("POST", "/v1/completions", b""), 400, "JSON|body"),
    ("JSON array body", request("POST", "/v1/completions", b"[]"), 400, "object"),
    ("prompt a number", completion(prompt=5), 400, "prompt"),
    ("prompt null", completion(prompt=None), 400, "prompt"),
    ("max_tokens a string", completion(max_tokens="x"), 400, "max_tokens"),
    ("max_tokens 10^23", request("POST", "/v1/completions", b'{"prompt": "hi", "max_tokens": 99999999999999999999999}'),
     400, "max_tokens"),
    ("max_tokens -1", completion(max_tokens=-1), 400, "max_tokens"),
    ("max_tokens 1e30", request("POST", "/v1/completions", b'{"prompt": "hi", "max_tokens": 1e30}'), 400, "max_tokens"),
    ("max_tokens 2.5", completion(max_tokens=2.5), 400, "max_tokens"),
    ("temperature a string", completion(temperature="hot"), 400, "temperature"),
    ("temperature -1", completion(temperature=-1), 400, "temperature"),
    ("temperature 1e400", request("POST", "/v1/completions", b'{"prompt": "hi", "temperature": 1e400}'), 400,
     "temperature|JSON"),
    ("top_p 2", completion(top_p=2), 400, "top_p"),
    ("top_k -5", completion(top_k=-5), 400, "top_k"),
    ("n 0", completion(n=0), 400, "n"),
    ("n 10^9", completion(n=10 ** 9), 400, "n"),
    ("stop a number", completion(stop=5), 400, "stop"),
    ("unknown field", completion(frobnicate=1), 400, "frobnicate"),
    ("token id past the vocabulary", completion(prompt=[999999]), 400, "prompt|token"),
    ("negative token id", completion(prompt=[-1]), 400, "prompt|token"),
    ("prompt longer than the context", completion(prompt=" whale" * 200), 400, "prompt|context|length"),
    ("invalid UTF-8 in the body", request("POST", "/v1/completions", b'{"prompt": "\xff\xfe"}'), 400, "UTF-8|JSON"),
    ("unknown model", completion(model="gpt-5"), 404, "gpt-5"),
    ("chat without a template", request("POST", "/v1/chat/completions",
                                        {"messages": [{"role": "user", "content": "hi"}]}), 400, "template"),
    ("messages not a list", request("POST", "/v1/chat/completions", {"messages": "hi"}), 400, "messages|template"),
    ("PUT /api prompts a string", request("PUT", "/api", {"prompts": "hi", "tokens_to_generate": 2}), 400, "prompts"),
    ("PUT /api tokens_to_generate -1", request("PUT", "/api", {"prompts": ["hi"], "tokens_to_generate": -1}), 400,
     "tokens_to_generate"),
    ("PUT /api tokens_to_generate 2^63", request("PUT", "/api", b'{"prompts": ["hi"], '
                                                 b'"tokens_to_generate": 9223372036854775808}'), 400,
     "tokens_to_generate"),
    ("unknown route", request("GET", "/v2/everything"), 404, "/v2/everything"),
    ("wrong method", request("DELETE", "/v1/completions"), 405, "DELETE|method"),
    ("POST /health", request("POST", "/health"), 405, "POST|method"),
    ("body over --max-request-bytes", completion(prompt="a" * 100000), 413, "bytes|large"),
    ("Content-Length abc", request("POST", "/v1/completions", b"{}", {"Content-Length": "abc"}), 400, "Content-Length"),
    ("Content-Length -5", request("POST", "/v1/completions", b"{}", {"Content-Length": "-5"}), 400, "Content-Length"),
    ("Content-Length 10^20", request("POST", "/v1/completions", b"{}", {"Content-Length": "1" + "0" * 20}), (400, 413),
     "Content-Length|bytes|large"),
    ("headers over 64 KiB", request("GET", "/health", b"", {"X-Big": "a" * 70000}), 431, "header"),
    ("garbage request line", b"HELLO THERE\r\n\r\n", 400, "request"),
    ("HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", (400, 405, 505), "HTTP|request|method"),
    ("NUL bytes in the path", b"GET /he\x00alth HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", (400, 404),
     "request|path|route"),
    ("chunked body, bad chunk size", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
     b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", 400, "chunk"),
]
HTTP_VALID = [
    ("valid completion", completion(), lambda b: None if '"text"' in b and '"completion_tokens":2' in b.replace(" ", "")
     else "no text or not 2 tokens"),
    ("valid PUT /api", request("PUT", "/api", {"prompts": ["hi"], "tokens_to_generate": 2}),
     lambda b: None if '"text"' in b else "no text"),
    ("valid GET /v1/models", request("GET", "/v1/models"), lambda b: None if "troupe" in b else "no model listed"),
    ("valid streamed completion", completion(stream=True),
     lambda b: None if "data: [DONE]" in b else "the stream did not end with [DONE]"),
    ("valid prompt of token ids", completion(prompt=[31373, 995]),
     lambda b: None if '"prompt_tokens":2' in b.replace(" ", "") else "prompt_tokens is not 2"),
]


def http_cases(fx, server_box):
    g = "HTTP requests to troupe serve"
    cases = []

    def classify_http(status, body, expected, word, server):
        if status is None and body == "" and server.p.poll() is not None:
            return Outcome("crash", "the server exited")
        if not server.alive():
            return Outcome("crash", "the server stopped answering /health afterwards")
        if status is None:
            return Outcome("vague error", "the connection closed without an answer")
        if 500 <= status:
            return Outcome("crash", f"HTTP {status}: {body[-200:]}")
        expected = expected if isinstance(expected, tuple) else (expected,)
        if 200 <= status < 300:
            return Outcome("silent wrong", f"HTTP {status} where {expected} was due")
        first = body.split("\r\n\r\n", 1)[-1][:200]
        if status in expected and names_word(body.split("\r\n\r\n", 1)[-1], word):
            return Outcome("clear error", f"HTTP {status}: {first}")
        return Outcome("vague error", f"HTTP {status}, no {word!r}: {first}")

    for i, (name, raw, expected, word) in enumerate(HTTP_CASES):
        def run(raw=raw, expected=expected, word=word):
            server = server_box()
            status, body, _ = http_raw(server.port, raw, 20)
            return classify_http(status, body, expected, word, server)
        cases.append(Case(g, name, run, fast=i % 2 == 0))
    for name, raw, check in HTTP_VALID:
        def run(raw=raw, check=check):
            server = server_box()
            status, body, _ = http_raw(server.port, raw, 30)
            if status is None or status >= 500:
                return Outcome("crash" if server.p.poll() is not None or status else "hang", f"HTTP {status}")
            if status != 200:
                return Outcome("refused valid input", f"HTTP {status}: {body[-200:]}")
            why = check(body)
            return Outcome("silent wrong", why) if why else Outcome("accepted correctly")
        cases.append(Case(g, name, run, fast=True))

    # Slow clients: the server closes them after its timeouts (2 s headers, 2 s body, 3 s idle).
    def slow(name, data, pause_after, pause, fast):
        def run():
            server = server_box()
            start = time.time()
            status, body, seconds = http_raw(server.port, data, 15, pause_after, pause)
            if seconds is None:
                return Outcome("hang", "the connection stayed open 15 s")
            if not server.alive():
                return Outcome("crash", "the server stopped answering /health afterwards")
            return Outcome("clear error", f"closed after {time.time() - start:.1f} s (HTTP {status})")
        cases.append(Case(g, name, run, fast))
    slow("slow headers (trickled past --header-timeout)", request("GET", "/health"), 10, 4, True)
    slow("slow body (past --body-timeout)", completion(), len(completion()) - 5, 4, False)
    slow("idle connection (past --idle-timeout)", b"", 0, 0, False)

    def run_disconnect():
        server = server_box()
        s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        s.sendall(completion(stream=True, max_tokens=20))
        s.recv(100)
        s.close()  # gone mid-stream
        time.sleep(0.5)
        return Outcome("accepted correctly") if server.alive() else Outcome("crash", "the server died")
    cases.append(Case(g, "client gone mid-stream", run_disconnect, fast=True))

    def run_many():
        server = server_box()
        socks = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(200)]
        for s in socks:
            s.close()
        return Outcome("accepted correctly") if server.alive() else Outcome("crash", "the server died")
    cases.append(Case(g, "200 connections opened and dropped", run_many))
    return cases


# ---------------------------------------------------------------------------------------------
# Signals during training, and kill trials under mpirun

def newest_loads(fx, ckpt):
    """(iteration the tracker names or None, why it did not resume or None): resumes one iteration."""
    try:
        latest = int(read_text(os.path.join(ckpt, "latest_checkpointed_iteration.txt")).strip())
    except ValueError:
        return None, "no tracker naming a checkpoint"
    rc, out = fx.r.run(fx.train(["--mock-data", "--global-batch-size", "2", "--load", ckpt, "--train-iters",
                                 str(latest + 1), "--save", ckpt + "_resumed"]), 120)
    if rc != 0 or "successfully loaded checkpoint" not in out or f"{latest + 1}/" not in out:
        return latest, f"resuming from iteration {latest} failed (exit {rc}): {out.strip().splitlines()[-1:]}"
    return latest, None


def signal_case(fx, name, sig, after, fast=False, during_save=False):
    """troupe train with --save; `sig` once `after` is in the log (plus a random delay when during_save)."""
    def run():
        d = fx.fresh("signal")
        ckpt = os.path.join(d, "ckpt")
        extra = ["--mock-data", "--global-batch-size", "2", "--train-iters", "100000", "--save", ckpt,
                 "--save-interval", "1" if during_save else "1000", "--most-recent-k", "2"]
        p = fx.r.start(fx.train(extra), os.path.join(d, "train.log"))
        deadline = time.time() + 60
        while after not in read_text(os.path.join(d, "train.log")) and p.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        if during_save:
            time.sleep(random.random() * 0.8)
        if p.poll() is not None:
            return Outcome("crash", f"exited {p.returncode} before the signal")
        os.killpg(p.pid, sig) if sig == signal.SIGKILL else p.send_signal(sig)
        try:
            rc = p.wait(30)
        except subprocess.TimeoutExpired:
            kill_group(p)
            return Outcome("hang", f"still running 30 s after signal {sig}")
        out = read_text(os.path.join(d, "train.log"))
        if sig != signal.SIGKILL and (rc != 130 or any(w in out for w in ABORT_WORDS)):
            return Outcome("crash", f"exit {rc} after signal {sig}, 130 documented")
        latest, why = newest_loads(fx, ckpt)
        if why:
            return Outcome("data lost", why)
        return Outcome("accepted correctly", f"exit {rc}; resumed from iteration {latest}")
    return Case("signals during training", name, run, fast)


def signal_cases(fx, full):
    cases = [signal_case(fx, "SIGTERM mid-run (saves, exit 130)", signal.SIGTERM, "iteration        2/", fast=True)]
    if full:
        for i in range(3):
            cases.append(signal_case(fx, f"SIGINT mid-run #{i + 1}", signal.SIGINT, "iteration        2/"))
        for i in range(2):
            cases.append(signal_case(fx, f"SIGTERM during a save #{i + 1}", signal.SIGTERM,
                                     "successfully saved checkpoint", during_save=True))
        for i in range(6):
            cases.append(signal_case(fx, f"kill -9 during a save #{i + 1}", signal.SIGKILL,
                                     "successfully saved checkpoint", during_save=True))

    def run_preprocess_interrupted():
        d = fx.fresh("pp_signal")
        path = os.path.join(d, "big.jsonl")
        rnd = random.Random(5)  # many distinct words: tokenizing takes a few seconds
        words = ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(3, 9)))
                 for _ in range(5000)]
        with open(path, "w") as f:
            for _ in range(100000):
                f.write(json.dumps({"text": " ".join(rnd.choice(words) for _ in range(60))}) + "\n")
        prefix = os.path.join(d, "out")
        log = os.path.join(d, "pp.log")
        p = fx.r.start(["preprocess", "--input", path, "--output-prefix", prefix, "--vocab-file", VOCAB,
                        "--merge-file", MERGES, "--log-interval", "0.2"], log)
        deadline = time.time() + 30
        while "preprocess: " not in read_text(log) and p.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        if p.poll() is not None:
            return Outcome("vague error", "finished before the signal: the case did not test what it says")
        p.send_signal(signal.SIGINT)
        try:
            rc = p.wait(30)
        except subprocess.TimeoutExpired:
            kill_group(p)
            return Outcome("hang", "preprocess still running 30 s after SIGINT")
        idx = prefix + "_text_document.idx"
        if rc == 0:
            why = docs_check(idx, 100000)
            return Outcome("silent wrong", why) if why else Outcome("accepted correctly", "finished all documents")
        if os.path.exists(idx):
            return Outcome("silent wrong", f"exit {rc} but a dataset was left at {idx}")
        litter = [f for f in os.listdir(d) if ".tmp." in f]
        return Outcome("clear error", f"exit {rc} (-2: SIGINT's default), no dataset left"
                       + (f", {len(litter)} temporary files left" if litter else ""))
    cases.append(Case("signals during training", "SIGINT to preprocess (no half dataset left)",
                      run_preprocess_interrupted, fast=False))
    return cases


def rank_pids(mpirun_pid):
    """{rank: pid} of the processes mpirun started (its children, by OMPI_COMM_WORLD_RANK)."""
    ranks = {}
    try:
        children = [int(c) for c in read_text(f"/proc/{mpirun_pid}/task/{mpirun_pid}/children").split()]
    except ValueError:
        return ranks
    for pid in children:
        env = read_bytes_quiet(f"/proc/{pid}/environ")
        m = re.search(rb"OMPI_COMM_WORLD_RANK=(\d+)", env)
        if m:
            ranks[int(m.group(1))] = pid
    return ranks


def read_bytes_quiet(path):
    try:
        return read_bytes(path)
    except OSError:
        return b""


def kill_trial(fx, sig, trial, rnd):
    """One 2-process run; a random rank gets `sig` at a random moment. (class, what happened)."""
    d = fx.fresh(f"kill_{signal.Signals(sig).name}_{trial}")
    ckpt = os.path.join(d, "ckpt")
    log = os.path.join(d, "mpirun.log")
    args = fx.train(["--mock-data", "--devices", "1", "--global-batch-size", "2", "--train-iters", "100000", "--save",
                     ckpt, "--save-interval", "1", "--most-recent-k", "2"])
    p = fx.r.start(args, log, launcher=["mpirun", "-np", "2"], env=MPI_ENV)
    deadline = time.time() + 90
    while "successfully saved checkpoint" not in read_text(log) and p.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(rnd.random() * 3)
    ranks = rank_pids(p.pid)
    if p.poll() is not None or len(ranks) != 2:
        kill_group(p)
        return "crash", f"the run ended (exit {p.returncode}) or had {len(ranks)} ranks before the signal"
    victim = rnd.choice(sorted(ranks))
    os.kill(ranks[victim], sig)
    start = time.time()
    try:
        rc = p.wait(45)
    except subprocess.TimeoutExpired:
        rc = None
    seconds = time.time() - start
    out = read_text(log)
    for pid in ranks.values():  # a stopped rank may still be there
        for s in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, s)
            except ProcessLookupError:
                pass
    kill_group(p)
    if rc is None or seconds > 30:
        return "hang", f"rank {victim}: the run went on {seconds:.0f} s after the signal"
    if rc == 0:
        return "silent wrong", f"rank {victim}: exit 0 after the signal"
    latest, why = newest_loads(fx, ckpt)
    if why:
        return "data lost", f"rank {victim}: {why}"
    aborts = [line.strip() for line in out.splitlines() if any(w in line for w in ABORT_WORDS)]
    if aborts:  # the survivor must end with its error and exit 1, not abort
        what = next((line.strip() for line in out.splitlines() if "what():" in line), aborts[0])
        return "crash", (f"rank {victim}: a surviving rank aborted ({aborts[0]}: {what[:160]}) "
                         f"{seconds:.1f} s after the signal; the newest checkpoint resumes ({latest})")
    if not re.search(r"rank|process", out, re.I):
        return "vague error", f"rank {victim}: exit {rc} without naming a rank or process"
    return "accepted correctly", f"rank {victim}: ended in {seconds:.1f} s (exit {rc}); resumed from {latest}"


# ---------------------------------------------------------------------------------------------
# Report

def table(results, kills):
    groups = []
    for r in results:
        if r[0] not in groups:
            groups.append(r[0])
    head = "| group | inputs tried | " + " | ".join(CLASSES) + " |"
    lines = [head, "|" + " --- |" * (len(CLASSES) + 2)]
    for g in groups + ["all"]:
        rows = [r for r in results if g in ("all", r[0])]
        counts = [sum(1 for r in rows if r[2].klass == c) for c in CLASSES]
        label = "**all**" if g == "all" else g
        lines.append(f"| {label} | {len(rows)} | " + " | ".join(str(c) for c in counts) + " |")
    text = "\n".join(lines) + "\n"
    if kills:
        text += "\nKill trials (`--kill-trials`): 2-process `mpirun` training, one rank signalled at a random " \
                "moment; survived = a clear error within 30 s and the newest checkpoint resumes.\n\n"
        text += "| signal | trials | survived | " + " | ".join(c for c in CLASSES if c not in (
            "accepted correctly", "clear error", "refused valid input")) + " |\n"
        others = [c for c in CLASSES if c not in ("accepted correctly", "clear error", "refused valid input")]
        text += "|" + " --- |" * (len(others) + 3) + "\n"
        for sig, outcomes in kills.items():
            survived = sum(1 for k, _ in outcomes if k == "accepted correctly")
            text += f"| {sig} | {len(outcomes)} | {survived}/{len(outcomes)} | " + \
                " | ".join(str(sum(1 for k, _ in outcomes if k == c)) for c in others) + " |\n"
    return text


def problems(results, kills):
    lines = []
    for g, name, o in results:
        if o.klass not in ("clear error", "accepted correctly"):
            gap = " (known gap: " + KNOWN_GAPS[f"{g}: {name}"] + ")" if f"{g}: {name}" in KNOWN_GAPS else ""
            lines.append(f"- **{o.klass}**{gap} — {g}: {name} — {o.detail}")
    for sig, outcomes in kills.items():  # one line per class: the trials repeat each other
        for klass in CLASSES[1:]:
            details = [d for k, d in outcomes if k == klass]
            if klass == "accepted correctly" or not details:
                continue
            ranks = [m.group(0) for m in (re.match(r"rank \d+", d) for d in details) if m]
            by_rank = ", ".join(f"{r}: {ranks.count(r)}" for r in sorted(set(ranks)))
            lines.append(f"- **{klass}** — {sig} kill trials, {len(details)} of {len(outcomes)} ({by_rank}), "
                         f"the first: " + re.sub(r"^rank \d+: ", "", details[0]))
    return lines


def commit():
    try:
        c = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return c.stdout.strip() + (" (with uncommitted changes)" if dirty else "")
    except OSError:
        return "unknown"


def write_doc(text):
    doc = read_text(DOC)
    start, end = doc.find(BEGIN), doc.find(END)
    if start < 0 or end < start:
        sys.exit(f"{DOC}: no {BEGIN} ... {END} block to rewrite")
    with open(DOC, "w") as f:
        f.write(doc[:start + len(BEGIN)] + "\n" + text + doc[end:])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--troupe", default=os.path.join(ROOT, "build/apps/troupe"), help="the troupe binary")
    ap.add_argument("--fast", action="store_true", help="the CI subset (about a third of the cases)")
    ap.add_argument("--kill-trials", type=int, default=0, metavar="N",
                    help="N 2-process mpirun runs per signal (SIGKILL, SIGSTOP) with one rank signalled")
    ap.add_argument("--only", default="", help="run only the groups whose name contains this")
    ap.add_argument("--write", action="store_true", help="rewrite the figures block of docs/reliability.md")
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    a = ap.parse_args()
    troupe = os.path.abspath(a.troupe)
    if not os.access(troupe, os.X_OK):
        sys.exit(f"no troupe binary at {troupe}; build it or pass --troupe")
    random.seed(a.seed)
    rnd = random.Random(a.seed)
    work = tempfile.mkdtemp(prefix="troupe_reliability_")
    runner = Runner(troupe, work)
    fx = Fixtures(runner, work)
    started = time.time()
    server = None

    def server_box():
        nonlocal server
        if server is None:
            server = Server(fx)
        return server
    try:
        fx.build()
        cases = (flag_cases(fx) + layout_cases(fx) + json_line_cases(fx) + dataset_cases(fx) + checkpoint_cases(fx)
                 + hf_cases(fx) + config_cases(fx) + http_cases(fx, server_box) + signal_cases(fx, not a.fast))
        cases = [c for c in cases if (c.fast or not a.fast) and a.only in c.group]
        results = []
        for c in cases:
            t0 = time.time()
            try:
                o = c.run()
            except Exception as e:  # a fault of this script's case, not of troupe: say so and go on
                o = Outcome("vague error", f"the case itself failed: {e!r}")
            o.detail = o.detail.replace(work, "$WORK")  # the report names files the same on every run
            results.append((c.group, c.name, o))
            mark = "  " if o.klass in ("clear error", "accepted correctly") else "!!"
            print(f"{mark} {o.klass:20s} {time.time() - t0:5.1f}s  {c.group}: {c.name}  {o.detail[:160]}", flush=True)
        if server is not None:
            rc = server.stop()
            o = Outcome("accepted correctly") if rc == 0 else Outcome("hang" if rc is None else "crash",
                                                                         f"SIGTERM: exit {rc}, 0 documented")
            results.append(("HTTP requests to troupe serve", "SIGTERM after the battery (exit 0)", o))
            print(f"   {o.klass:20s} serve SIGTERM {o.detail}")
        kills = {}
        for sig in ((signal.SIGKILL, signal.SIGSTOP) if a.kill_trials else ()):
            name = "kill -9" if sig == signal.SIGKILL else "SIGSTOP"
            kills[name] = []
            for t in range(a.kill_trials):
                k, detail = kill_trial(fx, sig, t, rnd)
                kills[name].append((k, detail.replace(work, "$WORK")))
                print(f"{'  ' if k == 'accepted correctly' else '!!'} {name} trial {t + 1}: {k}: {detail}", flush=True)
    finally:
        if server is not None and server.p.poll() is None:
            kill_group(server.p)
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    text = table(results, kills)
    print("\n" + text)
    bad = problems(results, kills)
    print("\n".join(bad) if bad else "no case other than a clear error or a correct answer")
    elapsed = time.time() - started
    print(f"\n{len(results)} cases in {elapsed:.0f} s")
    if a.write:
        stamp = datetime.date.today().isoformat()
        block = (f"Measured {stamp} at commit {commit()} on {os.cpu_count()} CPU cores "
                 f"(`scripts/reliability_report.py{' --fast' if a.fast else ''}"
                 f"{f' --kill-trials {a.kill_trials}' if a.kill_trials else ''} --write`, {elapsed:.0f} s).\n\n"
                 + text + "\nCases that were not a clear error or a correct answer:\n\n"
                 + ("\n".join(bad) if bad else "- none") + "\n")
        write_doc(block)
        print(f"wrote the figures into {DOC}")
    broken = [f"{g}: {n}" for g, n, o in results if o.klass in BROKEN and f"{g}: {n}" not in KNOWN_GAPS]
    broken += [f"{sig} trial: {d}" for sig, v in kills.items() for k, d in v if k in BROKEN]
    fixed = [f"{g}: {n}" for g, n, o in results if o.klass not in BROKEN and f"{g}: {n}" in KNOWN_GAPS]
    for name in broken:
        print(f"FAIL: {name}")
    for name in fixed:
        print(f"FAIL: a known gap now passes, take it off KNOWN_GAPS: {name}")
    return 1 if broken or fixed else 0


if __name__ == "__main__":
    sys.exit(main())
