"""A user's registered rl.* function (issue 57 item 2): its experiment file may be executed again in one process, and
a process that only reads the run's config.json (the sampler server) gets the function from `rl.imports`."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from swerl_jax.config import load_experiment_config
from swerl_jax.resolve import resolve_config
from swerl_jax.rl import advantages, registry

REPO = Path(__file__).resolve().parents[2]

EXPERIMENT = textwrap.dedent('''
    """An experiment file that registers its own advantage estimator, as README's "add an estimator" shows."""
    from experiments import tiny_cpu
    from swerl_jax.rl.advantages import register_advantage


    @register_advantage("test57-rank")
    def rank_advantage(rewards, std_eps, std_ddof):
        return rewards.argsort(axis=-1).argsort(axis=-1) - (rewards.shape[-1] - 1) / 2


    def get_config(arg=None):
        c = tiny_cpu.get_config(arg)
        c.rl.advantage = "test57-rank"
        return c
''')

# what the sampler server does with --config_json (swerl_jax/sampler/server.py: resolve_config of the JSON)
SAMPLER_SIDE = ("import json, sys, numpy as np; from swerl_jax.resolve import resolve_config; "
                "from swerl_jax.rl.advantages import group_advantages; "
                "e = resolve_config(json.load(open(sys.argv[1])), check_files=False); "
                "print(e.rl.advantage, group_advantages(np.array([[0.0, 1.0, 0.5]]), e.rl.advantage).tolist())")


@pytest.fixture
def experiment(tmp_path):
    path = tmp_path / "my_experiment.py"
    path.write_text(EXPERIMENT)
    yield path
    advantages.ADVANTAGE_ESTIMATORS.pop("test57-rank", None)


def test_an_experiment_file_executed_twice_registers_once(experiment):
    # was: ValueError "'test57-rank' is already registered" the second time (cli.py's key check and absl's
    # config flag both execute --config in `python -m swerl_jax.train`)
    first = load_experiment_config(str(experiment))
    second = load_experiment_config(str(experiment))
    assert first.rl.advantage == second.rl.advantage == "test57-rank"
    assert advantages.ADVANTAGE_ESTIMATORS["test57-rank"].__code__.co_filename == str(experiment)

    def rank_advantage(rewards, std_eps, std_ddof):  # another function under the taken name: still refused
        return rewards

    with pytest.raises(ValueError, match=r"'test57-rank' is already registered \(by rank_advantage in .*"
                                         r"my_experiment.py\)"):
        advantages.register_advantage("test57-rank")(rank_advantage)


def test_another_body_under_the_same_name_in_the_same_file_is_refused(tmp_path):
    """Issue 57's held-out check: a second `def` with another body, or a second lambda, in the same file under a
    taken name was accepted silently, because only (qualified name, file) were compared. The same file executed
    twice still registers once."""
    head = "from swerl_jax.rl.advantages import register_advantage as reg\n"
    files = {"two_defs.py": head + "def est(rewards, std_eps, std_ddof):\n    return rewards\nreg('test57-dup')(est)\n"
                            "def est(rewards, std_eps, std_ddof):\n    return -rewards\nreg('test57-dup')(est)\n",
             "two_lambdas.py": head + "reg('test57-dup')(lambda r, e, d: r)\nreg('test57-dup')(lambda r, e, d: -r)\n",
             "one_def.py": head + "reg('test57-dup')(lambda r, e, d: r)\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    try:
        for name in ("two_defs.py", "two_lambdas.py"):
            with pytest.raises(ValueError, match=rf"'test57-dup' is already registered \(by .* in .*{name}\)"):
                runpy.run_path(str(tmp_path / name))
            advantages.ADVANTAGE_ESTIMATORS.pop("test57-dup", None)
        runpy.run_path(str(tmp_path / "one_def.py"))
        runpy.run_path(str(tmp_path / "one_def.py"))  # the same def executed again: no error
    finally:
        advantages.ADVANTAGE_ESTIMATORS.pop("test57-dup", None)


def test_the_sampler_process_gets_the_estimator_from_config_json(experiment, tmp_path):
    resolved = resolve_config(load_experiment_config(str(experiment)), check_files=False)
    assert resolved.rl.imports == (str(experiment),)  # recorded where the file was executed
    config_json = tmp_path / "config.json"
    config_json.write_text(resolved.to_json(indent=1))  # as the trainer writes it for the sampler
    out = subprocess.run([sys.executable, "-c", SAMPLER_SIDE, str(config_json)], cwd=tmp_path, capture_output=True,
                         text=True, env={"PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[0] == "test57-rank"  # was: "rl.advantage='test57-rank' is not one of [...]"
    # built-in names record nothing: a config of the paper's estimators reads the same as before
    plain = resolve_config(load_experiment_config("experiments/tiny_cpu.py"), check_files=False)
    assert plain.rl.imports == ()
    # an origin that cannot be imported is one line naming the key
    bad = json.loads(config_json.read_text())
    bad["rl"]["imports"] = [str(tmp_path / "gone.py")]
    with pytest.raises(ValueError, match=r"rl.imports: cannot import '.*gone.py'.*no such file"):
        resolve_config(bad, check_files=False)


def test_origin_is_the_module_name_when_importable_else_the_file(experiment):
    load_experiment_config(str(experiment))
    assert registry.origin(advantages.ADVANTAGE_ESTIMATORS["test57-rank"]) == str(experiment)  # executed by path
    assert registry.origin(test_origin_is_the_module_name_when_importable_else_the_file) == "tests.rl.test_registry"
    assert registry.origin(advantages.ADVANTAGE_ESTIMATORS["grpo"]) is None  # swerl_jax's own
