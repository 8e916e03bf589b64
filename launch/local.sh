#!/usr/bin/env bash
# One process on this machine (CPU, one GPU or one 8-GPU node): check the fit, then train.
#
#   launch/local.sh experiments/tiny_cpu.py [--workdir=DIR] [--config.rl.num_steps=10 ...]
#   MODE=sft launch/local.sh experiments/sft_llama3_70b.py   # swerl_jax.train runs the SFT stage; plan its batch
#   SKIP_PLAN=1 launch/local.sh ...        # do not print the memory plan first
#
# The planner gets only the --config.FIELD=VALUE flags (it has no --workdir); the trainer gets them all.
#
# All devices of the machine join one mesh (config.mesh); on CPU, CPU_DEVICES=8 splits the host into 8 fake
# devices to try a mesh shape (`--config.mesh.name=cpu8 --config.mesh.shape.tensor=2`).
set -euo pipefail
# No cd: the config, --workdir and every relative path in the flags are the user's, from where they typed them
# (python -m swerl_jax.train reads them so); only this repository's own files are named from its root.
REPO="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"  # swerl_jax from any folder, whatever PY is
CONFIG="${1:?usage: launch/local.sh experiments/NAME.py [--config.FIELD=VALUE ...]}"; shift
PY="${PY:-$REPO/.venv/bin/python}"
if [[ -n "${CPU_DEVICES:-}" ]]; then
  export JAX_PLATFORMS=cpu XLA_FLAGS="--xla_force_host_platform_device_count=${CPU_DEVICES} ${XLA_FLAGS:-}"
fi
if [[ -z "${SKIP_PLAN:-}" ]]; then
  PLAN_ARGS=(); for a in "$@"; do if [[ "$a" == --config.* ]]; then PLAN_ARGS+=("$a"); fi; done
  "$PY" "$REPO/launch/plan.py" --config="$CONFIG" --mode="${MODE:-rl}" ${PLAN_ARGS[@]+"${PLAN_ARGS[@]}"} || true
fi
exec "$PY" -m swerl_jax.train --config="$CONFIG" "$@"
