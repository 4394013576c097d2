#!/usr/bin/env bash
# Issue 21's attention comparison in one command: our flash kernels, our cuDNN backend
# (TROUPE_ATTENTION_BACKEND=cudnn) and PyTorch's SDPA (flash and cuDNN kernels) on the same MHA
# causal bf16 shapes (B16 H12 T1024 D64; B8 H16 T2048 D128; B2 H32 T4096 D128; B1 H32 T8192 D128),
# forward and backward TFLOP/s side by side (causal FLOPs; backward counted as 2.5x forward).
# Usage (repo root, on the GPU machine): bench/attention_compare.sh BUILD_DIR [--iters N]
set -euo pipefail
build=${1:?usage: attention_compare.sh BUILD_DIR [--iters N]}
shift
out=${OUT:-/tmp}/attention_compare
mkdir -p "$out"
"$build/bench/attention_bench" --backend both --shapes sdpa "$@" \
    --benchmark_out="$out/attention.json" --benchmark_out_format=json
python3 "$(dirname "$0")/attention_torch_reference.py" --shapes sdpa "$@" --bench-json "$out/attention.json"
