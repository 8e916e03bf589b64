#!/usr/bin/env bash
# One lent-GPU session's measurements (issue 36), in priority order under one deadline; every part's log is
# appended to $OUT/all.log (default OUT=/tmp/gpu_out), the profiles go to $OUT/profile_*.tgz. From the repository
# root of the GPU machine:
#   DEADLINE=540 bash benchmarks/gpu_session.sh env smoke loop tests   # issue 48's loop (2026-11-27)
#   DEADLINE=540 bash benchmarks/gpu_session.sh [part ...]     # parts: env train profile decode1k tests torch
#                                                               #   decode2k mix 8b profile_after (default: all
#                                                               #   these), causal (train's second half alone)
# Needs: the image's python3 (jax[cuda], torch, transformers), the project's other dependencies as wheels in .whl/,
# bubblewrap's .deb in .gpu/ and SmolLM2's tokenizer in $SWERL_JAX_HOME (default .gpu/home). Make them here, on the
# CPU machine, with `bash benchmarks/gpu_session.sh prepare`, and carry .whl and .gpu (both git-ignored through
# .git/info/exclude). Prints each part's table; a part that would outrun the deadline is skipped and named.
set -u
OUT=${OUT:-/tmp/gpu_out}; LOGS=/tmp/gpu_logs; mkdir -p "$OUT" "$LOGS"  # back: all.log and 2 profiles
DEADLINE=${DEADLINE:-540}
START=$(date +%s)
export PYTHONUNBUFFERED=1 SWERL_JAX_HOME=${SWERL_JAX_HOME:-$PWD/.gpu/home} TOKENIZERS_PARALLELISM=false
export JAX_PLATFORMS=${JAX_PLATFORMS:-cuda}  # JAX_PLATFORMS=cpu: try a part's plumbing on a CPU machine
PY=${PY:-python3}
parts=("$@"); [ ${#parts[@]} -eq 0 ] && parts=(env train profile decode1k tests torch decode2k mix 8b profile_after)
MFU="benchmarks/train_step_mfu.py --model=llama3.2-1b --seq=4096 --batch=4 --dtype=bfloat16 \
--remat=dots_with_no_batch_dims_saveable --mesh=h200x1 --chunk 32768 --steps 5"
SAMPLER="benchmarks/sampler_throughput.py --model=llama3.2-1b --dtype=bfloat16 --new-tokens 256"

run() {  # run NAME SECONDS_NEEDED CMD...: skip when the deadline is nearer than SECONDS_NEEDED
  local name=$1 need=$2; shift 2
  local left=$(( DEADLINE - ${RESERVE:-0} - ($(date +%s) - START) ))  # RESERVE: seconds kept for what follows
  if [ "$left" -lt "$need" ]; then echo "== $name: SKIPPED ($left s left, needs ~$need s)"; return; fi
  echo "== $name (at $(( $(date +%s) - START )) s)"
  timeout "$left" "$@" > "$LOGS/$name.log" 2>&1; local rc=$?
  { echo "===== $name: $*"; cat "$LOGS/$name.log"; echo "===== $name: rc=$rc"; } >> "$OUT/all.log"
  grep -v -E "^\s*$|WARNING|warn\(|I0000|E0000|W0000|Loading weights" "$LOGS/$name.log" | tail -n 30
  echo "== $name: rc=$rc after $(( $(date +%s) - START )) s"
}

profile() {  # profile NAME ATTENTION: trace 2 steps, print the split, keep trace + optimized HLO in $OUT
  rm -rf /tmp/dump /tmp/prof
  XLA_FLAGS="--xla_gpu_enable_command_buffer= --xla_dump_to=/tmp/dump --xla_dump_hlo_as_text \
--xla_dump_hlo_module_re=jit_step" run "profile_$1" 90 $PY $MFU --attention="$2" --no-peer \
    --steps 2 --profile /tmp/prof --hlo-dump /tmp/dump
  tar czf "$OUT/profile_$1.tgz" /tmp/prof $(ls /tmp/dump/*jit_step*after_optimizations.txt 2>/dev/null) 2>/dev/null
}

for part in "${parts[@]}"; do case $part in
  prepare)  # on the CPU machine (the GPU machine reaches no registry): what the GPU image lacks
    grep -qx "/.whl/" .git/info/exclude 2>/dev/null || echo "/.whl/" >> .git/info/exclude
    grep -qx "/.gpu/" .git/info/exclude 2>/dev/null || echo "/.gpu/" >> .git/info/exclude
    for w in ml_collections==1.1.0 grain==0.2.18 array-record==0.8.6 cydifflib==1.2.0 unidiff==1.0.1 \
             tensorboardX==2.6.5 portpicker; do
      python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d .whl "$w"
    done
    mkdir -p .gpu/home && (cd .gpu && apt-get download bubblewrap)
    SWERL_JAX_HOME=$PWD/.gpu/home ${CPU_PY:-.venv/bin/python} -c \
      "from swerl_jax.tokenizer import load_tokenizer; load_tokenizer('')"
    du -sh .whl .gpu ;;
  env)  # the carried wheels (.whl/: the project's pure and compiled deps the image lacks) and bubblewrap (.gpu/)
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
    $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
    export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
    if ! command -v bwrap >/dev/null && ls .gpu/bubblewrap_*.deb >/dev/null 2>&1; then dpkg -x .gpu/bubblewrap_*.deb /; fi
    bwrap --version; bwrap --ro-bind / / --unshare-all --die-with-parent true && echo "bwrap runs"
    $PY -c "import jax, flax, optax, torch, transformers; print('jax', jax.__version__, jax.devices(), 'flax', \
flax.__version__, 'optax', optax.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
    ;;
  smoke)  # the loop's plumbing on this GPU (a few steps of each stage); stops the session if it fails
    export XLA_PYTHON_CLIENT_PREALLOCATE=false
    run loop_smoke 150 $PY -m swerl_jax.sweep --config=experiments/testbed_gpu.py:smoke --sweep rl.max_staleness=1 \
      --seeds 0 --share-sft --workdir /tmp/loop_smoke
    grep -q "1 done, 0 failed" "$LOGS/loop_smoke.log" || { tail -n 60 /tmp/loop_smoke/runs/*/train.log;
      cp /tmp/loop_smoke/runs/*/train.log "$OUT/smoke_train.log" 2>/dev/null; exit 1; } ;;
  loop)  # issue 48 item 1: SFT, GRPO at k=0 and k=1 (one SFT stage), the sampler process on the same GPU
    export XLA_PYTHON_CLIENT_PREALLOCATE=false  # each pool grows to its peak: the driver's reading is the peak
    $PY benchmarks/gpu_loop.py watch /tmp/loop_mem.csv & WATCH=$!
    RESERVE=25 run loop 300 $PY -m swerl_jax.sweep --config=experiments/testbed_gpu.py --sweep rl.max_staleness=0,1 --seeds 0 \
      --share-sft --workdir /tmp/loop
    kill $WATCH
    $PY benchmarks/gpu_loop.py report /tmp/loop --memory /tmp/loop_mem.csv | tee -a "$OUT/all.log"
    cp /tmp/loop_mem.csv "$OUT/loop_mem.csv"
    tar czf "$OUT/loop_runs.tgz" --exclude=checkpoints --exclude=policy /tmp/loop 2>/dev/null ;;
  train)  # MFU before (cuDNN given the mask as a bias) and after (cuDNN's causal mask + lengths)
    export XLA_PYTHON_CLIENT_MEM_FRACTION=0.94
    run train_masked 100 $PY $MFU --attention=cudnn_masked --no-peer
    run train_causal 100 $PY $MFU --attention=cudnn --no-peer ;;
  causal)  # the "after" alone
    export XLA_PYTHON_CLIENT_MEM_FRACTION=0.94
    run train_causal 100 $PY $MFU --attention=cudnn --no-peer ;;
  profile)  # the split of the step before the change; command buffers off so kernels name their HLO op
    profile masked cudnn_masked ;;
  profile_after)
    profile causal cudnn ;;
  tests)  # the GPU-relevant subset: kernels, fp32 parity against transformers / the copied engine, batching
    run tests 100 $PY -m pytest -q -p no:cacheprovider tests/model/test_attention.py \
      tests/sampler/test_prefix_attention.py tests/sampler/test_engine.py tests/model/test_llama.py \
      tests/sampler/test_continuous.py ;;
  torch)
    run train_torch 60 $PY $MFU --attention=cudnn --peer-only ;;
  decode1k)
    XLA_PYTHON_CLIENT_PREALLOCATE=false run decode1k 150 $PY $SAMPLER --batches=256 --samples 16 \
      --prompt-tokens 1024 --repeats 2 --compare-kernels --hbm-gbps=4800 ;;
  decode2k)
    XLA_PYTHON_CLIENT_PREALLOCATE=false run decode2k 70 $PY $SAMPLER --batches=256 --samples 16 \
      --prompt-tokens 2048 --repeats 1 --compare-kernels --skip-torch --hbm-gbps=4800 ;;
  mix)  # continuous batching vs the static engine on a long-tailed mix of answer lengths
    XLA_PYTHON_CLIENT_PREALLOCATE=false run mix 60 $PY benchmarks/sampler_throughput.py --model=llama3.2-1b \
      --dtype=bfloat16 --batches=32 --prompt-tokens 512 --new-tokens 512 --length-mix 128 --repeats 1 \
      --skip-torch ;;
  8b)  # the 8B shape on one GPU: bf16 master weights and Adam moments (fp32 would need 128 GB of state)
    run train_8b 100 $PY benchmarks/train_step_mfu.py --model=llama3.1-8b --seq=4096 --batch=1 \
      --dtype=bfloat16 --param-dtype=bfloat16 --remat=full --mesh=h200x1 --chunk 4096 --steps 3 \
      --attention=cudnn --no-peer ;;
  *) echo "unknown part $part" ;;
esac; done
echo "== done after $(( $(date +%s) - START )) s"
