"""Speed reference for bench/attention_bench.cpp: torch's SDPA flash kernel, causal, bf16,
on the same shapes, printed the same way (FLOPs: forward 2 B H T^2 D, backward 2.5x that).
Sliding-window cases (W > 0: query i sees keys i - W < j <= i) run flex_attention (torch >= 2.5)
with a block mask, which skips the key blocks outside the window as attention_bench does; their
FLOPs count the visible pairs, 4 B H D (W (W + 1) / 2 + (T - W) W).

    python3 bench/attention_torch_reference.py [--iters 50]
"""
import argparse

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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args()
    gen = torch.Generator(device="cuda").manual_seed(0)
    for B, T, H, G, D, W in CASES:
        def rand(heads):
            return torch.randn(B, heads, T, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        q, k, v = rand(H).requires_grad_(), rand(G).requires_grad_(), rand(G).requires_grad_()
        dout = rand(H)
        gqa = G != H
        label = f"B={B:<3} T={T:<5} H={H:<3} G={G:<3} D={D:<4} W={W:<5}"
        if W > 0:
            kernel = "flex_attention"
            try:
                forward = sliding_window_forward(q, k, v, T, W, gqa)
                fwd = time_ms(forward, args.iters)
            except Exception as err:  # no flex_attention (or no compiler for it) in this torch build
                print(f"{label} torch flex_attention unavailable: {err}")
                continue
            out = forward()
            bwd = time_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), args.iters)
        else:
            kernel = "SDPA flash"
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                def forward():
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
                try:
                    fwd = time_ms(forward, args.iters)
                except RuntimeError as err:  # no flash kernel for this shape in this torch build
                    print(f"{label} torch flash unavailable: {err}")
                    continue
                out = forward()
                bwd = time_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), args.iters)
        flop = forward_flop(B, T, H, D, W)
        print(f"{label} fwd {fwd:7.3f} ms {flop / fwd * 1e-9:6.1f} TFLOP/s   "
              f"bwd {bwd:7.3f} ms {2.5 * flop / bwd * 1e-9:6.1f} TFLOP/s   (torch {torch.__version__} {kernel})")


if __name__ == "__main__":
    main()
