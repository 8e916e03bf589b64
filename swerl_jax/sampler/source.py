"""Which policy an evaluation samples from, named before anything loads, and the engine or client that samples it.

The three evaluation entry points (`eval run`, `eval.repair_score`, `eval.tts`) score one of: a published policy
version (`weights` = RUN/policy, `version` or the newest), a Hugging Face directory (`model.hf_dir`), a running
sampler server (`address`), or, only when asked, the config's seeded random init. `describe` checks the choice and
says what it is (every report carries that dict); `open_engine` / `open_client` give the sampler for it and check
that what loaded is what was described. A path that holds no policy is an error, never a random init.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from swerl_jax.sampler.weights import require_policy, version_path


@dataclasses.dataclass(frozen=True)
class PolicySource:
    """One policy to sample: `weights` (+ `version`, None = the newest), `hf_dir`, `address`, or the experiment's
    `model.hf_dir`; `random_init` allows the seeded init when none of them names weights. `flag` spells each
    field as its entry point's users type it (e.g. {"weights": "--weights"}) for the errors; an empty name for
    `random_init` says the entry point has no such option."""

    weights: str = ""
    version: int | None = None
    hf_dir: str = ""
    address: str = ""
    random_init: bool = False
    flag: dict = dataclasses.field(default_factory=dict)

    def name(self, field: str) -> str:
        """How this entry point spells `field` in an error message."""
        return self.flag.get(field, field)

    def check(self) -> PolicySource:
        """Refuse two sources at once and a version without weights; returns self."""
        named = [self.name(f) for f in ("weights", "hf_dir", "address") if getattr(self, f)]
        if len(named) > 1:
            raise ValueError(f"{' and '.join(named)} name two policies: give one")
        if self.version is not None and not self.weights:
            raise ValueError(f"{self.name('version')} needs {self.name('weights')} (the published policy directory "
                             "it counts in)")
        if self.version is not None and self.version < -1:
            raise ValueError(f"{self.name('version')}={self.version}: a version number, or -1 for the newest")
        return self


def describe(source: PolicySource, config: Any, config_name: str) -> dict:
    """What `source` evaluates with the (resolved) experiment `config`: {"what", "policy_version", and "weights" |
    "hf_dir" | "address" | "random_init_seed"}. Checked here, before anything loads: a `weights` path without a
    published policy (or without the asked version), weights of another model than the config's
    (`CheckpointError`, naming both) and a model without weights (unless `random_init`) raise."""
    source.check()
    if source.address:
        return {"what": f"the sampler server at {source.address}", "address": source.address, "policy_version": None}
    if source.weights:
        version = require_policy(source.weights, -1 if source.version is None else source.version)
        from swerl_jax.weights_check import check_stored_weights

        # another model's weights: one line naming both models now, not Orbax's tree or shape errors when loading
        check_stored_weights(version_path(source.weights, version), config,
                             f"{source.name('weights')} {source.weights}", config_name)
        return {"what": f"policy version {version} (GRPO step {version}) of {source.weights}",
                "weights": source.weights, "policy_version": version}
    if source.hf_dir:
        from swerl_jax.model.convert import require_hf_dir

        require_hf_dir(source.hf_dir, source.name("hf_dir"))
    hf_dir = source.hf_dir or str(config.model.hf_dir)
    if hf_dir:
        return {"what": f"the Hugging Face model {hf_dir}", "hf_dir": hf_dir, "policy_version": None}
    if not source.random_init:
        ask = f", or {source.name('random_init')} to evaluate a random init" if source.name("random_init") else ""
        raise ValueError(f"{config_name}: its model has no weights (model.hf_dir is empty) and no "
                         f"{source.name('weights')} was given: set {source.name('weights')}=RUN/policy or "
                         f"{source.name('hf_dir')}=DIR{ask} (a random init is never evaluated silently)")
    return {"what": f"a random init of {config.model.name} (seed {config.seed})", "random_init_seed": int(config.seed),
            "policy_version": None}


def open_engine(config: Any, source: PolicySource, evaluated: dict):
    """The in-process `SamplingEngine` for `config` holding exactly the policy `describe` named in `evaluated`
    (a published version other than the newest is restored over the newest); RuntimeError if it is not."""
    from swerl_jax.sampler.factory import load_engine
    from swerl_jax.sampler.weights import load

    engine, _ = load_engine(config, weights_dir=source.weights)
    want = evaluated["policy_version"]
    if source.weights and engine.policy_version != want:
        engine.update_params(load(source.weights, want, like=engine.params), want)
    held = engine.policy_version if source.weights else None
    if held != want:
        raise RuntimeError(f"loaded policy version {held}, meant {want}")
    return engine


def open_client(config: Any, source: PolicySource):
    """A `SamplerClient` to the server at `source.address`; ValueError naming the address when nothing answers."""
    from swerl_jax.sampler.client import SamplerClient, SamplerError, parse_address

    try:
        return SamplerClient(parse_address(source.address, source.name("address")),
                             timeout_s=config.sampler.request_timeout_s)
    except SamplerError as err:  # nothing listening there: one line, not a traceback
        raise ValueError(f"{source.name('address')} {source.address}: {err}") from None
