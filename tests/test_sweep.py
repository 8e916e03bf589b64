"""swerl_jax.sweep: typed overrides checked before anything runs, one subprocess per (variant, seed), finished runs
skipped, a failed run recorded while the sweep goes on, emitted launch commands, and one real run end to end."""

from __future__ import annotations

import json
import subprocess

import pytest

from swerl_jax import sweep
from swerl_jax.config import load_experiment_config

CONFIG = "experiments/tiny_cpu.py"
CHEAP = {"sft.num_steps": 1, "rl.num_steps": 1, "sampler.mode": "inline", "sampler.max_new_tokens": 8,
         "logging.progress_bar": False, "logging.tensorboard": False}


def test_values_take_the_config_fields_types():
    c = load_experiment_config(CONFIG)
    assert sweep.parse_axes(c, ["reward.kind=continuous,discrete", "rl.kl_coef=0,0.04", "rl.num_samples=4,8",
                                "rl.compact_filtering=true,false"]) == [
        ("reward.kind", ["continuous", "discrete"]), ("rl.kl_coef", [0.0, 0.04]), ("rl.num_samples", [4, 8]),
        ("rl.compact_filtering", [True, False])]
    with pytest.raises(KeyError, match="unknown config key rl.kl_coeff"):
        sweep.parse_axes(c, ["rl.kl_coeff=0,1"])
    with pytest.raises(ValueError, match="expected a bool"):
        sweep.parse_axes(c, ["rl.compact_filtering=maybe"])


def test_a_bad_override_fails_before_any_run(tmp_path):
    calls = []
    with pytest.raises(ValueError, match="rl.num_samples"):
        sweep.run_sweep(CONFIG, tmp_path, [("rl.num_samples", [8, 1])], [0], CHEAP,
                        runner=lambda *a, **k: calls.append(a))
    assert calls == [] and not (tmp_path / "index.json").exists()


class Recorder:
    """Stands in for subprocess.run: records each command, fails the runs whose seed is in `fail_seeds`."""

    def __init__(self, fail_seeds=()):
        self.commands, self.fail_seeds = [], set(fail_seeds)

    def __call__(self, cmd, **kwargs):
        self.commands.append(cmd)
        seed = int(next(a for a in cmd if a.startswith("--config.seed=")).split("=")[1])
        return subprocess.CompletedProcess(cmd, 3 if seed in self.fail_seeds else 0)


def test_runs_variants_by_seeds_records_failures_and_skips_finished(tmp_path):
    rec = Recorder(fail_seeds={1})
    index = sweep.run_sweep(CONFIG, tmp_path, [("reward.kind", ["continuous", "discrete"])], [0, 1], CHEAP,
                            runner=rec)
    assert [r["name"] for r in index["runs"]] == [
        f"{'__'.join(f'{k}-{v}' for k, v in CHEAP.items())}__reward.kind-{kind}__seed-{s}"
        for kind in ("continuous", "discrete") for s in (0, 1)]
    assert [r["status"] for r in index["runs"]] == ["done", "failed", "done", "failed"]  # the sweep went on
    assert len(rec.commands) == 4
    first = rec.commands[0]
    assert first[1:4] == ["-m", "swerl_jax.train", f"--config={CONFIG}"]
    assert "--config.reward.kind=continuous" in first and "--config.seed=0" in first
    assert json.loads((tmp_path / "index.json").read_text()) == index
    # the first run finished (its checkpoints reached both stages' steps): a re-run skips it and runs the rest
    done = tmp_path / "runs" / index["runs"][0]["name"]
    (done / "sft" / "checkpoints" / "1").mkdir(parents=True)
    (done / "checkpoints" / "1").mkdir(parents=True)
    again = Recorder()
    index = sweep.run_sweep(CONFIG, tmp_path, [("reward.kind", ["continuous", "discrete"])], [0, 1], CHEAP,
                            runner=again)
    assert len(again.commands) == 3 and index["runs"][0]["status"] == "done"
    assert all(r["status"] == "done" for r in index["runs"])


def test_emit_writes_one_launcher_line_per_run_and_runs_nothing(tmp_path):
    rec = Recorder()
    index = sweep.run_sweep(CONFIG, tmp_path, [("rl.kl_coef", [0.0, 0.04])], [0, 1, 2], CHEAP,
                            emit="launch/local.sh", runner=rec)
    lines = (tmp_path / "commands.sh").read_text().splitlines()[2:]
    assert rec.commands == [] and len(lines) == 6 and all(r["status"] == "pending" for r in index["runs"])
    assert lines[0].startswith(f"launch/local.sh {CONFIG} --workdir=") and "--config.rl.kl_coef=0.0" in lines[0]


@pytest.mark.slow
def test_one_real_run_trains_and_a_rerun_skips_it(tmp_path):
    assert sweep.main(["--config", CONFIG, "--workdir", str(tmp_path), "--seeds", "0",
                       *[f"--set={k}={v}" for k, v in CHEAP.items()]]) == 0
    index = json.loads((tmp_path / "index.json").read_text())
    (run,) = index["runs"]
    assert run["status"] == "done" and run["final"]["step"] == 1 and "reward_mean" in run["final"]
    rec = Recorder()
    sweep.run_sweep(CONFIG, tmp_path, [], [0], {k: sweep.parse_value(load_experiment_config(CONFIG), k, str(v))
                                              for k, v in CHEAP.items()}, runner=rec)
    assert rec.commands == []
    # another sweep of an RL switch starts from that run's SFT stage instead of training its own
    other = tmp_path / "clip"
    assert sweep.main(["--config", CONFIG, "--workdir", str(other), "--seeds", "0", "--share-sft", "--sft-from",
                       str(tmp_path), "--sweep", "rl.clip_eps_high=0.28",
                       *[f"--set={k}={v}" for k, v in CHEAP.items()]]) == 0
    (shared,) = json.loads((other / "index.json").read_text())["runs"]
    assert shared["status"] == "done" and shared["sft_shared_from"] == run["workdir"]
    src, dst = tmp_path / "runs" / run["name"] / "sft", other / "runs" / shared["name"] / "sft"
    assert (dst / "metrics.jsonl").read_text() == (src / "metrics.jsonl").read_text()  # not trained again
    assert json.loads((dst / "shared_from.json").read_text())["run"] == run["workdir"]


def _finished_run(root, name: str, config: dict, sft_steps: int):
    run = root / "runs" / name
    (run / "sft" / "checkpoints" / str(sft_steps)).mkdir(parents=True)
    (run / "sft" / "metrics.jsonl").write_text(name)
    (run / "config.json").write_text(json.dumps(config))
    return run


def test_an_sft_stage_is_shared_only_between_configs_that_differ_in_rl_keys(tmp_path):
    (base,) = sweep.plan_runs(CONFIG, [], [0], {}, check_files=False)
    config = base["config"]
    steps = config["sft"]["num_steps"]

    def variant(**changes):
        out = json.loads(json.dumps(config))
        for key, value in changes.items():
            section, name = key.split("__")
            out[section][name] = value
        return out

    _finished_run(tmp_path, "a_other_seed", {**config, "seed": 1}, steps)
    _finished_run(tmp_path, "b_other_lr", variant(sft__learning_rate=1e-3), steps)
    _finished_run(tmp_path, "c_agent", variant(rl__task="agent"), steps)
    _finished_run(tmp_path, "d_unfinished", variant(rl__kl_coef=0.5), steps - 1)
    source = _finished_run(tmp_path, "e_rl_only", variant(rl__kl_coef=0.5, rl__num_steps=3,
                                                          logging__progress_bar=False), steps)
    target = tmp_path / "runs" / "new"
    assert sweep.share_sft_stage(target, config, [tmp_path / "runs"]) == source
    assert (target / "sft" / "metrics.jsonl").read_text() == "e_rl_only"
    assert sorted(p.name for p in target.iterdir()) == ["sft"]  # no half-copied temporary left
    assert sweep.share_sft_stage(target, config, [tmp_path / "runs"]) is None  # already has a stage
    assert sweep.sft_stage_differences(config, variant(data__max_prompt_len=128)) == ["data.max_prompt_len"]


def test_sft_sharing_refuses_a_missing_source_sweep_and_skips_a_broken_run(tmp_path, capsys):
    with pytest.raises(FileNotFoundError, match="--sft-from .*nowhere: no runs/ folder"):
        sweep.run_sweep(CONFIG, tmp_path / "s", [], [0], CHEAP, runner=Recorder(), share_sft=True,
                        sft_from=[tmp_path / "nowhere"])
    with pytest.raises(ValueError, match="pass --share-sft too"):
        sweep.run_sweep(CONFIG, tmp_path / "s", [], [0], CHEAP, runner=Recorder(), sft_from=[tmp_path])
    (base,) = sweep.plan_runs(CONFIG, [], [0], {}, check_files=False)
    broken = _finished_run(tmp_path, "a_broken", {}, base["config"]["sft"]["num_steps"])
    (broken / "config.json").write_text('{"sft": ')  # cut mid-write
    good = _finished_run(tmp_path, "b_good", base["config"], base["config"]["sft"]["num_steps"])
    assert sweep.share_sft_stage(tmp_path / "runs" / "new", base["config"], [tmp_path / "runs"]) == good
    err = capsys.readouterr().err
    assert f"skips {broken / 'config.json'}: unreadable config" in err


def test_variants_keep_positions_of_the_declared_sweep():
    from swerl_jax.sweep import plan_runs

    runs = plan_runs("experiments/ablations/grpo_pp.py:cpu", [], [0], {}, check_files=False, variants=[0, 3])
    assert [r["overrides"] for r in runs] == [{}, {"rl.advantage": "grpo"}]
    with pytest.raises(ValueError, match="declares 6 variants"):
        plan_runs("experiments/ablations/grpo_pp.py:cpu", [], [0], {}, check_files=False, variants=[6])
