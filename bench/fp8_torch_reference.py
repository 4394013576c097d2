"""PyTorch reference for FP8 training (issue 21): GPT-2 whose transformer linears (qkv, proj,
fc1, fc2) run their forward, input-gradient and weight-gradient GEMMs through torch._scaled_mm
with per-tensor current scaling (Transformer Engine's "tensorwise"; Megatron --fp8-recipe
tensorwise --fp8-format hybrid: e4m3 inputs and weights, e5m2 output gradients). The embedding
and LM head stay bf16, as in Troupe and TE. --mode bf16 runs the same model without FP8.

Trains on a Megatron .bin of uint16 tokens (bench/fp8_train.sh preprocesses the bundled corpus)
and prints the loss every --log-interval steps and a RESULT json line (tokens/s over the steps
after --warmup, first and last loss).
"""
import argparse
import json
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def quantize(t, dtype):
    """Current scaling: scale = fp8_max / amax; returns the fp8 tensor and its dequantization scale."""
    fmax = torch.finfo(dtype).max
    amax = t.abs().amax().float().clamp(min=1e-12)
    scale = fmax / amax
    q = (t.float() * scale).clamp(-fmax, fmax).to(dtype)
    return q, scale.reciprocal()


def mm(a, a_inv, b_t, b_inv):
    """a [M, K] row-major fp8 times b [K, N] given as b_t [N, K] row-major (column-major b)."""
    return torch._scaled_mm(a, b_t.t(), scale_a=a_inv, scale_b=b_inv, out_dtype=torch.bfloat16)


class Fp8LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        qx, x_inv = quantize(x2, E4M3)
        qw, w_inv = quantize(w, E4M3)
        y = mm(qx, x_inv, qw, w_inv) + b
        ctx.save_for_backward(qx, x_inv, qw, w_inv)
        ctx.shape = shape
        return y.reshape(*shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, dy):
        qx, x_inv, qw, w_inv = ctx.saved_tensors
        dy2 = dy.reshape(-1, dy.shape[-1])
        qdy, dy_inv = quantize(dy2, E5M2)
        dx = mm(qdy, dy_inv, qw.t().contiguous(), w_inv)  # dy [M, N] . w [N, K]
        dw = mm(qdy.t().contiguous(), dy_inv, qx.t().contiguous(), x_inv)  # dy^T [N, M] . x [M, K]
        db = dy2.float().sum(0).to(dy.dtype)
        return dx.reshape(ctx.shape), dw.to(torch.bfloat16), db


class Linear(nn.Linear):
    fp8 = False

    def forward(self, x):
        if Linear.fp8:
            return Fp8LinearFn.apply(x, self.weight, self.bias)
        return super().forward(x)


class Block(nn.Module):
    def __init__(self, d, nh):
        super().__init__()
        self.nh = nh
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = Linear(d, 3 * d), Linear(d, d)
        self.fc1, self.fc2 = Linear(d, 4 * d), Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.nh, C // self.nh).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(a)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, heads, dim, vocab, seq):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.lnf = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.wte.weight
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.lnf(x)).float()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True, help="Megatron .bin of uint16 tokens")
    ap.add_argument("--mode", choices=["bf16", "fp8"], default="fp8")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--iters", type=int, default=500)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--min-lr", type=float, default=6e-5)
    ap.add_argument("--warmup", type=int, default=20, help="steps before timing, and lr warm-up")
    ap.add_argument("--log-interval", type=int, default=50)
    ap.add_argument("--compile", action="store_true")
    args = ap.parse_args()

    torch.manual_seed(1234)
    Linear.fp8 = args.mode == "fp8"
    dev = "cuda"
    tokens = np.memmap(args.data, dtype=np.uint16, mode="r")
    model = GPT(args.layers, args.heads, args.dim, args.vocab, args.seq).to(dev).to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    fwd = torch.compile(model) if args.compile else model
    rng = np.random.default_rng(1)
    n = args.batch * args.seq

    def batch():
        starts = rng.integers(0, len(tokens) - args.seq - 1, size=args.batch)
        w = np.stack([tokens[s:s + args.seq + 1] for s in starts]).astype(np.int64)
        t = torch.from_numpy(w).to(dev, non_blocking=True)
        return t[:, :-1], t[:, 1:]

    losses, t0 = [], None
    for it in range(1, args.iters + 1):
        if it == args.warmup + 1:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        lr = args.lr * min(1.0, it / args.warmup)
        if it > args.warmup:
            frac = (it - args.warmup) / max(1, args.iters - args.warmup)
            lr = args.min_lr + 0.5 * (args.lr - args.min_lr) * (1 + math.cos(math.pi * frac))
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = batch()
        loss = fwd(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if it % args.log_interval == 0 or it == 1:
            losses.append(loss.item())
            print(f"iteration {it} lm loss {losses[-1]:.4f}", flush=True)
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    res = {"mode": args.mode, "tokens_per_s": n * (args.iters - args.warmup) / elapsed, "first_loss": losses[0],
           "last_loss": losses[-1]}
    print("RESULT " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
