"""The check_logits CLI on a random tiny checkpoint: report format, exit status, greedy helper vs transformers."""

import numpy as np
import pytest
import torch

from swerl_jax.model.check_logits import greedy_generate, hf_greedy_generate, main
from swerl_jax.model.config import get_model_config
from swerl_jax.model.convert import load_hf
from tests.model.hf_models import save_random_hf


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("gqa")
    save_random_hf(get_model_config("tiny-gqa-untied"), out, seed=3)
    return out


def test_cli_passes_and_last_line_is_the_summary(tiny_dir, capsys):
    rc = main(["--hf", str(tiny_dir), "--prompt", "hello world", "--new-tokens", "6"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert rc == 0
    key_diff, key_match = lines[-1].split(" ")
    assert key_diff.startswith("max_abs_logit_diff=") and float(key_diff.split("=")[1]) <= 1e-4
    assert key_match == "greedy_match=6/6"
    # No tokenizer in the directory: the prompt's 11 UTF-8 bytes are the tokens, + 6 greedy ones, one row each.
    rows = [ln for ln in lines if ln.split() and ln.split()[0].isdigit()]
    assert len(rows) == 17 and all(r.split()[3] == "same" for r in rows)


def test_cli_exits_1_above_tolerance(tiny_dir, capsys):
    # Different summation orders make the fp32 logits differ by ~1e-7, far above 1e-12.
    assert main(["--hf", str(tiny_dir), "--prompt", "x", "--new-tokens", "2", "--tol", "1e-12"]) == 1
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("max_abs_logit_diff=")


def test_greedy_loop_equals_transformers_and_argmax_of_full_forward(tiny_dir):
    cfg, params = load_hf(tiny_dir)
    model = __import__("transformers").LlamaForCausalLM.from_pretrained(tiny_dir).eval()
    prompt = [5, 17, 900, 3, 44]
    ours = greedy_generate(cfg, params, prompt, 8)
    assert ours == hf_greedy_generate(model, prompt, 8)
    # Independent of any cache: each token is the argmax of a full forward over everything before it.
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + ours])).logits[0].numpy()
    assert ours == list(np.argmax(logits[len(prompt) - 1:-1], axis=-1))
