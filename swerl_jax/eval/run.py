"""`python -m swerl_jax.eval run --config=experiments/eval_agentless_mini.py[:cpu] --out DIR [--config.KEY=VALUE]`:
Agentless Mini over SWE-bench instances with a policy (see the config file for backends), predictions JSONL, then
(with `grade`) the harness's report. Resumable: instances already in OUT/predictions.jsonl are skipped; the model's
failures are kept there as empty patches (with `empty_patch_reason`), an instance the infrastructure failed has no
prediction and is tried again. OUT/summary.json names what was evaluated and counts every instance asked about per
outcome; the last line is `resolved N/M (...)` over all M of them (no prediction, empty patch, error: unresolved).
With `grade`, an instance the harness could not grade on this machine whatever its patch (its environment needs
conda or an interpreter this machine lacks: `eval/precheck.py`; with `precheck=grade_empty` also what grading its
empty patch first finds: tests that need the network, a compiler) is skipped before anything is generated, named
with its reason and fix, and counted out of reach (not in the rate), as the harness counts it.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import pathlib
import sys

from swerl_jax.config import OVERRIDE_HELP, apply_overrides, load_experiment_config, split_overrides
from swerl_jax.data.paths import config_paths, user_path
from swerl_jax.eval import precheck
from swerl_jax.eval.agentless.pipeline import AgentlessSettings, run_instances
from swerl_jax.eval.predictions import chosen_instances, index_instances
from swerl_jax.sampler import source as policy_source
from swerl_jax.tasks import reach
from swerl_jax.tasks.index_cutoff import MODES as CUTOFF_MODES

BACKENDS = ("engine", "sampler", "openai", "oracle")
PRECHECKS = ("static", "grade_empty", "off")  # eval/precheck.py


def build_chat(c, instances: list[dict], evaluated: dict):
    """(chat backend, token counter) for the eval config `c`, sampling the policy `evaluated` names."""
    from swerl_jax.eval.agentless import backends, scripted

    if c.backend == "oracle":
        return scripted.OracleChat(instances), lambda text: len(text) // 4
    if c.backend == "openai":
        if not c.openai_model:
            raise ValueError("backend=openai needs openai_model (the served model's name)")
        return (backends.OpenAIChat(c.openai_base_url, c.openai_model, c.max_new_tokens, c.openai_api_key_env),
                lambda text: len(text) // 4)
    from swerl_jax.resolve import resolve_config
    from swerl_jax.tokenizer import tokenizer_for

    policy = load_experiment_config(c.policy)
    if c.hf_dir:
        policy.model.hf_dir = policy.model.tokenizer = c.hf_dir
        policy.model.name = "hf"  # FROM_CHECKPOINT: the folder evaluated is whatever model it holds
    policy.data.max_prompt_len, policy.sampler.max_new_tokens = int(c.max_prompt_len), int(c.max_new_tokens)
    policy.sampler.max_batch = max(1, min(int(policy.sampler.max_batch), int(c.agentless.num_samples)))
    policy = resolve_config(policy, check_files=True)
    tokenizer = tokenizer_for(policy.model)
    count = lambda text: len(tokenizer.encode(text, add_special_tokens=False))  # noqa: E731
    common = dict(top_p=policy.sampler.top_p, top_k=policy.sampler.top_k, seed=int(c.seed))
    if c.backend == "sampler":
        return backends.EngineChat(tokenizer, int(c.max_new_tokens), int(c.max_prompt_len),
                                   client=policy_source.open_client(policy, policy_source_of(c)), **common), count
    engine = policy_source.open_engine(policy, policy_source_of(c), evaluated)
    return backends.EngineChat(tokenizer, int(c.max_new_tokens), int(c.max_prompt_len), engine=engine,
                               **common), count


def local_executor(c, out: pathlib.Path):
    """The sandboxed executor the pipeline's tests (and `precheck=grade_empty`) run in, writing under `out`."""
    from swerl_jax.sandbox.bwrap import SandboxLimits
    from swerl_jax.tasks import environments
    from swerl_jax.tasks.executors import LocalExecutor

    return LocalExecutor(pathlib.Path(c.repos), out, environments.EnvironmentCache(),
                         SandboxLimits(timeout_s=float(c.test_timeout_s), cpu_seconds=int(c.test_timeout_s) + 60),
                         index_cutoff=str(c.index_cutoff))


def policy_source_of(c) -> policy_source.PolicySource:
    """The eval config's policy (backend "engine" or "sampler") as a `PolicySource`."""
    if c.backend == "sampler":
        return policy_source.PolicySource(address=str(c.address), flag={"random_init": ""})
    version = int(c.version)
    return policy_source.PolicySource(weights=str(c.weights), version=version if str(c.weights) else None,
                                      hf_dir=str(c.hf_dir), flag={"random_init": ""})


# Keys that do not change a prediction or its grade: a re-run may change them in the same --out.
OPERATIONAL_KEYS = ("harness_workers", "grade")


def evaluated_model(c) -> dict:
    """What the config evaluates, named for every prediction and report: {"what", "model_name", ...}. A `weights`
    path must hold a published policy (checked here, before anything loads; never a silent random init).
    `model_name` is `c.model_name` when set, else named after what is evaluated (`model_label`)."""
    name = str(c.model_name)
    if c.backend == "oracle":
        return {"what": "the gold patches (oracle backend: checks the scaffold, not a model)",
                "model_name": "oracle-gold-patches", "backend": "oracle"}
    if c.backend == "openai":
        return {"what": f"{c.openai_model} at {c.openai_base_url}", "model_name": name or str(c.openai_model),
                "backend": "openai"}
    policy = load_experiment_config(c.policy)
    if c.hf_dir:
        policy.model.hf_dir = str(c.hf_dir)
    evaluated = policy_source.describe(policy_source_of(c), policy, f"policy={c.policy}")
    if name and c.weights:
        name = f"{name}@v{evaluated['policy_version']}"
    return {**evaluated, "model_name": name or model_label(evaluated), "backend": str(c.backend),
            **({"policy": str(c.policy)} if "hf_dir" in evaluated and not c.hf_dir else {})}


def model_label(evaluated: dict) -> str:
    """The predictions' `model_name_or_path` for what `policy_source.describe` named: the weights folder with its
    version (WEIGHTS@vN), the Hugging Face folder, or the sampler server's address; folders as absolute paths, so
    the label names them wherever the command ran (a config's default name labelled a Qwen3 export SmolLM2's)."""
    if "weights" in evaluated:
        return f"{os.path.abspath(evaluated['weights'])}@v{evaluated['policy_version']}"
    if "hf_dir" in evaluated:  # a packaged model's name ("smollm2") is not a folder here: kept as it is
        hf_dir = str(evaluated["hf_dir"])
        return os.path.abspath(hf_dir) if os.path.isdir(hf_dir) else hf_dir
    return f"sampler-server@{evaluated['address']}" if "address" in evaluated else str(evaluated["what"])


PATH_KEYS = ("instances", "repos", "weights", "hf_dir")  # files and folders the eval config reads


def check_out_dir(out: pathlib.Path, c) -> None:
    """Refuse an --out that holds a run of another config (its predictions would be reused), listing the keys; an
    --out without predictions holds nothing to reuse (a run that stopped before its first answer)."""
    from swerl_jax.runs.rundir import refuse_other_config

    if (out / "predictions.jsonl").exists():
        refuse_other_config(out / "eval_config.json", json.loads(c.to_json()), OPERATIONAL_KEYS)


def main(argv: list[str] | None = None) -> dict:
    """CLI entry point; returns {"predictions": [...], "report": harness report or None, "failed": [ids with no
    prediction], "summary": summary.json's content}."""
    p = argparse.ArgumentParser(prog="python -m swerl_jax.eval run", description=__doc__,  # all of it: line 1 is cut
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="experiments/eval_agentless_mini.py[:cpu]")
    p.add_argument("--out", required=True, help="directory for predictions.jsonl, trajectories/, harness/")
    p.add_argument("--no-progress", action="store_true")
    p.epilog = OVERRIDE_HELP
    rest, overrides = split_overrides(list(sys.argv[1:] if argv is None else argv))
    args = p.parse_args(rest)
    c = load_experiment_config(args.config)
    apply_overrides(c, overrides)
    # its paths absolute once, before anything reads them: from the current directory, else from the repository
    # root (the defaults `../shared/data/...` from any directory), as data.* paths are
    config_paths(c, PATH_KEYS)
    if c.backend not in BACKENDS:
        close = difflib.get_close_matches(str(c.backend), BACKENDS, n=1)
        raise ValueError(f"backend={c.backend!r} is not one of {BACKENDS}"
                         + (f" (did you mean {close[0]!r}?)" if close else ""))
    if c.precheck not in PRECHECKS:
        close = difflib.get_close_matches(str(c.precheck), PRECHECKS, n=1)
        raise ValueError(f"precheck={c.precheck!r} is not one of {PRECHECKS}"
                         + (f" (did you mean {close[0]!r}?)" if close else ""))
    if c.index_cutoff not in CUTOFF_MODES:  # before anything is written: the harness would refuse it only later
        close = difflib.get_close_matches(str(c.index_cutoff), CUTOFF_MODES, n=1)
        raise ValueError(f"index_cutoff={c.index_cutoff!r} is not one of {CUTOFF_MODES}"
                         + (f" (did you mean {close[0]!r}?)" if close else ""))
    if not pathlib.Path(c.repos).is_dir():
        raise FileNotFoundError(f"repos={c.repos}: no such folder (the clones: owner__name, owner__name.git or "
                                "owner__name.bundle)")
    instances = chosen_instances(index_instances(pathlib.Path(c.instances)), c.instance_ids, str(c.instances))
    out = pathlib.Path(user_path(args.out))
    evaluated = evaluated_model(c)
    c.model_name = evaluated["model_name"]
    check_out_dir(out, c)
    asked = [inst["instance_id"] for inst in instances]
    far: dict[str, str] = {}
    if c.grade and c.precheck != "off":  # never generate for an instance the harness cannot grade here (issue 57)
        instances, lacks = precheck.split_reachable(instances, pathlib.Path(c.repos), out / "repos")
        if c.precheck == "grade_empty" and instances:
            print(f"agentless: grading the empty patch of {len(instances)} instances first (precheck=grade_empty)",
                  flush=True)
            instances, more = precheck.split_by_empty_grading(instances, local_executor(c, out / "precheck"),
                                                              out / "precheck" / "logs")
            lacks.update(more)
        far = {iid: reach.line(lack.reason, lack.fix) for iid, lack in lacks.items()}
        named = {iid: {"reason": lack.reason, "fix": lack.fix} for iid, lack in lacks.items()}
        for text in reach.report_lines({"out_of_reach": named}):
            print(f"agentless: skipped before generating, {text}", flush=True)
    print(f"evaluating {evaluated['what']}", flush=True)
    chat, count_tokens = build_chat(c, instances, evaluated) if instances else (None, None)
    # recorded only once the model loaded: a typo must not claim the folder for a config that never ran
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval_config.json").write_text(c.to_json(indent=1))
    (out / "evaluated.json").write_text(json.dumps(evaluated, indent=1))
    a = c.agentless
    settings = AgentlessSettings(num_samples=int(a.num_samples), temperature=float(a.temperature),
                                 max_input_tokens=int(a.max_input_tokens), thinking=bool(a.thinking),
                                 reproduction_tests=int(a.reproduction_tests), regression=bool(a.regression),
                                 model_name=str(c.model_name), seed=int(c.seed))
    executor = local_executor(c, out / "exec") if settings.reproduction_tests > 0 or settings.regression else None
    made = run_instances(instances, pathlib.Path(c.repos), out, chat, count_tokens, settings, executor,
                         progress=not args.no_progress)
    reachable = [inst["instance_id"] for inst in instances]
    have = kept_predictions(out / "predictions.jsonl", set(reachable))
    failed = [m for m in made if "error" in m]
    if reachable:
        print(agentless_line(reachable, have, made, out / "predictions.jsonl"), flush=True)
    for m in failed:
        print(f"agentless: {m['instance_id']} failed, no prediction (re-run to retry): {m['error'][:300]}",
              file=sys.stderr, flush=True)
    report = None
    if c.grade and have:
        from swerl_jax.eval import harness

        subset = out / "instances.json"
        subset.write_text(json.dumps(instances))
        report = harness.main(["--instances", str(subset), "--predictions", str(out / "predictions.jsonl"),
                               "--repos", str(c.repos), "--out", str(out / "harness"),
                               "--workers", str(int(c.harness_workers)), "--timeout", str(float(c.test_timeout_s)),
                               "--index-cutoff", str(c.index_cutoff),
                               *(["--no-progress"] if args.no_progress else [])])
    summary = write_summary(out, args.config, c, evaluated, asked, have, failed, report, far)
    print(f"summary: {out / 'summary.json'}", flush=True)
    print(summary_line(summary), flush=True)
    return {"predictions": made, "report": report, "failed": [m["instance_id"] for m in failed], "summary": summary}


def kept_predictions(path: pathlib.Path, asked: set[str]) -> dict[str, dict]:
    """{instance_id: prediction} of the predictions file for the instances asked about (none when it is absent);
    a line cut by a killed run is skipped here, as the pipeline skips it (the harness reports it)."""
    have = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and row.get("instance_id") in asked and row["instance_id"] not in have:
            have[row["instance_id"]] = {**row, "model_patch": row.get("model_patch") or ""}
    return have


def agentless_line(asked: list[str], have: dict[str, dict], made: list[dict], path: pathlib.Path) -> str:
    """One line saying what became of the instances asked about: patches, the model's empty ones (by reason),
    those with no prediction, and which predictions this run made (an earlier run's only when there was one)."""
    missing = len(asked) - len(have)
    if not have:
        return f"agentless: every instance failed before a prediction: {missing} no prediction (re-run to retry them)"
    reasons: dict[str, int] = {}
    for row in have.values():
        if not row["model_patch"]:
            reason = row.get("empty_patch_reason", "reason not recorded")
            reasons[reason] = reasons.get(reason, 0) + 1
    empty = sum(reasons.values())
    why = f" (the model's: {', '.join(f'{k} {v}' for k, v in reasons.items())})" if empty else ""
    now = sum("error" not in m for m in made)
    earlier = f", {len(have) - now} kept from an earlier run" if len(have) > now else ""
    return (f"agentless: {len(asked)} instances asked: {len(have) - empty} with a patch, {empty} empty patch{why}, "
            f"{missing} no prediction{' (re-run to retry them)' if missing else ''}; {now} made now{earlier} ({path})")


def write_summary(out: pathlib.Path, config_name: str, c, evaluated: dict, asked: list[str], have: dict[str, dict],
                  failed: list[dict], report: dict | None, far: dict[str, str] | None = None) -> dict:
    """OUT/summary.json: what was evaluated (the model, the config), the instances asked about and each one's
    outcome counted per reason (graded: from the harness's report; asked to grade with no prediction at all:
    every instance no prediction; not graded: the predictions' counts, no rate). `far`: {id: reason; fix} of the
    instances skipped before generating, counted out of reach."""
    from swerl_jax.eval import outcomes

    far = far or {}
    graded = [i for i in asked if i not in far]
    counts = dict(report["outcome_counts"]) if report is not None else (
        outcomes.outcome_counts(graded, {})[0] if c.grade else None)
    if counts is not None and far:
        counts[outcomes.OUT_OF_REACH] = counts.get(outcomes.OUT_OF_REACH, 0) + len(far)
    summary = {
        "evaluated": evaluated, "config": config_name, "eval_config": json.loads(c.to_json()),
        "instances_asked": len(asked), "graded": counts is not None, "outcome_counts": counts,
        "resolved_rate": outcomes.resolved_rate(counts) if counts is not None else None,
        "predictions": {"with_patch": sum(bool(r["model_patch"]) for r in have.values()),
                        "empty_patch": sum(not r["model_patch"] for r in have.values()),
                        "no_prediction": len(graded) - len(have)},
        "empty_patch": {i: r.get("empty_patch_reason", "reason not recorded") for i, r in sorted(have.items())
                        if not r["model_patch"]},
        "no_prediction": {m["instance_id"]: m["error"] for m in failed},
        **({"out_of_reach_before_generating": far} if far else {}),
        "report": str(out / "harness" / "report.json") if report is not None else None,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def summary_line(summary: dict) -> str:
    """The run's last line: the rate over every instance asked about, or (not graded) the predictions' counts."""
    from swerl_jax.eval import outcomes

    if summary["outcome_counts"] is not None:
        return outcomes.rate_line(summary["outcome_counts"])
    p = summary["predictions"]
    return (f"not graded (grade=false): {p['with_patch']} with a patch, {p['empty_patch']} empty patch, "
            f"{p['no_prediction']} no prediction of {summary['instances_asked']} instances asked")


def exit_code(result: dict) -> int:
    """1 when an instance failed (it has no prediction) or the grading's inputs were bad or nothing was graded."""
    from swerl_jax.eval import harness

    if result["failed"]:
        return 1
    return harness.exit_code(result["report"]) if result["report"] is not None else 0


if __name__ == "__main__":
    from swerl_jax.cli import run_cli

    run_cli("python -m swerl_jax.eval run", main, resume="run the same command again (finished instances are kept)",
            exit_code=exit_code)
