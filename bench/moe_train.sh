#!/usr/bin/env bash
# Mixture-of-experts training on one GPU, end to end on the bundled corpus, against a PyTorch
# reference measured in the same command (issue 20): a Mixtral-shaped small model (8 experts,
# top-2) and a DeepSeek-shaped one (64 fine-grained experts, top-6, a shared expert, sigmoid
# router with the expert bias), bf16, global batch 32 x 512 tokens (micro-batch 8). Prints the
# first and last logged loss of ours, then per shape: tokens/s of `troupe train` (the mean
# iteration time of its last three log lines: past the warm-up) and of
# bench/moe_torch_reference.py (the same model on random tokens, same tokens per step), their
# ratio, and the MFU of each (FLOPs on active parameters, as `troupe train` counts them) over
# the bf16 matmul peak of .baselines/peak.py. Last, bench/grouped_gemm_bench: our grouped GEMM's
# TFLOP/s on both shapes' expert GEMMs against one dense cuBLAS GEMM of the same work.
# Usage (repo root, after `source .devdeps/env.sh`): bench/moe_train.sh [BUILD_DIR] [ITERS]
# TORCH_COMPILE=0 runs the reference eager (default: its attention blocks compiled, falling back to eager);
# TORCH=0 skips it (ours only, e.g. to compare TROUPE_GROUPED_DW ways); SHAPES="deepseek" runs one shape.
set -uo pipefail
build=${1:-build}
iters=${2:-200}
troupe=$build/apps/troupe
export PYTHONUNBUFFERED=1
out=${OUT:-/tmp}/moe
mkdir -p "$out"
tokens_per_iter=$((32 * 512))

peak=$(python3 .baselines/peak.py 2>"$out/peak.err" | grep '"kind": "matmul"' | head -1 |
  sed 's/.*"tflops_median": \([0-9.]*\).*/\1/')
if [ -z "$peak" ]; then
  echo "bf16 matmul peak: not measured (.baselines/peak.py: $(tail -1 "$out/peak.err")); MFU columns show 0"
  peak=0
else
  echo "bf16 matmul peak: ${peak} TFLOP/s"
fi

source "$(dirname "$0")/moe_bench_lib.sh"
moe_preprocess
# shellcheck disable=SC2207
common=($(moe_body "$iters" 8) --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine --lr-warmup-iters 20 --log-interval 20)
declare -A shape
shape[mixtral]=$MOE_MIXTRAL
shape[deepseek]=$MOE_DEEPSEEK
compile=(--compile)
[ "${TORCH_COMPILE:-1}" = 0 ] && compile=()

rows=()
read -r -a shapes <<<"${SHAPES:-mixtral deepseek}"
for name in "${shapes[@]}"; do
  # shellcheck disable=SC2086
  "$troupe" train "${common[@]}" ${shape[$name]} > "$out/$name.log" 2>&1 || { echo "$name (troupe) failed:"; tail -5 "$out/$name.log"; }
  if [ "${TORCH:-1}" = 1 ]; then
    python3 bench/moe_torch_reference.py --shape "$name" "${compile[@]}" --peak "$peak" > "$out/torch_$name.log" 2>&1 ||
      { echo "$name (torch) failed:"; tail -5 "$out/torch_$name.log"; }
  else
    : > "$out/torch_$name.log"
  fi
  grep -v '^RESULT' "$out/torch_$name.log" | grep -E 'experts via|torch.compile|failed; trying' | tail -4
  first=$(grep -o 'lm loss: [0-9.E+-]*' "$out/$name.log" | head -1 | awk '{print $3}')
  last=$(grep -o 'lm loss: [0-9.E+-]*' "$out/$name.log" | tail -1 | awk '{print $3}')
  lb=$(grep -o 'load_balancing_loss: [0-9.E+-]*' "$out/$name.log" | tail -1 | awk '{print $2}')
  summary_tps=$(grep '^summary' "$out/$name.log" | sed 's/.*(\([0-9]*\) tokens\/s).*/\1/')
  printf '%-9s ours: loss %s -> %s  load_balancing_loss %s  %s tokens/s over the whole run\n' "$name" "${first:--}" \
    "${last:--}" "${lb:--}" "${summary_tps:--}"
  ms=$(last_three_mean "$out/$name.log" 'elapsed time per iteration (ms):')
  tflops=$(last_three_mean "$out/$name.log" 'throughput per GPU (TFLOP/s/GPU):')
  ref=$(grep '^RESULT' "$out/torch_$name.log" | sed 's/.*"tokens_per_s": \([0-9.]*\).*/\1/')
  ref_tflops=$(grep '^RESULT' "$out/torch_$name.log" | sed 's/.*"tflops": \([0-9.]*\).*/\1/')
  rows+=("$(awk -v m="$name" -v ms="${ms:-0}" -v n="$tokens_per_iter" -v tf="${tflops:-0}" -v r="${ref:-0}" \
    -v rtf="${ref_tflops:-0}" -v p="$peak" 'BEGIN {
      ours = ms > 0 ? n * 1000 / ms : 0
      printf "%-9s %12.0f %12.0f %7.3f %8.1f%% %8.1f%%", m, ours, r, (r > 0 ? ours / r : 0),
             (p > 0 ? 100 * tf / p : 0), (p > 0 ? 100 * rtf / p : 0) }')")
done
echo "==== MoE training (one GPU, bf16, $iters iterations; tokens/s past the warm-up; MFU on active-parameter FLOPs)"
printf '%-9s %12s %12s %7s %9s %9s\n' shape ours torch ours/t "MFU ours" "MFU torch"
printf '%s\n' "${rows[@]}"

echo "==== grouped GEMM (ours) against one dense cuBLAS GEMM of the same rows x C x F"
"$build/bench/grouped_gemm_bench" > "$out/grouped_gemm.log" 2>&1 || { echo "grouped_gemm_bench failed:"; tail -5 "$out/grouped_gemm.log"; }
grep '^grouped' "$out/grouped_gemm.log" || echo "grouped_gemm_bench printed no summary (log: $out/grouped_gemm.log)"
