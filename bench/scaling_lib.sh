# Helpers the scaling benchmarks share (parallel_scaling.sh, three_d_scaling.sh): numbers read
# back from `troupe train` and `troupe replay` logs. Sourced, not run.

# Steady-state ms per iteration: the last logged window (the first holds the warm-up).
ms_of() { grep -o 'elapsed time per iteration (ms): [0-9.]*' "$1" | tail -1 | awk '{print $NF}'; }

# "PARAMS_M LAYERS HIDDEN SEQ" from troupe train's header line (parameters in millions).
shape_of() {
  local params
  params=$(grep -o '[0-9.]*M parameters' "$1" | head -1 | sed 's/M parameters//')
  grep -o '^troupe train: [0-9]* layers, hidden [0-9]*, .*, seq [0-9]*' "$1" | head -1 |
      awk -v p="$params" '{print p, $3, $6, $NF}'
}

# FLOPs per token as troupe train counts them: 6N + 12 L d T (the attention scores).
flops_per_token() {
  shape_of "$1" | awk '{printf "%.6g\n", 6 * $1 * 1e6 + 12 * $2 * $3 * $4}'
}

# "BYTES_PER_PARAMETER GIB_IN_USE" from the summary's memory line (the first device of the process).
memory_of() {
  grep -o '[0-9.]* bytes per parameter; device memory in use [0-9.]* GiB' "$1" | head -1 | awk '{print $1, $9}'
}

# "MEASURED THEORY SIMULATED" bubble percentages from a `troupe replay` report.
bubble_of() {
  local measured theory simulated
  measured=$(grep -o '^bubble: [0-9.]*% measured' "$1" | grep -o '[0-9.]*%' | tr -d %)
  theory=$(grep -o '% measured, [0-9.]*% theory' "$1" | grep -o '[0-9.]*% theory' | tr -d '% theory')
  simulated=$(grep '^simulated with' "$1" | grep -o 'bubble [0-9.]*%' | tr -d 'bubble %')
  echo "${measured:--} ${theory:--} ${simulated:--}"
}

# The logged lm loss of every log line (one per iteration with --log-interval 1), one a line.
losses_of() { grep -o 'lm loss: [0-9.eE+-]*' "$1" | awk '{print $3}'; }

# Max relative difference between two files of losses, line by line: "MAX LINES".
max_rel_diff() {
  paste "$1" "$2" | awk '{ d = $1 - $2; if (d < 0) d = -d; b = $2 < 0 ? -$2 : $2; r = d / (b > 1e-12 ? b : 1e-12);
                           if (r > m) m = r; n++ } END { printf "%.3g %d\n", m, n }'
}
