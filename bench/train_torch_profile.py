#!/usr/bin/env python3
"""Where torch.compile's GPT-2 training step goes on the GPU: the baseline's model and step
(.baselines/train_gpt2_torch.py: bf16 autocast, torch.compile, fused AdamW, clipping at 1.0)
under torch.profiler, kernels grouped into coarse classes, ms per step. Read beside
`train_bench --profile` of the same shape (bench/compare_train_torch.sh PROFILE=1).

Usage (repo root, on the GPU machine):
  python3 bench/train_torch_profile.py --layers 24 --heads 16 --dim 1024 --batch 32 [--steps 3]
"""
import argparse
import collections
import importlib.util
import os
import time

import torch
from torch.profiler import ProfilerActivity, profile

# Kernel name fragments -> class (first match wins; lower-case).
CLASSES = [
    ("attention", ("flash", "fmha", "attention", "sdpa", "cudnn")),
    ("gemm", ("gemm", "sm90_xmma", "cutlass", "nvjet", "matmul", "splitk")),
    ("cross-entropy", ("log_softmax", "nll", "cross_entropy")),
    ("layer norm (+ fused)", ("layer_norm",)),
    ("optimizer, grad norm", ("adam", "fusedopti", "multi_tensor", "reduce_kernel")),
    ("other fused element-wise", ("triton",)),
    ("memset/copy", ("memset", "memcpy", "copy")),
]


def classify(name):
    n = name.lower()
    for cls, keys in CLASSES:
        if any(k in n for k in keys):
            return cls
    return "other"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()

    path = os.path.join(os.path.dirname(__file__), "..", ".baselines", "train_gpt2_torch.py")
    spec = importlib.util.spec_from_file_location("train_gpt2_torch", path)
    base = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(base)

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    model = base.GPT(a.layers, a.heads, a.dim, 50304, a.seq).cuda()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    nodecay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    fwd = torch.compile(model)
    x = torch.randint(0, 50257, (a.batch, a.seq), device="cuda")
    y = torch.randint(0, 50257, (a.batch, a.seq), device="cuda")

    def step():
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = fwd(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(10):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    torch.cuda.synchronize()
    wall_ms = (time.perf_counter() - t0) * 1e3 / a.steps

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(a.steps):
            step()
        torch.cuda.synchronize()
    by_name = collections.Counter()
    count = collections.Counter()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            by_name[e.name] += e.device_time_total / 1e3 / a.steps  # us -> ms per step
            count[e.name] += 1
    by_class = collections.Counter()
    for name, ms in by_name.items():
        by_class[classify(name)] += ms
    total = sum(by_name.values())
    print(f"torch.compile L{a.layers} H{a.heads} C{a.dim} B{a.batch} T{a.seq}: wall {wall_ms:.3f} ms/step "
          f"(unprofiled), kernels {total:.3f} ms/step, {sum(count.values()) // a.steps} launches/step")
    print("class                     ms/step   share")
    for cls, ms in by_class.most_common():
        print(f"{cls:24s} {ms:8.3f} {100 * ms / total:6.1f}%")
    print(f"top {a.top} kernels (ms/step, launches/step):")
    for name, ms in by_name.most_common(a.top):
        print(f"{ms:8.3f} {count[name] // a.steps:5d}  {name[:110]}")


if __name__ == "__main__":
    main()
