#!/usr/bin/env python3
"""PyTorch timings of the GEMMs bench/gemm_bench.cpp times, for a side-by-side ratio.

Same shapes (GPT-2's linear layers at --hidden, M = B*T rows), same dtype, CUDA-event medians:
  fwd = F.linear(x, w, b)   dx = dy @ w   dw = dy.T @ x (bf16 out, as under autocast)
  db  = dy.sum(0) in f32
With --troupe FILE (gemm_bench's Google Benchmark JSON), prints troupe/torch throughput ratios
(> 1: Troupe faster); Troupe's time per GEMM is the case's median over --benchmark_repetitions
when there are several, else its mean.

  build/bench/gemm_bench --benchmark_out=gemm.json --benchmark_out_format=json [--tune]
  python3 bench/gemm_torch_reference.py [--m 16384] [--hidden 768] [--dtype bf16] [--troupe gemm.json]
"""
import argparse
import json

import torch
import torch.nn.functional as F

def gpt2_shapes(c):
    """name, K, N, bias, per forward pass: GPT-2's linear layers at hidden size c (as gemm_bench --hidden)."""
    layers = {768: 12, 1024: 24}[c]  # --hidden takes only these two
    return [
        ("attn_qkv", c, 3 * c, True, layers),
        ("attn_proj", c, c, True, layers),
        ("mlp_fc", c, 4 * c, True, layers),
        ("mlp_proj", 4 * c, c, True, layers),
        ("lm_head", c, 50304, False, 1),
    ]


def median_ms(fn, reps):
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return sorted(times)[reps // 2]


def read_troupe(path, m):
    """gemm_bench's Google Benchmark JSON -> {shape: {"fwd_ms": .., "dx_ms": .., "dw_ms": .., "tuned": {..}}}.

    Case names are gemm/<shape>/<op>[/tuned]/M:<m>/K:<k>/N:<n>/..., times in each case's time_unit.
    """
    to_ms = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
    with open(path) as f:
        runs = json.load(f)["benchmarks"]
    medians = {r["run_name"] for r in runs if r.get("aggregate_name") == "median"}
    out = {}
    for r in runs:
        if r.get("error_occurred") or r.get("skipped"):
            continue
        if r["run_name"] in medians and r.get("aggregate_name") != "median":
            continue  # several repetitions: the median stands for them
        if r["run_type"] == "aggregate" and r.get("aggregate_name") != "median":
            continue
        parts = r["run_name"].split("/")
        if parts[0] != "gemm" or f"M:{m}" not in parts:
            continue
        shape, op, tuned = parts[1], parts[2], parts[3] == "tuned"
        entry = out.setdefault(shape, {})
        if tuned:
            entry = entry.setdefault("tuned", {})
        entry[f"{op}_ms"] = r["real_time"] * to_ms[r["time_unit"]]
    return out


def tflops(m, k, n, ms):
    return 2.0 * m * k * n / (ms * 1e-3) / 1e12


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, default=16384)
    ap.add_argument("--hidden", type=int, default=768, choices=[768, 1024], help="768: GPT-2 124M, 1024: 350M")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16"])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--troupe", help="gemm_bench's --benchmark_out JSON to compare against")
    args = ap.parse_args()
    dt = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    troupe = {}
    if args.troupe:
        troupe = read_troupe(args.troupe, args.m)
        if not troupe:
            print(f"warning: no gemm/<shape> cases with M={args.m} in {args.troupe}")

    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}, {args.dtype}, M={args.m}")
    m = args.m
    step = {"torch": 0.0}
    for name, k, n, has_bias, per_step in gpt2_shapes(args.hidden):
        x = torch.randn(m, k, device="cuda", dtype=dt)
        w = torch.randn(n, k, device="cuda", dtype=dt) * 0.05
        b = torch.randn(n, device="cuda", dtype=dt) * 0.1 if has_bias else None
        dy = torch.randn(m, n, device="cuda", dtype=dt) * 1e-3
        t = {
            "fwd_ms": median_ms(lambda: F.linear(x, w, b), args.reps),
            "dx_ms": median_ms(lambda: dy @ w, args.reps),
            "dw_ms": median_ms(lambda: dy.t() @ x, args.reps),
        }
        line = f"{name:<10} M={m} K={k:<5} N={n:<6}"
        for key in ("fwd_ms", "dx_ms", "dw_ms"):
            line += f" | {key[:-3]} {t[key]:7.3f} ms {tflops(m, k, n, t[key]):6.1f} TF/s"
        if has_bias:
            db_ms = median_ms(lambda: dy.sum(0, dtype=torch.float32), args.reps)
            line += f" | db {db_ms:6.3f} ms"
        print(line)
        step["torch"] += per_step * sum(t.values())
        for label in ("troupe", "tuned"):
            ours = troupe.get(name, {}) if label == "troupe" else troupe.get(name, {}).get("tuned")
            if not ours or any(key not in ours for key in t):
                continue
            ratios = " ".join(f"{key[:-3]} {t[key] / ours[key]:.3f}" for key in t)
            print(f"{'':<10} {label}/torch throughput: {ratios}")
            step[label] = step.get(label, 0.0) + per_step * sum(ours[key] for key in t)
        del x, w, b, dy
    print(f"GPT-2 hidden {args.hidden} step, all linear GEMMs (fwd+dx+dw): torch {step['torch']:.2f} ms")
    for label in ("troupe", "tuned"):
        if step.get(label):
            print(f"  {label} {step[label]:.2f} ms, throughput vs torch {step['torch'] / step[label]:.3f}")

if __name__ == "__main__":
    main()
