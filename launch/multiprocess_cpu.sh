#!/usr/bin/env bash
# Run one JAX program as N cooperating processes on this machine (loopback coordinator, gloo CPU collectives).
#
#   launch/multiprocess_cpu.sh NUM_PROCESSES DEVICES_PER_PROCESS COMMAND [ARGS...]
#   launch/multiprocess_cpu.sh 2 2 .venv/bin/python -m swerl_jax.train --config=experiments/tiny_cpu.py \
#       --config.mesh.shape.fsdp=-1
#
# Every process gets JAX_PLATFORMS=cpu, DEVICES_PER_PROCESS fake CPU devices and JAX_COORDINATOR_ADDRESS /
# JAX_NUM_PROCESSES / JAX_PROCESS_ID, which swerl_jax.sharding.initialize_distributed() reads. Output lines are
# printed as they come, prefixed with the process id; logs also go to $LOG_DIR (default: a temp dir). If any
# process fails, the others are stopped and the script exits with that status.
set -euo pipefail

if [[ $# -lt 3 ]]; then
  sed -n '2,12p' "$0"; exit 2
fi
NUM="$1"; DEV="$2"; shift 2
PORT="${PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
LOG_DIR="${LOG_DIR:-$(mktemp -d -t swerl_mp.XXXXXX)}"
mkdir -p "$LOG_DIR"

pids=()
interrupted=0
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
on_interrupt() {  # the processes share this terminal's Ctrl-C and stop by themselves (a trainer first closes its
  # sampler and checkpoint writes): a SIGTERM from here would cut that short
  interrupted=1
  echo "multiprocess_cpu.sh: interrupted; waiting for the processes to stop (they got the Ctrl-C too)" >&2
}
trap cleanup EXIT TERM
trap on_interrupt INT
prefix() {  # each line as soon as it is read (awk and sed read ahead on a pipe), prefixed with the process id
  local line
  while IFS= read -r line || [[ -n "$line" ]]; do printf '[%s] %s\n' "$1" "$line"; done
}

for ((i = 0; i < NUM; i++)); do
  (
    export JAX_PLATFORMS=cpu
    export XLA_FLAGS="--xla_force_host_platform_device_count=${DEV} ${EXTRA_XLA_FLAGS:-}"
    export JAX_COORDINATOR_ADDRESS="127.0.0.1:${PORT}" JAX_NUM_PROCESSES="$NUM" JAX_PROCESS_ID="$i"
    export PYTHONUNBUFFERED=1  # a Python program's prints reach the screen when made, not when its buffer fills
    # exec: the job's pid is the program's (waited for and stopped below); its output goes, live, to the log as
    # it is and to the screen prefixed, by printers that outlive a Ctrl-C to print the program's last lines
    exec "$@" > >(trap '' INT; tee "$LOG_DIR/process_$i.log" | prefix "$i") 2>&1
  ) &
  pids+=("$!")
done

# Wait in the order the processes end (wait -n -p): the first failure is the one reported, and the processes
# stopped because of it do not overwrite its status.
declare -A index_of
for i in "${!pids[@]}"; do index_of[${pids[$i]}]=$i; done
status=0
for ((n = 0; n < NUM; n++)); do
  rc=0; pid=""
  wait -n -p pid || rc=$?  # the launched processes are this script's only background jobs
  if [[ -z "${pid:-}" ]]; then  # wait -n unsets pid when no job is left, or when a Ctrl-C interrupted it
    if [[ $rc -gt 128 ]]; then n=$((n - 1)); continue; fi
    break
  fi
  if [[ $rc -ne 0 && $status -eq 0 ]]; then
    status=$rc
    if [[ $interrupted -eq 0 ]]; then
      echo "process ${index_of[$pid]} failed (exit $rc); log: $LOG_DIR/process_${index_of[$pid]}.log" >&2
      cleanup
    fi
  fi
done
trap - EXIT
exit "$status"
