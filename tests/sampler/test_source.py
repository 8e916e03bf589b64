"""sampler/source.py: the one place that says which policy an evaluation samples, and refuses an ambiguous or empty
choice before anything loads."""

import jax
import ml_collections
import pytest

from swerl_jax.config import load_experiment_config
from swerl_jax.model.config import get_model_config
from swerl_jax.model.llama import init_params
from swerl_jax.sampler import weights
from swerl_jax.sampler.source import PolicySource, describe


def _config(hf_dir: str = "") -> ml_collections.ConfigDict:
    c = load_experiment_config("experiments/base.py")  # model.name 'tiny': the published weights' model
    c.model.hf_dir, c.seed = hf_dir, 7
    return c


def test_two_sources_or_a_version_without_weights_are_refused_in_the_entry_points_spelling():
    flags = {"weights": "--weights", "address": "--address", "version": "--version"}
    with pytest.raises(ValueError, match="--weights and --address name two policies"):
        PolicySource(weights="w", address="h:1", flag=flags).check()
    with pytest.raises(ValueError, match="--version needs --weights"):
        PolicySource(version=3, flag=flags).check()
    with pytest.raises(ValueError, match="version=-2: a version number"):
        PolicySource(weights="w", version=-2).check()


def test_describe_names_each_kind_of_policy_and_never_a_silent_random_init(tmp_path):
    weights.publish(tmp_path / "policy", init_params(get_model_config("tiny"), jax.random.PRNGKey(0)), 1)
    weights.publish(tmp_path / "policy", init_params(get_model_config("tiny"), jax.random.PRNGKey(1)), 4)
    newest = describe(PolicySource(weights=str(tmp_path / "policy")), _config(), "cfg")
    assert newest["policy_version"] == 4 and newest["what"].startswith("policy version 4 (GRPO step 4)")
    assert describe(PolicySource(weights=str(tmp_path / "policy"), version=1), _config(), "cfg")["policy_version"] == 1
    with pytest.raises(FileNotFoundError, match="policy version 2 is not there"):
        describe(PolicySource(weights=str(tmp_path / "policy"), version=2), _config(), "cfg")
    with pytest.raises(FileNotFoundError, match="no published policy"):
        describe(PolicySource(weights=str(tmp_path)), _config(), "cfg")
    assert describe(PolicySource(), _config("some/hf"), "cfg") == {
        "what": "the Hugging Face model some/hf", "hf_dir": "some/hf", "policy_version": None}
    with pytest.raises(FileNotFoundError, match="--hf_dir=.*not a Hugging Face model folder"):
        describe(PolicySource(hf_dir=str(tmp_path), flag={"hf_dir": "--hf_dir"}), _config(), "cfg")
    with pytest.raises(ValueError, match="cfg: its model has no weights .* never evaluated silently"):
        describe(PolicySource(), _config(), "cfg")
    assert describe(PolicySource(random_init=True), _config(), "cfg")["what"] == "a random init of tiny (seed 7)"
    assert describe(PolicySource(address="h:1"), _config(), "cfg")["what"] == "the sampler server at h:1"
