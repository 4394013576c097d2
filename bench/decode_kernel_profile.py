#!/usr/bin/env python3
"""Each GPU kernel's time in decode_bench's decode steps (CUDA graphs included), for the GPU
machine, which has no Nsight Systems: runs decode_bench (built as BUILD/bench/
libdecode_bench_module.so) inside this process under PyTorch's profiler, whose CUPTI tracing
sees every kernel of the process, graph-replayed ones one by one.

A run of one batch size: a warm-up generate of N tokens, one timed generate of N and one of
1 (--reps 1), so 2 (N - 1) decode steps. The run also uploads the weights and runs three
prefills, so a kernel's time in a decode step is taken as its median duration times its
launches per decode step rounded down (kernels launched less than once per step belong to the
prefills and the set-up). Prints per kernel: launches per step, median microseconds,
microseconds per step, largest first; then their sum beside decode_bench's measured time per
step (the difference: gaps between kernels and host work; the profiler slows the run somewhat).

  python3 bench/decode_kernel_profile.py BUILD --model gpt2-124m --batch 1
"""
import argparse
import ctypes
import json
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--model", default="gpt2-124m")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--tensor-model-parallel-size", type=int, default=1)
    a = ap.parse_args()
    lib = ctypes.CDLL(os.path.join(a.build, "bench", "libdecode_bench_module.so"))
    argv = ["decode_bench", "--model", a.model, "--batches", str(a.batch), "--new", str(a.new), "--reps", "1",
            "--tensor-model-parallel-size", str(a.tensor_model_parallel_size)]
    cargv = (ctypes.c_char_p * len(argv))(*[s.encode() for s in argv])
    torch.cuda.init()
    out_r, out_w = os.pipe()  # decode_bench prints its RESULT line on stdout
    saved = os.dup(1)
    sys.stdout.flush()
    os.dup2(out_w, 1)
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            rc = lib.troupe_decode_bench(len(argv), cargv)
            libc = ctypes.CDLL(None)
            libc.fflush(None)
    finally:
        os.dup2(saved, 1)
        os.close(out_w)
    text = os.read(out_r, 1 << 20).decode()
    print(text, end="")
    if rc != 0:
        sys.exit(f"decode_bench failed ({rc})")
    result = json.loads(next(l[7:] for l in text.splitlines() if l.startswith("RESULT ")))
    steps = 2 * (a.new - 1)
    kernels = {}  # name -> durations, microseconds
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kernels.setdefault(e.name, []).append(e.time_range.elapsed_us())
    rows = []
    for name, d in kernels.items():
        d.sort()
        per_step = len(d) // steps
        if per_step > 0:
            rows.append((d[len(d) // 2] * per_step, per_step, d[len(d) // 2], name))
    rows.sort(reverse=True)
    print(f"{a.model} batch {a.batch} TP{a.tensor_model_parallel_size}: {steps} decode steps; "
          f"measured {result['ms_per_decode_step'] * 1e3:.1f} us/step")
    print(f"{'launches/step':>13} {'median us':>9} {'us/step':>8}  kernel")
    for t, n, med, name in rows[: a.top]:
        print(f"{n:>13d} {med:>9.2f} {t:>8.2f}  {name[:100]}")
    print(f"decode-step kernels: {sum(r[0] for r in rows):.1f} us/step in {sum(r[1] for r in rows)} launches")

if __name__ == "__main__":
    main()
