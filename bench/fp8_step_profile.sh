#!/usr/bin/env bash
# Where an FP8 training step goes (issue 21): GPT-2 124M through train_bench, bf16 and FP8
# (hybrid, delayed and tensorwise), with --profile (per-op CUDA-event times) and, where nsys is
# installed, the kernels of a few steps summed by name (the top ROWS).
# Usage (repo root, after `source .devdeps/env.sh`): bench/fp8_step_profile.sh [BUILD_DIR] [MBS] [ROWS]
set -uo pipefail
build=${1:-build}
mbs=${2:-16}
rows=${3:-25}
bench=$build/bench/train_bench
out=${OUT:-/tmp}/fp8_profile
mkdir -p "$out"
common=(--model gpt2-124m --mock-data --micro-batch-size "$mbs" --global-batch-size "$mbs" --train-iters 12
        --timing-warmup 4 --eval-iters 0 --sample-tokens 0 --log-interval 4)
declare -A flags
flags[bf16]=""
flags[fp8-delayed]="--fp8-format hybrid --fp8-recipe delayed"
flags[fp8-tensorwise]="--fp8-format hybrid --fp8-recipe tensorwise"
nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys 2>/dev/null || true)
for name in bf16 fp8-delayed fp8-tensorwise; do
  # shellcheck disable=SC2086
  "$bench" "${common[@]}" ${flags[$name]} --profile > "$out/$name.log" 2>&1 || { echo "$name failed:"; tail -5 "$out/$name.log"; }
  if [ -n "$nsys" ]; then
    # shellcheck disable=SC2086
    "$nsys" profile -o "$out/$name" --force-overwrite true -t cuda "$bench" "${common[@]}" ${flags[$name]} > /dev/null 2>&1
    "$nsys" stats -r cuda_gpu_kern_sum -f csv -o "$out/$name" "$out/$name.nsys-rep" > /dev/null 2>&1
  fi
done
for name in bf16 fp8-delayed fp8-tensorwise; do
  echo "==== $name"
  grep -E "tokens/s|ms/it|step" "$out/$name.log" | tail -3
  csv=$(ls "$out/$name"*cuda_gpu_kern_sum*.csv 2>/dev/null | head -1)
  # Time(%),Total Time (ns),Instances,Avg,...,Name
  [ -n "$csv" ] && python3 - "$csv" "$rows" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
total = sum(float(r["Total Time (ns)"]) for r in rows)
for r in rows[: int(sys.argv[2])]:
    print(f'{float(r["Time (%)"]):5.1f}% {float(r["Total Time (ns)"]) / 1e6:9.2f} ms {int(r["Instances"]):7d}  {r["Name"][:110]}')
print(f"kernels total {total / 1e6:.1f} ms")
PY
done
