"""Is a checkpoint the config's model? Asked at each entry point before anything is written or loaded, so that a
mismatch is one line naming both models instead of Orbax's tree-structure or shape errors (or a 20-line traceback
after the run's folder was made).

    check_hf_checkpoint(config)                        # train: model.hf_dir's family, shape, shards; the tokenizer
    check_stored_weights(path, config, what="--weights runs/T/policy", config_name="experiments/tiny_cpu.py")

A run's `config.json` sits beside `policy/` and `checkpoints/`: it names the model the weights were trained as.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import jax

from swerl_jax.model.config import LlamaConfig
from swerl_jax.model.convert import CheckpointError, checkpoint_tensors
from swerl_jax.model.hf_stream import CheckpointReader
from swerl_jax.model.smollm2 import resolve_hf_dir
from swerl_jax.policy import model_config_from

Shapes = dict[str, tuple[int, ...]]


def check_hf_checkpoint(config: Any) -> LlamaConfig:
    """The model config of `config` after checking `model.hf_dir` (when set) the way loading it would: the family
    and shape against `model.name`, unsupported attention (sliding windows), a missing shard, a tensor of another
    shape, all from config.json and the safetensors headers (no weight is read); and, when the SFT stage runs,
    that the tokenizer writes no id past the model's vocabulary. CheckpointError: one line naming the file or key."""
    model_config = model_config_from(config)  # CheckpointError: family, shape, sliding window, rope (names the file)
    if config.model.hf_dir:
        reader = CheckpointReader(resolve_hf_dir(str(config.model.hf_dir)))  # CheckpointError: a missing shard
        for tensor in checkpoint_tensors(model_config):
            for name in tensor.hf_names:
                reader.check(name, tensor.hf_shape)
    if int(config.sft.num_steps) > 0:
        check_tokenizer_fits(config.model, model_config.vocab_size)
    return model_config


def check_tokenizer_fits(model: Any, vocab_size: int) -> None:
    """CheckpointError (a ValueError) naming model.name and model.tokenizer when the tokenizer has ids past the
    model's vocabulary: the embedding lookup would clamp them to its last row (the SFT trainer checks each batch
    too, but only after the run's folder exists)."""
    from swerl_jax.tokenizer import tokenizer_for, tokenizer_path

    size = len(tokenizer_for(model))
    if size > vocab_size:
        raise CheckpointError(
            f"model.tokenizer={tokenizer_path(model) or 'smollm2'!r} has {size} tokens (ids up to {size - 1}), outside "
            f"model.name={str(model.name)!r}'s vocabulary of {vocab_size}: the model has no row for them; pick a model "
            "whose vocab_size covers the tokenizer (e.g. testbed-* with 'testbed', demo-7m or smollm2-135m with "
            "SmolLM2's)")


def stored_shapes(path: str | pathlib.Path, subtree: str | None = None) -> Shapes:
    """{leaf path "a/b/c": shape} of an Orbax checkpoint at `path` (under `subtree`), from its metadata only."""
    import orbax.checkpoint as ocp

    checkpointer = ocp.StandardCheckpointer()
    try:
        meta = checkpointer.metadata(pathlib.Path(path).absolute())
    finally:
        checkpointer.close()
    if hasattr(meta, "item_metadata"):
        tree = None if meta.item_metadata is None else meta.item_metadata.tree
    else:
        tree = meta
    if tree is None:  # Orbax reads a missing or empty folder as a checkpoint without a tree
        raise FileNotFoundError(f"{path}: no checkpoint metadata there (a missing or partly written checkpoint)")
    if subtree:
        tree = tree[subtree]
    return _flat_shapes(tree)


def model_shapes(model_config: LlamaConfig) -> Shapes:
    """{leaf path: shape} of `model_config`'s params (traced, nothing allocated)."""
    from swerl_jax.model.llama import init_params

    return _flat_shapes(jax.eval_shape(lambda: init_params(model_config, jax.random.PRNGKey(0))))


def _flat_shapes(tree: Any) -> Shapes:
    leaves = jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda x: hasattr(x, "shape"))[0]
    return {"/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path): tuple(leaf.shape)
            for path, leaf in leaves}


def shape_difference(stored: Shapes, expected: Shapes) -> str:
    """The first difference between two {leaf: shape} maps, in words ('' when they are equal)."""
    for key in sorted(set(stored) | set(expected)):
        if key not in stored:
            return f"{key} is absent from the weights"
        if key not in expected:
            return f"the weights have {key}, which the model has not"
        if stored[key] != expected[key]:
            return f"{key} is {list(stored[key])} in the weights, {list(expected[key])} in the model"
    return ""


def run_model(path: str | pathlib.Path) -> str:
    """The model named by the run's config.json above `path` (a run's policy/, a version in it, a checkpoint), as
    'model.name=... (RUN/config.json)', or '' when no run folder holds `path`."""
    here = pathlib.Path(path).absolute()
    for folder in [here, *here.parents][:5]:
        candidate = folder / "config.json"
        if candidate.is_file() and ((folder / "policy").exists() or (folder / "checkpoints").exists()):
            try:
                model = json.loads(candidate.read_text()).get("model", {})
            except (OSError, ValueError):
                return ""
            hf = f", model.hf_dir={model.get('hf_dir')!r}" if model.get("hf_dir") else ""
            return f"model.name={model.get('name')!r}{hf} ({candidate})"
    return ""


def describe_model(model: Any) -> str:
    """A config's model section as 'model.name=...' (with model.hf_dir when set)."""
    hf = f", model.hf_dir={str(model.hf_dir)!r}" if str(model.hf_dir or "") else ""
    return f"model.name={str(model.name)!r}{hf}"


def check_stored_weights(path: str | pathlib.Path, config: Any, what: str, config_name: str,
                         subtree: str | None = None) -> None:
    """CheckpointError, one line, when the Orbax weights at `path` (under `subtree`) are not shaped as `config`'s
    model: naming `what` (how the user named the weights), the checkpoint's model (its run's config.json) and the
    config's (`config_name`), and the first tensor that differs."""
    expected = model_shapes(model_config_from(config))
    difference = shape_difference(stored_shapes(path, subtree), expected)
    if not difference:
        return
    ours, theirs = describe_model(config.model), run_model(path)
    if theirs and not theirs.startswith(ours + " ("):
        said = f"the weights are {theirs}, but {config_name} is {ours}"
    else:  # no run folder says otherwise (or it says the same model): the weights are simply not that model
        said = f"the weights are not {config_name}'s {ours}"
    raise CheckpointError(f"{what}: {said} ({difference})")
