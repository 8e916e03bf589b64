"""Streamed HF loading (model/hf_stream.py) and sharded saving (model/hf_write.py) on the suite's 8 CPU devices, bit
for bit: any layout loads bit-exact reading each byte once, a checkpoint that disagrees fails before reading, and
sharded params write back bit-exact. What a load reads and holds (the bytes from storage, each host's part, the host
memory) is in tests/model/test_hf_stream_reads.py; the two-process cases (each process reads its half, saves without
gathering the model) are in tests/model/test_hf_stream_multihost.py."""

from __future__ import annotations

import json
import pathlib

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from safetensors.numpy import load_file, save_file

from swerl_jax.model.config import get_model_config
from swerl_jax.model.convert import CheckpointError, CheckpointReader, hf_config_to_llama, load_hf, save_hf
from swerl_jax.model.hf_load import read_sharding
from tests.model.hf_checkpoints import checkpoint_state, fsdp_shardings, reference


def _assert_same(got: dict, want: dict) -> None:
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(got), jax.tree.leaves(want), strict=True):
        assert a.dtype == b.dtype, path
        np.testing.assert_array_equal(np.asarray(a), b, err_msg=jax.tree_util.keystr(path))


# Every kind of split on the tiny model: the layer axis, whole heads, part of a head (head_dim over 4: the covering
# rows are read), the width, the vocabulary, two mesh axes on one dim, and replication (a shard read once for the
# devices that share it).
_ODD = {("embed_tokens",): P(("a", "b"), None), ("lm_head",): P(None, "b"), ("norm", "scale"): P(("a", "b")),
        ("layers", "self_attn", "q_proj"): P("a", None, None, "b"),
        ("layers", "self_attn", "k_proj"): P(None, "b", "a", None),
        ("layers", "self_attn", "v_proj"): P(None, None, None, ("a", "b")),
        ("layers", "self_attn", "o_proj"): P(None, "b", "a", None),
        ("layers", "mlp", "gate_proj"): P(None, "a", "b"), ("layers", "mlp", "up_proj"): P(None, None, "b"),
        ("layers", "mlp", "down_proj"): P("a", "b", None),
        ("layers", "input_layernorm", "scale"): P("a", None), ("layers", "post_attention_layernorm", "scale"): P()}


def _odd_shardings(params: dict) -> dict:
    mesh = Mesh(np.asarray(jax.devices()).reshape(2, 4), ("a", "b"))
    return jax.tree_util.tree_map_with_path(
        lambda path, _: NamedSharding(mesh, _ODD[tuple(k.key for k in path)]), params)


@pytest.fixture(scope="module")
def tiny_sharded(tmp_path_factory) -> pathlib.Path:
    from tests.model.hf_models import save_random_hf

    out = tmp_path_factory.mktemp("tiny_sharded")
    save_random_hf(get_model_config("tiny"), out, seed=5, max_shard_size="60KB")  # transformers' shards + index
    assert (out / "model.safetensors.index.json").is_file()
    return out


def test_fsdp_load_is_bit_exact_and_reads_each_byte_once(tiny_sharded):
    cfg = get_model_config("tiny")
    shardings = fsdp_shardings(cfg)
    reader = CheckpointReader(tiny_sharded)
    loaded_cfg, params = load_hf(tiny_sharded, shardings=shardings, reader=reader)
    assert loaded_cfg.replace(rms_norm_eps=cfg.rms_norm_eps) == cfg
    _assert_same(params, reference(tiny_sharded))
    for got, want in zip(jax.tree.leaves(params), jax.tree.leaves(shardings), strict=True):
        assert got.sharding == want
    # each shard read once, the replicated norms once for all 8 devices: exactly the checkpoint's tensor bytes
    assert reader.bytes_read == sum(v.nbytes for v in checkpoint_state(tiny_sharded).values())


def test_any_layout_loads_bit_exact(tiny_sharded):
    want = reference(tiny_sharded)
    shardings = _odd_shardings(want)
    _, params = load_hf(tiny_sharded, shardings=shardings)
    _assert_same(params, want)
    for got, s in zip(jax.tree.leaves(params), jax.tree.leaves(shardings), strict=True):
        assert got.sharding == s


def _greedy_shardings(params: dict) -> dict:
    """Each leaf split as finely as the (2, 4) mesh allows, innermost axes first: head_dim for the q/k/v weights
    and biases and the q/k norms (parts of heads), the width, the layers."""
    mesh = Mesh(np.asarray(jax.devices()).reshape(2, 4), ("a", "b"))

    def spec(x) -> NamedSharding:
        axes: list = [None] * x.ndim
        for i in reversed(range(x.ndim)):
            for name, size in (("b", 4), ("a", 2)):
                if axes[i] is None and name not in axes and x.shape[i] % size == 0:
                    axes[i] = name
        return NamedSharding(mesh, P(*axes))

    return jax.tree.map(spec, params)


@pytest.mark.parametrize("name", ["tiny-qwen2", "tiny-qwen3"])
def test_family_tensors_load_and_save_sharded_bit_exact(name, tmp_path):
    """The families' rows of the tensor table (Qwen2's q/k/v biases HF [heads*d] -> ours [heads, d], Qwen3's q/k
    norms [d]) go through the same slice mapping, split inside a head, and back."""
    from tests.model.hf_models import save_random_hf

    save_random_hf(get_model_config(name), tmp_path / "hf", seed=2, max_shard_size="60KB")
    want = reference(tmp_path / "hf")
    loaded_cfg, params = load_hf(tmp_path / "hf", shardings=_greedy_shardings(want))
    assert loaded_cfg.family == get_model_config(name).family
    _assert_same(params, want)
    save_hf(loaded_cfg, params, tmp_path / "back", max_shard_bytes=60_000)
    saved, original = checkpoint_state(tmp_path / "back"), checkpoint_state(tmp_path / "hf")
    assert sorted(saved) == sorted(original)
    for k, v in original.items():
        np.testing.assert_array_equal(saved[k], v, err_msg=k)


def test_rows_layout_then_reshard_loads_bit_exact(tiny_sharded):
    """The read path that multi-process FSDP takes (whole rows or layers per device, resharded on device to the
    target), forced in one process: bit-exact into the FSDP layout and every odd one. In one process "auto" reads
    straight into the target (every byte is read either way; the reshard would be a second copy)."""
    want = reference(tiny_sharded)
    cfg = get_model_config("tiny")
    for shardings in (fsdp_shardings(cfg), _odd_shardings(want)):
        _, params = load_hf(tiny_sharded, shardings=shardings, read="rows")
        _assert_same(params, want)
        for got, s in zip(jax.tree.leaves(params), jax.tree.leaves(shardings), strict=True):
            assert got.sharding == s
    from swerl_jax.model.convert import checkpoint_tensors

    fsdp = fsdp_shardings(cfg)
    for m in checkpoint_tensors(cfg):
        target = fsdp
        for key in m.path:
            target = target[key]
        assert read_sharding(m, target) is target
        assert read_sharding(m, target, "direct") is target
    with pytest.raises(ValueError, match=r"read='row': expected one of auto, direct, rows"):
        load_hf(tiny_sharded, shardings=fsdp, read="row")


def test_cast_on_the_way_matches_numpy(tmp_path):
    from tests.model.hf_models import save_random_hf

    cfg = get_model_config("tiny-tied")
    save_random_hf(cfg, tmp_path / "hf")
    state = load_file(tmp_path / "hf" / "model.safetensors")
    save_file({k: v.astype("bfloat16") for k, v in state.items()}, tmp_path / "hf" / "model.safetensors",
              metadata={"format": "pt"})
    want = jax.tree.map(lambda x: x.astype(np.float32), reference(tmp_path / "hf"))
    _, params = load_hf(tmp_path / "hf", param_dtype="float32", shardings=fsdp_shardings(cfg))
    _assert_same(params, want)


@pytest.mark.parametrize("change,match", [
    ("shape", r"tensor 'model\.layers\.0\.mlp\.gate_proj\.weight' in model-\d+-of-\d+\.safetensors has shape "
              r"\[128, 64\], expected \[100, 64\]"),
    ("missing", r"is missing tensor 'model\.layers\.1\.self_attn\.o_proj\.weight' \(not in "
                r"model\.safetensors\.index\.json\)"),
    ("misplaced", r"model\.safetensors\.index\.json puts tensor 'model\.norm\.weight' in model-\d+-of-\d+"
                  r"\.safetensors, which does not hold it"),
])
def test_a_checkpoint_that_disagrees_fails_before_reading(tiny_sharded, tmp_path, change, match):
    import shutil

    shutil.copytree(tiny_sharded, tmp_path, dirs_exist_ok=True)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    if change == "shape":
        hf = json.loads((tmp_path / "config.json").read_text())
        hf["intermediate_size"] = 100
        (tmp_path / "config.json").write_text(json.dumps(hf))
    elif change == "missing":
        del index["weight_map"]["model.layers.1.self_attn.o_proj.weight"]
    else:
        files = sorted(set(index["weight_map"].values()) - {index["weight_map"]["model.norm.weight"]})
        index["weight_map"]["model.norm.weight"] = files[0]
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    cfg = hf_config_to_llama(json.loads((tmp_path / "config.json").read_text()))
    reader = CheckpointReader(tmp_path)
    with pytest.raises(CheckpointError, match=match):
        load_hf(tmp_path, shardings=fsdp_shardings(cfg), reader=reader)
    assert reader.bytes_read == 0  # checked from the headers, before any tensor is read


def test_sharded_params_save_bit_exact_from_their_shards(tiny_sharded, tmp_path):
    cfg = get_model_config("tiny")
    for name, shardings in (("fsdp", fsdp_shardings(cfg)), ("odd", _odd_shardings(reference(tiny_sharded)))):
        loaded_cfg, params = load_hf(tiny_sharded, shardings=shardings)
        save_hf(loaded_cfg, params, tmp_path / name, max_shard_bytes=100_000)
        assert len(list((tmp_path / name).glob("model-*-of-*.safetensors"))) > 2
        want, got = checkpoint_state(tiny_sharded), checkpoint_state(tmp_path / name)
        assert sorted(got) == sorted(want)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)
        weight_map = json.loads((tmp_path / name / "model.safetensors.index.json").read_text())["weight_map"]
        assert sorted(weight_map) == sorted(want)
    params["layers"]["mlp"]["up_proj"] = params["layers"]["mlp"]["up_proj"][:1]
    with pytest.raises(CheckpointError, match=r"params/layers/mlp/up_proj has shape \[1, 64, 128\], the config "
                                              r"says \[2, 64, 128\]"):
        save_hf(loaded_cfg, params, tmp_path / "bad")
