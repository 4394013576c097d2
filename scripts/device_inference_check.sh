#!/usr/bin/env bash
# Inference checks for the GPU machine: the inference GPU tests (paged attention, prefills on the
# training attention, RoPE at per-token positions, the device argmax, CUDA vs CPU), then greedy
# `troupe generate` against HF transformers `generate`: random GPT-2 and Llama models, and a GPT-2
# 124M trained here for 300 iterations on the bundled corpus and exported by `troupe convert --to
# hf`; each on the CPU (fp32), on CUDA in fp32 (--dtype f32) and in bf16, and on 2 or more GPUs also in fp32 as a
# tensor-parallel replica of 2 GPUs (--tensor-model-parallel-size 2). Prints the tables last.
# Usage (repo root, after `source .devdeps/env.sh`): scripts/device_inference_check.sh [BUILD_DIR]
set -uo pipefail
build=${1:-build}
troupe=$build/apps/troupe
work=${OUT:-/tmp}/inference_check
mkdir -p "$work"
ctest --test-dir "$build" -R 'paged_attention_cuda_test|prefill_attention_cuda_test|rope_cuda_test|argmax_cuda_test|inference_.*cuda_test' \
  --output-on-failure 2>&1 | tee "$work/ctest.log"
PYTHONUNBUFFERED=1 python3 scripts/check_generate_hf.py --troupe "$troupe" 2>&1 | tee "$work/generate_hf.log"
status=${PIPESTATUS[0]}

# Trained weights: peaked distributions, as real use sees them.
scripts/device_train_gpt2.sh "$build" "$work" &&
  PYTHONUNBUFFERED=1 python3 scripts/check_generate_hf.py --troupe "$troupe" --folder "$work/trained-gpt2" \
    --speed-tokens 0 --min-cuda-match 0.8 2>&1 | tee "$work/generate_hf_trained.log"
trained=$?
[ "$trained" = 0 ] || { echo "trained-model check failed ($trained)"; tail -5 "$work"/*.log; }
echo "==== summary"
grep -E 'tests passed|tests failed' "$work/ctest.log" | tail -1
grep -A30 '^model ' "$work/generate_hf.log" || true
grep -A10 '^model ' "$work/generate_hf_trained.log" || true
[ "$status" = 0 ] && [ "$trained" = 0 ]
