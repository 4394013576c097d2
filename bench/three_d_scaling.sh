#!/usr/bin/env bash
# 3D parallelism (tensor x pipeline x data) on one node's GPUs, a ~1.3B GPT (GPT-3 XL shape: 24
# layers, hidden 2048, 16 heads) and a ~7B GPT (32 layers, hidden 4096, 32 heads) at sequence
# length 2048 on mock data, bf16, distributed optimizer and overlapped gradient reduction in
# every run (sequence parallel where TP > 1), each data-parallel replica running 8 microbatches.
#   8 GPUs: TP2xPP2xDP2, TP2xPP4 (interleaved, V=2), PP2xDP4, DP8.
#   4 GPUs: their analogues TP2xPP2, PP4 (V=2), PP2xDP2, DP4; the 7B only without data
#           parallelism (TP2xPP2, PP4 V=2): the weights are drawn on the host (~15 s per 7B
#           replica, one rank after another in one process), which would not leave one device
#           call for the rest.
# Each layout runs as one process for all GPUs ("proc") and as one process per GPU under mpirun
# ("mpi"; process p sees only GPU p). Beside them, the one-GPU run of the same per-GPU work: the
# 1.3B model whole; for the 7B (which one GPU cannot hold) the same layer shape with 1/N of the
# layers, N = GPUs: each GPU of a model-parallel layout holds 32/N layers of it. Efficiency is
# TFLOP/s per GPU against that run (for the 1.3B the same as tokens/s per GPU).
# Prints per run: ms/iteration (last log window), tokens/s and TFLOP/s per GPU (6N + 12 L d T
# FLOPs per token, as troupe train counts), MFU against the bf16 matmul peak measured first in
# the same call (gemm_bench --square 8192), scaling efficiency, the estimated and the measured
# memory of the first GPU (estimate: model state 18 bytes/parameter, 6 + 12/DP with the
# distributed optimizer, plus 34 s b h / TP bytes of activations per layer and microbatch in
# flight and the logits), and for pipelines the bubble from the run's trace (`troupe replay`:
# measured, theory (P-1)/(V M+P-1), simulated) and the bubble `troupe replay --what-if` predicts
# for this shape from the other pipeline run's trace. Then the loss check: per-iteration losses
# of two layouts over 50 iterations, same data and seed, and their max relative difference
# (8 GPUs: TP2xPP2xDP2 vs DP8; 4 GPUs: TP2xPP2 vs DP4). Runs write to $THREE_D_WORK (default
# /tmp/three_d): logs, traces (mpi runs: one per process, PATH.rankR, each holding that
# process's stages), replays, the SVG timelines of the TP2xPP2(xDP2) runs, summary.txt; $OUT
# gets summary.txt, the SVGs and three_d_runs.tar.xz of the whole folder.
# Every run ends within --budget seconds of the start (default 510: one device call of 10 minutes
# holds the script with its setup); runs that would start later are skipped, saying so. On 4
# H200s the whole list is estimated at 8-9 minutes, so the last runs (the 7B with one process per
# GPU) may be cut; `--models 1.3b` and `--models 7b` in two calls take about 5 minutes each.
#
# Usage (repo root, after `source .devdeps/env.sh`):
#   bench/three_d_scaling.sh [--dry-run] [--cpu] [--gpus N] [--models "1.3b 7b"] [--modes "proc mpi"]
#                            [--layouts "tp2pp2 dp4 ..."] [--budget SECONDS] BUILD_DIR
# --dry-run prints the commands without running them; --cpu runs the same logic with tiny models
# on 8 CPU devices (a smoke test of the script and every flag it passes); --layouts runs only the
# named layouts (on 4 GPUs also the 7B's data-parallel ones); --gpus N plans for N GPUs.
set -uo pipefail
source "$(dirname "$0")/scaling_lib.sh"
dry=0 cpu=0 gpus="" models="1.3b 7b" modes="proc mpi" only="" budget=510
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) dry=1 ;;
    --cpu) cpu=1 ;;
    --gpus) gpus=$2; shift ;;
    --models) models=$2; shift ;;
    --modes) modes=$2; shift ;;
    --layouts) only=$2; shift ;;
    --budget) budget=$2; shift ;;
    -*) echo "three_d_scaling.sh: unknown flag $1" >&2; exit 2 ;;
    *) break ;;
  esac
  shift
done
build=${1:?usage: three_d_scaling.sh [--dry-run] [--cpu] [--gpus N] [--models M] [--modes M] [--layouts L] [--budget S] BUILD_DIR}
troupe=$build/apps/troupe
# Runs write to a scratch folder; $OUT gets the summary, the timelines and one archive of every
# log, trace and replay (the device machine sends back at most 8 files).
out=${THREE_D_WORK:-/tmp/three_d}
rm -rf "$out"
mkdir -p "$out"
summary=$out/summary.txt runs=$out/runs.txt
: > "$summary"
: > "$runs"
say() { echo "$*" | tee -a "$summary"; }
# mpirun as root, more processes than cores (.devdeps/env.sh sets these on the device machines).
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
export OMPI_MCA_rmaps_base_oversubscribe=${OMPI_MCA_rmaps_base_oversubscribe:-1}

if [ "$cpu" = 1 ]; then
  gpus=${gpus:-8} mem_gib=100000 device=(--device cpu) iters=4 log_interval=2 loss_iters=6 limit=300
  export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
else
  [ -n "$gpus" ] || gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
  mem_gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1 |
            awk '{printf "%d", $1 / 1024}')
  mem_gib=${mem_gib:-139} device=(--bf16) iters=10 log_interval=5 loss_iters=50 limit=240
fi
[ "$gpus" -ge 2 ] || { echo "three_d_scaling.sh: needs 2 or more GPUs (--gpus N for a dry run)"; exit 2; }
microbatches=8  # per data-parallel replica and iteration

# Layouts for this GPU count: "name T P D V".
layouts() {
  if [ "$gpus" -ge 8 ]; then printf '%s\n' "tp2pp2dp2 2 2 2 1" "tp2pp4v2 2 4 1 2" "pp2dp4 1 2 4 1" "dp8 1 1 8 1"
  elif [ "$gpus" -ge 4 ]; then printf '%s\n' "tp2pp2 2 2 1 1" "pp4v2 1 4 1 2" "pp2dp2 1 2 2 1" "dp4 1 1 4 1"
  else printf '%s\n' "pp2 1 2 1 1" "tp2 2 1 1 1" "dp2 1 1 2 1"
  fi
}
n_all=$(layouts | awk '{n = $2 * $3 * $4; if (n > m) m = n} END {print m}')  # GPUs the runs use
svg_run=$(layouts | head -1 | awk '{print $1}')                             # TP2xPP2(xDP2): the timeline
loss_pair=$(layouts | awk 'NR == 1 {a = $1} $3 == 1 && $2 == 1 {b = $1} END {print a, b}')  # first vs pure DP

# Model shape: sets margs (troupe train's shape flags but --num-layers), layers, hidden, heads,
# vocab, seq, mbs.
model_shape() {
  vocab=50257 seq=2048
  case $1 in
    1.3b) layers=24 hidden=2048 heads=16 mbs=2 ;;
    7b) layers=32 hidden=4096 heads=32 mbs=1 ;;
    *) echo "unknown model $1 (1.3b, 7b)"; exit 2 ;;
  esac
  if [ "$cpu" = 1 ]; then  # the same logic on tiny shapes (8 layers: 8 chunks for PP4 V2)
    layers=8 heads=4 vocab=512 seq=32 mbs=1
    hidden=$([ "$1" = 7b ] && echo 128 || echo 64)
  fi
  margs=(--model gpt2-124m --hidden-size "$hidden" --num-attention-heads "$heads" --seq-length "$seq"
         --vocab-size "$vocab" --mock-data)  # --num-layers: per run
}

# Estimated GiB on the busiest GPU: model state + activations of the microbatches in flight on
# stage 0 (P of them, 1 + (P-1)/(P V) times that interleaved) + the logits (bf16 and f32 grad).
estimate_gib() {  # layers T P D V
  awk -v L="$1" -v T="$2" -v P="$3" -v D="$4" -v V="$5" -v h="$hidden" -v s="$seq" -v b="$mbs" -v voc="$vocab" \
      -v M="$microbatches" 'BEGIN {
    vp = int((voc + 127) / 128) * 128;
    params = (L / P * (12 * h * h + 13 * h) + vp * h + s * h) / T;
    state = params * (D > 1 ? 6 + 12 / D : 18);
    flight = P > 1 ? (P < M ? P : M) * (V > 1 ? 1 + (P - 1) / (P * V) : 1) : 1;
    act = flight * L / P * 34 * s * b * h / T + s * b * vp * 6 / T;
    printf "%.1f\n", (state + act) / 2^30 + 2 }'
}


# One troupe train run; a line in runs.txt when it produced a time.
# run NAME MODE T P D V ITERS LOG_INTERVAL GBS LAYERS
run() {
  local name=$1 mode=$2 T=$3 P=$4 D=$5 V=$6 it=$7 li=$8 gbs=$9 L=${10}
  local n=$((T * P * D)) log=$out/$1.log trace=$out/$1.trace
  local est
  est=$(estimate_gib "$L" "$T" "$P" "$D" "$V")
  if awk -v e="$est" -v m="$mem_gib" 'BEGIN {exit !(e > 0.9 * m)}'; then
    say "$name: skipped, estimated $est GiB per GPU of $mem_gib"
    return 0
  fi
  # Each run ends by the budget: at most `limit` seconds, and none starts with under 45 left.
  local left=$((budget - SECONDS)) cap=$limit
  [ "$left" -lt "$cap" ] && cap=$left
  if [ "$cap" -lt 45 ] && [ "$dry" = 0 ]; then
    say "$name: skipped, the time budget is spent (${SECONDS} s of $budget)"
    return 0
  fi
  local args=("${margs[@]}" --num-layers "$L" "${device[@]}" --micro-batch-size "$mbs" --global-batch-size "$gbs"
              --train-iters "$it" --log-interval "$li" --eval-iters 0 --lr 1e-4 --tensor-model-parallel-size "$T"
              --pipeline-model-parallel-size "$P" --use-distributed-optimizer --overlap-grad-reduce)
  [ "$T" -gt 1 ] && args+=(--sequence-parallel)
  [ "$V" -gt 1 ] && args+=(--num-layers-per-virtual-pipeline-stage $((L / (P * V))))
  local cmd
  if [ "$mode" = mpi ]; then
    # Process p of the node takes GPU p; each writes its own trace, $trace.rankR.
    cmd=(timeout -k 10 "$cap" mpirun -np "$n" "$troupe" train "${args[@]}" --devices 1 --trace "$trace")
  else
    cmd=(timeout -k 10 "$cap" "$troupe" train "${args[@]}" --devices "$n" --trace "$trace")
  fi
  echo "== $name ($n GPU, $mode, estimated $est GiB per GPU): ${cmd[*]}"
  [ "$dry" = 1 ] && return 0
  local t0=$SECONDS
  "${cmd[@]}" < /dev/null > "$log" 2>&1  # mpirun would read the layouts loop's input
  local rc=$? ms
  ms=$(ms_of "$log")
  if [ "$rc" != 0 ] || [ -z "$ms" ]; then
    say "$name FAILED (exit $rc after $((SECONDS - t0)) s): $(grep -v '^ \[' "$log" | tail -3 | tr '\n' ' ')"
    return 0
  fi
  echo "   $((SECONDS - t0)) s, $ms ms/iteration"
  echo "$name $mode $n $T $P $D $V $gbs $ms $est" >> "$runs"
}

# The --what-if spec of a pipeline shape.
what_if_spec() {  # P V
  if [ "$2" -gt 1 ]; then echo "schedule=interleaved,p=$1,v=$2"; else echo "schedule=1f1b,p=$1"; fi
}

# Replays a one-process pipeline run's trace, predicting the other pipeline shapes of the layouts.
replay() {  # NAME P V
  local name=$1 trace=$out/$1.trace specs=() svg=() own
  [ -f "$trace" ] || return 0
  own=$(what_if_spec "$2" "$3")
  while read -r spec; do
    [ "$spec" = "$own" ] || specs+=(--what-if "$spec")
  done < <(layouts | awk '$3 > 1 {print $3, $5}' | sort -u | while read -r p v; do what_if_spec "$p" "$v"; done)
  [[ $name == *-$svg_run-proc ]] && svg=(--svg "$out/$name.svg")
  "$troupe" replay "$trace" --iteration $((iters - 1)) "${specs[@]}" "${svg[@]}" > "$out/$name.replay" 2>&1 ||
      say "$name: troupe replay failed: $(tail -1 "$out/$name.replay")"
}

say "==== three_d_scaling.sh: $gpus $([ "$cpu" = 1 ] && echo CPU devices || echo GPUs) of $mem_gib GiB; models $models; modes $modes"
peak=0
if [ "$cpu" = 0 ]; then
  echo "== $build/bench/gemm_bench --square 8192 --reps 30"
  if [ "$dry" = 0 ]; then
    "$build/bench/gemm_bench" --square 8192 --reps 30 > "$out/gemm_peak.log" 2>&1
    peak=$(grep -o 'matmul peak: [0-9.]*' "$out/gemm_peak.log" | awk '{print $3}')
    peak=${peak:-0}
    say "$(grep 'matmul peak' "$out/gemm_peak.log" || echo "matmul peak: not measured ($(tail -1 "$out/gemm_peak.log"))")"
  fi
fi

# Priority order (the budget cuts the tail): 1.3B in one process, its loss check, the 7B in one
# process, then the runs with one process per GPU.
declare -A baseline
for mode in proc mpi; do
  [[ " $modes " == *" $mode "* ]] || continue
  for model in $models; do
    model_shape "$model"
    base_layers=$layers
    [ "$model" = 7b ] && base_layers=$((layers / n_all))
    base=$model-1gpu$([ "$base_layers" != "$layers" ] && echo "-${base_layers}L")
    if [ -z "${baseline[$model]:-}" ]; then
      run "$base" proc 1 1 1 1 "$iters" "$log_interval" $((mbs * microbatches)) "$base_layers"
      baseline[$model]=$base
    fi
    while read -r lname T P D V; do
      [ -z "$only" ] || [[ " $only " == *" $lname "* ]] || continue
      [ "$model" = 7b ] && [ "$gpus" -lt 8 ] && [ "$D" -gt 1 ] && [ -z "$only" ] && continue
      run "$model-$lname-$mode" "$mode" "$T" "$P" "$D" "$V" "$iters" "$log_interval" $((mbs * microbatches * D)) "$layers"
      [ "$mode" = proc ] && [ "$P" -gt 1 ] && [ "$dry" = 0 ] && replay "$model-$lname-$mode" "$P" "$V"
    done < <(layouts)
    if [ "$mode" = proc ] && [ "$model" = "$(echo "$models" | awk '{print $1}')" ]; then
      # The loss check: same data, seed and global batch (mbs x 4 x D of the pure-DP layout).
      read -r a b <<< "$loss_pair"
      for l in $a $b; do
        read -r _ T P D V < <(layouts | awk -v l="$l" '$1 == l')
        run "$model-$l-loss" proc "$T" "$P" "$D" "$V" "$loss_iters" 1 $((mbs * n_all)) "$layers"
      done
    fi
  done
done
[ "$dry" = 1 ] && exit 0

echo
say "==== per GPU: tokens/s, TFLOP/s (6N + 12 L d T per token), MFU of the ${peak} TFLOP/s matmul peak, efficiency"
say "==== against the one-GPU run of the same per-GPU work; bubble from the trace (measured / theory / simulated)"
say "==== and predicted by replay --what-if from the other pipeline run; memory of the first GPU (estimate / in use)"
printf '%-26s %4s %9s %12s %9s %6s %6s  %-22s %-10s %s\n' run GPUs ms/it tokens/s/GPU TFLOP/s MFU eff \
    "bubble meas/theo/sim" what-if "memory GiB est/used (B/param)" | tee -a "$summary"
while read -r name mode n T P D V gbs ms est; do
  [[ $name == *-loss ]] && continue
  model=${name%%-*}
  log=$out/$name.log
  fpt=$(flops_per_token "$log")
  read -r _ _ _ seq_run < <(shape_of "$log")
  base=${baseline[$model]}
  base_sps=$(awk -v b="$base" '$1 == b {print $8 / ($9 / 1000)}' "$runs")  # the one-GPU run's samples/s
  bfpt=$([ -f "$out/$base.log" ] && flops_per_token "$out/$base.log" || echo 0)
  read -r bmeas btheo bsim < <([ -f "$out/$name.replay" ] && bubble_of "$out/$name.replay" || echo "- - -")
  # The bubble predicted for this shape from the other pipeline runs' traces (one process each):
  # "PERCENT<-RUN", comma-separated.
  pred=-
  if [ "$P" -gt 1 ]; then
    spec=$(what_if_spec "$P" "$V")
    pred=$(for f in "$out/$model"-*-proc.replay; do
             [ -f "$f" ] || continue
             grep -F "[$spec]" "$f" | grep -o 'bubble [0-9.]*%' | head -1 |
                 awk -v r="$(basename "$f" -proc.replay)" '{printf "%s<-%s\n", $2, substr(r, index(r, "-") + 1)}'
           done | paste -sd, -)
    pred=${pred:--}
  fi
  read -r bpp used < <(memory_of "$log")
  awk -v name="$name" -v n="$n" -v gbs="$gbs" -v ms="$ms" -v seq="$seq_run" -v fpt="$fpt" -v peak="$peak" \
      -v bsps="${base_sps:-0}" -v bfpt="$bfpt" -v meas="$bmeas" -v theo="$btheo" -v sim="$bsim" \
      -v pred="$pred" -v est="$est" -v used="${used:--}" -v bpp="${bpp:--}" -v isbase="$([ "$name" = "$base" ] && echo 1 || echo 0)" 'BEGIN {
    tps = gbs * seq / (ms / 1000) / n; tf = tps * fpt / 1e12;
    btf = bsps * seq * bfpt / 1e12;  # the one-GPU run (same sequence length)
    mfu = peak > 0 ? sprintf("%5.1f%%", 100 * tf / peak) : "-";
    eff = (btf > 0 && !isbase) ? sprintf("%5.1f%%", 100 * tf / btf) : "-";
    bub = meas == "-" ? "-" : sprintf("%s/%s/%s%%", meas, theo, sim);
    printf "%-26s %4d %9.1f %12.0f %9.1f %6s %6s  %-22s %-10s %s/%s (%s)\n", name, n, ms, tps, tf, mfu, eff, bub,
           pred == "-" ? "-" : pred, est, used, bpp }' | tee -a "$summary"
done < "$runs"

read -r a b <<< "$loss_pair"
model1=$(echo "$models" | awk '{print $1}')
la=$out/$model1-$a-loss.log lb=$out/$model1-$b-loss.log
if [ -f "$la" ] && [ -f "$lb" ]; then
  losses_of "$la" > "$out/$model1-$a-loss.losses"
  losses_of "$lb" > "$out/$model1-$b-loss.losses"
  read -r worst count < <(max_rel_diff "$out/$model1-$a-loss.losses" "$out/$model1-$b-loss.losses")
  say "loss check ($model1, $loss_iters iterations, same data and seed): $a vs $b: $count iterations compared," \
      "max relative difference $worst; first/last loss $(head -1 "$out/$model1-$a-loss.losses")/$(tail -1 "$out/$model1-$a-loss.losses")" \
      "vs $(head -1 "$out/$model1-$b-loss.losses")/$(tail -1 "$out/$model1-$b-loss.losses")"
fi
say "$(ls "$out"/*.svg 2>/dev/null | sed 's/^/timeline: /')"
say "total ${SECONDS} s"
if [ -n "${OUT:-}" ] && [ "$dry" = 0 ]; then
  cp "$summary" "$out"/*.svg "$OUT"/ 2>/dev/null
  tar -C "$(dirname "$out")" -cJf "$OUT/three_d_runs.tar.xz" "$(basename "$out")" &&
    echo "logs, traces and replays: \$OUT/three_d_runs.tar.xz ($(du -h "$OUT/three_d_runs.tar.xz" | cut -f1))"
fi
