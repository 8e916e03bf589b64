"""Cost per useful GRPO group: hand-computed on logged rows, and the CLI over a sweep directory."""

import json
import math

import pytest

from swerl_jax.analysis.useful_groups import main, run_cost


def test_cost_counts_only_groups_with_a_signal():
    # without dynamic sampling: 2 prompts a step, 1 of the 4 trained groups had no signal
    plain = [{"step": 1, "reward_mean": 0.1, "time/step_s": 3.0, "zero_variance_groups": 1},
             {"step": 2, "reward_mean": 0.2, "time/step_s": 5.0, "zero_variance_groups": 0},
             {"step": 2, "eval/resolved_rate": 0.4}]  # an eval-only row is not a step
    cost = run_cost(plain, prompts_per_step=2, num_samples=16)
    assert cost == {"steps": 2, "wall_s": 8.0, "useful_groups": 3, "wasted_groups": 1, "prompts_drawn": 4,
                    "wall_s_per_useful_group": 8.0 / 3, "samples_per_useful_group": 4 * 16 / 3}
    # with it: step 1 drew 6 prompts to keep 2; step 2 gave up after its draws and filled one group
    dynamic = [{"step": 1, "reward_mean": 0.1, "time/step_s": 9.0, "zero_variance_groups": 0,
                "dynamic/prompts_drawn": 6},
               {"step": 2, "reward_mean": 0.2, "time/step_s": 12.0, "zero_variance_groups": 1,
                "dynamic/prompts_drawn": 8}]
    cost = run_cost(dynamic, prompts_per_step=2, num_samples=4)
    assert cost["useful_groups"] == 3 and cost["samples_per_useful_group"] == 14 * 4 / 3
    assert cost["wall_s_per_useful_group"] == 7.0
    # the estimator's verdict wins where every step logged it (an env error's sample left out of the baseline)
    masked = [{**r, "no_signal_groups": 2} for r in plain if "reward_mean" in r]
    assert run_cost(masked, prompts_per_step=2, num_samples=16)["useful_groups"] == 0
    assert run_cost(masked[:1] + plain[1:], prompts_per_step=2, num_samples=16)["useful_groups"] == 3
    with pytest.raises(ValueError, match=r"a run of 2 processes with dynamic sampling"):
        run_cost(dynamic, prompts_per_step=2, num_samples=4, processes=2)
    assert run_cost(plain, prompts_per_step=2, num_samples=16, processes=2)["useful_groups"] == 3
    # a run where no group ever had a signal costs infinitely much per useful group
    assert math.isinf(run_cost(plain[:1], prompts_per_step=1, num_samples=2)["wall_s_per_useful_group"])


def test_a_row_without_the_counts_is_named():
    with pytest.raises(ValueError, match=r"step 3: 'zero_variance_groups' not logged"):
        run_cost([{"step": 3, "reward_mean": 0.0, "time/step_s": 1.0}], 2, 2)
    with pytest.raises(ValueError, match=r"no GRPO step logged"):
        run_cost([{"step": 0, "eval/score": 1.0}], 2, 2)


def test_cli_over_a_sweep_directory(tmp_path, capsys):
    runs = []
    for arm, extra in (("False", {}), ("True", {"dynamic/prompts_drawn": 4})):
        for seed in (0, 1):
            wd = tmp_path / "runs" / f"{arm}-{seed}"
            wd.mkdir(parents=True)
            (wd / "config.json").write_text(json.dumps({"rl": {"prompts_per_step": 2, "num_samples": 8}}))
            wasted = 0 if arm == "True" else seed
            (wd / "metrics.jsonl").write_text(json.dumps(
                {"step": 1, "reward_mean": 0.0, "time/step_s": 2.0 + seed, "zero_variance_groups": wasted,
                 **extra}) + "\n")
            runs.append({"name": wd.name, "overrides": {"rl.dynamic_sampling": arm == "True"}, "seed": seed,
                         "workdir": str(wd), "status": "done"})
    (tmp_path / "index.json").write_text(json.dumps({"runs": runs}))
    assert main([str(tmp_path), "--pair", "rl.dynamic_sampling=True", "rl.dynamic_sampling=False"]) == 0
    out = capsys.readouterr().out
    assert "| rl.dynamic_sampling=False | 1 | 1 | 1 | 1 | 2 | 3.0 | 3.00 | 16.00 |" in out  # seed 1: 1 useful
    assert "| rl.dynamic_sampling=True | 0 | 1 | 2 | 0 | 4 | 2.0 | 1.00 | 16.00 |" in out
    assert "rl.dynamic_sampling=True - rl.dynamic_sampling=False: samples_per_useful_group" in out
    assert main([str(tmp_path), "--pair", "rl.dynamic_sampling=Tru", "rl.dynamic_sampling=False"]) == 2
    assert "is not a variant of this sweep" in capsys.readouterr().err
    assert main([str(tmp_path / "runs")]) == 2
