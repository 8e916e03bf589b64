"""Export a run's policy to a Hugging Face directory that transformers (and so vLLM or any OpenAI-compatible server)
loads: a training checkpoint (Orbax) or a policy version published to the sampler.

    python -m swerl_jax.eval.export --run WORKDIR --out HF_DIR [--step N | --version N] [--stage sft] [--dtype bfloat16]

The model config comes from the run's own `WORKDIR/config.json` (the trainer's `policy.model_config_from`), the
weights from `WORKDIR/checkpoints/<step>/state` (the newest step by default; its integrity manifest is verified
first) or from `WORKDIR/policy/` version N (`--version`; `-1` is the newest); `--stage sft` takes the SFT stage's
checkpoints (`WORKDIR/sft/checkpoints`: the SFT baseline). The directory gets config.json, safetensors, the run's
tokenizer with its chat template, and the stop ids (eos, bos, pad in config.json and generation_config.json), so
transformers' `generate` stops where our sampler does; `repair_score --hf_dir` evaluates it.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import pathlib
import shutil
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from jax.sharding import Mesh

from swerl_jax import sharding
from swerl_jax.data.paths import user_path
from swerl_jax.meshes import AXES
from swerl_jax.model.config import LlamaConfig
from swerl_jax.model.convert import save_hf
from swerl_jax.policy import model_config_from
from swerl_jax.resolve import load_run_config
from swerl_jax.runs.integrity import has_manifest, verify_manifest
from swerl_jax.sampler import weights
from swerl_jax.tokenizer import tokenizer_for
from swerl_jax.weights_check import check_stored_weights


def export_shardings(model_config: LlamaConfig) -> Any:
    """Param shardings for exporting on every device of the run (all processes): FSDP over the largest device count
    that divides the model width, replicated over the rest, so each device holds a slice and no host the model."""
    devices = np.asarray(jax.devices())
    fsdp = math.gcd(devices.size, model_config.hidden_size)
    mesh = Mesh(devices.reshape(devices.size // fsdp, fsdp, 1), AXES)
    return sharding.param_shardings(model_config, mesh)


def _sharded_target(path: Any, shardings: Any, subtree: str | None) -> Any:
    """The stored params' shapes and dtypes (the Orbax metadata of `path`, under `subtree`) laid out by `shardings`."""
    checkpointer = ocp.StandardCheckpointer()
    try:
        tree = checkpointer.metadata(path).item_metadata.tree
    finally:
        checkpointer.close()
    stored = tree[subtree] if subtree else tree
    return jax.tree.map(lambda m, s: jax.ShapeDtypeStruct(tuple(m.shape), m.dtype, sharding=s), stored, shardings,
                        is_leaf=lambda x: hasattr(x, "shape") and hasattr(x, "dtype"))


def checkpoint_step(checkpoints: pathlib.Path, step: int | None = None) -> int:
    """`step` when `checkpoints` holds it, else the newest step there (None); FileNotFoundError names the folder."""
    steps = sorted(int(p.name) for p in checkpoints.iterdir() if p.is_dir() and p.name.isdigit()) \
        if checkpoints.is_dir() else []
    if not steps:
        raise FileNotFoundError(f"no checkpoint steps in {checkpoints}")
    step = steps[-1] if step is None else step
    if step not in steps:
        raise FileNotFoundError(f"checkpoint step {step} is not in {checkpoints} (steps: {steps})")
    return step


def checkpoint_params(checkpoints: pathlib.Path, step: int | None = None, shardings: Any = None) -> tuple[int, dict]:
    """(step, params) of a training checkpoint: `step`, or the newest finished one. Only the params are read: onto
    `shardings` (a params-like tree; each process reads its slices), or as host numpy arrays when None."""
    checkpoints = pathlib.Path(checkpoints).absolute()  # Orbax reads a relative path as nothing
    step = checkpoint_step(checkpoints, step)
    path = checkpoints / str(step)
    if has_manifest(path):
        verify_manifest(path)  # CorruptCheckpointError names the file
    if shardings is not None:
        target = {"params": _sharded_target(path / "state", shardings, "params")}
        checkpointer = ocp.PyTreeCheckpointer()
        try:  # partial: the optimizer state stays on disk
            state = checkpointer.restore(path / "state", args=ocp.args.PyTreeRestore(
                item=target, restore_args=ocp.checkpoint_utils.construct_restore_args(target), partial_restore=True))
        finally:
            checkpointer.close()
        return step, state["params"]
    checkpointer = ocp.StandardCheckpointer()
    try:
        state = checkpointer.restore(path / "state")  # no target: the saved tree, as host arrays
    finally:
        checkpointer.close()
    return step, jax.tree.map(np.asarray, state["params"])


def export_run(run: str | pathlib.Path, out: str | pathlib.Path, *, step: int | None = None,
               version: int | None = None, dtype: str = "", stage: str = "grpo") -> dict:
    """Write the run's policy (checkpoint `step`, or published `version`) as an HF directory; returns what was
    exported (source, step or version, dtype, path)."""
    run = pathlib.Path(run)
    if not (run / "config.json").is_file() and (run.parent / "config.json").is_file():
        # RUN/sft (a stage's folder) is the natural guess; load_run_config would only say "no config.json"
        stage_flag = f" --stage {run.name}" if run.name == "sft" else ""
        raise FileNotFoundError(f"--run {run}: a folder inside the run {run.parent}, not a run directory (no "
                                f"config.json); use --run {run.parent}{stage_flag}")
    config = load_run_config(run)
    if version is not None and (step is not None or stage != "grpo"):
        raise ValueError("--version exports a published policy (GRPO's policy/); --step and --stage name a "
                         "checkpoint instead: give one or the other")
    if dtype:
        check_dtype(dtype)
    target = pathlib.Path(out).resolve()
    if target == run.resolve() or run.resolve() in target.parents or (target / "config.json").is_file() and \
            (target / "checkpoints").exists():
        raise ValueError(f"--out {out}: inside the run (or another run's folder); the export would overwrite its "
                         "files: choose a folder of its own")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        # e.g. the base model's own HF folder: the export replaced its config and deleted its safetensors shards
        held = sorted(p.name for p in target.iterdir())[:3] if target.is_dir() else []
        raise FileExistsError(f"--out {out}: already exists" + (f" and holds files ({', '.join(held)}, ...)"
                                                                if held else " as a file")
                              + "; the export would replace them: choose a new folder")
    model_config = model_config_from(config)
    # Weights of another model than config.json's: one line naming both, before anything is read or written.
    if version is not None:
        policy_dir = config.sampler.weights_dir or str(run / "policy")
        version = weights.require_policy(policy_dir, version)
        check_stored_weights(weights.version_path(policy_dir, version), config,
                             str(weights.version_path(policy_dir, version)), str(run / "config.json"))
    else:
        checkpoints = run / "sft" / "checkpoints" if stage == "sft" else run / "checkpoints"
        step = checkpoint_step(checkpoints, step)
        check_stored_weights(checkpoints / str(step) / "state", config, str(checkpoints / str(step) / "state"),
                             str(run / "config.json"), subtree="params")
    # The weights stay sharded over every device from the read to the write (`save_hf` writes each HF tensor from
    # the process that holds it): no host holds the model, and a multi-process launch splits the work.
    shardings = export_shardings(model_config)
    if version is not None:
        like = _sharded_target(weights.version_path(policy_dir, version), shardings, None)
        params = weights.load(policy_dir, version, like=like)
        source = {"policy_version": version}
    else:
        step, params = checkpoint_params(checkpoints, step, shardings)
        source = {"stage": stage, "checkpoint_step": step}
    if dtype:
        params = jax.tree.map(lambda x: x.astype(jnp.dtype(dtype)), params)  # on the devices, shard by shard
    model_config = model_config.replace(param_dtype=str(next(iter(jax.tree.leaves(params))).dtype))
    # Written into a staging folder beside --out and renamed at the end: a Ctrl-C or a crash leaves no --out that
    # looks like a model. Its name is fixed, so every process of a multi-process export writes into the same one.
    staging = target.parent / f".{target.name}.partial"
    if jax.process_index() == 0 and staging.exists():
        shutil.rmtree(staging)  # a killed export's leftovers: ours by name, never a user's folder
    try:
        save_hf(model_config, params, staging)  # every process's files are in `staging` when it returns
        if jax.process_index() == 0:
            tokenizer = tokenizer_for(config.model)
            tokenizer.save_pretrained(str(staging))
            write_stop_ids(staging, tokenizer)
            os.replace(staging, target)  # onto an absent or empty folder only (checked above)
    except BaseException:
        if jax.process_count() == 1:
            shutil.rmtree(staging, ignore_errors=True)
        raise
    return {"run": str(run.absolute()), **source, "dtype": model_config.param_dtype, "path": str(pathlib.Path(out))}


def check_dtype(dtype: str) -> None:
    """ValueError naming --dtype when `dtype` is not a floating type numpy knows (e.g. `bf16` for `bfloat16`)."""
    names = ["float32", "bfloat16", "float16"]
    try:
        floating = jnp.issubdtype(jnp.dtype(dtype), jnp.floating)
    except TypeError:
        close = difflib.get_close_matches(dtype, names, n=1, cutoff=0.3)
        raise ValueError(f"--dtype {dtype}: not a data type" + (f" (did you mean {close[0]}?)" if close else "")
                         + f"; one of {', '.join(names)}") from None
    if not floating:
        raise ValueError(f"--dtype {dtype}: weights are cast to a floating type ({', '.join(names)}), "
                         "not rounded to integers")


def write_stop_ids(path: str | pathlib.Path, tokenizer: Any) -> dict:
    """Make transformers stop where our sampler stops: the tokenizer's eos (our engine's default stop id), bos and pad
    ids in config.json and a generation_config.json (without them `generate` ran past `<|im_end|>` to its length
    limit). Returns the ids written."""
    from transformers import GenerationConfig

    ids = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
           "pad_token_id": tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id}
    if ids["eos_token_id"] is None:
        raise ValueError(f"{path}: the run's tokenizer has no eos token: nothing would stop generation")
    config_path = pathlib.Path(path) / "config.json"
    hf = json.loads(config_path.read_text())
    hf.update({k: v for k, v in ids.items() if v is not None})
    config_path.write_text(json.dumps(hf, indent=2, sort_keys=True) + "\n")
    GenerationConfig(**{k: v for k, v in ids.items() if v is not None}).save_pretrained(str(path))
    return ids


def main(argv: list[str] | None = None) -> dict:
    """CLI entry point; prints and returns what was exported."""
    # the whole docstring, as written: its first line cut a sentence (held-out check of issue 46, item 7)
    p = argparse.ArgumentParser(prog="python -m swerl_jax.eval.export", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True, help="the run's workdir (config.json, checkpoints/, policy/)")
    p.add_argument("--out", required=True, help="the Hugging Face directory to write")
    p.add_argument("--step", type=int, default=None, help="checkpoint step (default: the newest)")
    p.add_argument("--version", type=int, default=None, help="export published policy version N instead (-1: newest)")
    p.add_argument("--dtype", default="", help="cast the weights (e.g. bfloat16); default: as stored")
    p.add_argument("--stage", choices=("grpo", "sft"), default="grpo", help="whose checkpoints (sft: WORKDIR/sft)")
    args = p.parse_args(argv)
    try:
        # the paths typed, from the current directory, once (Orbax reads a relative path as nothing)
        done = export_run(user_path(args.run), user_path(args.out), step=args.step, version=args.version,
                          dtype=args.dtype, stage=args.stage)
    except (FileNotFoundError, FileExistsError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"swerl_jax.eval.export: {e}") from None
    print(json.dumps(done), flush=True)
    return done


if __name__ == "__main__":
    from swerl_jax.cli import run_cli

    run_cli("python -m swerl_jax.eval.export", main)
