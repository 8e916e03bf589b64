"""swerl_jax.sweep: typed overrides checked before anything runs, one subprocess per (variant, seed), finished runs
skipped, a failed run recorded while the sweep goes on, emitted launch commands, and one real run end to end."""

from __future__ import annotations

import json
import pathlib
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from swerl_jax import sweep, sweepdir
from swerl_jax.config import load_experiment_config, parse_value, set_key
from swerl_jax.resolve import resolve_config
from swerl_jax.runs import rundir

CONFIG = "experiments/tiny_cpu.py"
CHEAP = {"sft.num_steps": 1, "rl.num_steps": 1, "sampler.mode": "inline", "sampler.max_new_tokens": 8,
         "logging.progress_bar": False, "logging.tensorboard": False}


def test_values_take_the_config_fields_types():
    c = load_experiment_config(CONFIG)
    assert sweep.parse_axes(c, ["reward.kind=continuous,discrete", "rl.kl_coef=0,0.04", "rl.num_samples=4,8",
                                "rl.compact_filtering=true,false"]) == [
        ("reward.kind", ["continuous", "discrete"]), ("rl.kl_coef", [0.0, 0.04]), ("rl.num_samples", [4, 8]),
        ("rl.compact_filtering", [True, False])]
    with pytest.raises(KeyError, match=r"unknown config key rl.kl_coeff; did you mean rl.kl_coef\?"):
        sweep.parse_axes(c, ["rl.kl_coeff=0,1"])
    with pytest.raises(ValueError, match="rl.num_samples='four': expected an int"):
        sweep.parse_axes(c, ["rl.num_samples=four"])
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
        seed = int(next(a for a in cmd if a.startswith(("--config.seed=", "--config.rl.seed="))).split("=")[1])
        return subprocess.CompletedProcess(cmd, 3 if seed in self.fail_seeds else 0)


def test_runs_variants_by_seeds_records_failures_and_skips_finished(tmp_path):
    rec = Recorder(fail_seeds={1})
    index = sweep.run_sweep(CONFIG, tmp_path, [("reward.kind", ["continuous", "discrete"])], [0, 1], CHEAP,
                            runner=rec)
    assert [r["name"] for r in index["runs"]] == [  # the result-changing overrides, sorted; no logging.*
        f"reward.kind-{kind}__rl.num_steps-1__sampler.max_new_tokens-8__sampler.mode-inline__sft.num_steps-1__seed-{s}"
        for kind in ("continuous", "discrete") for s in (0, 1)]
    assert [r["status"] for r in index["runs"]] == ["done", "failed", "done", "failed"]  # the sweep went on
    assert len(rec.commands) == 4
    first = rec.commands[0]
    assert first[1:4] == ["-m", "swerl_jax.train", f"--config={sweep.REPO / CONFIG}"]
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
    assert lines[0].startswith(f"{sweep.REPO / 'launch/local.sh'} {sweep.REPO / CONFIG} --workdir=")
    assert "--config.rl.kl_coef=0.0" in lines[0]
    # a key both swept and fixed is refused (held-out check: the --set value silently lost or won)
    with pytest.raises(ValueError, match="reward.kind is both swept"):
        sweep.main(_argv(tmp_path / "both", ["reward.kind=continuous"], "--dry-run"))
    # a launcher that does not exist is refused (issue 31.9: commands.sh was written naming it)
    with pytest.raises(FileNotFoundError, match=r"--emit launch/locl.sh: no such launcher \(did you mean "
                                                r"launch/local.sh\?\)"):
        sweep.run_sweep(CONFIG, tmp_path / "other", [("rl.kl_coef", [0.0])], [0], CHEAP, emit="launch/locl.sh",
                        runner=rec)
    assert not (tmp_path / "other").exists()
    # --share-sft with --emit (issue 46 item 6): the emitted lines would each train their own SFT stage, so the pair
    # is refused in one line, before anything is written
    for extra in ([], ["--dry-run"]):
        with pytest.raises(ValueError, match=r"^--share-sft with --emit: .*each emitted command would train its own "
                                             r"SFT stage.*without --emit"):
            sweep.main(_argv(tmp_path / "shared", [], "--emit", "launch/local.sh",
                             "--share-sft", *extra))
    assert not (tmp_path / "shared").exists()



def test_emitted_lines_name_the_launcher_and_config_where_they_were_found(tmp_path, monkeypatch):
    """Held-out check of issue 46, item 3: from outside the clone, `--emit launch/local.sh` was found under the
    repository root but written as typed, a path that does not exist from the user's directory; the config likewise
    (the launcher runs from the repository root, so one beside the user must be named absolute)."""
    (tmp_path / "mine.py").write_text("from experiments.tiny_cpu import get_config  # noqa: F401\n")
    monkeypatch.chdir(tmp_path)
    for config, named in ((CONFIG, sweep.REPO / CONFIG), ("mine.py", tmp_path / "mine.py")):
        sweep.run_sweep(config, tmp_path / "sw", [("rl.kl_coef", [0.0])], [0], CHEAP, emit="launch/local.sh",
                        runner=Recorder())
        line = (tmp_path / "sw" / "commands.sh").read_text().splitlines()[2]
        assert line.startswith(f"{sweep.REPO / 'launch' / 'local.sh'} {named} --workdir={tmp_path / 'sw' / 'runs'}/")


@pytest.mark.slow
def test_one_real_run_trains_and_a_rerun_skips_it(tmp_path):
    assert sweep.main(["--config", CONFIG, "--workdir", str(tmp_path), "--seeds", "0",
                       *[f"--config.{k}={v}" for k, v in CHEAP.items()]]) == 0
    index = json.loads((tmp_path / "index.json").read_text())
    (run,) = index["runs"]
    assert run["status"] == "done" and run["final"]["step"] == 1 and "reward_mean" in run["final"]
    rec = Recorder()
    sweep.run_sweep(CONFIG, tmp_path, [], [0], {k: parse_value(load_experiment_config(CONFIG), k, str(v))
                                              for k, v in CHEAP.items()}, runner=rec)
    assert rec.commands == []
    # another sweep of an RL switch starts from that run's SFT stage instead of training its own
    other = tmp_path / "clip"
    assert sweep.main(["--config", CONFIG, "--workdir", str(other), "--seeds", "0", "--share-sft", "--sft-from",
                       str(tmp_path), "--sweep", "rl.clip_eps_high=0.28",
                       *[f"--config.{k}={v}" for k, v in CHEAP.items()]]) == 0
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
    assert sweepdir.share_sft_stage(target, config, [tmp_path / "runs"]) == source
    assert (target / "sft" / "metrics.jsonl").read_text() == "e_rl_only"
    assert sorted(p.name for p in target.iterdir()) == ["sft"]  # no half-copied temporary left
    assert sweepdir.share_sft_stage(target, config, [tmp_path / "runs"]) is None  # already has a stage
    assert sweepdir.sft_stage_differences(config, variant(data__max_prompt_len=128)) == ["data.max_prompt_len"]
    # what the SFT stage never reads: GRPO's rate and reward, the sampling temperature (its evaluation is greedy)
    grpo_only = variant(optim__learning_rate=9e-4, reward__kind="discrete", sampler__temperature=0.3)
    assert sweepdir.sft_stage_differences(config, grpo_only) == []
    assert sweepdir.sft_stage_differences(config, variant(optim__warmup_steps=7)) == ["optim.warmup_steps"]


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
    assert sweepdir.share_sft_stage(tmp_path / "runs" / "new", base["config"], [tmp_path / "runs"]) == good
    err = capsys.readouterr().err
    assert f"skips {broken / 'config.json'}: unreadable config" in err


def test_an_sft_stage_whose_config_changed_before_it_finished_is_not_shared(tmp_path, capsys):
    """A stage resumed with a new learning rate, or extended under a cosine schedule (which decays to its step
    count), is not what its config.json alone trains; extended under a constant schedule, it is."""
    (base,) = sweep.plan_runs(CONFIG, [], [0], {}, check_files=False)
    steps = base["config"]["sft"]["num_steps"]
    extended = _finished_run(tmp_path, "a_extended", base["config"], steps)
    change = {"from_checkpoint": {"sft": steps - 1}, "changes": {"sft.num_steps": {"old": steps - 1, "new": steps},
                                                               "sft.learning_rate": {"old": 1, "new": 2}}}
    (extended / "config_changes.jsonl").write_text(json.dumps(change) + "\n")
    assert sweepdir.changed_mid_sft(extended, steps, "cosine") == (f"sft.num_steps at SFT step {steps - 1}, "
                                                                   f"sft.learning_rate at SFT step {steps - 1}")
    assert sweepdir.changed_mid_sft(extended, steps, "constant") == f"sft.learning_rate at SFT step {steps - 1}"
    later = _finished_run(tmp_path, "b_rl_changed_later", base["config"], steps)
    after = {"from_checkpoint": {"sft": steps, "grpo": 2}, "changes": {"rl.kl_coef": {"old": 0.0, "new": 0.1},
                                                                       "sft.learning_rate": {"old": 1, "new": 2}}}
    (later / "config_changes.jsonl").write_text(json.dumps(after) + "\n")
    assert sweepdir.changed_mid_sft(later, steps, "cosine") == ""  # changed after its SFT stage finished
    assert sweepdir.share_sft_stage(tmp_path / "runs" / "new", base["config"], [tmp_path / "runs"]) == later
    err = capsys.readouterr().err
    assert f"skips {extended}: its SFT stage changed config mid-way (sft.learning_rate at SFT step" in err
    lengthened = _finished_run(tmp_path, "0_lengthened", base["config"], steps)  # sorts first: found first
    length_only = {"from_checkpoint": {"sft": 1}, "changes": {"sft.num_steps": {"old": 1, "new": steps}}}
    (lengthened / "config_changes.jsonl").write_text(json.dumps(length_only) + "\n")
    assert base["config"]["optim"]["schedule"] == "constant"
    assert sweepdir.share_sft_stage(tmp_path / "runs" / "newer", base["config"], [tmp_path / "runs"]) == lengthened


def test_rl_seeds_share_one_sft_stage_and_are_named_and_passed_as_rl_seed(tmp_path):
    runs = sweep.plan_runs(CONFIG, [], [0, 1], {}, check_files=False, seed_key="rl.seed")
    assert [r["name"] for r in runs] == ["rl.seed-0", "rl.seed-1"]
    assert [r["config"]["seed"] for r in runs] == [0, 0] and [r["config"]["rl"]["seed"] for r in runs] == [0, 1]
    assert sweepdir.sft_stage_differences(runs[0]["config"], runs[1]["config"]) == []  # one SFT stage for both
    whole = sweep.plan_runs(CONFIG, [], [0, 1], {}, check_files=False)
    assert sweepdir.sft_stage_differences(whole[0]["config"], whole[1]["config"]) == ["seed"]
    assert "--config.rl.seed=1" in sweep.train_command(CONFIG, tmp_path, {}, 1, seed_key="rl.seed")
    with pytest.raises(ValueError, match="rl.seed is both the --seed-key and set by --config"):
        sweep.plan_runs(CONFIG, [], [0], {"rl.seed": 3}, check_files=False, seed_key="rl.seed")
    rec = Recorder()
    index = sweep.run_sweep(CONFIG, tmp_path / "s", [], [0, 1], CHEAP, runner=rec, seed_key="rl.seed")
    assert index["seed_key"] == "rl.seed" and [r["seed"] for r in index["runs"]] == [0, 1]
    assert all("--config.seed=0" not in c and any(a.startswith("--config.rl.seed=") for a in c) for c in rec.commands)


def test_variants_keep_positions_of_the_declared_sweep():
    from swerl_jax.sweep import plan_runs

    runs = plan_runs("experiments/ablations/grpo_pp.py:cpu", [], [0], {}, check_files=False, variants=[0, 3])
    assert [r["overrides"] for r in runs] == [{}, {"rl.advantage": "grpo"}]
    with pytest.raises(ValueError, match="declares 6 variants"):
        plan_runs("experiments/ablations/grpo_pp.py:cpu", [], [0], {}, check_files=False, variants=[6])


# ------------------------------------------------ a researcher's sweep never silently retrains or loses a run
# (issue 31.5, 31.7): the flags of ABLATIONS.md's commands, result-changing and cosmetic ones apart
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


def _argv(root, sets, *more):
    return ["--config", CONFIG, "--workdir", str(root), "--seeds", "0", "--sweep", "reward.kind=continuous,discrete",
            *[f"--config.{s}" for s in sets], *more]


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
    assert sweep.main(_argv(tmp_path, [*COSMETIC[::-1], *RESULT], "--dry-run")) == 0
    assert _files(tmp_path) == before
    assert "2 runs, 2 done, 0 failed, 0 pending (dry run: nothing written)" in capsys.readouterr().out
    assert sweep.main(_argv(tmp_path / "new", RESULT, "--dry-run")) == 0
    assert not (tmp_path / "new").exists()
    # with --emit too: the commands are printed, commands.sh is not written (a held-out check found it written)
    assert sweep.main(_argv(tmp_path, RESULT, "--dry-run", "--emit", "launch/local.sh")) == 0
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
    argv = _argv(tmp_path, [*RESULT, *COSMETIC])
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
        sweep.cli(_argv(tmp_path, ["rl.kl_coeff=0"]))
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip() == ("python -m swerl_jax.sweep: unknown config key rl.kl_coeff; did you "
                                               "mean rl.kl_coef?")


def test_ctrl_c_stops_the_run_in_progress_and_what_it_started(tmp_path):
    # the run (a stand-in for the trainer) stops on SIGINT; what it started ignores SIGINT and must not outlive it
    started, stopped = tmp_path / "started", tmp_path / "stopped"
    child = textwrap.dedent(f"""
        import pathlib, signal, subprocess, sys, time
        ignore = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(120)"
        helper = subprocess.Popen([sys.executable, "-c", ignore])
        def stop(*_):
            pathlib.Path({str(stopped)!r}).write_text("SIGINT")
            sys.exit(130)
        signal.signal(signal.SIGINT, stop)
        pathlib.Path({str(started)!r}).write_text(f"{{helper.pid}}")
        time.sleep(120)
    """)
    main_thread = threading.main_thread().ident

    def press_ctrl_c():  # once the run is up: waits on an event, not on a guessed duration
        deadline = time.monotonic() + 60
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        signal.pthread_kill(main_thread, signal.SIGINT)

    threading.Thread(target=press_ctrl_c, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        sweep.run_child([sys.executable, "-c", child], cwd=tmp_path, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL)
    assert stopped.read_text() == "SIGINT"  # it was asked to stop (and could close its checkpoint writes)
    helper = int(started.read_text())
    deadline = time.monotonic() + 30
    while _alive(helper) and time.monotonic() < deadline:  # killed; its parent gone, init reaps it
        time.sleep(0.02)
    assert not _alive(helper)


def _alive(pid: int) -> bool:
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")
