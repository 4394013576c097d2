#!/usr/bin/env bash
# Does mpirun's CPU binding stall a two-process GPU pipeline? Open MPI binds each process to one
# core when it starts two or fewer; every thread of that process (the actors' workers, NCCL's
# proxy, the clock sampler) then shares the core. This runs the same traced two-process pipeline
# under each binding and prints each run's per-iteration step times from its trace: a stalled
# iteration is one more than 3% over the run's median.
# Usage (repo root, 2+ GPUs, after `source .devdeps/env.sh`):
#   bench/mpirun_binding.sh [BUILD_DIR]   (BINDINGS="core none" by default; ITERS=30; SCHEDULE=zb-v;
#                                          a binding written "core+smi" also runs nvidia-smi's
#                                          100 ms sampler beside the run, as replay_accuracy.sh does)
set -uo pipefail
build=${1:-build}
troupe=$(realpath "$build/apps/troupe")
out=${OUT:-/tmp}/binding
mkdir -p "$out"
read -r -a bindings <<<"${BINDINGS:-core none}"
iters=${ITERS:-30}
schedule=${SCHEDULE:-zb-v}
# The pipeline of bench/replay_accuracy.sh: 24 layers, hidden 1600, seq 1024, 8 microbatches of 4.
model=(--num-layers 24 --hidden-size 1600 --num-attention-heads 25 --seq-length 1024 --vocab-size 50257
       --mock-data --bf16 --micro-batch-size 4 --global-batch-size 32 --train-iters "$iters"
       --log-interval "$iters" --eval-iters 0 --lr 1e-4 --pipeline-model-parallel-size 2
       --pipeline-schedule "$schedule" --devices 1)

for b in "${bindings[@]}"; do
  bind=${b%+smi} smi=""
  echo "== $b: each rank's CPUs"
  mpirun -np 2 --bind-to "$bind" bash -c 'echo "rank $OMPI_COMM_WORLD_RANK: $(grep Cpus_allowed_list /proc/self/status)"' | sort
  if [ "$bind" != "$b" ]; then
    nvidia-smi --query-gpu=index,clocks.sm --format=csv,noheader -lms 100 >/dev/null 2>&1 &
    smi=$!
  fi
  mpirun -np 2 --bind-to "$bind" "$troupe" train "${model[@]}" --trace "$out/$b.trace" >"$out/$b.log" 2>&1 ||
    echo "$b failed: $(tail -3 "$out/$b.log")"
  [ -z "$smi" ] || kill "$smi" 2>/dev/null
  [ -e "$out/$b.trace.rank0" ] || continue
  grep -i "warn" "$out/$b.log" | head -3
  for i in $(seq 2 "$iters"); do
    "$troupe" replay "$out/$b.trace" --iteration "$i" 2>/dev/null | awk '/^step time:/ { print $3 }'
  done >"$out/$b.steps"
done

echo "==== per-iteration step (ms of forward/backward ops, iterations 2..$iters)"
printf '%-9s %9s %9s %9s %9s %8s\n' binding median mean max stalled "of"
for b in "${bindings[@]}"; do
  [ -s "$out/$b.steps" ] || continue
  sort -n "$out/$b.steps" | awk -v b="$b" '{ v[NR] = $1; s += $1 } END {
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    for (i = 1; i <= NR; ++i) if (v[i] > 1.03 * m) n++
    printf "%-9s %9.2f %9.2f %9.2f %9d %8d\n", b, m, s / NR, v[NR], n, NR }'
done
