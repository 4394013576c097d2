#!/usr/bin/env python3
"""HF export check: `transformers` loads the folder `troupe convert --to hf` wrote, and its logits
match our model's on the Troupe checkpoint it came from (bench/hf_parity_tool --checkpoint).

Usage (on a machine with torch + transformers):
  python3 scripts/check_hf_export.py --tool build/bench/hf_parity_tool --checkpoint CKPT --hf HF_DIR
Prints one row per device and exits non-zero if a row fails its tolerance.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file

TOLERANCE = {"cpu": 1e-4, "cuda": 3e-2}  # relative norm of the logits' difference


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--hf", required=True)
    ap.add_argument("--devices", default="cpu,cuda")
    a = ap.parse_args()
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(a.hf, torch_dtype=torch.float32,
                                                              attn_implementation="eager").eval()
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, vocab, (2, 128), generator=g)
    targets = torch.roll(tokens, -1, dims=1)
    with torch.no_grad():
        ref = model(tokens).logits.float()
    ok = True
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        inputs = os.path.join(tmp, "in.safetensors")
        save_file({"tokens": tokens.int().contiguous(), "targets": targets.int().contiguous()}, inputs)
        for dev in a.devices.split(","):
            out = os.path.join(tmp, f"ours_{dev}.safetensors")
            r = subprocess.run([a.tool, "--checkpoint", a.checkpoint, "--inputs", inputs, "--device", dev, "--out", out],
                               capture_output=True, text=True)
            if r.returncode != 0:
                print(r.stdout, r.stderr)
                rows.append(f"{dev:5s} FAILED to run")
                ok = False
                continue
            ours = load_file(out)["logits"].float()
            rel = ((ours - ref).norm() / ref.norm()).item()
            agree = (ours.argmax(-1) == ref.argmax(-1)).float().mean().item()
            good = rel <= TOLERANCE[dev]
            ok &= good
            rows.append(f"{dev:5s} logits rel {rel:.2e} (tol {TOLERANCE[dev]:.0e}), argmax agreement {agree:.4f}, "
                        f"{'ok' if good else 'FAIL'}")
    print(f"HF export of {a.checkpoint}: {type(model).__name__}, vocab {vocab}")
    for row in rows:
        print("export " + row)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
