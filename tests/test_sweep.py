"""swerl_jax.sweep: typed overrides checked before anything runs, one subprocess per (variant, seed), finished runs
skipped, a failed run recorded while the sweep goes on, emitted launch commands, and one real run end to end (run
names and the index: test_sweep_names.py; stopping a run: test_process_group.py)."""

from __future__ import annotations

import json

import pytest

from swerl_jax import sweep, sweepdir
from swerl_jax.config import load_experiment_config, parse_value
from tests.sweep_fakes import CONFIG, Recorder, sweep_argv

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
        sweep.main(sweep_argv(tmp_path / "both", ["reward.kind=continuous"], "--dry-run"))
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
            sweep.main(sweep_argv(tmp_path / "shared", [], "--emit", "launch/local.sh",
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


def test_a_bad_seed_list_names_the_flag_given(tmp_path):
    """`--seeds 0,a` named `--variants ''` too, a flag the user had not passed."""
    with pytest.raises(ValueError, match=r"^--seeds '0,a': expected comma-separated integers$"):
        sweep.main(["--config", CONFIG, "--workdir", str(tmp_path), "--seeds", "0,a", "--dry-run"])
    with pytest.raises(FileExistsError, match=r"--workdir .*afile: .*afile is a file, not a folder"):
        (tmp_path / "afile").write_text("")
        sweep.main(["--config", CONFIG, "--workdir", str(tmp_path / "afile"), "--dry-run"])
