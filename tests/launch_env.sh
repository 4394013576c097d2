#!/usr/bin/env bash
# Runs a command as NP processes on this machine with torchrun's environment variables, as
# `torchrun --nproc-per-node NP --no-python CMD...` would (torchrun itself needs PyTorch): RANK,
# WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK=0, MASTER_ADDR=127.0.0.1, MASTER_PORT=a
# free port, TORCHELASTIC_RUN_ID and TORCHELASTIC_USE_AGENT_STORE=True. Every line of output is prefixed with its rank; fails (with the first failing
# process's status) if any process fails.
# Usage: tests/launch_env.sh NP CMD [ARGS...]
set -u
if [ $# -lt 2 ] || ! [[ $1 =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 NP CMD [ARGS...]" >&2
  exit 2
fi
np=$1
shift
# Ports nobody listens on: torchrun's own store would hold MASTER_PORT, so process 0 listens on
# MASTER_PORT+1 (TORCHELASTIC_USE_AGENT_STORE=True, as torchrun sets it). One that cannot be
# bound fails naming it.
for _ in $(seq 50); do
  port=$((20000 + RANDOM % 40000))
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue
  (exec 3<>"/dev/tcp/127.0.0.1/$((port + 1))") 2>/dev/null || break
done
pids=()
for ((r = 0; r < np; ++r)); do
  (
    set -o pipefail
    RANK=$r WORLD_SIZE=$np LOCAL_RANK=$r LOCAL_WORLD_SIZE=$np GROUP_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      TORCHELASTIC_RUN_ID=launch_env TORCHELASTIC_USE_AGENT_STORE=True "$@" 2>&1 | sed -u "s/^/[rank $r] /"
  ) &
  pids+=($!)
done
status=0
for ((r = 0; r < np; ++r)); do
  wait "${pids[$r]}"
  rc=$?
  if [ $rc -ne 0 ]; then
    echo "launch_env: rank $r exited with status $rc" >&2
    [ $status -ne 0 ] || status=$rc
  fi
done
exit $status
