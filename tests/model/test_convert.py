"""HF checkpoint <-> params: bit-exact round trips, sharded files, bf16, GGUF, and the bad-input errors."""

import json
import shutil

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaForCausalLM

from swerl_jax.model.config import get_model_config
from swerl_jax.model.convert import (
    CheckpointError,
    gguf_to_hf,
    hf_config_to_llama,
    llama_to_hf_config,
    load_hf,
    require_hf_dir,
    save_hf,
)
from tests.model.hf_models import save_random_hf


def _assert_state_dicts_equal(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        assert torch.equal(a[name], b[name]), name


@pytest.mark.parametrize("name", ["tiny-gqa-untied", "tiny-tied"])
def test_hf_params_hf_round_trip_is_bit_exact(name, tmp_path):
    cfg = get_model_config(name)
    model = save_random_hf(cfg, tmp_path / "hf")
    loaded_cfg, params = load_hf(tmp_path / "hf")
    assert params["layers"]["self_attn"]["q_proj"].shape == (cfg.num_layers, cfg.hidden_size, cfg.num_heads,
                                                            cfg.head_size)
    assert ("lm_head" in params) == (not cfg.tie_word_embeddings)
    save_hf(loaded_cfg, params, tmp_path / "back")
    back = LlamaForCausalLM.from_pretrained(tmp_path / "back")
    _assert_state_dicts_equal(model.state_dict(), back.state_dict())
    assert back.config.rope_parameters == model.config.rope_parameters
    assert back.config.tie_word_embeddings == cfg.tie_word_embeddings
    assert hf_config_to_llama(json.loads((tmp_path / "back" / "config.json").read_text())) == loaded_cfg


def test_sharded_checkpoints_both_directions(tmp_path):
    cfg = get_model_config("tiny-gqa-untied")
    save_random_hf(cfg, tmp_path / "single")
    save_random_hf(cfg, tmp_path / "sharded", max_shard_size="100KB")  # transformers' own sharding + index
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    _, p1 = load_hf(tmp_path / "single")
    _, p2 = load_hf(tmp_path / "sharded")
    for a, b in zip(_leaves(p1), _leaves(p2), strict=True):
        np.testing.assert_array_equal(a, b)
    # Our writer shards too; transformers reads it back unchanged.
    save_hf(cfg, p1, tmp_path / "ours", max_shard_bytes=200_000)
    assert len(list((tmp_path / "ours").glob("model-*-of-*.safetensors"))) > 1
    _assert_state_dicts_equal(LlamaForCausalLM.from_pretrained(tmp_path / "single").state_dict(),
                              LlamaForCausalLM.from_pretrained(tmp_path / "ours").state_dict())


def _leaves(params: dict) -> list:
    import jax

    return jax.tree.leaves(params)


def test_bf16_params_round_trip(tmp_path):
    cfg = get_model_config("tiny-tied")
    save_random_hf(cfg, tmp_path / "hf")
    torch_bf16 = LlamaForCausalLM.from_pretrained(tmp_path / "hf", dtype=torch.bfloat16)
    torch_bf16.save_pretrained(tmp_path / "bf16")
    loaded_cfg, params = load_hf(tmp_path / "bf16", param_dtype="bfloat16")
    assert loaded_cfg.param_dtype == "bfloat16"
    assert all(x.dtype == jnp.bfloat16 for x in _leaves(params))
    save_hf(loaded_cfg, params, tmp_path / "back")
    assert json.loads((tmp_path / "back" / "config.json").read_text())["dtype"] == "bfloat16"
    _assert_state_dicts_equal(load_file(tmp_path / "bf16" / "model.safetensors"),
                              load_file(tmp_path / "back" / "model.safetensors"))


def test_tied_checkpoint_with_duplicate_lm_head_loads(tmp_path):
    cfg = get_model_config("tiny-tied")
    save_random_hf(cfg, tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    state["lm_head.weight"] = state["model.embed_tokens.weight"].clone()
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    _, params = load_hf(tmp_path)
    assert "lm_head" not in params
    np.testing.assert_array_equal(params["embed_tokens"], state["model.embed_tokens.weight"].numpy())


@pytest.mark.parametrize("model_type,arch", [("gpt2", "GPT2LMHeadModel"), ("mistral", "MistralForCausalLM")])
def test_other_architecture_is_refused(model_type, arch):
    hf = llama_to_hf_config(get_model_config("tiny")) | {"model_type": model_type, "architectures": [arch]}
    with pytest.raises(CheckpointError, match=f"model_type='{model_type}'.*{arch}"):
        hf_config_to_llama(hf)


@pytest.mark.parametrize("change,match", [
    ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0}}, "rope type 'yarn'"),
    ({"attention_bias": True}, "attention_bias=True"),
    ({"hidden_act": "gelu"}, "hidden_act='gelu'"),
])
def test_unsupported_llama_variants_are_refused(change, match):
    hf = llama_to_hf_config(get_model_config("tiny")) | change
    with pytest.raises(CheckpointError, match=match):
        hf_config_to_llama(hf)


def test_legacy_rope_scaling_spelling():
    cfg = get_model_config("tiny-gqa-untied")
    hf = llama_to_hf_config(cfg)
    del hf["rope_parameters"]  # transformers < 5: rope_theta + rope_scaling only
    assert hf_config_to_llama(hf) == cfg


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny")
    save_random_hf(get_model_config("tiny"), out)
    return out


def test_missing_tensor_is_named(tiny_dir, tmp_path):
    shutil.copytree(tiny_dir, tmp_path, dirs_exist_ok=True)
    state = load_file(tmp_path / "model.safetensors")
    del state["model.layers.1.mlp.up_proj.weight"]
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=r"missing tensor 'model\.layers\.1\.mlp\.up_proj\.weight'"):
        load_hf(tmp_path)


def test_shape_mismatch_names_tensor_expected_and_got(tiny_dir, tmp_path):
    shutil.copytree(tiny_dir, tmp_path, dirs_exist_ok=True)
    hf = json.loads((tmp_path / "config.json").read_text())
    hf["intermediate_size"] = 100
    (tmp_path / "config.json").write_text(json.dumps(hf))
    with pytest.raises(CheckpointError, match=r"'model\.layers\.0\.mlp\.gate_proj\.weight'.*\[128, 64\], "
                                              r"expected \[100, 64\]"):
        load_hf(tmp_path)


def test_missing_files_are_named(tiny_dir, tmp_path):
    with pytest.raises(CheckpointError, match="config.json does not exist"):
        load_hf(tmp_path)
    shutil.copy(tiny_dir / "config.json", tmp_path / "config.json")
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        load_hf(tmp_path)
    # cut short (a broken download): named as such, not "no config.json with a model_type" (eval run, repair_score)
    (tmp_path / "config.json").write_text((tiny_dir / "config.json").read_text()[:-20])
    with pytest.raises(CheckpointError, match=r"hf_dir=.*config\.json does not parse as JSON"):
        require_hf_dir(tmp_path)


def test_corrupt_or_missing_gguf(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.gguf"):
        gguf_to_hf(tmp_path / "nope.gguf", tmp_path / "out")
    (tmp_path / "junk.gguf").write_bytes(b"PK\x03\x04" + bytes(100))
    with pytest.raises(CheckpointError, match=r"junk\.gguf is not a GGUF file"):
        gguf_to_hf(tmp_path / "junk.gguf", tmp_path / "out")
    (tmp_path / "cut.gguf").write_bytes(b"GGUF\x03\x00\x00\x00" + bytes(13))  # right magic, truncated header
    with pytest.raises(CheckpointError, match=r"cannot read GGUF file .*cut\.gguf"):
        gguf_to_hf(tmp_path / "cut.gguf", tmp_path / "out")
    assert not (tmp_path / "out").exists()
