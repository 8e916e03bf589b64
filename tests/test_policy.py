"""The trainers' shared policy setup: non-finite guard, micro-batch split, one shape across processes."""

import pytest

from swerl_jax.batching import global_max
from swerl_jax.policy import check_finite, micro_batches


def test_non_finite_steps_stop_the_run_unless_skipped():
    assert check_finite({"loss": 1.0, "grad_norm": 2.0}, 3, "GRPO", 0)
    with pytest.raises(FloatingPointError, match="GRPO step 3: loss nan.*optim.skip_nonfinite"):
        check_finite({"loss": float("nan"), "grad_norm": 2.0}, 3, "GRPO", 0)
    assert not check_finite({"loss": 1.0, "grad_norm": float("inf")}, 3, "SFT", 2)


def test_micro_batches_and_global_max():
    assert micro_batches(32, 0, "rl.micro_batch_size") == 1 and micro_batches(32, 64, "x") == 1
    assert micro_batches(32, 8, "rl.micro_batch_size") == 4
    with pytest.raises(ValueError, match="rl.micro_batch_size=6 does not divide the step's 32 rows"):
        micro_batches(32, 6, "rl.micro_batch_size")
    assert global_max(7) == 7  # one process


def test_initial_params_come_from_model_hf_dir_onto_their_shards(tmp_path):
    """model.hf_dir: the model config is read from the directory and its weights are placed on the mesh
    (not the registry's random init), tensor by tensor equal to transformers' state dict."""
    import jax
    import numpy as np

    from experiments import base
    from swerl_jax import sharding
    from swerl_jax.model.config import get_model_config
    from swerl_jax.model.convert import CheckpointError, load_hf
    from swerl_jax.policy import initial_params, model_config_from
    from tests.model.hf_models import save_random_hf

    hf = save_random_hf(get_model_config("tiny"), tmp_path / "hf", seed=3)
    config = base.get_config()
    config.model.name = "llama3.1-8b"  # another model than the checkpoint's: refused, naming the file and key
    config.model.hf_dir = str(tmp_path / "hf")
    with pytest.raises(CheckpointError, match=r"hf/config.json: vocab_size=512, but model.name='llama3.1-8b' has "
                                              r"128256.*set model.name to its entry \(tiny\)"):
        model_config_from(config)
    config.model.name = "hf"  # whatever the folder holds
    assert model_config_from(config).hidden_size == 64
    config.model.name = "tiny"
    model_config = model_config_from(config)
    assert model_config.replace(rms_norm_eps=1e-5) == get_model_config("tiny").replace(rms_norm_eps=1e-5)
    mesh = sharding.create_mesh(config, model_config=model_config)
    rules = sharding.logical_axis_rules(config)
    params = initial_params(config, model_config, mesh, rules)
    # the converter's reading of the directory (checked against transformers in tests/model/test_convert.py),
    # leaf by leaf, and the embedding straight from the torch model
    _, want = load_hf(str(tmp_path / "hf"))
    assert jax.tree.structure(params) == jax.tree.structure(want)
    for got, ref in zip(jax.tree.leaves(params), jax.tree.leaves(want)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(ref))
    np.testing.assert_array_equal(np.asarray(params["embed_tokens"]),
                                  hf.state_dict()["model.embed_tokens.weight"].numpy())
    expected = sharding.param_shardings(model_config, mesh, rules)
    for got, spec in zip(jax.tree.leaves(params), jax.tree.leaves(expected)):
        assert got.sharding == spec
