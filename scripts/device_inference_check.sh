#!/usr/bin/env bash
# Inference checks for the GPU machine: the inference GPU tests (paged attention, RoPE at
# per-token positions, CUDA vs CPU), then greedy `troupe generate` against HF transformers
# `generate` on GPT-2 and Llama weights, CPU (fp32) and CUDA (bf16), and decode tokens/s with
# and without CUDA graphs. Prints the tables last.
# Usage (repo root, after `source .devdeps/env.sh`): scripts/device_inference_check.sh [BUILD_DIR]
set -uo pipefail
build=${1:-build}
ctest --test-dir "$build" -R 'paged_attention_cuda_test|rope_cuda_test|inference_.*cuda_test' --output-on-failure \
  2>&1 | tee /tmp/inference_ctest.log
PYTHONUNBUFFERED=1 python3 scripts/check_generate_hf.py --troupe "$build/apps/troupe" 2>&1 | tee /tmp/generate_hf.log
status=${PIPESTATUS[0]}
echo "==== summary"
grep -E 'tests passed|tests failed' /tmp/inference_ctest.log | tail -1
grep -A30 '^model ' /tmp/generate_hf.log || true
exit "$status"
