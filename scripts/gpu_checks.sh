#!/usr/bin/env bash
# Every GPU check in one go, for the GPU machine (nothing is built there): the CUDA-vs-CPU
# op tests, then HF parity on CPU and CUDA. Prints a summary table last.
# Usage (repo root, after `source .devdeps/env.sh`): scripts/gpu_checks.sh [BUILD_DIR]
set -uo pipefail
build=${1:-build}
summary=()
ctest --test-dir "$build" -L gpu --timeout 300 --output-on-failure 2>&1 | tee /tmp/gpu_ctest.log
summary+=("gpu tests: $(grep -E 'tests passed|tests failed' /tmp/gpu_ctest.log | tail -1)")
PYTHONUNBUFFERED=1 python3 scripts/check_hf_parity.py --tool "$build/bench/hf_parity_tool" 2>&1 | tee /tmp/parity.log
summary+=("hf parity: exit ${PIPESTATUS[0]}")
echo "==== summary"
printf '%s\n' "${summary[@]}"
grep -E '^(gpt2|llama|qwen2|qwen3|mistral) ' /tmp/parity.log || true
