"""Stand-ins for `python -m swerl_jax.train` in the sweep's tests: they record each command a sweep runs."""

from __future__ import annotations

import pathlib
import subprocess

from swerl_jax.config import load_experiment_config, parse_value, set_key
from swerl_jax.resolve import resolve_config
from swerl_jax.runs import rundir

CONFIG = "experiments/tiny_cpu.py"


class Recorder:
    """Stands in for subprocess.run: records each command, fails the runs whose seed is in `fail_seeds`."""

    def __init__(self, fail_seeds=()):
        self.commands, self.fail_seeds = [], set(fail_seeds)

    def __call__(self, cmd, **kwargs):
        self.commands.append(cmd)
        seed = int(next(a for a in cmd if a.startswith(("--config.seed=", "--config.rl.seed="))).split("=")[1])
        return subprocess.CompletedProcess(cmd, 3 if seed in self.fail_seeds else 0)



class FakeTrain(Recorder):
    """Stands in for `python -m swerl_jax.train`: records the command, keeps the resolved config as the trainer
    does (`rundir.record_config`) and leaves both stages' last checkpoints, i.e. a finished run."""

    def __call__(self, cmd, **kwargs):
        super().__call__(cmd, **kwargs)
        flags = dict(a[2:].split("=", 1) for a in cmd if a.startswith("--"))
        config, workdir = load_experiment_config(flags.pop("config")), pathlib.Path(flags.pop("workdir"))
        for key, text in flags.items():
            key = key.removeprefix("config.")
            set_key(config, key, parse_value(config, key, text))
        resolved = resolve_config(config, check_files=False)
        rundir.record_config(workdir, resolved.to_json(indent=1))
        for stage, steps in (("sft/checkpoints", resolved.sft.num_steps), ("checkpoints", resolved.rl.num_steps)):
            (workdir / stage / str(steps)).mkdir(parents=True, exist_ok=True)
        return subprocess.CompletedProcess(cmd, 0)


def sweep_argv(root: pathlib.Path, sets: list[str], *more: str) -> list[str]:
    """`python -m swerl_jax.sweep`'s arguments: CONFIG over reward.kind=continuous,discrete, seed 0, `sets` as
    --config.KEY=VALUE overrides, then `more`."""
    return ["--config", CONFIG, "--workdir", str(root), "--seeds", "0", "--sweep", "reward.kind=continuous,discrete",
            *[f"--config.{s}" for s in sets], *more]
