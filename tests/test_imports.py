"""Import boundaries, each checked in a fresh interpreter: the record, reward and curation packages, the tokenizer
and the sampler's client never load JAX or Flax (reward workers, Grain workers, Beam workers and clients stay
light), and the Grain loader brings no Flax or model code."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

JAX_FREE = ["swerl_jax.answer", "swerl_jax.data", "swerl_jax.data.records", "swerl_jax.data.prompts",
            "swerl_jax.data.synthetic", "swerl_jax.data.targets", "swerl_jax.data.swebench", "swerl_jax.reward",
            "swerl_jax.reward.service", "swerl_jax.curate", "swerl_jax.tokenizer", "swerl_jax.sampler.client",
            "swerl_jax.sampler.protocol", "swerl_jax.sampler.types"]


def _loaded_after_import(module: str, watch: tuple[str, ...]) -> list[str]:
    code = (f"import sys, json; import {module}; "
            f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {list(watch)!r} "
            f"or m in {list(watch)!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", JAX_FREE)
def test_module_imports_no_jax_or_flax(module):
    assert _loaded_after_import(module, ("jax", "flax", "jaxlib")) == []


def test_loader_imports_no_flax_and_no_model():
    # Grain itself imports JAX and Orbax's array helpers; Flax, optax and the model must not come with it.
    loaded = _loaded_after_import("swerl_jax.data.loader", ("flax", "optax", "swerl_jax"))
    assert [m for m in loaded if m.split(".")[0] in ("flax", "optax") or m.startswith("swerl_jax.model")] == []
