"""swerl_jax.sweep: a run's name is its result-changing settings (flag order and cosmetic flags change nothing),
runs named by older code are found, the index lists every run at every update, Ctrl-C and bad input are one line."""

from __future__ import annotations

import json
import pathlib
import re
import shlex

import pytest

from swerl_jax import sweep
from swerl_jax.config import load_experiment_config, parse_value
from tests.sweep_fakes import CONFIG, FakeTrain, Recorder, sweep_argv

RESULT = ["sft.num_steps=1", "rl.num_steps=1", "sampler.mode=inline", "sampler.max_new_tokens=8"]
COSMETIC = ["eval.every_steps=30", "logging.progress_bar=false"]
KINDS = ("reward.kind", ["continuous", "discrete"])


def _command(root, sets, seeds=(0,), runner=None, dry_run=False):
    """`python -m swerl_jax.sweep --config CONFIG --sweep reward.kind=continuous,discrete --set S ...` as `main`
    parses it (each --set in flag order), with `runner` for the training subprocess."""
    base = load_experiment_config(CONFIG)
    fixed = {}
    for spec in sets:
        key, _, text = spec.partition("=")
        fixed[key] = parse_value(base, key, text)
    return sweep.run_sweep(CONFIG, root, [KINDS], list(seeds), fixed, dry_run=dry_run, runner=runner)


def _files(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_runs_name_is_its_result_changing_settings_in_canonical_order():
    base = load_experiment_config(CONFIG)

    def names(*sets):
        fixed = {k: parse_value(base, k, v) for k, _, v in (s.partition("=") for s in sets)}
        return [r["name"] for r in sweep.plan_runs(CONFIG, [KINDS], [0], fixed, check_files=False)]

    planned = names("rl.kl_coef=0.04", *COSMETIC)
    assert planned == [f"reward.kind-{kind}__rl.kl_coef-0.04__seed-0" for kind in KINDS[1]]
    assert names(*COSMETIC[::-1], "rl.kl_coef=0.04") == planned  # the flags swapped
    assert names("rl.kl_coef=0.04") == planned  # the cosmetic flags dropped
    assert names("rl.kl_coef=4e-2", "logging.progress_bar=true", "checkpoint.every_steps=7") == planned  # same values


def test_two_runs_that_would_train_the_same_thing_are_refused():
    with pytest.raises(ValueError, match="differ only in logging.progress_bar, which change no result"):
        sweep.plan_runs(CONFIG, [("logging.progress_bar", [True, False])], [0], {}, check_files=False)


def test_a_rerun_with_the_flags_swapped_or_cosmetic_ones_dropped_retrains_nothing(tmp_path):
    first = FakeTrain()
    index = _command(tmp_path, [*RESULT, *COSMETIC], runner=first)
    assert len(first.commands) == 2 and [r["status"] for r in index["runs"]] == ["done", "done"]
    names = [r["name"] for r in index["runs"]]
    for sets in ([*COSMETIC[::-1], *RESULT[::-1]], [*RESULT, COSMETIC[0]], RESULT):  # swapped; no progress_bar; none
        again = Recorder()
        index = _command(tmp_path, sets, runner=again)
        assert again.commands == [], sets
        assert [(r["name"], r["status"]) for r in index["runs"]] == [(n, "done") for n in names]
        assert all(r["returncode"] == 0 and "seconds" in r for r in index["runs"])  # the first command's record
        assert json.loads((tmp_path / "index.json").read_text()) == index
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == sorted(names)  # no new run directory


def test_a_dry_run_writes_nothing(tmp_path, capsys):
    _command(tmp_path, [*RESULT, *COSMETIC], runner=FakeTrain())
    before = _files(tmp_path)
    assert sweep.main(sweep_argv(tmp_path, [*COSMETIC[::-1], *RESULT], "--dry-run")) == 0
    assert _files(tmp_path) == before
    assert "2 runs, 2 done, 0 failed, 0 pending (dry run: nothing written)" in capsys.readouterr().out
    assert sweep.main(sweep_argv(tmp_path / "new", RESULT, "--dry-run")) == 0
    assert not (tmp_path / "new").exists()
    # with --emit too: the commands are printed, commands.sh is not written (a held-out check found it written)
    assert sweep.main(sweep_argv(tmp_path, RESULT, "--dry-run", "--emit", "launch/local.sh")) == 0
    assert _files(tmp_path) == before and "launch/local.sh " in capsys.readouterr().out


def test_runs_named_by_yesterdays_code_are_found_not_retrained(tmp_path, capsys):
    # yesterday's code named a run by every --set in flag order (ABLATIONS.md's: eval.every_steps, progress_bar, ...)
    base = load_experiment_config(CONFIG)
    yesterday = {k: parse_value(base, k, v) for k, _, v in (s.partition("=") for s in [*COSMETIC, *RESULT])}
    old_dirs = []
    for kind in KINDS[1]:
        overrides = {**yesterday, "reward.kind": kind}
        old_dirs.append(tmp_path / "runs" / ("__".join(f"{k}-{v}" for k, v in overrides.items()) + "__seed-0"))
        FakeTrain()(sweep.train_command(CONFIG, old_dirs[-1], overrides, 0))
    # today: the same sweep, its flags in another order
    rec = Recorder()
    index = _command(tmp_path, [*RESULT, *COSMETIC[::-1]], runner=rec)
    assert rec.commands == [] and [r["status"] for r in index["runs"]] == ["done", "done"]
    assert [r["workdir"] for r in index["runs"]] == [str(d) for d in old_dirs]
    assert [r["planned_name"] for r in index["runs"]] == [
        f"reward.kind-{kind}__rl.num_steps-1__sampler.max_new_tokens-8__sampler.mode-inline__sft.num_steps-1__seed-0"
        for kind in KINDS[1]]
    out = capsys.readouterr().out
    assert all(f"found as {d} (named by an earlier sweep" in out for d in old_dirs)
    assert sorted((tmp_path / "runs").iterdir()) == old_dirs  # nothing trained again beside them


def test_a_run_directory_holding_another_configs_checkpoints_is_reported_not_counted(tmp_path, capsys):
    index = _command(tmp_path, RESULT, runner=FakeTrain())
    changed = pathlib.Path(index["runs"][0]["workdir"]) / "config.json"  # the experiment file changed since
    config = json.loads(changed.read_text())
    config["sft"]["learning_rate"] = 0.5
    changed.write_text(json.dumps(config))
    rec = Recorder()
    index = _command(tmp_path, RESULT, runner=rec)
    assert rec.commands == [] and [r["status"] for r in index["runs"]] == ["conflict", "done"]
    assert "sft.learning_rate: 0.5 -> " in index["runs"][0]["conflict"]
    assert f"conflict {changed.parent}: it holds checkpoints of a run with another config (sft.learning_rate: 0.5 -> " \
        in capsys.readouterr().out


def test_the_index_keeps_every_run_the_directory_holds(tmp_path):
    _command(tmp_path, RESULT, seeds=[0], runner=FakeTrain())
    planned = _command(tmp_path, RESULT, seeds=[1], runner=FakeTrain())  # ABLATIONS.md: one seed at a time
    index = json.loads((tmp_path / "index.json").read_text())
    assert sorted((r["overrides"]["reward.kind"], r["seed"], r["status"]) for r in index["runs"]) == [
        (kind, seed, "done") for kind in KINDS[1] for seed in (0, 1)]
    assert index["planned"] == [r["name"] for r in planned["runs"][:2]]
    # an index lost (deleted, or written by older code without them): the run directories list their runs again
    (tmp_path / "index.json").unlink()
    _command(tmp_path, RESULT, seeds=[1], runner=Recorder())
    again = json.loads((tmp_path / "index.json").read_text())
    key = lambda r: (r["name"], r["seed"], r["status"], json.dumps(r["overrides"], sort_keys=True))  # noqa: E731
    assert sorted(map(key, again["runs"])) == sorted(map(key, index["runs"]))


def test_every_run_prints_its_start_and_end_and_the_index_lists_every_run_at_every_update(tmp_path, capsys):
    seen = []

    class Peek(Recorder):
        def __call__(self, cmd, **kwargs):
            seen.append({r["name"]: r["status"] for r in json.loads((tmp_path / "index.json").read_text())["runs"]})
            return super().__call__(cmd, **kwargs)

    index = _command(tmp_path, RESULT, seeds=[0, 1], runner=Peek(fail_seeds={1}))
    names = [r["name"] for r in index["runs"]]
    assert [sorted(s) for s in seen] == [sorted(names)] * 4  # every run listed, the first write included
    assert [s[n] for s, n in zip(seen, names, strict=True)] == ["running"] * 4 and seen[1][names[0]] == "done"
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 8
    for i, (name, status) in enumerate(zip(names, ["done", "failed", "done", "failed"], strict=True)):
        run_dir = re.escape(str(tmp_path / "runs" / name))
        assert re.fullmatch(rf"sweep \[{i + 1}/4\] start {run_dir} \(its output: train.log there\)", lines[2 * i])
        assert re.fullmatch(rf"sweep \[{i + 1}/4\] {status} {run_dir} in \d+\.\d s"
                            + (r" \(exit 3: see its train.log\)" if status == "failed" else ""), lines[2 * i + 1])


def test_ctrl_c_and_bad_input_are_one_line(tmp_path, monkeypatch, capsys):
    def ctrl_c(cmd, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "run_child", ctrl_c)
    argv = sweep_argv(tmp_path, [*RESULT, *COSMETIC])
    with pytest.raises(SystemExit) as stop:
        sweep.cli(argv)
    assert stop.value.code == 130
    assert capsys.readouterr().err.strip() == ("python -m swerl_jax.sweep: interrupted; to resume, run the same "
                                               f"command again: python -m swerl_jax.sweep {shlex.join(argv)}")
    # the run it stopped is pending (it resumes), not "running"; the same command resumes the sweep
    assert [r["status"] for r in json.loads((tmp_path / "index.json").read_text())["runs"]] == ["pending", "pending"]
    monkeypatch.setattr(sweep, "run_child", FakeTrain())
    with pytest.raises(SystemExit) as stop:
        sweep.cli(argv)
    assert stop.value.code == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        sweep.cli(sweep_argv(tmp_path, ["rl.kl_coeff=0"]))
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip() == ("python -m swerl_jax.sweep: unknown config key rl.kl_coeff; did you "
                                               "mean rl.kl_coef?")
