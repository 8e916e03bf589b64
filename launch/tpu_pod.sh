#!/usr/bin/env bash
# Run on every host of a Cloud TPU slice (v4-8, v5p-128, v5p-512, v6e-256, ...) with gcloud tpu-vm ssh.
#
#   TPU_NAME=my-v5p-512 ZONE=us-east5-a launch/tpu_pod.sh experiments/swerl_llama3_70b.py \
#       --config.mesh.name=tpu-v5p-512
#   SETUP=1 ... launch/tpu_pod.sh ...   # first copy this checkout to every host and install it
#
# Each host runs one process that sees its local chips; SWERL_DISTRIBUTED=auto makes
# swerl_jax.sharding.initialize_distributed() call jax.distributed.initialize(), which finds the coordinator,
# process count and id from the TPU metadata. Multi-slice (DCN) runs set --config.mesh.dcn_shape.data=N.
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG="${1:?usage: TPU_NAME=... ZONE=... launch/tpu_pod.sh experiments/NAME.py [--config.FIELD=VALUE ...]}"
shift
: "${TPU_NAME:?set TPU_NAME}" "${ZONE:?set ZONE}"
REMOTE_DIR="${REMOTE_DIR:-swerl_jax}"
PROJECT_FLAG=${PROJECT:+--project=$PROJECT}
gssh() { gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone="$ZONE" $PROJECT_FLAG --worker=all --command="$1"; }

if [[ -n "${SETUP:-}" ]]; then
  tar --exclude=.venv --exclude=.git -czf /tmp/swerl_jax_src.tgz .
  gcloud compute tpus tpu-vm scp /tmp/swerl_jax_src.tgz "$TPU_NAME":/tmp/ --zone="$ZONE" $PROJECT_FLAG --worker=all
  gssh "mkdir -p $REMOTE_DIR && tar -xzf /tmp/swerl_jax_src.tgz -C $REMOTE_DIR && cd $REMOTE_DIR && \
python3 -m venv .venv && .venv/bin/pip install -q -e . 'jax[tpu]==0.10.2'"
fi

# Print the fit once (host 0's output is enough; every host computes the same plan).
# The planner gets only the --config.FIELD=VALUE flags (it has no --workdir); the trainer gets them all.
PLAN_ARGS=(); for a in "$@"; do if [[ "$a" == --config.* ]]; then PLAN_ARGS+=("$a"); fi; done
"${PY:-.venv/bin/python}" launch/plan.py --config="$CONFIG" ${PLAN_ARGS[@]+"${PLAN_ARGS[@]}"} 2>/dev/null | tail -n 3 \
  || true
ARGS=$(printf ' %q' "$@")
gssh "cd $REMOTE_DIR && SWERL_DISTRIBUTED=auto .venv/bin/python -m swerl_jax.train --config=$CONFIG$ARGS \
2>&1 | tee -a /tmp/swerl_jax_train.log"
