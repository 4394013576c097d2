"""Speed reference for bench/attention_bench.cpp: torch's SDPA flash kernel, causal, bf16,
on the same shapes, printed the same way (FLOPs: forward 2 B H T^2 D, backward 2.5x that).

    python3 bench/attention_torch_reference.py [--iters 50]
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

CASES = [  # B, T, H, G, D (as in attention_bench.cpp)
    (16, 1024, 12, 12, 64),
    (8, 1024, 16, 16, 64),
    (4, 2048, 32, 8, 128),
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args()
    gen = torch.Generator(device="cuda").manual_seed(0)
    for B, T, H, G, D in CASES:
        def rand(heads):
            return torch.randn(B, heads, T, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        q, k, v = rand(H).requires_grad_(), rand(G).requires_grad_(), rand(G).requires_grad_()
        dout = rand(H)
        gqa = G != H
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            def forward():
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
            try:
                fwd = time_ms(forward, args.iters)
            except RuntimeError as err:  # no flash kernel for this shape in this torch build
                print(f"B={B:<3} T={T:<5} H={H:<3} G={G:<3} D={D:<4} torch flash unavailable: {err}")
                continue
            out = forward()
            bwd = time_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), args.iters)
        flop = 2.0 * B * H * T * T * D
        print(f"B={B:<3} T={T:<5} H={H:<3} G={G:<3} D={D:<4} fwd {fwd:7.3f} ms {flop / fwd * 1e-9:6.1f} TFLOP/s   "
              f"bwd {bwd:7.3f} ms {2.5 * flop / bwd * 1e-9:6.1f} TFLOP/s   (torch {torch.__version__} SDPA flash)")


if __name__ == "__main__":
    main()
