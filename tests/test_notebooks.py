"""The analysis notebooks execute headless (nbclient) without a cell error and draw their figures."""

import json
import re

import nbformat
import numpy as np
import pytest

from notebooks.run_notebooks import NOTEBOOK_DIR, execute_notebook, inject_parameters, main, parse_parameter
from swerl_jax.analysis.ablations import load_sweep
from swerl_jax.analysis.advantages import step_groups
from swerl_jax.analysis.runs import load_run
from tests.analysis.test_simulate import hand_grpo


def _images(nb):
    return sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)


def _text(nb):
    parts = []
    for c in nb.cells:
        for o in c.get("outputs", []):
            parts.append(o.get("text", ""))
            parts.append(o.get("data", {}).get("text/markdown", ""))
    return "\n".join(parts)


def test_reward_notebook_on_real_data(shared_data, tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the run made on the fly lands here
    out = tmp_path / "reward_analysis.ipynb"
    nb = execute_notebook(NOTEBOOK_DIR / "reward_analysis.ipynb", out,
                          {"data_dir": str(shared_data), "run_mode": "simulate", "num_steps": 2,
                           "edit_ks": [0, 1, 8], "edit_repeats": 1}, timeout_s=300)
    assert out.exists() and _images(nbformat.read(out, as_version=4)) == _images(nb) >= 7
    text = _text(nb)
    assert "| GPT-4 predictions | 168 |" in text
    assert "(simulated)" in text and "NOTE: simulated completions" in text


def test_advantage_notebook_defaults(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    # The notebook's own defaults, except a simulated run (a real one is the slow test below).
    nb = execute_notebook(NOTEBOOK_DIR / "advantage_analysis.ipynb", None, {"run_mode": "simulate"}, timeout_s=300)
    assert _images(nb) >= 6
    text = _text(nb)
    assert "| grpo |" in text and "| drgrpo |" in text and "| loo |" in text
    assert "max |logged advantage - recomputed GRPO advantage| = 0.00e+00" in text
    _assert_logged_advantages_are_grpo(tmp_path)  # independent of the notebook's own recomputation


@pytest.mark.slow
def test_advantage_notebook_on_a_real_tiny_cpu_run(tiny_cpu_short_run):
    # the suite's one tiny_cpu training run (shared with tests/test_demo.py), not a second one of its own
    workdir, _ = tiny_cpu_short_run
    nb = execute_notebook(NOTEBOOK_DIR / "advantage_analysis.ipynb", None, {"workdir": str(workdir)}, timeout_s=900)
    text = _text(nb)
    assert "(given)" in text and "advantage estimator 'grpo'" in text and _images(nb) >= 6
    diff = float(re.search(r"max \|logged advantage - recomputed GRPO advantage\| = (\S+)", text).group(1))
    assert diff < 1e-5
    # the trainer's logged advantages against GRPO written out by hand (not the code the notebook calls)
    _assert_logged_advantages_are_grpo(workdir)


def _assert_logged_advantages_are_grpo(root):
    """Every run the notebook made under `root`: logged advantages == hand-computed float64 GRPO (1e-5)."""
    runs = [p for p in (root, *root.rglob("*")) if p.is_dir() and (p / "rollouts").is_dir()]
    assert runs, f"no run with rollouts/ under {root}"
    for run in runs:
        for groups in step_groups(load_run(run).rollouts):
            np.testing.assert_allclose(groups.logged_advantages, hand_grpo(groups.rewards), atol=1e-5)


@pytest.mark.slow
def test_ablation_notebook_on_a_tiny_real_sweep(tmp_path, monkeypatch):
    # The notebook's default: no sweep_dir, so it runs a tiny real sweep (analysis.ablations.run_tiny_sweep:
    # experiments/ablations/reward_kind.py:cpu, 2 variants x 2 seeds, 2 GRPO steps each) into TMPDIR.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    nb = execute_notebook(NOTEBOOK_DIR / "ablation_analysis.ipynb", None, {"train_last": 2}, timeout_s=900)
    text = _text(nb)
    assert "(tiny)" in text and "4 runs: 4 done\n" in text and "not logged" not in text  # every status counted
    assert "not in the tables" not in text
    assert _images(nb) == 3  # training curves, eval curves, final values
    # the final table: both variants with their 2 seeds, every metric; the paired comparison, every metric
    assert "| variant | seeds | reward_mean | reward_solved_frac | format_error_rate | eval/score |" in text
    assert "| reward.kind=continuous | 2 |" in text and "| reward.kind=discrete | 2 |" in text
    for metric in ("reward_mean", "format_error_rate", "eval/score", "eval/exact_rate"):
        assert f"| reward.kind=discrete - reward.kind=continuous | {metric} | 2 |" in text
    # paired by held-out task, from the answers each run's last evaluation kept
    for measure in ("score", "format"):
        assert f"| reward.kind=discrete - reward.kind=continuous | {measure} | " in text
    (root,) = tmp_path.glob("swerl_sweep_*")
    index = load_sweep(root)
    assert sorted((r["overrides"]["reward.kind"], r["seed"]) for r in index["runs"]) == [
        ("continuous", 0), ("continuous", 1), ("discrete", 0), ("discrete", 1)]
    for run in index["runs"]:  # real runs: 2 GRPO steps, the held-out eval after each
        assert [r["step"] for r in run["rows"] if "eval/score" in r and "reward_mean" in r] == [1, 2]


def test_ablation_notebook_on_a_sweep_without_held_out_eval(tmp_path, monkeypatch):
    """Issue 46 item 12: the README's sweep example logs no eval/* (eval.every_steps=0); the notebook says in one
    line which metrics no finished run logged, leaves them out and still writes the rest (through
    run_notebooks.main, as a user runs it). Held-out item 2: `-p sweep_dir=sweep` relative to the user's current
    directory (the kernel runs in notebooks/, where it "has no index.json")."""
    runs = []  # a sweep directory as swerl_jax.sweep lays it out: index.json, one metrics.jsonl per run
    for kind in ("continuous", "discrete"):
        for seed in (0, 1):
            wd = tmp_path / "sweep" / "runs" / f"{kind}-{seed}"
            wd.mkdir(parents=True)
            wd.joinpath("metrics.jsonl").write_text("".join(json.dumps(
                {"step": step, "reward_mean": 0.1 * step + seed + (kind == "discrete"),
                 "format_error_rate": 0.5 / step}) + "\n" for step in (1, 2, 3)))
            runs.append({"name": wd.name, "overrides": {"reward.kind": kind}, "seed": seed, "workdir": str(wd),
                         "status": "done"})
    (tmp_path / "sweep" / "index.json").write_text(json.dumps({"config": "experiments/tiny_cpu.py", "runs": runs}))
    out = tmp_path / "executed"
    monkeypatch.chdir(tmp_path)
    assert main(["ablation_analysis.ipynb", "--out", "executed", "-p", "sweep_dir=sweep"]) == 0
    text = _text(nbformat.read(out / "ablation_analysis.ipynb", as_version=4))
    left_out = [line for line in text.splitlines() if "left out" in line]
    assert left_out == ["not logged by any finished run (left out): reward_solved_frac, eval/score, eval/format_rate, "
                        "eval/exact_rate"], left_out
    assert "| variant | seeds | reward_mean | format_error_rate |" in text
    assert "| reward.kind=discrete - reward.kind=continuous | reward_mean | 2 |" in text
    assert "section 4 skipped: no finished run logged a held-out evaluation (eval/score)" in text


def test_a_missing_path_parameter_is_one_line_naming_it_from_the_current_directory(tmp_path, monkeypatch, capsys):
    """Issue 46 held-out item 2: `-p workdir=runs/tiny` was looked up from the kernel's folder (notebooks/) and
    failed with the cell's whole traceback; now it is the user's runs/tiny, and a missing one is one line."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as err:
        main(["advantage_analysis.ipynb", "--out", "executed", "-p", "workdir=runs/nope"])
    (line,) = str(err.value).splitlines()
    assert line.startswith("run_notebooks: advantage_analysis.ipynb: FileNotFoundError: ") and \
        f"workdir={str(tmp_path / 'runs' / 'nope')!r} does not exist" in line, line


def test_parameter_injection_and_cli_errors(tmp_path):
    nb = nbformat.read(NOTEBOOK_DIR / "advantage_analysis.ipynb", as_version=4)
    inject_parameters(nb, {"step": 2})
    inject_parameters(nb, {"step": 3})  # re-injection replaces, never stacks
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1 and injected[0].source.endswith("step = 3")
    assert "parameters" in nb.cells[nb.cells.index(injected[0]) - 1].metadata["tags"]
    with pytest.raises(ValueError, match=r"unknown notebook parameter\(s\) \['stepp'\]"):
        inject_parameters(nb, {"stepp": 1})
    assert parse_parameter("edit_ks=[0, 2]") == ("edit_ks", [0, 2])
    assert parse_parameter("workdir=/tmp/run") == ("workdir", "/tmp/run")
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path), "-p", "nope=1"])


def test_advantage_notebook_overlays_other_runs_and_names_a_missing_step(tmp_path, monkeypatch):
    from nbclient.exceptions import CellExecutionError

    from swerl_jax.analysis.simulate import simulate_run

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    runs = [simulate_run(tmp_path / f"seed{seed}", num_steps=2, seed=seed) for seed in (0, 1)]
    for run, off_policy in zip(runs, ("plain", "decoupled")):  # as an rl.off_policy ablation's configs
        (run / "config.json").write_text(json.dumps({"rl": {"advantage": "grpo", "off_policy": off_policy},
                                                     "optim": {"learning_rate": 2e-4}, "seed": 0}))
    main, other = runs
    nb = execute_notebook(NOTEBOOK_DIR / "advantage_analysis.ipynb", None,
                          {"workdir": str(main), "compare_with": str(other)}, timeout_s=300)
    text = _text(nb)
    assert "| seed1 |" in text and text.count("| 2 |") >= 2  # one table row per run, 2 steps each
    # issue 46 item 4: the key the runs differ in has its column, and a learning rate of 2e-4 is not 0.000
    (header,) = [line for line in text.splitlines() if line.startswith("| run |")]
    assert "| rl.off_policy |" in header and "| optim.learning_rate |" in header
    assert "| 0.0002 | 0 | plain |" in text and "| 0.0002 | 0 | decoupled |" in text
    with pytest.raises(CellExecutionError, match=r"step=9 has no rollouts in .*; steps with rollouts: \[1, 2\]"):
        execute_notebook(NOTEBOOK_DIR / "advantage_analysis.ipynb", None,
                         {"workdir": str(other), "step": 9}, timeout_s=300)


def test_parameters_for_one_run_run_only_the_notebooks_that_take_them(tmp_path, monkeypatch, capsys):
    """The README's `-p workdir=RUN -p step=10` also ran the ablation notebook, which then trained a sweep."""
    from notebooks import run_notebooks

    ran = []
    monkeypatch.setattr(run_notebooks, "execute_notebook", lambda src, out, params, timeout_s: ran.append(src.name))
    assert main(["--out", str(tmp_path), "-p", f"workdir={tmp_path}", "-p", "step=10"]) == 0
    assert ran == ["reward_analysis.ipynb", "advantage_analysis.ipynb"]
    assert "not run (none of ['step', 'workdir'] is theirs; name them to run them): ablation_analysis.ipynb" in (
        capsys.readouterr().out)
    ran.clear()
    assert main(["--out", str(tmp_path)]) == 0 and len(ran) == 3  # no parameters: every notebook (make notebooks)


def test_advantage_notebook_on_a_run_without_rollouts_is_one_line(tmp_path):
    """Day-three check: `-p workdir=RUN/sft` (an SFT stage: metrics, no rollouts) ended in a bare StopIteration
    with the cell's whole traceback."""
    sft = tmp_path / "run" / "sft"
    sft.mkdir(parents=True)
    (sft / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 1.0 / s}) + "\n" for s in (1, 2)))
    with pytest.raises(SystemExit) as err:
        main(["advantage_analysis.ipynb", "--out", str(tmp_path / "out"), "-p", f"workdir={sft}"])
    (line,) = str(err.value).splitlines()
    assert line == (f"run_notebooks: advantage_analysis.ipynb: ValueError: run {sft} has no rollouts "
                    "(rollouts/step_*.jsonl: GRPO steps write them; an SFT stage's folder has none)"), line
    assert not (tmp_path / "out").exists()


def test_cli_typos_get_a_did_you_mean_and_notebooks_dir_as_out_is_refused(tmp_path, capsys, monkeypatch):
    """Day-three checks: `-p work_dir=RUN` and `advantage_analyis.ipynb` named no close match; `--out notebooks`
    wrote the executed copies (outputs, injected parameters) over the notebooks themselves; Ctrl-C was a
    traceback."""
    from notebooks import run_notebooks

    for argv, said in ((["advantage_analysis.ipynb", "--out", str(tmp_path), "-p", "work_dir=/x"],
                        "no notebook has parameter(s) ['work_dir'] (did you mean workdir?)"),
                       (["advantage_analyis.ipynb", "--out", str(tmp_path)],
                        "advantage_analyis.ipynb (did you mean advantage_analysis.ipynb?)"),
                       (["advantage_analysis.ipynb", "--out", str(NOTEBOOK_DIR)],
                        "that is notebooks/ itself; the executed copies would overwrite the notebooks")):
        with pytest.raises(SystemExit):
            main(argv)
        assert said in capsys.readouterr().err
    before = (NOTEBOOK_DIR / "advantage_analysis.ipynb").read_bytes()

    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(run_notebooks, "execute_notebook", interrupted)
    with pytest.raises(SystemExit) as err:
        main(["advantage_analysis.ipynb", "ablation_analysis.ipynb", "--out", str(tmp_path / "o")])
    assert str(err.value).strip() == ("run_notebooks: interrupted in advantage_analysis.ipynb (nothing written for "
                                      "it); to resume, run the same command naming advantage_analysis.ipynb "
                                      "ablation_analysis.ipynb")
    assert (NOTEBOOK_DIR / "advantage_analysis.ipynb").read_bytes() == before


def test_ablation_notebook_names_the_runs_it_leaves_out(tmp_path):
    """Day-three check: a sweep read while one run was still training (its metrics.jsonl cut mid-line) and another
    had failed said "4 runs: 2 done, 1 failed, 0 pending": the running run was in no count and no table."""
    runs = []
    for seed, status in enumerate(("done", "done", "running", "failed")):
        wd = tmp_path / "sweep" / "runs" / f"seed-{seed}"
        wd.mkdir(parents=True)
        rows = "".join(json.dumps({"step": s, "reward_mean": 0.1 * s + seed}) + "\n" for s in (1, 2))
        wd.joinpath("metrics.jsonl").write_text(rows + ('{"step": 3, "rew' if status == "running" else ""))
        runs.append({"name": wd.name, "overrides": {}, "seed": seed, "workdir": str(wd), "status": status})
    (tmp_path / "sweep" / "index.json").write_text(json.dumps({"config": "experiments/tiny_cpu.py", "runs": runs}))
    assert main(["ablation_analysis.ipynb", "--out", str(tmp_path / "executed"), "-p",
                 f"sweep_dir={tmp_path / 'sweep'}"]) == 0
    text = _text(nbformat.read(tmp_path / "executed" / "ablation_analysis.ipynb", as_version=4))
    assert "4 runs: 2 done, 1 failed, 1 running" in text, text[:2000]
    assert "not in the tables (running): seed-2" in text and "not in the tables (failed): seed-3" in text
    assert "| all | 2 |" in text  # the table: the two finished seeds
