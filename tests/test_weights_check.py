"""weights_check: a checkpoint of another model than the config's is one line naming both, found from config.json,
the safetensors headers or Orbax's metadata before anything is loaded or written (issue 46 items 10 and 11)."""

from __future__ import annotations

import json
import pathlib

import pytest

from experiments import base
from swerl_jax.model.config import get_model_config
from swerl_jax.model.convert import CheckpointError
from swerl_jax.weights_check import check_hf_checkpoint, shape_difference
from tests.model.hf_models import save_random_hf


def missing_shard_checkpoint(path: pathlib.Path) -> str:
    """A sharded random `tiny` checkpoint at `path` with its last shard deleted; returns the shard's name."""
    save_random_hf(get_model_config("tiny"), path, max_shard_size="100KB")
    index = json.loads((path / "model.safetensors.index.json").read_text())
    gone = sorted(set(index["weight_map"].values()))[-1]
    (path / gone).unlink()
    return gone


def _config(hf_dir: pathlib.Path, name: str = "hf", sft_steps: int = 0):
    c = base.get_config()
    c.model.hf_dir, c.model.name, c.sft.num_steps = str(hf_dir), name, sft_steps
    return c


def test_every_kind_of_checkpoint_problem_is_found_before_loading(tmp_path):
    save_random_hf(get_model_config("tiny-qwen3"), tmp_path / "qwen3")
    save_random_hf(get_model_config("tiny"), tmp_path / "llama")
    assert check_hf_checkpoint(_config(tmp_path / "llama", "tiny")).vocab_size == 512
    with pytest.raises(CheckpointError, match="model_type='qwen3' is a qwen3 checkpoint, but model.name='tiny'"):
        check_hf_checkpoint(_config(tmp_path / "qwen3", "tiny"))
    with pytest.raises(CheckpointError, match="vocab_size=512, but model.name='demo-7m' has 49152"):
        check_hf_checkpoint(_config(tmp_path / "llama", "demo-7m"))
    gone = missing_shard_checkpoint(tmp_path / "sharded")
    with pytest.raises(CheckpointError, match=f"lists shard {gone}, which is missing"):
        check_hf_checkpoint(_config(tmp_path / "sharded"))
    (tmp_path / "window").mkdir()
    hf = json.loads((tmp_path / "qwen3" / "config.json").read_text())
    (tmp_path / "window" / "config.json").write_text(json.dumps(hf | {"layer_types": ["sliding_attention"] * 2}))
    with pytest.raises(CheckpointError, match=r"layer_types\[0\]='sliding_attention' is not supported"):
        check_hf_checkpoint(_config(tmp_path / "window"))
    # config.json says one width, a tensor has another: named from the safetensors header, no weight read
    (tmp_path / "wide").mkdir()
    (tmp_path / "wide" / "config.json").write_text(json.dumps(
        json.loads((tmp_path / "llama" / "config.json").read_text()) | {"intermediate_size": 144}))
    (tmp_path / "wide" / "model.safetensors").symlink_to(tmp_path / "llama" / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"has shape \[128, 64\], expected \[144, 64\]"):
        check_hf_checkpoint(_config(tmp_path / "wide"))


def test_a_tokenizer_past_the_vocabulary_is_refused_when_sft_runs():
    c = base.get_config()  # model.name 'tiny' (vocab 512), SmolLM2's tokenizer (49152)
    c.sft.num_steps = 0
    check_hf_checkpoint(c)  # GRPO alone: the collector hands token ids, nothing is tokenized for the model
    c.sft.num_steps = 2
    with pytest.raises(CheckpointError, match=r"model.tokenizer='smollm2' has 49152 tokens \(ids up to 49151\), "
                                              r"outside model.name='tiny''s vocabulary of 512"):
        check_hf_checkpoint(c)


def test_shape_difference_names_the_first_leaf_that_differs():
    assert shape_difference({"a": (1,), "b": (2,)}, {"a": (1,), "b": (2,)}) == ""
    assert shape_difference({"a": (1,)}, {"a": (1,), "lm_head": (4, 2)}) == "lm_head is absent from the weights"
    assert shape_difference({"a": (1,), "x": (3,)}, {"a": (1,)}) == "the weights have x, which the model has not"
    assert shape_difference({"a": (1, 2)}, {"a": (2, 2)}) == "a is [1, 2] in the weights, [2, 2] in the model"


@pytest.mark.parametrize("damage, problem", [
    ("cut", r"model\.safetensors is not a safetensors file"),
    ("no_config", r"config\.json does not exist"),
    ("bad_json", r"config\.json does not parse"),
    ("huge_header", r"model\.safetensors is not a safetensors file"),
])
def test_a_broken_download_is_one_checkpoint_error_naming_the_file(tmp_path, damage, problem):
    # issue 46 held-out item 6: these were a SafetensorError, FileNotFoundError or JSONDecodeError traceback
    save_random_hf(get_model_config("tiny"), tmp_path)
    weights, config = tmp_path / "model.safetensors", tmp_path / "config.json"
    if damage == "cut":
        weights.write_bytes(weights.read_bytes()[:100])
    elif damage == "huge_header":  # a header length far past the file's end
        weights.write_bytes((2**62).to_bytes(8, "little") + weights.read_bytes()[8:100])
    elif damage == "no_config":
        config.unlink()
    else:
        config.write_text(config.read_text()[:-20])
    with pytest.raises(CheckpointError, match=problem) as caught:
        check_hf_checkpoint(_config(tmp_path))
    assert str(tmp_path) in str(caught.value) and "\n" not in str(caught.value)


def test_a_missing_or_empty_checkpoint_folder_is_named(tmp_path):
    """Orbax reads both as a checkpoint without a tree: an AttributeError on None reached the user."""
    from swerl_jax.weights_check import stored_shapes

    for path in (tmp_path / "absent", tmp_path):
        with pytest.raises(FileNotFoundError, match="no checkpoint metadata there"):
            stored_shapes(path)
