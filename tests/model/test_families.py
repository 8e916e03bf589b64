"""Model families (Qwen3's q/k norm, Qwen2's q/k/v bias) against transformers' own classes: logits, greedy decoding,
parameter counts, the round trip through save_hf, and every checkpoint we cannot run refused with the key named."""

from __future__ import annotations

import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from experiments import base, deepswe_agent
from swerl_jax.model.check_logits import main as check_logits_main
from swerl_jax.model.config import MODEL_CONFIGS, get_model_config
from swerl_jax.model.convert import (
    CheckpointError,
    hf_config_to_llama,
    layer_tensors,
    llama_to_hf_config,
    load_hf,
    save_hf,
)
from swerl_jax.model.llama import forward, init_params, positions_from_mask
from swerl_jax.optim import make_optimizer
from swerl_jax.policy import model_config_from
from tests.model.hf_models import hf_logits, left_padded_batch, random_hf_model, save_random_hf

FAMILIES = ["tiny-qwen3", "tiny-qwen3-tied", "tiny-qwen2"]  # untied / tied / tied with biases; all GQA
TOL = 1e-4  # max |logit diff| fp32 vs transformers (the Llama bound of tests/model/test_llama.py)
HF_CLASS = {"qwen3": "Qwen3ForCausalLM", "qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM"}


@pytest.fixture(scope="module", params=FAMILIES)
def family_dir(request, tmp_path_factory):
    """(registry name, HF directory written by transformers' save_pretrained, the HF model)."""
    out = tmp_path_factory.mktemp(request.param)
    model = save_random_hf(get_model_config(request.param), out, seed=len(request.param))
    return request.param, out, model


def test_logits_match_transformers_left_padded(family_dir):
    name, path, model = family_dir
    cfg, params = load_hf(path)
    assert cfg == get_model_config(name) and type(model).__name__ == HF_CLASS[cfg.family]
    tokens, mask = left_padded_batch(cfg.vocab_size)
    positions = np.asarray(positions_from_mask(jnp.asarray(mask)))
    ref = hf_logits(model, tokens, mask, positions)
    ours = np.asarray(forward(cfg, params, jnp.asarray(tokens), jnp.asarray(mask)))
    diff = float(np.abs(ours - ref)[mask].max())  # padded query positions are undefined in both
    print(f"{name}: max |logit diff| vs {type(model).__name__} = {diff:.2e}")
    assert diff <= TOL


def test_parity_tool_greedy_32_tokens(family_dir, capsys):
    """`python -m swerl_jax.model.check_logits` on each family: transformers' own class, 32 greedy tokens equal."""
    _, path, _ = family_dir
    assert check_logits_main(["--hf", str(path), "--new-tokens", "32", "--tol", str(TOL)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.endswith("greedy_match=32/32"), last


@pytest.mark.parametrize("name", FAMILIES + ["tiny"])
def test_num_params_counts_the_family_tensors(name):
    cfg = get_model_config(name)
    model = random_hf_model(cfg)
    assert cfg.num_params() == sum(p.numel() for p in model.parameters())  # a tied head is one parameter
    abstract = jax.eval_shape(lambda: init_params(cfg, jax.random.key(0)))
    assert cfg.num_params() == sum(x.size for x in jax.tree.leaves(abstract))


def test_registry_shapes_of_the_published_models():
    """Qwen3-32B as DeepSWE trains it: 32.76B parameters (its model card's 32.8B), q/k norm, untied, head_dim 128."""
    q = get_model_config("qwen3-32b")
    assert (q.family, q.qk_norm, q.qkv_bias, q.tie_word_embeddings, q.head_size) == ("qwen3", True, False, False, 128)
    assert q.num_params() == 32_762_123_264
    assert get_model_config("qwen3-0.6b").num_params() == 596_049_920
    assert get_model_config("qwen2.5-0.5b").num_params() == 494_032_768
    assert all(c.family == "llama" for n, c in MODEL_CONFIGS.items() if n.startswith(("llama", "tiny-g", "demo")))


def _random_params(cfg, seed: int) -> dict:
    """Random params of `cfg`'s shapes (numpy: an eager Flax init compiles every op), norm scales and biases too."""
    rng = np.random.default_rng(seed)
    shapes = jax.eval_shape(lambda: init_params(cfg, jax.random.key(0)))
    return jax.tree.map(lambda x: jnp.asarray(rng.normal(0.0, 0.05, x.shape), x.dtype), shapes)


@pytest.mark.parametrize("name", FAMILIES)
def test_save_hf_loads_in_transformers_and_back_bit_exact(name, tmp_path):
    cfg = get_model_config(name)
    params = _random_params(cfg, 3)
    save_hf(cfg, params, tmp_path / "ours")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "ours", dtype=torch.float32).eval()
    assert type(model).__name__ == HF_CLASS[cfg.family]
    tokens, mask = left_padded_batch(cfg.vocab_size, pad=0, t=12)
    with torch.no_grad():
        ref = model(input_ids=torch.tensor(tokens)).logits.numpy()
    ours = jax.jit(forward, static_argnums=0)(cfg, params, jnp.asarray(tokens))
    assert np.abs(np.asarray(ours) - ref).max() <= TOL
    back_cfg, back = load_hf(tmp_path / "ours")
    assert back_cfg == cfg
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(back), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # transformers' own save of what it loaded is our file, tensor for tensor
    model.save_pretrained(tmp_path / "theirs")
    ours = load_file(tmp_path / "ours" / "model.safetensors")
    theirs = load_file(tmp_path / "theirs" / "model.safetensors")
    assert set(ours) == set(theirs) - ({"lm_head.weight"} if cfg.tie_word_embeddings else set())
    for key, value in ours.items():
        assert torch.equal(value, theirs[key]), key


def test_family_rows_of_the_tensor_table():
    """The table grows by the family's tensors only; biases map HF [heads*d] -> ours [heads, d] by reshape."""
    base_rows = set(layer_tensors(get_model_config("tiny")))
    qwen3 = layer_tensors(get_model_config("tiny-qwen3"))
    qwen2 = layer_tensors(get_model_config("tiny-qwen2"))
    assert set(qwen3) - base_rows == {("self_attn", "q_norm_scale"), ("self_attn", "k_norm_scale")}
    assert set(qwen2) - base_rows == {("self_attn", f"{n}_bias") for n in "qkv"}
    k_bias = qwen2[("self_attn", "k_bias")]
    assert (k_bias.hf_name, k_bias.hf_shape, k_bias.shape, k_bias.kind) == ("self_attn.k_proj.bias", (32,), (2, 16),
                                                                              "vector")
    w = np.arange(32.0)
    np.testing.assert_array_equal(k_bias.to_hf(k_bias.to_ours(w)), w)
    assert qwen3[("self_attn", "q_norm_scale")].hf_shape == (24,)  # head_dim, not hidden / heads


def _hf(name: str, **changes) -> dict:
    return llama_to_hf_config(get_model_config(name)) | changes


@pytest.mark.parametrize("hf, match", [
    (_hf("tiny-qwen3", attention_bias=True), "attention_bias=True is not supported"),
    (_hf("tiny", attention_bias=True), "attention_bias=True is not supported"),
    (_hf("tiny-qwen2", use_sliding_window=True, sliding_window=64, max_window_layers=1, layer_types=None),
     "use_sliding_window=True"),
    (_hf("tiny-qwen3", layer_types=["full_attention", "sliding_attention"]), r"layer_types\[1\]='sliding_attention'"),
    (_hf("tiny-qwen3", rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6}),
     "rope_parameters: rope type 'yarn'"),
    (_hf("tiny-qwen2", rope_parameters=None, rope_scaling={"type": "dynamic", "factor": 2.0}),
     "rope_scaling: rope type 'dynamic'"),
    (_hf("tiny-qwen2", hidden_act="gelu"), "hidden_act='gelu'"),
    (_hf("tiny-qwen3", mlp_bias=True), "mlp_bias=True"),
    (_hf("tiny-qwen3", architectures=["Qwen3MoeForCausalLM"]), "model_type='qwen3'.*Qwen3MoeForCausalLM"),
    (_hf("tiny-qwen3", model_type="qwen3_moe"), "model_type='qwen3_moe'"),
])
def test_what_we_do_not_compute_is_refused_naming_the_key(hf, match):
    with pytest.raises(CheckpointError, match=match) as err:
        hf_config_to_llama(hf, source="/ckpt/Qwen/config.json")
    assert str(err.value).startswith("/ckpt/Qwen/config.json")


def test_published_config_files_map_to_the_registry():
    """Qwen3-32B's and Qwen2.5-0.5B-Instruct's config.json as published (no layer_types; Qwen2.5 has no head_dim, a
    sliding_window that use_sliding_window=false turns off): our registry entries."""
    qwen3 = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": False,
             "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120, "intermediate_size": 25600,
             "max_position_embeddings": 40960, "max_window_layers": 64, "num_attention_heads": 64,
             "num_hidden_layers": 64, "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": None,
             "rope_theta": 1000000, "sliding_window": None, "tie_word_embeddings": False,
             "torch_dtype": "bfloat16", "use_sliding_window": False, "vocab_size": 151936}
    assert hf_config_to_llama(qwen3, "bfloat16") == get_model_config("qwen3-32b", param_dtype="bfloat16")
    qwen25 = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
              "hidden_size": 896, "intermediate_size": 4864, "max_position_embeddings": 32768,
              "max_window_layers": 21, "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
              "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": True,
              "use_sliding_window": False, "vocab_size": 151936}
    assert hf_config_to_llama(qwen25) == get_model_config("qwen2.5-0.5b")
    # a Qwen3 config.json without head_dim means transformers' default, 128 (not hidden_size / heads)
    no_head_dim = {k: v for k, v in _hf("tiny-qwen3-tied").items() if k != "head_dim"}
    assert hf_config_to_llama(no_head_dim).head_size == 128


@pytest.mark.parametrize("tensor, change, match", [
    ("model.layers.1.self_attn.k_norm.weight", None, "missing tensor 'model.layers.1.self_attn.k_norm.weight'"),
    ("model.layers.0.self_attn.q_norm.weight", torch.ones(80),
     r"'model.layers.0.self_attn.q_norm.weight' in model.safetensors has shape \[80\], expected \[24\]"),
])
def test_a_checkpoint_missing_or_misshaping_a_family_tensor_names_it(tensor, change, match, tmp_path):
    save_random_hf(get_model_config("tiny-qwen3"), tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    if change is None:
        del state[tensor]
    else:
        state[tensor] = change
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=match):
        load_hf(tmp_path)


def test_a_checkpoint_of_another_family_than_the_experiments_is_refused(tmp_path):
    """model.name says the family, model.hf_dir's config.json must agree: the error names the file and the key."""
    save_random_hf(get_model_config("tiny-qwen3"), tmp_path / "qwen3")
    save_random_hf(get_model_config("tiny"), tmp_path / "llama")
    c = base.get_config()  # model.name = "tiny", a Llama
    c.model.hf_dir = str(tmp_path / "qwen3")
    with pytest.raises(CheckpointError, match=rf"^{tmp_path / 'qwen3' / 'config.json'}: model_type='qwen3'.*"
                                              r"model.name='tiny' is a llama model; set model.name to a qwen3 entry"):
        model_config_from(c)
    # DeepSWE's experiment (model.name qwen3-32b) reads a Qwen3 directory of its shape (here a tiny one, named so),
    # refuses one of another shape naming the key, and refuses a Llama one
    d = deepswe_agent.get_config()
    d.model.hf_dir = str(tmp_path / "qwen3")
    with pytest.raises(CheckpointError, match=r"qwen3/config.json: vocab_size=911, but model.name='qwen3-32b' has "
                                              r"151936.*set model.name to its entry \(tiny-qwen3\)"):
        model_config_from(d)
    d.model.name = "tiny-qwen3"
    assert model_config_from(d) == get_model_config("tiny-qwen3", param_dtype=d.model.param_dtype,
                                                    dtype=d.model.dtype, remat=d.model.remat,
                                                    attention_impl=d.model.attention_impl)
    d.model.hf_dir = str(tmp_path / "llama")
    with pytest.raises(CheckpointError, match="model.name='tiny-qwen3' is a qwen3 model"):
        model_config_from(d)
    # a sliding-window checkpoint fails at the same point, naming its file and key
    hf = json.loads((tmp_path / "qwen3" / "config.json").read_text())
    shutil.copytree(tmp_path / "qwen3", tmp_path / "window")
    (tmp_path / "window" / "config.json").write_text(json.dumps(hf | {"layer_types": ["sliding_attention"] * 2}))
    d.model.hf_dir = str(tmp_path / "window")
    with pytest.raises(CheckpointError, match=rf"^{tmp_path / 'window' / 'config.json'} layer_types\[0\]"):
        model_config_from(d)


def test_weight_decay_skips_the_family_norms_and_biases():
    c = base.get_config()
    c.optim.weight_decay, c.optim.learning_rate, c.optim.grad_clip = 0.5, 0.1, 0.0
    opt = make_optimizer(c.optim, 10)
    # every leaf name of the families' attention (layer_tensors' keys), each a small array of ones
    names = {leaf for n in ("tiny-qwen3", "tiny-qwen2") for _, leaf in layer_tensors(get_model_config(n))}
    params = {"layers": {"self_attn": {leaf: jnp.ones((2, 3)) for leaf in names}}}
    # zero gradients: the update is the weight decay alone
    updates, _ = jax.jit(lambda p: opt.update(jax.tree.map(jnp.zeros_like, p), opt.init(p), p))(params)
    decayed = {k for k, v in updates["layers"]["self_attn"].items() if float(jnp.abs(v).max()) > 0}
    assert decayed == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}, decayed
