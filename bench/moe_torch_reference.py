#!/usr/bin/env python3
"""PyTorch reference for bench/moe_train.sh: the same two MoE models trained on random tokens.

The model is bench/moe_train.sh's (llama-tiny preset with overrides): 8 layers, hidden 512,
8 heads in 2 query groups (GQA), RMSNorm, RoPE, no biases, untied output layer, vocabulary
50304 (GPT-2's padded to 128), every layer's MLP a mixture of SwiGLU experts:
  --shape mixtral:  8 experts of 1024, top-2, softmax over the top-k logits
  --shape deepseek: 64 experts of 256, top-6, sigmoid scores with an expert bias (selection only,
                    updated after each step by the sign of the load error), top-k probs
                    normalized and scaled by 2.5, a shared SwiGLU expert of 512
plus the load-balancing (aux) loss, coefficient 1e-2. bf16 autocast, fused AdamW, micro-batch 8
x 4 microbatches of 512 tokens (global batch 32: moe_train.sh's tokens per step).

Experts run as one grouped GEMM over tokens sorted by expert (torch.nn.functional.grouped_mm or
torch._grouped_mm when this torch has one and it matches the loop on a test), else a loop of
matmuls over each expert's contiguous rows. --compile compiles each layer's attention block
(the dense part) when that works; the RESULT line says which paths ran.

FLOPs per token as `troupe train` counts them: 6 x active parameters + 12 x layers x hidden x
seq (active: all parameters less the (E - k) unchosen experts of each layer).

    python3 bench/moe_torch_reference.py --shape mixtral [--compile] [--peak 800] [--steps 20]
Prints `RESULT {json}` with tokens_per_s (and mfu with --peak).
"""
import argparse
import json
import math
import time
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

SHAPES = {  # experts, top-k, expert ffn, shared ffn, score function, top-k scaling
    "mixtral": dict(experts=8, topk=2, ffn=1024, shared=0, score="softmax", scale=1.0),
    "deepseek": dict(experts=64, topk=6, ffn=256, shared=512, score="sigmoid", scale=2.5),
}
LAYERS, HIDDEN, HEADS, GROUPS, VOCAB = 8, 512, 8, 2, 50304
AUX_COEFF, BIAS_RATE = 1e-2, 1e-3


def grouped_mm_fn():
    """The grouped GEMM of this torch, or None."""
    if hasattr(F, "grouped_mm"):
        return F.grouped_mm
    if hasattr(torch, "_grouped_mm"):
        return torch._grouped_mm
    return None


def loop_mm(x, w, offsets):
    """x [R, K] rows sorted by expert, w [E, K, N], offsets [E] int32 cumulative ends -> [R, N]."""
    out = x.new_empty(x.shape[0], w.shape[2])
    ends = offsets.tolist()
    begin = 0
    for e, end in enumerate(ends):
        if end > begin:
            out[begin:end] = x[begin:end] @ w[e]
        begin = end
    return out


def pick_expert_mm():
    """grouped_mm when it exists and matches the loop (forward and backward) on a small test."""
    gmm = grouped_mm_fn()
    if gmm is None:
        return loop_mm, "loop (no grouped_mm in this torch)"
    try:
        torch.manual_seed(0)
        x = torch.randn(96, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        w = torch.randn(4, 32, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)  # [E, N, K]
        offs = torch.tensor([16, 16, 72, 96], device="cuda", dtype=torch.int32)  # one empty group
        y = gmm(x, w.transpose(-2, -1), offs=offs)
        y.float().square().sum().backward()
        gx, gw = x.grad.clone(), w.grad.clone()
        x.grad, w.grad = None, None
        y_ref = loop_mm(x, w.transpose(-2, -1), offs)
        y_ref.float().square().sum().backward()
        close = lambda a, b: (a.float() - b.float()).abs().max().item() <= 0.05 * b.float().abs().max().item() + 1e-2
        if close(y, y_ref) and close(gx, x.grad) and close(gw, w.grad):
            return (lambda a, b, o: gmm(a, b, offs=o)), "grouped_mm (" + gmm.__module__ + "." + gmm.__name__ + ")"
        return loop_mm, "loop (grouped_mm differs from the loop on a test)"
    except Exception as e:  # noqa: BLE001 - any failure means: use the loop
        return loop_mm, "loop (grouped_mm failed: " + str(e).splitlines()[0][:120] + ")"


def rope_tables(seq, dim, base=10000.0):
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, device="cuda", dtype=torch.float32) / dim))
    ang = torch.outer(torch.arange(seq, device="cuda", dtype=torch.float32), inv)
    return torch.cos(ang), torch.sin(ang)  # [T, D/2]


def apply_rope(x, cos, sin):
    """x [B, H, T, D], rotate-half (Megatron's / HF Llama's layout)."""
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d].float(), x[..., d:].float()
    out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    return out.type_as(x)


class Attention(nn.Module):
    """RMSNorm -> QKV (GQA) -> RoPE -> causal SDPA -> output projection (residual outside)."""

    def __init__(self):
        super().__init__()
        self.head_dim = HIDDEN // HEADS
        self.norm = nn.RMSNorm(HIDDEN, eps=1e-5)
        self.qkv = nn.Linear(HIDDEN, (HEADS + 2 * GROUPS) * self.head_dim, bias=False)
        self.proj = nn.Linear(HEADS * self.head_dim, HIDDEN, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        d = self.head_dim
        q, k, v = self.qkv(self.norm(x)).split([HEADS * d, GROUPS * d, GROUPS * d], dim=-1)
        q = apply_rope(q.reshape(b, t, HEADS, d).transpose(1, 2), cos, sin)
        k = apply_rope(k.reshape(b, t, GROUPS, d).transpose(1, 2), cos, sin)
        v = v.reshape(b, t, GROUPS, d).transpose(1, 2)
        k = k.repeat_interleave(HEADS // GROUPS, dim=1)
        v = v.repeat_interleave(HEADS // GROUPS, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.proj(y.transpose(1, 2).reshape(b, t, HEADS * d))


class MoE(nn.Module):
    """Router (f32) -> top-k -> tokens sorted by expert -> SwiGLU experts -> weighted sum; shared expert."""

    def __init__(self, s, expert_mm):
        super().__init__()
        e, f = s["experts"], s["ffn"]
        self.s, self.expert_mm = s, expert_mm
        self.router = nn.Parameter(torch.randn(e, HIDDEN) * 0.02)
        # Weights [E, out, in] as ours (rows of fc1: [gate | up]); the GEMMs take them transposed
        # (column-major B, the layout torch's grouped GEMM tests use).
        self.fc1 = nn.Parameter(torch.randn(e, 2 * f, HIDDEN) * 0.02)
        self.fc2 = nn.Parameter(torch.randn(e, HIDDEN, f) * 0.02)
        self.register_buffer("expert_bias", torch.zeros(e))
        self.register_buffer("tokens_per_expert", torch.zeros(e))
        if s["shared"]:
            self.shared_fc1 = nn.Linear(HIDDEN, 2 * s["shared"], bias=False)
            self.shared_fc2 = nn.Linear(s["shared"], HIDDEN, bias=False)

    def forward(self, x):
        s, e, k = self.s, self.s["experts"], self.s["topk"]
        n = x.shape[0]
        with torch.autocast("cuda", enabled=False):
            logits = x.float() @ self.router.float().t()  # [N, E]
            if s["score"] == "softmax":  # Megatron's default: softmax over the top-k logits
                top_logits, idx = torch.topk(logits, k, dim=-1)
                probs = torch.softmax(top_logits, dim=-1)
                all_probs = torch.softmax(logits, dim=-1)
            else:  # sigmoid: the bias only picks the experts; their top-k probs normalized, then scaled
                scores = torch.sigmoid(logits)
                _, idx = torch.topk(scores + self.expert_bias, k, dim=-1)
                probs = scores.gather(1, idx)
                probs = probs / (probs.sum(-1, keepdim=True) + 1e-20)
                all_probs = scores / (scores.sum(-1, keepdim=True) + 1e-20)
            probs = probs * s["scale"]
            flat = idx.flatten()
            counts = torch.zeros(e, dtype=torch.int64, device=x.device).index_add_(0, flat, torch.ones_like(flat))
            # Switch-style load balancing: E * sum_e (fraction of choices to e) * (mean prob of e).
            aux = AUX_COEFF * e * torch.sum(counts.float() / (n * k) * all_probs.mean(0))
        if self.training:
            self.tokens_per_expert += counts.float()
        order = torch.argsort(flat, stable=True)
        token_of_row = order // k
        offsets = torch.cumsum(counts, 0).to(torch.int32)
        xs = x[token_of_row].to(torch.bfloat16)  # [N*k, C] in expert order
        h = self.expert_mm(xs, self.fc1.to(torch.bfloat16).transpose(-2, -1), offsets)
        gate, up = h.chunk(2, dim=-1)
        ys = self.expert_mm(F.silu(gate) * up, self.fc2.to(torch.bfloat16).transpose(-2, -1), offsets)
        ys = ys * probs.flatten()[order].unsqueeze(1).to(ys.dtype)
        y = torch.zeros_like(x).index_add_(0, token_of_row, ys.to(x.dtype))
        if s["shared"]:
            g, u = self.shared_fc1(x).chunk(2, dim=-1)
            y = y + self.shared_fc2(F.silu(g) * u)
        return y, aux

    @torch.no_grad()
    def update_bias(self):
        """DeepSeek-V3's aux-loss-free balancing: bias += rate * sign(mean load - load)."""
        if self.s["score"] == "sigmoid":
            t = self.tokens_per_expert
            self.expert_bias += BIAS_RATE * torch.sign(t.mean() - t)
        self.tokens_per_expert.zero_()


class Layer(nn.Module):
    def __init__(self, s, expert_mm):
        super().__init__()
        self.attn = Attention()
        self.norm = nn.RMSNorm(HIDDEN, eps=1e-5)
        self.moe = MoE(s, expert_mm)
        self.attn_fn = self.attn  # replaced by a compiled version with --compile

    def forward(self, x, cos, sin):
        x = self.attn_fn(x, cos, sin)
        b, t, c = x.shape
        y, aux = self.moe(self.norm(x).reshape(b * t, c))
        return x + y.reshape(b, t, c), aux


class Model(nn.Module):
    def __init__(self, s, expert_mm, seq):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList([Layer(s, expert_mm) for _ in range(LAYERS)])
        self.norm = nn.RMSNorm(HIDDEN, eps=1e-5)
        self.head = nn.Linear(HIDDEN, VOCAB, bias=False)
        cos, sin = rope_tables(seq, HIDDEN // HEADS)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, tokens, targets):
        x = self.embed(tokens)
        aux_total = 0.0
        for layer in self.layers:
            x, aux = layer(x, self.cos, self.sin)
            aux_total = aux_total + aux
        logits = self.head(self.norm(x))
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), targets.reshape(-1))
        return loss, aux_total


def active_parameters(model, s):
    """All parameters less each layer's E - k unchosen experts (as GptConfig::num_active_parameters)."""
    total = sum(p.numel() for p in model.parameters())
    inactive = LAYERS * (s["experts"] - s["topk"]) * 3 * s["ffn"] * HIDDEN
    return total, total - inactive


def run(a, s, expert_mm, compile_attention):
    torch.manual_seed(1234)
    model = Model(s, expert_mm, a.seq).cuda()
    compiled = "off"
    if compile_attention:
        # One compiled graph should serve the 8 layers' blocks; room for recompiles if it does not.
        for limit in ("recompile_limit", "cache_size_limit"):
            try:
                setattr(torch._dynamo.config, limit, max(getattr(torch._dynamo.config, limit), 64))
            except AttributeError:
                pass
        for layer in model.layers:
            layer.attn_fn = torch.compile(layer.attn)
        compiled = "attention blocks"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    g = torch.Generator(device="cuda").manual_seed(0)
    batches = [torch.randint(0, 50257, (a.micro_batch, a.seq + 1), device="cuda", generator=g)
               for _ in range(a.microbatches)]
    losses = []

    def step():
        total = 0.0
        for mb in batches:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss, aux = model(mb[:, :-1], mb[:, 1:])
            ((loss + aux) / a.microbatches).backward()
            total += loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        for layer in model.layers:
            layer.moe.update_bias()
        return total / a.microbatches

    for _ in range(a.warmup):
        losses.append(step())
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        losses.append(step())
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    total, active = active_parameters(model, s)
    return model, seconds, [float(x) for x in losses], total, active, compiled


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--microbatches", type=int, default=4, help="gradient accumulation steps per optimizer step")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--compile", action="store_true", help="torch.compile the attention blocks (falls back to eager)")
    ap.add_argument("--peak", type=float, default=0.0, help="bf16 matmul peak TFLOP/s, for MFU")
    a = ap.parse_args()
    s = SHAPES[a.shape]
    torch.backends.cuda.matmul.allow_tf32 = True
    expert_mm, expert_path = pick_expert_mm()
    print(f"{a.shape}: experts via {expert_path}", flush=True)
    # The fastest setup first; on a failure, without torch.compile, then with the loop of matmuls.
    attempts = [(expert_mm, expert_path, a.compile)]
    if a.compile:
        attempts.append((expert_mm, expert_path, False))
    if expert_mm is not loop_mm:
        attempts.append((loop_mm, "loop (grouped_mm failed in training)", False))
    for i, (mm, path, compile_attention) in enumerate(attempts):
        try:
            _, seconds, losses, total, active, compiled = run(a, s, mm, compile_attention)
            expert_path = path
            if compile_attention is False and a.compile and i > 0:
                compiled = "off (compile or grouped_mm failed)"
            break
        except Exception:  # noqa: BLE001 - report it, then the next setup
            if i + 1 == len(attempts):
                raise
            print(f"{a.shape}: {path}, compile {compile_attention} failed; trying {attempts[i + 1][1]}, compile "
                  f"{attempts[i + 1][2]}:\n" + traceback.format_exc(limit=3), flush=True)
            torch.cuda.empty_cache()
    print(f"{a.shape}: experts via {expert_path}", flush=True)
    print(f"{a.shape}: torch.compile {compiled}", flush=True)
    tokens_per_step = a.micro_batch * a.microbatches * a.seq
    tokens_per_s = tokens_per_step * a.steps / seconds
    flops_per_token = 6.0 * active + 12.0 * LAYERS * HIDDEN * a.seq
    tflops = tokens_per_s * flops_per_token / 1e12
    res = {"shape": a.shape, "tokens_per_s": round(tokens_per_s, 1), "ms_per_step": round(1e3 * seconds / a.steps, 2),
           "tflops": round(tflops, 2), "mfu": round(tflops / a.peak, 4) if a.peak > 0 else None,
           "params_total": total, "params_active": active, "tokens_per_step": tokens_per_step,
           "experts_path": expert_path, "compile": compiled, "first_loss": round(losses[0], 4),
           "last_loss": round(losses[-1], 4), "finite": all(math.isfinite(x) for x in losses),
           "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    print("RESULT " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
