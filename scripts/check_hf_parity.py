#!/usr/bin/env python3
"""HF parity: our model against `transformers` on the same weights and tokens.

For a few random-init GPT2LMHeadModel and LlamaForCausalLM shapes: save the model as
safetensors, compute logits, loss and parameter gradients with transformers (fp32, eager
attention), run bench/hf_parity_tool on the CPU (fp32) and on CUDA (bf16), and compare.
Prints one row per (model, device) and exits non-zero if any row fails its tolerance.

Usage (on a machine with torch + transformers): python3 scripts/check_hf_parity.py --tool build/bench/hf_parity_tool
"""
import argparse
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

# (relative-norm tolerance for logits and gradients, absolute for the loss)
TOLERANCE = {"cpu": (1e-4, 1e-4), "cuda": (3e-2, 2e-2)}


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
        make = transformers.Qwen2Config if kind == "qwen2" else transformers.LlamaConfig
        cfg = make(num_hidden_layers=shape["layers"], hidden_size=shape["hidden"],
                                       num_attention_heads=shape["heads"], num_key_value_heads=shape["groups"],
                                       intermediate_size=shape["ffn"], max_position_embeddings=shape["positions"],
                                       vocab_size=shape["vocab"], rms_norm_eps=1e-6,
                                       tie_word_embeddings=shape.get("tied", False), **rope_args)
        model = (transformers.Qwen2ForCausalLM if kind == "qwen2" else transformers.LlamaForCausalLM)(cfg)
    cfg._attn_implementation = "eager"
    # Random-init norms are all ones and biases all zeros: perturb them so they are tested.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model.float().eval()


def reference(model, tokens, targets):
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=tokens.long()).logits
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long(), ignore_index=-1)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), loss.detach(), grads


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def compare(ours_path, logits, loss, grads):
    ours = load_file(ours_path)
    worst_grad, worst_name = 0.0, ""
    for name, g in grads.items():
        key = "grad." + name
        if key not in ours:
            if name == "lm_head.weight" and "grad.transformer.wte.weight" in ours:
                continue  # tied: its gradient is part of wte's
            raise SystemExit(f"our output lacks a gradient for {name}")
        e = rel(ours[key], g)
        if e > worst_grad:
            worst_grad, worst_name = e, name
    return rel(ours["logits"], logits), abs(ours["loss"].item() - loss.item()), worst_grad, worst_name


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
            logits, loss, grads = reference(model, tokens, targets)
            for dev in a.devices.split(","):
                out = os.path.join(tmp, f"out{i}_{dev}.safetensors")
                r = subprocess.run([a.tool, "--hf-dir", d, "--inputs", inputs, "--device", dev, "--out", out],
                                   capture_output=True, text=True)
                if r.returncode != 0:
                    rows.append((kind, shape, dev, None, r.stderr.strip()[-300:]))
                    failed = True
                    continue
                e_logits, e_loss, e_grad, worst = compare(out, logits, loss, grads)
                tol_rel, tol_loss = TOLERANCE[dev]
                ok = e_logits <= tol_rel and e_loss <= tol_loss and e_grad <= tol_rel
                failed |= not ok
                rows.append((kind, shape, dev, (e_logits, e_loss, e_grad, worst, ok), ""))

    print(f"{'model':6} {'L':>2} {'C':>4} {'H':>2} {'G':>2} {'V':>6} {'T':>4} {'dev':5} {'logits rel':>11} "
          f"{'loss abs':>9} {'grad rel (worst)':>17}  worst tensor / error")
    for kind, s, dev, res, err in rows:
        head = f"{kind:6} {s['layers']:>2} {s['hidden']:>4} {s['heads']:>2} {s.get('groups', s['heads']):>2} " \
               f"{s['vocab']:>6} {s['seq']:>4} {dev:5}"
        if res is None:
            print(f"{head} FAILED: {err}")
        else:
            el, es, eg, worst, ok = res
            print(f"{head} {el:11.2e} {es:9.2e} {eg:17.2e}  {worst} {'ok' if ok else 'FAIL'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
