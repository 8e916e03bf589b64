"""Sweep analysis against hand-computed values: t-intervals, paired differences by seed, variant tables read from a
sweep directory laid out as swerl_jax.sweep writes it."""

from __future__ import annotations

import json
import math

import pytest

from swerl_jax.analysis import ablations as ab

# t quantile at 0.975 with 2 degrees of freedom, closed form: F(t) = 1/2 + t / (2 sqrt(t^2 + 2)) = 0.975
T_0975_2 = math.sqrt(2 * 0.95 ** 2 / (1 - 0.95 ** 2))


def test_t_interval_by_hand():
    got = ab.t_interval([1.0, 2.0, 3.0])  # mean 2, sample sd 1
    half = T_0975_2 * 1.0 / math.sqrt(3)
    assert (got.mean, got.n) == (2.0, 3) and got.lo == pytest.approx(2 - half, abs=1e-12)
    assert got.hi == pytest.approx(2 + half, abs=1e-12)
    assert ab.t_interval([5.0]) == ab.Interval(5.0, 5.0, 5.0, 1)
    assert ab.t_interval([math.nan]).n == 0


def test_an_interval_of_small_values_keeps_them():
    # issue 46 item 4's kind: a mean of 2e-4 (a KL, a learning rate) printed as 0.000 [0.000, 0.000]
    assert ab.Interval(2e-4, 1e-4, 3.5e-4, 3).text() == "0.0002 [0.0001, 0.00035]"
    assert ab.Interval(15.0, 10.0, 20.0, 2).text() == "15.000 [10.000, 20.000]"


def test_paired_difference_by_hand():
    a, b = {0: 1.0, 1: 2.0, 2: 4.0, 3: 9.0}, {0: 0.0, 1: 1.0, 2: 2.0}  # seed 3 has no pair
    diff, p = ab.paired_difference(a, b)  # diffs 1, 1, 2: mean 4/3, sd 1/sqrt(3)
    sd = math.sqrt(((1 - 4 / 3) ** 2 * 2 + (2 - 4 / 3) ** 2) / 2)
    assert diff.n == 3 and diff.mean == pytest.approx(4 / 3)
    assert diff.hi - diff.mean == pytest.approx(T_0975_2 * sd / math.sqrt(3))
    # t = (4/3) / (sd / sqrt(3)) = 4 with 2 degrees of freedom: two-sided p = 2 (1 - F(4)) = 1 - 4 / sqrt(18)
    assert p == pytest.approx(2 * (1 - (0.5 + 4 / (2 * math.sqrt(4 ** 2 + 2)))), abs=1e-9)


def _sweep(tmp_path, values):
    runs = []
    for (kind, seed), rows in values.items():
        wd = tmp_path / "runs" / f"{kind}-{seed}"
        wd.mkdir(parents=True)
        (wd / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        runs.append({"name": wd.name, "overrides": {"reward.kind": kind, "rl.num_steps": 2}, "seed": seed,
                     "workdir": str(wd), "status": "done"})
    runs.append({"name": "x", "overrides": {"reward.kind": "discrete", "rl.num_steps": 2}, "seed": 9,
                 "workdir": str(tmp_path / "none"), "status": "failed"})
    (tmp_path / "index.json").write_text(json.dumps({"runs": runs}))
    return ab.load_sweep(tmp_path)


def test_variant_table_reads_a_sweep(tmp_path):
    index = _sweep(tmp_path, {
        ("continuous", 0): [{"step": 1, "r": 0.0}, {"step": 2, "r": 0.5, "eval/score": 10.0}],
        ("continuous", 1): [{"step": 1, "r": 0.0}, {"step": 2, "r": 0.7, "eval/score": 20.0}],
        ("discrete", 0): [{"step": 1, "r": 0.0}, {"step": 2, "r": 0.1, "eval/score": 4.0}],
        ("discrete", 1): [{"step": 1, "r": 0.2}, {"step": 2, "r": 0.3, "eval/score": 8.0}],
    })
    assert ab.varying_keys(index) == ["reward.kind"]  # rl.num_steps is the same everywhere
    values = ab.final_values(index, "eval/score")
    assert values == {"reward.kind=continuous": {0: 10.0, 1: 20.0}, "reward.kind=discrete": {0: 4.0, 1: 8.0}}
    assert ab.final_values(index, "r", last=2)["reward.kind=discrete"] == {0: 0.05, 1: 0.25}
    rows = ab.variant_table(index, ["eval/score"])
    assert [r["variant"] for r in rows] == ["reward.kind=continuous", "reward.kind=discrete"]
    assert rows[0]["seeds"] == 2 and rows[0]["eval/score"].startswith("15.000 [")
    diff, _ = ab.paired_difference(values["reward.kind=discrete"], values["reward.kind=continuous"])
    assert diff.mean == -9.0
    assert ab.to_markdown(rows).splitlines()[0] == "| variant | seeds | eval/score |"
    # a metric no run logs is refused with a did-you-mean (issue 31.9: it was a table of nan [nan, nan])
    with pytest.raises(KeyError, match=r"'eval/scor' is logged by no finished run .*did you mean 'eval/score'"):
        ab.variant_table(index, ["eval/scor"])
    # what a notebook draws: the metrics some finished run logged (the failed run's are not counted), in order
    assert ab.split_logged(index, ["eval/score", "kl", "r", "eval/resolved_rate"]) == (
        ["eval/score", "r"], ["kl", "eval/resolved_rate"])


def test_a_declared_sweep_whose_first_variant_overrides_nothing_is_named_base():
    index = {"runs": [{"overrides": {}, "seed": 0}, {"overrides": {"rl.clip_eps_high": 0.2}, "seed": 0},
                      {"overrides": {"rl.advantage": "grpo"}, "seed": 0}]}
    varying = ab.varying_keys(index)
    assert varying == ["rl.advantage", "rl.clip_eps_high"]
    assert [ab.variant_name(r, varying) for r in index["runs"]] == ["base", "rl.clip_eps_high=0.2",
                                                                    "rl.advantage=grpo"]
    assert ab.variant_name({"overrides": {"seed": 1}}, []) == "all"


def test_an_sft_only_run_is_compared_on_its_sft_stage_evaluation(tmp_path):
    index = _sweep(tmp_path, {("continuous", 0): [{"step": 2, "eval/score": 10.0}], ("discrete", 0): []})
    assert math.isnan(ab.final_values(index, "eval/score")["reward.kind=discrete"][0])  # no rows, no value
    (tmp_path / "runs" / "discrete-0" / "sft").mkdir()
    (tmp_path / "runs" / "discrete-0" / "sft" / "eval.json").write_text(json.dumps({"step": 100,
                                                                                     "eval/score": 6.25}))
    (tmp_path / "runs" / "continuous-0" / "sft").mkdir()  # a GRPO run's rows win over its SFT stage's eval
    (tmp_path / "runs" / "continuous-0" / "sft" / "eval.json").write_text(json.dumps({"step": 100,
                                                                                       "eval/score": 1.0}))
    values = ab.final_values(ab.load_sweep(tmp_path), "eval/score")
    assert values == {"reward.kind=continuous": {0: 10.0}, "reward.kind=discrete": {0: 6.25}}
    sft_only = next(r for r in ab.load_sweep(tmp_path)["runs"] if r["name"] == "discrete-0")
    assert sft_only["rows"] == [{"step": 0, "sft_step": 100, "eval/score": 6.25}]  # before any GRPO step
    (tmp_path / "runs" / "discrete-0" / "sft" / "eval.json").write_text('{"step": 1')  # cut mid-write
    with pytest.raises(ValueError, match="discrete-0/sft/eval.json: not an SFT eval row"):
        ab.load_sweep(tmp_path)


def test_per_metric_last_step_curves_and_paired_table(tmp_path):
    index = _sweep(tmp_path, {
        ("continuous", 0): [{"step": 1, "r": 0.0}, {"step": 2, "r": 0.5, "eval/score": 10.0}],
        ("continuous", 1): [{"step": 1, "r": 0.1}, {"step": 2, "r": 0.7, "eval/score": 20.0}],
        ("discrete", 0): [{"step": 1, "r": 0.0}, {"step": 2, "r": 0.1, "eval/score": 4.0}],
        ("discrete", 1): [{"step": 2, "r": 0.3, "eval/score": 8.0}],  # logged nothing at step 1
    })
    rows = ab.variant_table(index, ["r", "eval/score"], last={"r": 2})  # eval/score: the last row (default 1)
    assert rows[0]["r"].startswith("0.325 [") and rows[0]["eval/score"].startswith("15.000 [")
    assert rows[1]["r"].startswith("0.175 [")  # seeds: mean(0, 0.1) = 0.05 and 0.3 (its only row)

    curves = ab.step_curves(index, "r")
    c, d = curves["reward.kind=continuous"], curves["reward.kind=discrete"]
    assert c.steps.tolist() == [1, 2] and c.seeds == [0, 1]
    assert c.mean().tolist() == pytest.approx([0.05, 0.6]) and c.min().tolist() == [0.0, 0.5]
    assert c.max().tolist() == [0.1, 0.7]
    assert math.isnan(d.values[1, 0]) and d.mean().tolist() == pytest.approx([0.0, 0.2])  # the seed that logged
    assert list(ab.step_curves(index, "eval/score")["reward.kind=discrete"].steps) == [2]
    with pytest.raises(KeyError, match="never_logged"):  # a typo is an error, not an empty figure
        ab.step_curves(index, "never_logged")

    pair = ("reward.kind=discrete", "reward.kind=continuous")
    table = ab.paired_table(index, ["eval/score", "r"], [pair], last={"r": 1})
    assert [(r["metric"], r["seeds"]) for r in table] == [("eval/score", 2), ("r", 2)]
    assert table[0]["comparison"] == "reward.kind=discrete - reward.kind=continuous"
    # eval/score: differences -6 and -12 (mean -9); a paired t-test with 1 degree of freedom on them by hand:
    # t = -9 / (sd / sqrt 2) with sd = 3 sqrt 2, so t = -3 and p = 2 (1/2 - atan(3) / pi)
    assert table[0]["difference"].startswith("-9.000 [")
    assert float(table[0]["p"]) == pytest.approx(1 - 2 * math.atan(3) / math.pi, rel=1e-3)
    assert table[1]["p"] == "n/a"  # r: the difference is -0.4 on both seeds
    with pytest.raises(KeyError, match="no finished run of variant 'reward.kind=nope'"):
        ab.paired_table(index, ["r"], [("reward.kind=nope", "reward.kind=discrete")])


def test_ensure_sweep_takes_a_sweep_directory(tmp_path):
    _sweep(tmp_path, {("continuous", 0): [{"step": 1, "r": 0.0}]})
    assert ab.ensure_sweep(str(tmp_path)) == (tmp_path, "given")
    with pytest.raises(FileNotFoundError, match="has no index.json: make one with python -m swerl_jax.sweep"):
        ab.ensure_sweep(str(tmp_path / "runs"))


def test_the_command_prints_the_tables(tmp_path, capsys):
    """`python -m swerl_jax.analysis.ablations DIR` printed nothing (no entry point; new-user check)."""
    _sweep(tmp_path, {
        ("continuous", 0): [{"step": 2, "reward_mean": 0.5, "eval/resolved_rate": 0.4}],
        ("continuous", 1): [{"step": 2, "reward_mean": 0.7, "eval/resolved_rate": 0.6}],
        ("discrete", 0): [{"step": 2, "reward_mean": 0.1, "eval/resolved_rate": 0.3}],
        ("discrete", 1): [{"step": 2, "reward_mean": 0.3, "eval/resolved_rate": 0.4}],
    })
    assert ab.main([str(tmp_path), "--pair", "reward.kind=continuous", "reward.kind=discrete"]) == 0
    out = capsys.readouterr().out
    assert "4 finished runs of 5; varying reward.kind" in out
    assert "| variant | seeds | reward_mean | eval/resolved_rate |" in out
    assert "| reward.kind=continuous - reward.kind=discrete | eval/resolved_rate | 2 | 0.150 [" in out
    with pytest.raises(FileNotFoundError, match="no index.json there"):
        ab.main([str(tmp_path / "runs")])


def test_a_run_folder_given_as_the_sweep_is_named_a_run(tmp_path):
    """New-user check: a run's folder said only "no index.json" (it has config.json and metrics.jsonl)."""
    run = tmp_path / "alone"
    run.mkdir()
    (run / "metrics.jsonl").write_text("")
    said = (rf"; {run} is a single run \(config.json, metrics.jsonl\), not a sweep: for one run use the notebooks, "
            rf"python notebooks/run_notebooks.py advantage_analysis.ipynb --out OUT -p workdir={run}$")
    with pytest.raises(FileNotFoundError, match=said):
        ab.main([str(run)])
    _sweep(tmp_path / "sweep", {("continuous", 0): [{"step": 1, "reward_mean": 0.5}]})
    inside = next(p for p in (tmp_path / "sweep").rglob("metrics.jsonl")).parent
    with pytest.raises(FileNotFoundError, match=rf"; {inside} is one run of the sweep {tmp_path / 'sweep'}: give it$"):
        ab.main([str(inside)])


def test_the_command_names_each_run_it_leaves_out(tmp_path, capsys):
    """Day-three check: a sweep with a failed run printed "4 finished runs of 5" and tables over fewer seeds, but
    not which run was missing or why."""
    _sweep(tmp_path, {(kind, seed): [{"step": 2, "reward_mean": 0.5 + seed}] for kind in ("continuous", "discrete")
                      for seed in (0, 1)})
    assert ab.main([str(tmp_path)]) == 0
    assert "\n  not in the tables (failed): x\n" in capsys.readouterr().out
