#!/usr/bin/env python3
"""HF parity: our model against `transformers` on the same weights and tokens.

For a few random-init GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
MistralForCausalLM and mixture-of-experts (MixtralForCausalLM, Qwen2MoeForCausalLM,
Qwen3MoeForCausalLM) shapes: save the model as safetensors, compute logits, loss and parameter gradients with
transformers (fp32, eager attention), run bench/hf_parity_tool on the CPU (fp32) and on CUDA
(bf16), and compare. The tool also continues each row's first tokens greedily with our inference
model (prefill, then decode steps on the KV cache): every token it picks must be transformers'
argmax on that same sequence (exactly on the CPU, within a bf16 gap of it on CUDA). And it
exports the weights back to an HF folder, which transformers must load as the same class with
the same weights and logits (export round trip, checked once per model).
MoE gradients: transformers 5 holds a layer's experts stacked (experts.gate_up_proj [E, 2I, H],
experts.down_proj [E, H, I]; Mixtral's router as mlp.gate); they are compared per expert under
the names save_pretrained writes, which are the names our tool gives them (hub_names).
Prints one row per (model, device) and exits non-zero if any row fails its tolerance.

Usage (on a machine with torch + transformers >= 4.51, for Qwen3):
    python3 scripts/check_hf_parity.py --tool build/bench/hf_parity_tool
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

# (relative-norm tolerance for logits and gradients, absolute for the loss)
TOLERANCE = {"cpu": (1e-4, 1e-4), "cuda": (3e-2, 2e-2)}
# MoE on CUDA (bf16): a token whose top-k scores differ by less than bf16's rounding may go to
# another expert than in transformers' fp32 run, and that moves its whole contribution; the
# gradients upstream of such a flip (router, norms, attention) then differ by more than rounding
# (measured on one H100: up to 0.11 for a router, 0.03 for a norm, 0.29 for one expert's weights).
# Logits and loss keep the bf16 tolerance, the routed experts' weights are left out (compare()),
# the other gradients get this bound; a wrong mapping gives errors of order 1.
MOE_CUDA_GRAD_TOLERANCE = 0.15
# Greedy tokens: how far below transformers' largest logit (as a fraction of the row's logit range)
# our pick may be; 0 on the CPU up to f32 noise, bf16 noise on CUDA.
GAP_TOLERANCE = {"cpu": 1e-5, "cuda": 5e-2}
PROMPT, GENERATE = 16, 8  # greedy continuation: each row's first PROMPT tokens, GENERATE new ones
MOE_KINDS = ("mixtral", "qwen2_moe", "qwen3_moe")
# Greedy generation of MoE rows needs MoE in our inference model (model/inference). Set False if
# that is missing (`hf_parity_tool --generate` refuses MoE): the MoE rows then skip the greedy
# check, printed "greedy skipped (no MoE inference)".
MOE_GREEDY = True


def make_model(kind, shape):
    import transformers
    torch.manual_seed(shape["seed"])
    if kind == "gpt2":
        cfg = transformers.GPT2Config(n_layer=shape["layers"], n_embd=shape["hidden"], n_head=shape["heads"],
                                      n_positions=shape["positions"], vocab_size=shape["vocab"],
                                      activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model = transformers.GPT2LMHeadModel(cfg)
    else:
        rope = dict(rope_type="default", rope_theta=shape.get("theta", 10000.0))
        if "llama3" in shape:  # Llama 3.1's frequency scaling
            rope.update(rope_type="llama3", **shape["llama3"])
        if int(transformers.__version__.split(".")[0]) >= 5:
            rope_args = dict(rope_parameters=rope)  # saved as 5.x writes it: rope_parameters
        else:
            rope_args = dict(rope_theta=rope.pop("rope_theta"),
                             rope_scaling=rope if rope["rope_type"] != "default" else None)
        make, causal_lm = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
                           "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
                           "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
                           "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
                           "mixtral": (transformers.MixtralConfig, transformers.MixtralForCausalLM),
                           "qwen2_moe": (transformers.Qwen2MoeConfig, transformers.Qwen2MoeForCausalLM),
                           "qwen3_moe": (transformers.Qwen3MoeConfig, transformers.Qwen3MoeForCausalLM)}[kind]
        extra = dict(head_dim=shape["head_dim"]) if "head_dim" in shape else {}
        if kind == "mistral":
            extra["sliding_window"] = shape["window"]
        if kind in MOE_KINDS:
            extra.update(moe_config_args(make, kind, shape))
        cfg = make(num_hidden_layers=shape["layers"], hidden_size=shape["hidden"],
                   num_attention_heads=shape["heads"], num_key_value_heads=shape["groups"],
                   intermediate_size=shape["ffn"], max_position_embeddings=shape["positions"],
                   vocab_size=shape["vocab"], rms_norm_eps=1e-6,
                   tie_word_embeddings=shape.get("tied", False), **rope_args, **extra)
        model = causal_lm(cfg)
        if kind in MOE_KINDS:
            experts = getattr(cfg, "num_local_experts", None) or getattr(cfg, "num_experts", None)
            assert experts == shape["experts"], f"{kind}: the config has {experts} experts, not {shape['experts']}"
    cfg._attn_implementation = "eager"
    if kind in MOE_KINDS and hasattr(cfg, "_experts_implementation"):
        cfg._experts_implementation = "eager"  # the per-expert loop: the reference, on every device
    # Random-init norms are all ones and biases all zeros: perturb them so they are tested.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
            elif kind in MOE_KINDS:
                # Routers and stacked experts may start as zeros or uninitialized (transformers 5
                # makes them with torch.zeros / torch.empty): a zero router ties every expert.
                p.normal_(0.0, 0.02)
    return model.float().eval()


def moe_config_args(make, kind, shape):
    """The experts of a Mixtral / Qwen2-MoE / Qwen3-MoE shape as its config's arguments."""
    import inspect
    params = inspect.signature(make).parameters
    # Mixtral: num_local_experts; Qwen2-MoE: num_experts; Qwen3-MoE: num_experts in transformers 4,
    # num_local_experts in 5.
    experts_key = {"mixtral": "num_local_experts", "qwen2_moe": "num_experts"}.get(
        kind, "num_local_experts" if "num_local_experts" in params else "num_experts")
    args = {experts_key: shape["experts"], "num_experts_per_tok": shape["topk"], "output_router_logits": False}
    if kind == "mixtral":  # its intermediate_size (the shape's ffn) is the experts' size
        assert shape["ffn"] == shape["moe_ffn"], "Mixtral has one intermediate size"
        args.update(router_jitter_noise=0.0)
    else:
        args.update(moe_intermediate_size=shape["moe_ffn"], norm_topk_prob=shape["norm_topk_prob"],
                    decoder_sparse_step=1, mlp_only_layers=[])
    if kind == "qwen2_moe":
        args.update(shared_expert_intermediate_size=shape["shared"])
    return args


def hub_names(kind, grads):
    """transformers 5's stacked expert gradients as the per-expert tensors save_pretrained writes
    (transformers 4's parameters already are those)."""
    out = {}
    for name, g in grads.items():
        m = re.fullmatch(r"(model\.layers\.\d+\.)mlp\.(experts\.gate_up_proj|experts\.down_proj|gate\.weight)", name)
        if kind not in MOE_KINDS or not m:
            out[name] = g
            continue
        block = m.group(1) + ("block_sparse_moe." if kind == "mixtral" else "mlp.")
        if m.group(2) == "gate.weight":  # the router
            out[block + "gate.weight"] = g
            continue
        w = ("w1", "w3", "w2") if kind == "mixtral" else ("gate_proj", "up_proj", "down_proj")
        for e in range(g.shape[0]):
            x = f"{block}experts.{e}."
            if m.group(2) == "experts.gate_up_proj":  # [E, 2I, H]: rows [gate | up]
                gate, up = g[e].chunk(2, dim=0)
                out[x + w[0] + ".weight"], out[x + w[1] + ".weight"] = gate, up
            else:  # [E, H, I]
                out[x + w[2] + ".weight"] = g[e]
    return out


def reference(model, tokens, targets):
    """Logits, loss and gradients; also, for each k_proj bias, the norm of the per-token
    gradients it sums (see compare)."""
    model.zero_grad(set_to_none=True)
    scales, hooks = {}, []
    for name, module in model.named_modules():
        if name.endswith("k_proj") and getattr(module, "bias", None) is not None:
            def keep(_module, _inputs, out, name=name):
                out.register_hook(lambda g: scales.__setitem__(name + ".bias", g.double().norm().item()))
            hooks.append(module.register_forward_hook(keep))
    logits = model(input_ids=tokens.long()).logits
    for h in hooks:
        h.remove()
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long(), ignore_index=-1)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), loss.detach(), grads, scales


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def is_expert_weight(name):
    """A routed expert's weight (per-expert hub names or the stacked ones)."""
    return re.search(r"\.experts\.(\d+\.|gate_up_proj|down_proj)", name) is not None


def compare(ours_path, logits, loss, grads, scales, skip_experts=False):
    """Relative errors. A k_proj bias's gradient is the sum over tokens of (RoPE-rotated) key
    gradients that nearly cancel (softmax ignores a shift shared by all keys: without RoPE the sum
    is exactly zero), so bf16 rounding of the terms swamps the small sum; its error is measured
    against the norm of the terms it sums (`scales`), the size that rounding acts on.
    skip_experts (MoE in bf16): a routing choice between two experts whose scores differ by less
    than bf16's rounding goes either way, and the token's whole gradient moves from one expert to
    the other; so the routed experts' weight gradients are left out there (every other gradient,
    the router's included, is compared; the fp32 CPU rows compare the experts' too, and
    tests/model/moe/moe_mlp_cuda_test compares the CUDA experts with the CPU on equal routing)."""
    ours = load_file(ours_path)
    worst_grad, worst_name = 0.0, ""
    for name, g in grads.items():
        if skip_experts and is_expert_weight(name):
            continue
        key = "grad." + name
        if key not in ours:
            if name == "lm_head.weight" and "grad.transformer.wte.weight" in ours:
                continue  # tied: its gradient is part of wte's
            raise SystemExit(f"our output lacks a gradient for {name}")
        e = rel(ours[key], g)
        if name in scales:
            e = min(e, (ours[key].double() - g.double()).norm().item() / max(scales[name], 1e-30))
        if e > worst_grad:
            worst_grad, worst_name = e, name
    return rel(ours["logits"], logits), abs(ours["loss"].item() - loss.item()), worst_grad, worst_name


@torch.no_grad()
def greedy_gap(model, tokens, generated):
    """Our greedy tokens against transformers on the same sequences: the largest gap between
    transformers' top logit and the logit of our pick, relative to the row's logit range, and how
    many picks are transformers' argmax."""
    seq = torch.cat([tokens[:, :PROMPT].long(), generated.long()], dim=1)
    logits = model(input_ids=seq).logits[:, PROMPT - 1:-1].double()  # the rows that chose each new token
    top = logits.max(dim=-1).values
    picked = logits.gather(-1, generated.long().unsqueeze(-1)).squeeze(-1)
    spread = (top - logits.min(dim=-1).values).clamp_min(1e-30)
    gap = ((top - picked) / spread).max().item()
    same = (logits.argmax(dim=-1) == generated.long()).sum().item()
    return gap, same


@torch.no_grad()
def export_round_trip(model, export_dir, tokens):
    """transformers loads our export as the same class with the same weights and logits."""
    import transformers
    back = transformers.AutoModelForCausalLM.from_pretrained(export_dir, attn_implementation="eager").float().eval()
    if type(back) is not type(model):
        return f"loaded as {type(back).__name__}, not {type(model).__name__}"
    ours, theirs = back.state_dict(), model.state_dict()
    for name, t in theirs.items():
        if name not in ours or ours[name].shape != t.shape or not torch.equal(ours[name], t):
            return f"weight {name} differs"
    e = rel(back(input_ids=tokens.long()).logits, model(input_ids=tokens.long()).logits)
    return "" if e <= 1e-6 else f"logits differ (rel {e:.2e})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--devices", default="cpu,cuda")
    a = ap.parse_args()

    shapes = [
        ("gpt2", dict(seed=1, layers=2, hidden=128, heads=4, positions=128, vocab=1000, batch=2, seq=64)),
        ("gpt2", dict(seed=2, layers=3, hidden=256, heads=4, positions=256, vocab=50257, batch=2, seq=200)),
        ("llama", dict(seed=3, layers=2, hidden=128, heads=4, groups=2, ffn=352, positions=256, vocab=1000, batch=2, seq=64)),
        ("llama", dict(seed=4, layers=2, hidden=256, heads=2, groups=1, ffn=688, positions=512, vocab=32000, batch=1, seq=256)),
        # Llama 3.x: rope_theta 500000 and the llama3 frequency scaling (an original context of
        # 64 so the scaled and smoothed bands act within the sequence), tied embeddings (3.2)
        ("llama", dict(seed=5, layers=2, hidden=256, heads=4, groups=2, ffn=512, positions=1024, vocab=1000, batch=2,
                       seq=256, theta=500000.0, tied=True,
                       llama3=dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                   original_max_position_embeddings=64))),
        # Qwen2.5: Llama with a bias on q, k and v (perturbed like the norms), theta 1e6, tied
        ("qwen2", dict(seed=6, layers=2, hidden=256, heads=4, groups=2, ffn=512, positions=512, vocab=1000, batch=2,
                       seq=128, theta=1000000.0, tied=True)),
        # Qwen3: q_norm / k_norm on each head before RoPE (weights perturbed like the norms), head_dim
        # 128 apart from hidden / heads = 64, grouped queries, theta 1e6, tied
        ("qwen3", dict(seed=7, layers=2, hidden=256, heads=4, groups=2, head_dim=128, ffn=512, positions=512,
                       vocab=1000, batch=2, seq=128, theta=1000000.0, tied=True)),
        # Mistral: sliding-window attention, a window of 40 in sequences of 160 (not a multiple of
        # the kernels' blocks), untied
        ("mistral", dict(seed=8, layers=2, hidden=256, heads=4, groups=2, ffn=512, positions=512, vocab=1000, batch=2,
                         seq=160, theta=1000000.0, window=40)),
        # Mixtures of experts, 8 experts top-2 of intermediate size 32 (weights, routers included,
        # N(0, 0.02)). Mixtral: softmax, top 2, renormalized (Megatron's default router), untied.
        ("mixtral", dict(seed=9, layers=2, hidden=64, heads=4, groups=2, ffn=32, moe_ffn=32, experts=8, topk=2,
                         positions=256, vocab=1000, batch=2, seq=64, theta=1000000.0)),
        # Qwen2-MoE: q/k/v bias, a shared expert (48) behind its sigmoid gate, norm_topk_prob false
        # (--moe-router-pre-softmax: the top 2 keep their softmax over all 8)
        ("qwen2_moe", dict(seed=10, layers=3, hidden=64, heads=4, groups=2, ffn=128, moe_ffn=32, experts=8, topk=2,
                           shared=48, norm_topk_prob=False, positions=256, vocab=1000, batch=2, seq=64)),
        # Qwen3-MoE: q/k norms, head_dim 32 apart from hidden / heads = 16; norm_topk_prob both ways
        ("qwen3_moe", dict(seed=11, layers=2, hidden=64, heads=4, groups=2, head_dim=32, ffn=128, moe_ffn=32,
                           experts=8, topk=2, norm_topk_prob=True, positions=256, vocab=1000, batch=2, seq=64,
                           theta=1000000.0)),
        ("qwen3_moe", dict(seed=12, layers=2, hidden=64, heads=4, groups=2, head_dim=32, ffn=128, moe_ffn=32,
                           experts=8, topk=2, norm_topk_prob=False, positions=256, vocab=1000, batch=2, seq=64)),
    ]
    rows, failed = [], False
    with tempfile.TemporaryDirectory() as tmp:
        for i, (kind, shape) in enumerate(shapes):
            model = make_model(kind, shape)
            d = os.path.join(tmp, f"m{i}")
            model.save_pretrained(d, safe_serialization=True)
            g = torch.Generator().manual_seed(100 + i)
            tokens = torch.randint(0, shape["vocab"], (shape["batch"], shape["seq"]), generator=g, dtype=torch.int32)
            targets = torch.randint(0, shape["vocab"], (shape["batch"], shape["seq"]), generator=g, dtype=torch.int32)
            targets[0, :3] = -1  # ignored positions
            inputs = os.path.join(tmp, f"in{i}.safetensors")
            save_file({"tokens": tokens, "targets": targets}, inputs)
            logits, loss, grads, scales = reference(model, tokens, targets)
            grads = hub_names(kind, grads)
            greedy = kind not in MOE_KINDS or MOE_GREEDY
            for dev in a.devices.split(","):
                out = os.path.join(tmp, f"out{i}_{dev}.safetensors")
                export_dir = os.path.join(tmp, f"export{i}")
                cmd = [a.tool, "--hf-dir", d, "--inputs", inputs, "--device", dev, "--out", out]
                if greedy:
                    cmd += ["--generate", str(GENERATE), "--prompt-len", str(PROMPT)]
                if dev == "cpu":  # the export does not depend on the device: once per model
                    cmd += ["--export-dir", export_dir]
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode != 0:
                    rows.append((kind, shape, dev, None, r.stderr.strip()[-300:]))
                    failed = True
                    continue
                e_logits, e_loss, e_grad, worst = compare(out, logits, loss, grads, scales,
                                                          skip_experts=kind in MOE_KINDS and dev == "cuda")
                gap, same = greedy_gap(model, tokens, load_file(out)["generated"]) if greedy else (0.0, None)
                export = export_round_trip(model, export_dir, tokens) if dev == "cpu" else None
                tol_rel, tol_loss = TOLERANCE[dev]
                tol_grad = MOE_CUDA_GRAD_TOLERANCE if kind in MOE_KINDS and dev == "cuda" else tol_rel
                ok = e_logits <= tol_rel and e_loss <= tol_loss and e_grad <= tol_grad and gap <= GAP_TOLERANCE[dev] \
                    and not export
                failed |= not ok
                rows.append((kind, shape, dev, (e_logits, e_loss, e_grad, worst, gap, same, export, ok), ""))
    report(rows)
    sys.exit(1 if failed else 0)


def report(rows):
    print(f"{'model':9} {'L':>2} {'C':>4} {'H':>2} {'G':>2} {'D':>3} {'V':>6} {'T':>4} {'dev':5} {'logits rel':>11} "
          f"{'loss abs':>9} {'grad rel':>9} {'greedy':>6} {'gap':>8} {'export':>6}  worst tensor / error")
    for kind, s, dev, res, err in rows:
        n = GENERATE * s["batch"]
        head_dim = s.get("head_dim", s["hidden"] // s["heads"])
        head = f"{kind:9} {s['layers']:>2} {s['hidden']:>4} {s['heads']:>2} {s.get('groups', s['heads']):>2} " \
               f"{head_dim:>3} {s['vocab']:>6} {s['seq']:>4} {dev:5}"
        if res is None:
            print(f"{head} FAILED: {err}")
            continue
        el, es, eg, worst, gap, same, export, ok = res
        ex = "-" if export is None else ("ok" if not export else "FAIL")
        greedy = f"{same:>3}/{n:<2} {gap:8.1e}" if same is not None else f"{'-':>6} {'-':>8}"
        skipped = " greedy skipped (no MoE inference)" if same is None else ""
        print(f"{head} {el:11.2e} {es:9.2e} {eg:9.2e} {greedy} {ex:>6}  {worst} "
              f"{export or ''} {'ok' if ok else 'FAIL'}{skipped}")


if __name__ == "__main__":
    main()
