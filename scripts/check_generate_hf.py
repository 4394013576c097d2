#!/usr/bin/env python3
"""Greedy generation parity: `troupe generate` against HF transformers `generate` on the same weights.

For random-init GPT2LMHeadModel, LlamaForCausalLM, MixtralForCausalLM, Qwen2MoeForCausalLM and
Qwen3MoeForCausalLM models (check_hf_parity.py's, matrices scaled
up so the logits are peaked and greedy choices are not near-ties), saved as HF folders with the GPT-2 tokenizer files:
runs HF greedy generate and our engine, several prompts batched together in one `troupe generate`
call, in four settings: `cpu` (both fp32 on the CPU), `cuda-f32` (both fp32 on the GPU: ours
`--dtype f32`, HF without TF32), `cuda` (both bf16 on the GPU) and `cuda-f32-tp2` (as cuda-f32,
ours a tensor-parallel replica over 2 GPUs; skipped below 2 GPUs; MoE models must be refused there,
naming the flag: not implemented), and prints, per (model,
setting), how many prompts match token for token and the shortest common prefix. Exits non-zero
if ours differs from HF on any prompt in fp32 (CPU or GPU), or matches HF bf16 on fewer than
--min-cuda-match of the prompts (default 0: bf16 greedy decoding diverges on near-ties whoever
computes it; the row shows HF bf16 against HF fp32 beside ours).

Usage (repo root, torch + transformers installed):
  python3 scripts/check_generate_hf.py --troupe build/apps/troupe [--devices cpu,cuda-f32,cuda] [--tokens 32]
"""
import argparse
import copy
import os
import shutil
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_hf_parity import make_model  # noqa: E402

PROMPTS = [
    "Hello, my name is",
    "The capital of France is",
    "In 1492, Columbus",
    "def fibonacci(n):",
    "Once upon a time there was a little",
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
]


SHAPES = {
    "gpt2": dict(seed=10, layers=2, hidden=128, heads=4, positions=256, vocab=50257),
    "llama": dict(seed=11, layers=2, hidden=128, heads=4, groups=2, ffn=352, positions=256, vocab=50257),
    # Mixtures of experts (check_hf_parity.py's kinds, GPT-2's vocabulary): 8 experts top-2; Mixtral's
    # renormalized softmax, Qwen2-MoE's gated shared expert without renormalizing, Qwen3-MoE's q/k norms.
    "mixtral": dict(seed=12, layers=2, hidden=128, heads=4, groups=2, ffn=64, moe_ffn=64, experts=8, topk=2,
                    positions=256, vocab=50257, theta=1000000.0),
    "qwen2_moe": dict(seed=13, layers=2, hidden=128, heads=4, groups=2, ffn=128, moe_ffn=64, experts=8, topk=2,
                      shared=96, norm_topk_prob=False, positions=256, vocab=50257),
    "qwen3_moe": dict(seed=14, layers=2, hidden=128, heads=4, groups=2, head_dim=32, ffn=128, moe_ffn=64,
                      experts=8, topk=2, norm_topk_prob=True, positions=256, vocab=50257, theta=1000000.0),
}
MOE_KINDS = {kind for kind, shape in SHAPES.items() if "experts" in shape}


def make_peaked_model(kind):
    """check_hf_parity's random model with its matrices scaled up: peaked logits, few greedy near-ties."""
    model = make_model(kind, SHAPES[kind])
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() >= 2:  # matrices, and MoE experts stacked [E, ...]
                p.mul_(8.0)
    return model


def hf_greedy(model, ids, tokens, device, dtype):
    m = copy.deepcopy(model).to(device=device, dtype=dtype)  # the fp32 original stays as saved
    x = torch.tensor([ids], device=device)
    with torch.no_grad():
        out = m.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=tokens, do_sample=False,
                         eos_token_id=None, pad_token_id=0)
    return out[0, len(ids):].tolist()


def ours(troupe, folder, device, dtype, tokens, tp=1):
    cmd = [troupe, "generate", "--hf", folder, "--device", device, "--temperature", "0", "--ignore-eod",
           "--max-tokens", str(tokens), "--print-ids", "--tensor-model-parallel-size", str(tp)]
    cmd += ["--dtype", dtype] if device == "cuda" else []
    for p in PROMPTS:
        cmd += ["--prompt", p]
    try:  # a hang is a failure of its own, not a stuck check
        r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=180)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"troupe generate (--tensor-model-parallel-size {tp}, {device} {dtype}) did not finish in 180 s")
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip()[-500:])
    rows = [line[4:].split() for line in r.stdout.splitlines() if line.startswith("ids:")]
    if len(rows) != len(PROMPTS):
        raise RuntimeError(f"expected {len(PROMPTS)} 'ids:' lines, got {len(rows)}:\n{r.stdout[-800:]}")
    return [[int(t) for t in row] for row in rows], r.stderr.strip().splitlines()[-1]


def decode_speed(troupe, tokens):
    """tokens/s of `troupe generate` (its stderr summary) with and without CUDA graphs, 1 and 8 prompts."""
    import transformers
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        transformers.GPT2LMHeadModel(transformers.GPT2Config()).save_pretrained(tmp, safe_serialization=True)
        here = os.path.dirname(os.path.abspath(__file__))
        shutil.copy(os.path.join(here, "../assets/gpt2/gpt2-vocab.json"), os.path.join(tmp, "vocab.json"))
        shutil.copy(os.path.join(here, "../assets/gpt2/gpt2-merges.txt"), os.path.join(tmp, "merges.txt"))
        for n in (1, 8):
            for graphs in (True, False):
                cmd = [troupe, "generate", "--hf", tmp, "--device", "cuda", "--temperature", "0", "--ignore-eod",
                       "--max-tokens", str(tokens)] + ["--prompt", "The"] * n + ([] if graphs else ["--no-cuda-graphs"])
                r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=180)
                last = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "?"
                tps = last.split("(")[-1].split(" tokens/s")[0] if r.returncode == 0 else "ERROR " + last[-200:]
                rows.append((n, "on" if graphs else "off", tps))
    return rows


def common_prefix(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--troupe", required=True)
    ap.add_argument("--devices", default="cpu,cuda-f32,cuda,cuda-f32-tp2",
                    help="settings: cpu, cuda-f32, cuda (bf16), cuda-f32-tp2 (fp32, tensor-parallel over 2 GPUs; "
                         "skipped with fewer)")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--speed-tokens", type=int, default=256, help="decode-speed check length (0: skip)")
    ap.add_argument("--min-cuda-match", type=float, default=0.0,
                    help="fraction of prompts that must match HF bf16 in the bf16 setting (default: report only; "
                         "random models' bf16 greedy runs diverge on near-ties, HF's own against its fp32 too)")
    ap.add_argument("--folder", action="append", default=[],
                    help="an HF folder to check instead of the random models (e.g. `troupe convert --to hf` "
                         "of a trained checkpoint); repeatable")
    a = ap.parse_args()
    from tokenizers import Tokenizer, models, pre_tokenizers
    here = os.path.dirname(os.path.abspath(__file__))
    vocab, merges = os.path.join(here, "../assets/gpt2/gpt2-vocab.json"), os.path.join(here, "../assets/gpt2/gpt2-merges.txt")
    # HF `tokenizers`' BPE with GPT-2's byte-level pre-tokenizer (transformers 5's GPT2Tokenizer*
    # built from vocab/merges files encodes to nothing).
    tok = Tokenizer(models.BPE.from_file(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    prompt_ids = [tok.encode(p).ids for p in PROMPTS]
    assert all(prompt_ids), f"the GPT-2 tokenizer encoded a prompt to nothing: {prompt_ids}"

    rows, failed = [], False
    with tempfile.TemporaryDirectory() as tmp:
        import transformers
        cases = [(os.path.basename(os.path.normpath(f)), f) for f in a.folder] or [(k, None) for k in SHAPES]
        for kind, folder in cases:
            if folder is None:
                model = make_peaked_model(kind)
                folder = os.path.join(tmp, kind)
                model.save_pretrained(folder, safe_serialization=True)
                shutil.copy(vocab, os.path.join(folder, "vocab.json"))
                shutil.copy(merges, os.path.join(folder, "merges.txt"))
            else:
                model = transformers.AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32)
            for setting in a.devices.split(","):
                dev, exact = setting.split("-")[0], setting != "cuda"  # exact: fp32 on both sides
                tp = 2 if setting.endswith("-tp2") else 1  # a tensor-parallel replica of 2 GPUs
                if dev == "cuda" and torch.cuda.device_count() < tp:
                    continue
                dtype = torch.float32 if exact else torch.bfloat16
                ref = [hf_greedy(model, ids, a.tokens, dev, dtype) for ids in prompt_ids]
                try:
                    got, speed = ours(a.troupe, folder, dev, "f32" if exact else "bf16", a.tokens, tp)
                except RuntimeError as e:
                    # Tensor-parallel MoE inference is not implemented: troupe must refuse it by name.
                    refused = tp > 1 and kind in MOE_KINDS and "--tensor-model-parallel-size" in str(e)
                    rows.append((kind, setting, None, ("refused as expected: " if refused else "") + str(e)))
                    failed |= not refused
                    continue
                match = sum(g == r for g, r in zip(got, ref))
                prefix = min(common_prefix(g, r) for g, r in zip(got, ref))
                if not exact:
                    # bf16 noise or a real difference? Both bf16 runs against HF in fp32 on the GPU.
                    ref32 = [hf_greedy(model, ids, a.tokens, dev, torch.float32) for ids in prompt_ids]
                    ours32 = sum(g == r for g, r in zip(got, ref32))
                    hf32 = sum(g == r for g, r in zip(ref, ref32))
                    speed = f"vs HF fp32: ours bf16 {ours32}/{len(PROMPTS)}, HF bf16 {hf32}/{len(PROMPTS)}; " + speed
                need = len(PROMPTS) if exact else a.min_cuda_match * len(PROMPTS)
                ok = match >= need
                failed |= not ok
                rows.append((kind, setting, (match, prefix, ok), speed))

    speed_rows = []
    if "cuda" in a.devices and torch.cuda.is_available() and a.speed_tokens > 0:
        speed_rows = decode_speed(a.troupe, a.speed_tokens)

    print(f"{'model':6} {'setting':8} {'equal prompts':>14} {'min prefix':>11}  result / our speed")
    for kind, dev, res, note in rows:
        if res is None:
            print(f"{kind:6} {dev:8} {'-':>14} {'-':>11}  {'ok' if note.startswith('refused') else 'ERROR'} {note}")
        else:
            match, prefix, ok = res
            print(f"{kind:6} {dev:8} {f'{match}/{len(PROMPTS)}':>14} {f'{prefix}/{a.tokens}':>11}  "
                  f"{'ok' if ok else 'FAIL'}  ({note})")
    if speed_rows:
        print(f"\ndecode speed, GPT-2 124M shape (random weights), bf16, {a.speed_tokens} tokens after a short prompt:")
        print(f"{'prompts':>7} {'cuda graphs':>11} {'tokens/s':>9}")
        for n, graphs, tps in speed_rows:
            print(f"{n:>7} {graphs:>11} {tps:>9}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
