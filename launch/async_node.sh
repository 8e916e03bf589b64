#!/usr/bin/env bash
# Asynchronous GRPO on one machine, each role on its own cores or GPUs: the trainer, and a fleet of sampler
# processes running up to STALENESS policy versions ahead of it (README "Asynchronous RL").
#
#   launch/async_node.sh experiments/tiny_cpu.py [--workdir=DIR] [--config.FIELD=VALUE ...]
#   TRAINER_GPUS=0-5 SAMPLER_GPUS=6-7 SAMPLERS=2 launch/async_node.sh experiments/NAME.py   # an 8-GPU node
#   SAMPLER_CPUS=0 TRAINER_CPUS=1 STALENESS=0 launch/async_node.sh ...   # the synchronous loop, roles pinned
#
# Where each role runs:
#   trainer          TRAINER_GPUS (its CUDA_VISIBLE_DEVICES; default: all) and TRAINER_CPUS (rl.trainer_cpus)
#   sampler fleet    SAMPLERS processes (sampler.num_processes, default 1), each with its share of SAMPLER_GPUS
#                    (sampler.devices, as CUDA_VISIBLE_DEVICES) and of SAMPLER_CPUS (sampler.cpus)
# Without GPUs the cores are split in two by default: the first half for the samplers, the rest for the trainer
# (BENCHMARKS "Asynchronous GRPO": one core each on a 2-core machine). STALENESS is rl.max_staleness (default 1).
# With GPUs, disjoint GPUs are simplest; roles that share GPUs (SAMPLER_GPUS unset on a GPU machine) get the memory
# split launch/plan.py --split gives from its rows (rl.trainer_memory_fraction, sampler.memory_fraction).
# The placement is printed first; each sampler's log (WORKDIR/sampler/process_0/...) repeats what it got.
set -euo pipefail
# No cd: the config, --workdir and every relative path in the flags are the user's, from where they typed them
# (python -m swerl_jax.train reads them so); only this repository's own files are named from its root.
REPO="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"  # swerl_jax from any folder, whatever PY is
CONFIG="${1:?usage: launch/async_node.sh experiments/NAME.py [--config.FIELD=VALUE ...]}"; shift
PY="${PY:-$REPO/.venv/bin/python}"
STALENESS="${STALENESS:-1}"
SAMPLERS="${SAMPLERS:-1}"
if [[ -z "${SAMPLER_GPUS:-}${TRAINER_GPUS:-}" && -z "${SAMPLER_CPUS:-}${TRAINER_CPUS:-}" ]]; then
  n="$(nproc)"
  if (( n >= 2 )); then
    half=$(( n / 2 ))
    SAMPLER_CPUS="0-$(( half - 1 ))"; TRAINER_CPUS="${half}-$(( n - 1 ))"
  fi
fi
if [[ -n "${TRAINER_GPUS:-}" ]]; then
  # CUDA_VISIBLE_DEVICES takes a comma list: expand ranges such as 0-5
  export CUDA_VISIBLE_DEVICES="$(python3 -c 'import sys; print(",".join(str(i) for p in sys.argv[1].split(",")
    for i in range(int(p.split("-")[0]), int(p.split("-")[-1]) + 1)))' "$TRAINER_GPUS")"
fi
echo "async_node: trainer on GPUs ${TRAINER_GPUS:-all}, cores ${TRAINER_CPUS:-any};" \
     "${SAMPLERS} sampler process(es) on GPUs ${SAMPLER_GPUS:-shared with the trainer}, cores ${SAMPLER_CPUS:-any};" \
     "rl.max_staleness=${STALENESS}"
SPLIT=""
if [[ -z "${SAMPLER_GPUS:-}" ]] && command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  PLAN_ARGS=(); for a in "$@"; do if [[ "$a" == --config.* ]]; then PLAN_ARGS+=("$a"); fi; done
  SPLIT=$("$PY" "$REPO/launch/plan.py" --config="$CONFIG" --config.sampler.num_processes="$SAMPLERS" \
    ${PLAN_ARGS[@]+"${PLAN_ARGS[@]}"} --split)
  echo "async_node: roles share the GPUs: $SPLIT"
fi
# shellcheck disable=SC2086  # SPLIT is two --config.KEY=VALUE words; later flags override it
exec "$PY" -m swerl_jax.train --config="$CONFIG" $SPLIT --config.sampler.mode=process \
  --config.rl.max_staleness="$STALENESS" --config.sampler.num_processes="$SAMPLERS" \
  --config.sampler.devices="${SAMPLER_GPUS:-}" --config.sampler.cpus="${SAMPLER_CPUS:-}" \
  --config.rl.trainer_cpus="${TRAINER_CPUS:-}" "$@"
