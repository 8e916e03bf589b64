"""Mesh resolution, validation errors, logical rules, sharded init and batch placement on 8 fake CPU devices."""

from __future__ import annotations

import jax
import ml_collections
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from experiments import base
from swerl_jax import sharding
from swerl_jax.meshes import MESHES
from swerl_jax.model.config import get_model_config
from swerl_jax.model.llama import init_params

MODEL = get_model_config("tiny", num_heads=8, num_kv_heads=4, hidden_size=64, intermediate_size=128,
                         vocab_size=256)


def cfg(name: str = "cpu8", rules=(), **shape) -> ml_collections.ConfigDict:
    c = base.get_config()
    c.mesh.name = name
    for k, v in shape.items():
        c.mesh.shape[k] = v
    c.mesh.logical_axis_rules = rules
    return c


def test_named_meshes_resolve_to_their_device_counts():
    for spec in MESHES.values():
        ici, dcn = sharding.resolve_mesh_shape(cfg(spec.name), spec.num_devices)
        assert np.prod([ici[a] * dcn[a] for a in ici]) == spec.num_devices, spec.name
        assert spec.hbm_bytes > 0 and spec.peak_bf16_flops > 0
    ici, dcn = sharding.resolve_mesh_shape(cfg("h100x512"), 512)
    assert ici == {"data": 1, "fsdp": 8, "tensor": 1} and dcn == {"data": 1, "fsdp": 64, "tensor": 1}
    # The paper's model shards on every named mesh.
    for spec in MESHES.values():
        sharding.validate_mesh(cfg(spec.name), get_model_config("llama3.3-70b"), spec.num_devices)


def test_shape_overrides_and_rest_axis():
    assert sharding.mesh_axis_sizes(cfg(data=2, fsdp=-1, tensor=2), 8) == {"data": 2, "fsdp": 2, "tensor": 2}
    assert sharding.mesh_axis_sizes(cfg(data=-1, fsdp=1, tensor=4), 8) == {"data": 2, "fsdp": 1, "tensor": 4}
    c = cfg("h100x64", tensor=8)  # DCN fsdp=8 from the named mesh, 8-way tensor inside each node
    assert sharding.resolve_mesh_shape(c, 64) == ({"data": 1, "fsdp": 1, "tensor": 8},
                                                  {"data": 1, "fsdp": 8, "tensor": 1})


@pytest.mark.parametrize("shape, devices, pattern", [
    (dict(data=3, fsdp=1, tensor=1), 8, r"data=3 x fsdp=1 x tensor=1 = 3 devices, but there are 8"),
    (dict(data=3, fsdp=-1, tensor=1), 8, r"mesh.shape.fsdp=-1: .* do not divide the 8 devices"),
    (dict(data=-1, fsdp=-1, tensor=1), 8, r"only one axis may be -1"),
    (dict(data=0, fsdp=-1, tensor=1), 8, r"mesh.shape.data=0"),
])
def test_bad_mesh_sizes_name_the_axis(shape, devices, pattern):
    with pytest.raises(ValueError, match=pattern):
        sharding.validate_mesh(cfg(**shape), MODEL, devices)


@pytest.mark.parametrize("model_kw, shape, pattern", [
    (dict(num_heads=6, num_kv_heads=2, head_dim=8), dict(fsdp=2, tensor=4),
     r"mesh axis 'tensor' \(size 4\) does not divide model.num_heads=6"),
    (dict(num_kv_heads=2), dict(fsdp=2, tensor=4), r"'tensor' \(size 4\) does not divide model.num_kv_heads=2"),
    (dict(vocab_size=255), dict(fsdp=4, tensor=2), r"'tensor' \(size 2\) does not divide model.vocab_size=255"),
    (dict(hidden_size=36, head_dim=8), dict(fsdp=8), r"'fsdp' \(size 8\) does not divide model.hidden_size=36"),
    (dict(intermediate_size=130), dict(fsdp=2, tensor=4), r"'tensor' \(size 4\) does not divide "
                                                          r"model.intermediate_size=130"),
])
def test_model_not_divisible_by_axis_fails_before_compile(model_kw, shape, pattern):
    with pytest.raises(ValueError, match=pattern):
        sharding.validate_mesh(cfg(data=1, **shape), MODEL.replace(**model_kw), 8)


def test_batch_and_rule_errors():
    with pytest.raises(ValueError, match=r"mesh axes 'data' \(size 2\) x 'fsdp' \(size 4\) do not divide the global "
                                         r"batch of 6 sequences"):
        sharding.validate_mesh(cfg(data=2, fsdp=4), MODEL, 8, global_batch=6)
    with pytest.raises(ValueError, match=r"unknown mesh axis 'model'"):
        sharding.logical_axis_rules(cfg(rules=(("mlp", "model"),)))
    with pytest.raises(KeyError, match=r"unknown mesh.name='h100x7'"):
        sharding.resolve_mesh_shape(cfg("h100x7"), 7)
    c = cfg()
    c.mesh.shape.pipeline = 2
    with pytest.raises(ValueError, match=r"mesh.shape has unknown axes \['pipeline'\]"):
        sharding.resolve_mesh_shape(c, 8)


def test_param_specs_follow_rules_and_overrides():
    specs = sharding.param_partition_specs(MODEL)
    assert specs["embed_tokens"] == P("tensor", "fsdp")
    assert specs["lm_head"] == P("fsdp", "tensor")
    assert specs["layers"]["self_attn"]["k_proj"] == P(None, "fsdp", "tensor", None)
    assert specs["layers"]["self_attn"]["o_proj"] == P(None, "tensor", None, "fsdp")
    assert specs["layers"]["mlp"]["down_proj"] == P(None, "tensor", "fsdp")
    assert specs["norm"]["scale"] == P(None)
    # Overriding one rule keeps the others: pure tensor parallelism of the MLP on the data axis, say.
    rules = sharding.logical_axis_rules(cfg(rules=(("embed", None), ("mlp", ["fsdp", "tensor"]))))
    specs = sharding.param_partition_specs(MODEL, rules)
    assert specs["layers"]["mlp"]["gate_proj"] == P(None, None, ("fsdp", "tensor"))
    assert specs["embed_tokens"] == P("tensor", None)


def test_sharded_init_holds_one_shard_per_device():
    c = cfg(data=1, fsdp=4, tensor=2)
    mesh = sharding.create_mesh(c)
    params = sharding.init_params_sharded(MODEL, mesh, jax.random.key(3))
    emb = params["embed_tokens"]
    shards = emb.addressable_shards
    assert len(shards) == 8 and all(s.data.shape == (256 // 2, 64 // 4) for s in shards)
    ref = jax.jit(init_params, static_argnums=0)(MODEL, jax.random.key(3))
    # Same random stream as the unsharded init (threefry is partitionable); fused normal transforms may
    # differ by an ulp or so of values ~0.02.
    diffs = jax.tree.map(lambda a, b: float(np.max(np.abs(np.asarray(a) - np.asarray(b)))), params, ref)
    assert max(jax.tree.leaves(diffs)) <= 1e-7


def test_batches_split_over_data_axes():
    mesh = sharding.create_mesh(cfg(data=2, fsdp=2, tensor=2))
    batch = {"tokens": np.arange(8 * 5, dtype=np.int32).reshape(8, 5), "mask": np.ones((8, 5), bool)}
    arrays = sharding.shard_batch(batch, mesh)
    assert arrays["tokens"].sharding.spec == P(("data", "fsdp"), None)
    rows = sorted({tuple(s.data[:, 0].tolist()) for s in arrays["tokens"].addressable_shards})
    assert rows == [(0, 5), (10, 15), (20, 25), (30, 35)]  # 4 batch shards of 2 rows, each on 2 tensor devices
    np.testing.assert_array_equal(np.asarray(arrays["tokens"]), batch["tokens"])
    assert sharding.local_batch_slice(mesh, 8) == slice(0, 8)  # one process holds every row
    assert sharding.is_main_process()


def test_initialize_distributed_from_environment(monkeypatch):
    for var in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "SLURM_NTASKS",
                "TPU_WORKER_HOSTNAMES", "MEGASCALE_COORDINATOR_ADDRESS", "SWERL_DISTRIBUTED"):
        monkeypatch.delenv(var, raising=False)
    assert sharding.initialize_distributed(base.get_config()) is False  # single process: nothing to join
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "127.0.0.1:1")
    monkeypatch.setenv("JAX_NUM_PROCESSES", "2")
    with pytest.raises(ValueError, match="no process id: set JAX_PROCESS_ID or mesh.process_id"):
        sharding.initialize_distributed(base.get_config())
    monkeypatch.setenv("JAX_PROCESS_ID", "zero")
    with pytest.raises(ValueError, match="JAX_PROCESS_ID='zero' is not an integer"):
        sharding.initialize_distributed(base.get_config())


def test_create_mesh_validates_the_model_first():
    with pytest.raises(ValueError, match=r"'tensor' \(size 8\) does not divide model.num_kv_heads=4"):
        sharding.create_mesh(cfg(data=1, fsdp=1, tensor=8), model_config=MODEL)


def test_sharded_init_ignores_the_attention_kernel():
    """cuDNN attention (an H100 config) still initialises on CPU: the kernel does not change the parameters."""
    mesh = sharding.create_mesh(cfg(data=1, fsdp=8, tensor=1))
    params = sharding.init_params_sharded(MODEL.replace(attention_impl="cudnn", remat="full"), mesh,
                                          jax.random.key(3))
    assert params["layers"]["mlp"]["up_proj"].sharding.spec == P(None, "fsdp", "tensor")
    assert sharding.batch_spec(ndim=0) == P()


def test_a_named_mesh_refuses_the_wrong_device_count():
    # mesh.name=cpu8 on one device used to run silently on that one device
    with pytest.raises(ValueError, match=r"mesh.name='cpu8' is a mesh of 8 cpu devices, but 1 are available"):
        sharding.create_mesh(cfg(), devices=jax.devices()[:1])
    assert sharding.create_mesh(cfg("cpu"), devices=jax.devices()[:1]).size == 1  # `cpu` takes what is there
