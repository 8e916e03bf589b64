"""Agentless Mini end to end for one instance: localize -> repair -> (tests) -> rerank -> one prediction.

`run_instances` writes SWE-bench predictions (`instance_id`, `model_name_or_path`, `model_patch`) to
`OUT/predictions.jsonl` and every step's prompts, answers and results to `OUT/trajectories/<id>.json`; an
instance already in the predictions file is skipped (resumable). The model's failure (localization names no file,
no repair sample edits) is its prediction: an empty patch with `empty_patch_reason`, kept, so a re-run does not
retry it until a sample succeeds. An instance the infrastructure failed (no clone, a backend error) gets its error
in the trajectory and no prediction: a re-run tries it again. Nothing stops the run.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import random
import traceback
from collections.abc import Callable

from swerl_jax.answer import ANSWER_END, ANSWER_START
from swerl_jax.eval.agentless import localize, normalize, repair, rerank, tests_gen
from swerl_jax.eval.agentless.backends import Chat
from swerl_jax.eval.structure import file_contents, repo_structure
from swerl_jax.runs.progress import StageBar
from swerl_jax.tasks import environments, grading
from swerl_jax.tasks.executors import ScriptExecutor


@dataclasses.dataclass(frozen=True)
class AgentlessSettings:
    """The scaffold's knobs (the release's defaults for the paper's runs: 500 localization and repair samples at
    temperature 1.0 with a 128k-token budget; here they come from the eval config)."""

    num_samples: int = 4
    temperature: float = 1.0
    max_input_tokens: int = 60_000
    thinking: bool = True  # the answer is the <solution> part (SWE-RL models); False: the whole text
    reproduction_tests: int = 0  # reproduction scripts sampled per instance (0: no reproduction ranking)
    regression: bool = False  # rank by PASS_TO_PASS regression tests the model keeps
    model_name: str = "swerl_jax"
    seed: int = 0


def solution_part(text: str, thinking: bool) -> str:
    """The release's `parse_thinking_output`: the text between <solution> and </solution> (or all of it)."""
    if thinking:
        text = text.split(ANSWER_START, 1)[-1].split(ANSWER_END, 1)[0]
    return text.strip()


def sample_patch(generation: str, contents: dict[str, str], thinking: bool) -> dict:
    """A repair sample's patch made the release's way, in two passes: the files its `<solution>` part edits
    (`process_loc`), then the edits of the whole generation applied to those files (`post_process_repair` parses
    `all_generations` again: edit blocks drafted inside `<think>` apply too when they match)."""
    edited, _ = repair.edited_files(solution_part(generation, thinking), contents)
    return repair.answer_patch(generation, {f: contents[f] for f in edited})


def _user(content: str) -> list[dict]:
    return [{"role": "user", "content": content}]


def run_instance(instance: dict, git_dir: pathlib.Path, chat: Chat, count_tokens: Callable[[str], int],
                 settings: AgentlessSettings, executor=None, log_dir: pathlib.Path | None = None,
                 note: Callable[[str], None] = lambda stage: None) -> dict:
    """The trajectory of one instance; its `prediction` is the SWE-bench prediction row. `note` is told each
    stage as it starts (the progress bar shows it)."""
    iid, n = instance["instance_id"], settings.num_samples
    note("reading the repository")
    rng = random.Random(f"{settings.seed}:{iid}")
    structure = repo_structure(git_dir, instance["base_commit"])
    contents = file_contents(structure)
    tree = localize.shown_structure(structure, iid)
    files = localize.tree_files(tree)
    traj: dict = {"instance_id": iid}

    note(f"localizing ({n} samples)")
    asks = [localize.localization_prompt(instance["problem_statement"], tree, n, rng) for _ in range(n)]
    answers = chat([_user(p) for p, _ in asks], settings.temperature)
    found = [localize.found_files(solution_part(a, settings.thinking), files) for a in answers]
    traj["localization"] = [{"prompt": p, "answer": a, "found_files": f} for (p, _), a, f in zip(asks, answers, found)]

    # The release's sample plan: distinct non-empty file lists, cycled up to n samples.
    unique = list(dict.fromkeys(tuple(f) for f in found if f))[:n]
    if not unique:
        traj["prediction"] = empty_prediction(iid, settings, "localization found no file of the repository")
        return traj
    plans = [list(unique[i % len(unique)]) for i in range(n)]
    contexts = [repair.repair_context(p, contents, settings.max_input_tokens, count_tokens, rng if n > 1 else None)
                for p in plans]
    prompts = [repair.repair_prompt(instance["problem_statement"], c) for c in contexts]
    note(f"repairing ({n} samples)")
    answers = chat([_user(p) for p in prompts], settings.temperature)
    samples = []
    for plan, answer in zip(plans, answers):
        made = sample_patch(answer, {f: contents[f] for f in plan}, settings.thinking)
        made["normalized_patch"] = normalize.normalize_patch(made["model_patch"], made["original_file_content"],
                                                             made["new_file_content"], made["edited_files"])
        samples.append({"files": plan, "answer": answer, **made})
    traj["repair"] = [{"prompt": p, **s} for p, s in zip(prompts, samples)]

    if executor:
        note("testing the patches")
    results = patch_test_results(instance, samples, chat, settings, executor, log_dir, traj) if executor else None
    ranked = [rerank.Sample(s["model_patch"], s["normalized_patch"].strip(),
                            **(results[s["model_patch"]] if results and s["model_patch"] in results else {}))
              for s in samples]
    chosen = rerank.select(ranked, use_regression=bool(results) and settings.regression,
                           use_reproduction=bool(results) and settings.reproduction_tests > 0)
    traj["chosen_sample"] = chosen
    patch = samples[chosen]["model_patch"] if chosen is not None else ""
    traj["prediction"] = ({"instance_id": iid, "model_name_or_path": settings.model_name, "model_patch": patch}
                          if patch else empty_prediction(iid, settings, "no repair sample made an edit"))
    return traj


def empty_prediction(instance_id: str, settings: AgentlessSettings, reason: str) -> dict:
    """The model's failure as its prediction: an empty patch (unresolved, SWE-bench's rule) and why it is empty."""
    return {"instance_id": instance_id, "model_name_or_path": settings.model_name, "model_patch": "",
            "empty_patch_reason": reason}


def patch_test_results(instance: dict, samples: list[dict], chat: Chat, settings: AgentlessSettings,
                       executor: ScriptExecutor, log_dir: pathlib.Path, traj: dict) -> dict[str, dict]:
    """{patch: Sample fields} from running the kept reproduction scripts and the selected regression tests (also
    the agent's execution-based verifier, `swerl_jax.eval.scaling`); `traj` gets the scripts and outcomes."""
    scripts: list[str] = []
    if settings.reproduction_tests > 0:
        answers = chat([_user(tests_gen.REPRODUCTION.format(problem_statement=instance["problem_statement"]))]
                       * settings.reproduction_tests, settings.temperature)
        scripts = [s for s in (tests_gen.reproduction_script(solution_part(a, settings.thinking)) for a in answers)
                   if s]
    candidates = grading.test_list(instance, "PASS_TO_PASS") if settings.regression else None
    base_dir = log_dir / "original"
    base_dir.mkdir(parents=True, exist_ok=True)
    script, files = tests_gen.check_script(instance, scripts, candidates is not None)
    base = executor.run_script(instance, "", script, base_dir, files)
    if base.get("status") != "ran":
        traj["tests_error"] = base
        return {}
    outcomes, failed = tests_gen.read_check(instance, base["output"], len(scripts), candidates,
                                            base.get("test_statuses"))
    kept = [k for k, o in enumerate(outcomes) if o == "reproduced"]
    regression = None
    if candidates is not None:
        passing = [t for t in candidates if t not in set(failed or [])]
        answer = chat([_user(tests_gen.REGRESSION_SELECTION.format(
            problem_statement=instance["problem_statement"], tests="\n".join(passing)))], 0.0)[0]
        regression = [t for t in passing if t not in tests_gen.excluded_tests(answer, passing)]
    traj["tests"] = {"reproduction_scripts": scripts, "outcomes_on_original": outcomes, "kept": kept,
                     "regression_tests": regression}
    kept_scripts = [scripts[k] for k in kept]
    results: dict[str, dict] = {}
    for j, patch in enumerate(dict.fromkeys(s["model_patch"] for s in samples if s["model_patch"])):
        patch_dir = log_dir / f"patch_{j}"
        patch_dir.mkdir(parents=True, exist_ok=True)
        script, files = tests_gen.check_script(instance, kept_scripts, regression is not None)
        ran = executor.run_script(instance, patch, script, patch_dir, files)
        if ran.get("status") != "ran":
            results[patch] = {"regression_failures": rerank.NO_REGRESSION_RESULT}
            continue
        outs, fails = tests_gen.read_check(instance, ran["output"], len(kept_scripts), regression,
                                           ran.get("test_statuses"))
        results[patch] = {
            "regression_failures": len(fails) if fails is not None else 0,
            "reproduction_passed": frozenset(str(kept[k]) for k, o in enumerate(outs) if o == "resolved")}
    traj["tests"]["per_patch"] = {str(k): {**v, "reproduction_passed": sorted(v.get("reproduction_passed", ()))}
                                  for k, v in enumerate(results.values())}
    return results


def run_instances(instances: list[dict], repos_dir: pathlib.Path, out: pathlib.Path, chat: Chat,
                  count_tokens: Callable[[str], int], settings: AgentlessSettings, executor=None,
                  progress: bool = True) -> list[dict]:
    """Agentless Mini over `instances`; appends to OUT/predictions.jsonl; returns this call's predictions (the
    model's failures among them, as empty patches with their `empty_patch_reason`), and {instance_id, error} for an
    instance the infrastructure failed (a missing clone, a backend error): it is not written as a prediction, so
    a re-run tries it again and no grade counts it as the model's."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "trajectories").mkdir(exist_ok=True)
    predictions_file = out / "predictions.jsonl"
    done = set()
    if predictions_file.exists():
        for line in predictions_file.read_text().splitlines():
            try:
                done.add(json.loads(line)["instance_id"])
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
    if predictions_file.exists() and not predictions_file.read_bytes().endswith(b"\n") \
            and predictions_file.stat().st_size:
        with open(predictions_file, "a") as f:  # a killed run's cut last line: the next prediction must not join it
            f.write("\n")
    todo = [inst for inst in instances if inst["instance_id"] not in done]
    bar = StageBar(progress, "agentless")  # per instance, the stage it is in (issue 57 item 7)
    bar.stage("instances", len(todo), "instance")
    made = []
    for inst in todo:
        iid = inst["instance_id"]
        try:
            git_dir = environments.resolve_clone(repos_dir, inst["repo"], out / "repos")
            traj = run_instance(inst, git_dir, chat, count_tokens, settings, executor, out / "logs" / iid,
                                note=lambda stage, iid=iid: bar.note(f"{iid}: {stage}"))
        except Exception as err:  # one instance's failure is its record, never the run's end
            traj = {"instance_id": iid, "error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()}
        (out / "trajectories" / f"{iid}.json").write_text(json.dumps(traj, indent=1, default=list))
        if "error" in traj:  # the infrastructure's, not the model's: no prediction, so a re-run retries it
            made.append({"instance_id": iid, "error": traj["error"]})
            bar.update(1)
            continue
        with open(predictions_file, "a") as f:
            f.write(json.dumps(traj["prediction"]) + "\n")
        made.append(traj["prediction"])
        bar.update(1)
    bar.close()
    return made
