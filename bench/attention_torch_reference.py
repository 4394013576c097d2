"""Speed reference for bench/attention_bench.cpp: torch's SDPA flash kernel, causal, bf16,
on the same shapes, printed the same way (FLOPs: forward 2 B H T^2 D, backward 2.5x that).
Sliding-window cases (W > 0: query i sees keys i - W < j <= i) run flex_attention (torch >= 2.5)
with a block mask, which skips the key blocks outside the window as attention_bench does; their
FLOPs count the visible pairs, 4 B H D (W (W + 1) / 2 + (T - W) W). Unwindowed cases also time
torch's cuDNN SDPA kernel where this torch has it.

--shapes sdpa: issue 21's set (as attention_bench --shapes sdpa). --bench-json FILE: the
Google Benchmark JSON of attention_bench (--benchmark_out_format=json); then a table puts its
backends (flash, cudnn) beside torch's kernels, in TFLOP/s (bench/attention_compare.sh does both).

    python3 bench/attention_torch_reference.py [--iters 50] [--shapes default|sdpa] [--bench-json FILE]
"""
import argparse
import json
import re

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

CASES = [  # B, T, H, G, D, W (as in attention_bench.cpp; W = 0: unbounded)
    (16, 1024, 12, 12, 64, 0),
    (8, 1024, 16, 16, 64, 0),
    (4, 2048, 32, 8, 128, 0),
    (1, 8192, 32, 8, 128, 0),
    (1, 8192, 32, 8, 128, 1024),
]

SDPA_CASES = [  # attention_bench --shapes sdpa: MHA, causal
    (16, 1024, 12, 12, 64, 0),
    (8, 2048, 16, 16, 128, 0),
    (2, 4096, 32, 32, 128, 0),
    (1, 8192, 32, 32, 128, 0),
]


def time_ms(fn, iters):
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def forward_flop(B, T, H, D, W):
    pairs = T * T / 2 if W == 0 or W >= T else W * (W + 1) / 2 + (T - W) * W
    return 4.0 * B * H * D * pairs


def sliding_window_forward(q, k, v, T, W, gqa):
    """flex_attention over the band i - W < j <= i; raises where this torch lacks it."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def visible(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (q_idx - kv_idx < W)

    block_mask = create_block_mask(visible, B=None, H=None, Q_LEN=T, KV_LEN=T)
    attend = torch.compile(flex_attention)
    return lambda: attend(q, k, v, block_mask=block_mask, enable_gqa=gqa)


def sdpa_times(q, k, v, dout, backend, gqa, iters):
    """(forward ms, backward ms) of causal SDPA on one torch backend."""
    with sdpa_kernel(backend):
        def forward():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        fwd = time_ms(forward, iters)
        out = forward()
        bwd = time_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), iters)
    return fwd, bwd


def bench_rates(path):
    """{(B, T, H, G, D, W): {"flash": (fwd, bwd), ...}} in TFLOP/s from attention_bench's JSON."""
    with open(path) as f:
        runs = json.load(f)["benchmarks"]
    rates = {}
    for run in runs:
        if run.get("error_occurred") or "FLOP" not in run:
            continue
        parts = run["name"].split("/")
        if len(parts) < 3 or parts[0] != "attention":
            continue
        backend, direction = parts[1], parts[2]
        args = dict(re.findall(r"([BTHGDW]):(\d+)", run["name"]))
        key = tuple(int(args[a]) for a in "BTHGDW")
        fwd, bwd = rates.setdefault(key, {}).get(backend, (None, None))
        tflops = run["FLOP"] * 1e-12
        rates[key][backend] = (tflops, bwd) if direction == "forward" else (fwd, tflops)
    return rates


def print_table(measured, rates):
    """Ours (from the JSON) beside torch's kernels, forward then backward, TFLOP/s."""
    columns = ["ours flash", "ours cudnn", "torch flash", "torch cudnn"]
    print()
    print(f"{'shape':<38}| {'forward TFLOP/s':^47} | {'backward TFLOP/s':^47}")
    print(f"{'':<38}| " + " ".join(f"{c:>11}" for c in columns) + " | " + " ".join(f"{c:>11}" for c in columns))
    for key, torch_rates in measured.items():
        B, T, H, G, D, W = key
        ours = rates.get(key, {})
        row = {"ours flash": ours.get("flash", (None, None)), "ours cudnn": ours.get("cudnn", (None, None)),
               "torch flash": torch_rates.get("flash", (None, None)),
               "torch cudnn": torch_rates.get("cudnn", (None, None))}

        def cell(x):
            return f"{x:11.1f}" if x is not None else f"{'-':>11}"
        label = f"B={B} T={T} H={H} G={G} D={D}" + (f" W={W}" if W else "")
        print(f"{label:<38}| " + " ".join(cell(row[c][0]) for c in columns) + " | " +
              " ".join(cell(row[c][1]) for c in columns))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--shapes", choices=["default", "sdpa"], default="default")
    parser.add_argument("--bench-json", help="attention_bench's --benchmark_out JSON, printed beside torch")
    args = parser.parse_args()
    gen = torch.Generator(device="cuda").manual_seed(0)
    measured = {}  # (B, T, H, G, D, W) -> {"flash" | "cudnn": (fwd TFLOP/s, bwd TFLOP/s)}
    for B, T, H, G, D, W in (SDPA_CASES if args.shapes == "sdpa" else CASES):
        def rand(heads):
            return torch.randn(B, heads, T, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        q, k, v = rand(H).requires_grad_(), rand(G).requires_grad_(), rand(G).requires_grad_()
        dout = rand(H)
        gqa = G != H
        label = f"B={B:<3} T={T:<5} H={H:<3} G={G:<3} D={D:<4} W={W:<5}"
        flop = forward_flop(B, T, H, D, W)
        results = measured.setdefault((B, T, H, G, D, W), {})

        def report(kernel, name, fwd, bwd):
            results[name] = (flop / fwd * 1e-9, 2.5 * flop / bwd * 1e-9)
            print(f"{label} fwd {fwd:7.3f} ms {flop / fwd * 1e-9:6.1f} TFLOP/s   "
                  f"bwd {bwd:7.3f} ms {2.5 * flop / bwd * 1e-9:6.1f} TFLOP/s   (torch {torch.__version__} {kernel})")

        if W > 0:
            try:
                forward = sliding_window_forward(q, k, v, T, W, gqa)
                fwd = time_ms(forward, args.iters)
            except Exception as err:  # no flex_attention (or no compiler for it) in this torch build
                print(f"{label} torch flex_attention unavailable: {err}")
                continue
            out = forward()
            bwd = time_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), args.iters)
            report("flex_attention", "flash", fwd, bwd)
            continue
        for kernel, name, backend in (("SDPA flash", "flash", SDPBackend.FLASH_ATTENTION),
                                      ("SDPA cuDNN", "cudnn", getattr(SDPBackend, "CUDNN_ATTENTION", None))):
            if backend is None:
                print(f"{label} torch {kernel} unavailable: this torch has no SDPBackend.CUDNN_ATTENTION")
                continue
            try:
                fwd, bwd = sdpa_times(q, k, v, dout, backend, gqa, args.iters)
            except RuntimeError as err:  # no such kernel for this shape in this torch build
                print(f"{label} torch {kernel} unavailable: {err}")
                continue
            report(kernel, name, fwd, bwd)
    if args.bench_json:
        print_table(measured, bench_rates(args.bench_json))


if __name__ == "__main__":
    main()
