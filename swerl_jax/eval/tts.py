"""`python -m swerl_jax.eval.tts --config=experiments/agent_tts.py[:cpu|:tiny] --out DIR [--config.KEY=VALUE ...]`:
test-time scaling of an agent policy end to end (see `eval.scaling` for the selectors and the report).

1. K trajectories of each instance with the policy (kept-K/V multi-turn generation, sandboxed environments), each
   graded by the harness -> OUT/trajectories.jsonl.
2. The execution-based verifier: the policy writes reproduction scripts, the regression tests are selected, both
   run on every trajectory's patch in the sandbox -> OUT/execution/<instance>/.
3. The execution-free verifier: the policy's own trajectories on `verifier.tasks` synthetic tasks (seeded apart
   from any evaluated task) plus their scripted gold episodes, labelled by the synthetic harness, train a copy of
   the policy with the SFT trainer (OUT/verifier: checkpoints, metrics.jsonl); it scores every trajectory.
4. The three selectors' choices, pass@1 / pass@k / best@K -> OUT/report.json and OUT/report.md (printed).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import copy
import json
import pathlib
import sys
from typing import Any

from swerl_jax.agent import verifier
from swerl_jax.agent.env import SWEEnv
from swerl_jax.agent.rollout import SYSTEM, ChatFormat, run_episodes
from swerl_jax.agent.sft import Scripted, gold_actions
from swerl_jax.agent.synthetic import SyntheticTasks
from swerl_jax.config import OVERRIDE_HELP, apply_overrides, load_experiment_config, split_overrides
from swerl_jax.data.paths import blocking_file, config_paths, user_path
from swerl_jax.eval import scaling
from swerl_jax.eval.agentless.backends import EngineChat
from swerl_jax.eval.agentless.pipeline import AgentlessSettings
from swerl_jax.resolve import resolve_config
from swerl_jax.runs.rundir import refuse_other_config
from swerl_jax.sampler.sessions import KeptKV
from swerl_jax.sampler.types import SamplingParams
from swerl_jax.sandbox.bwrap import SandboxLimits


def _policy_config(c: Any) -> Any:
    """The policy's experiment ConfigDict, sized for these episodes (prompt limit = the whole conversation)."""
    policy = load_experiment_config(str(c.policy))
    if str(c.hf_dir):
        policy.model.hf_dir = policy.model.tokenizer = str(c.hf_dir)
        policy.model.name = "hf"  # FROM_CHECKPOINT: the folder evaluated is whatever model it holds
    policy.data.max_prompt_len = policy.agent.max_context = int(c.max_context)  # the policy's own may be longer
    # the tasks evaluated are `instances`: the policy's training (and held-out) task files are not read here, and
    # a run trained on a generated set elsewhere must not need them on this machine
    policy.agent.instances = policy.agent.eval_instances = policy.agent.repos = ""
    policy.sampler.max_new_tokens = max(int(c.max_new_tokens), int(c.test_max_new_tokens))
    policy.sampler.max_batch = max(int(c.k), int(c.reproduction_tests), 1)
    return policy


def _verifier_config(policy: Any, c: Any) -> Any:
    """The SFT run that trains the verifier: the policy's model and mesh, the `verifier.*` sizes."""
    v = copy.deepcopy(policy)
    v.sft.num_steps, v.sft.batch_size = int(c.verifier.num_steps), int(c.verifier.batch_size)
    v.sft.learning_rate, v.sft.max_len = float(c.verifier.learning_rate), int(c.verifier.max_len)
    v.sft.micro_batch_size = int(c.verifier.micro_batch_size)
    v.logging.progress_bar = False
    return resolve_config(v)


class Episodes:
    """K sandboxed episodes per instance with the policy, graded by the instances' harness."""

    def __init__(self, c: Any, generator, chat: ChatFormat, pool: concurrent.futures.Executor, out: pathlib.Path):
        self.c, self.generator, self.chat, self.pool, self.out = c, generator, chat, pool, out
        self.limits = SandboxLimits(timeout_s=float(c.test_timeout_s), cpu_seconds=int(c.test_timeout_s) + 60)

    def run(self, instances: list[dict], repos: pathlib.Path, executor: Any, k: int, seed: int, generator=None,
            resume: str = "", what: str = "") -> list[list[scaling.Trajectory]]:
        """`k` graded trajectories of each instance (`generator`: the policy's unless a scripted one). `resume`:
        a name under OUT/done/ where each finished batch of instances is kept, so a re-run (same config: the
        output folder refuses another) loads it instead of running it again; batches are seeded by position.
        `what` names the episodes in the progress lines (the verifier's training episodes are not the policy's
        episodes on the evaluated instances, whatever heading they print under)."""
        c = self.c
        envs = [[SWEEnv(inst, repos, self.out / "episodes", executor=executor, reward="execution",
                        max_turns=int(c.max_turns), timeout_s=float(c.episode_timeout_s),
                        step_timeout_s=float(c.step_timeout_s), limits=self.limits, compact=bool(c.compact_prompt))
                 for _ in range(k)] for inst in instances]
        sampling = SamplingParams(temperature=float(c.temperature), max_new_tokens=int(c.max_new_tokens))
        # instances_per_batch bounds the kept K/V (one session holds every row of a batch of instances)
        per = int(c.instances_per_batch) or len(envs)
        done = []
        for start in range(0, len(envs), per):
            kept = self.out / "done" / f"{resume}-{start}.jsonl"
            if resume and kept.exists():
                batch = [[scaling.Trajectory(**json.loads(line)) for line in group.splitlines()]
                         for group in kept.read_text().split("\n\n") if group.strip()]
                say(f"    instances {start + 1}-{start + len(batch)}: kept from an earlier run ({kept})")
            else:
                got, _ = run_episodes(envs[start:start + per], generator or self.generator, self.chat, SYSTEM,
                                      sampling, max_context=int(c.max_context), seed=seed, step=start,
                                      policy_version=0, pool=self.pool)
                batch = scaling.trajectories(got)
                if resume:
                    kept.parent.mkdir(parents=True, exist_ok=True)
                    tmp = kept.with_suffix(".tmp")
                    tmp.write_text("\n\n".join("\n".join(json.dumps(t.as_json()) for t in g) for g in batch) + "\n")
                    tmp.replace(kept)
                say(batch_line(what, start, batch, len(envs)))
            done += batch
        return done


def batch_line(what: str, start: int, batch: list[list[scaling.Trajectory]], total: int) -> str:
    """The progress line of one finished batch of instances, `what` (when given) saying whose episodes they are."""
    resolved, n = sum(t.resolved for g in batch for t in g), sum(len(g) for g in batch)
    return (f"    {what + ': ' if what else ''}instances {start + 1}-{start + len(batch)} of {total}: "
            f"{resolved}/{n} episodes resolved")


def _instances(c: Any, out: pathlib.Path) -> tuple[list[dict], pathlib.Path, Any]:
    """(instances, repos dir, executor): synthetic tasks, or SWE-bench instances run by the harness."""
    if str(c.instances) == "synthetic":
        tasks = SyntheticTasks(out / "tasks" / "eval", int(c.synthetic_tasks), int(c.seed) + 1000)
        return tasks.instances, tasks.root / "repos", tasks.executor(out / "grade")
    from swerl_jax.eval.predictions import chosen_instances, index_instances
    from swerl_jax.tasks import environments
    from swerl_jax.tasks.executors import LocalExecutor

    chosen = chosen_instances(index_instances(pathlib.Path(str(c.instances))), c.instance_ids, str(c.instances))
    limits = SandboxLimits(timeout_s=float(c.test_timeout_s), cpu_seconds=int(c.test_timeout_s) + 60)
    executor = LocalExecutor(pathlib.Path(str(c.repos)), out / "harness", environments.EnvironmentCache(), limits,
                             verdict="plugin")  # labels and verifier data: no printed result passes
    return chosen, pathlib.Path(str(c.repos)), executor


def verifier_training_set(c: Any, episodes: Episodes, tokenizer) -> tuple[list[dict], dict]:
    """Labelled verifier rows: the policy's trajectories on `verifier.tasks` synthetic tasks (seed + 2000) and each
    task's scripted gold episode, graded by the synthetic harness."""
    tasks = SyntheticTasks(episodes.out / "tasks" / "verifier", int(c.verifier.tasks), int(c.seed) + 2000)
    executor = tasks.executor(episodes.out / "grade")
    say(f"3/4 execution-free verifier: its training episodes on {len(tasks.instances)} synthetic tasks of its own "
        "(the policy's samples, then each task's scripted gold episode)")
    sampled = episodes.run(tasks.instances, tasks.root / "repos", executor, int(c.verifier.samples), int(c.seed) + 1,
                           what="verifier training, the policy's episodes")
    scripts = {}
    for inst in tasks.instances:
        env = SWEEnv(inst, tasks.root / "repos", episodes.out / "episodes", compact=bool(c.compact_prompt),
                     executor=executor)
        scripts[episodes.chat.prompt(SYSTEM, env.task()).tobytes()] = gold_actions(inst)
    gold = episodes.run(tasks.instances, tasks.root / "repos", executor, 1, int(c.seed),
                        generator=Scripted(tokenizer, scripts), what="verifier training, scripted gold episodes")
    by_id = {inst["instance_id"]: inst for inst in tasks.instances}
    rows = [verifier.verifier_example(tokenizer, _prompt(c, tokenizer, by_id[t.instance_id], t), t.resolved)
            for group in sampled + gold for t in group]
    labels = [t.resolved for group in sampled + gold for t in group]
    return rows, {"rows": len(rows), "resolved": int(sum(labels)), "tasks": len(tasks.instances)}


def _prompt(c: Any, tokenizer, instance: dict, t: scaling.Trajectory):
    return verifier.verifier_prompt(tokenizer, instance["problem_statement"], t.transcript, t.patch,
                                    int(c.verifier.max_len))


def say(line: str) -> None:
    """A progress line on stderr (stdout keeps the report's table)."""
    print(f"tts: {line}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> dict:
    """CLI entry point; returns the report."""
    # the whole docstring, as written: its first line is only the usage (held-out check of issue 46, item 7)
    p = argparse.ArgumentParser(prog="python -m swerl_jax.eval.tts", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="experiments/agent_tts.py[:cpu|:tiny]")
    p.add_argument("--out", required=True, help="directory for trajectories, verifier, report")
    p.epilog = OVERRIDE_HELP
    rest, overrides = split_overrides(list(sys.argv[1:] if argv is None else argv))
    args = p.parse_args(rest)
    c = load_experiment_config(args.config)
    apply_overrides(c, overrides)
    # the paths typed or defaulted, absolute once: from the current directory, else the repository root
    config_paths(c, ("weights", "hf_dir", "instances", "repos"), keep=("synthetic",))
    bad = [s for s in str(c.selectors).split(",") if s not in scaling.SELECTORS]
    if bad:
        raise ValueError(f"selectors: {bad} are not among {scaling.SELECTORS}")
    for key in ("k", "max_turns", "env_workers"):
        if int(c[key]) < 1:
            raise ValueError(f"{key}={c[key]} must be >= 1")
    out = pathlib.Path(user_path(args.out))
    taken = blocking_file(out)  # before the engine starts, not an errno from the first mkdir under it
    if taken is not None:
        raise FileExistsError(f"--out {args.out}: {taken} is a file, not a folder")
    refuse_other_config(out / "tts_config.json", json.loads(c.to_json()))  # finished batches are reused

    from swerl_jax.sampler import source as policy_source
    from swerl_jax.tokenizer import tokenizer_for

    raw_policy = _policy_config(c)
    policy = resolve_config(raw_policy, check_files=True)
    source = policy_source.PolicySource(weights=str(c.weights), random_init=bool(c.random_init),
                                        flag={"hf_dir": "policy's model.hf_dir", "random_init": "random_init=True"})
    evaluated = policy_source.describe(source, policy, f"policy={c.policy}")
    print(f"evaluating {evaluated['what']}", flush=True)
    instances, repos, executor = _instances(c, out)  # checked before the folder is claimed for this config
    out.mkdir(parents=True, exist_ok=True)
    (out / "tts_config.json").write_text(c.to_json(indent=1))
    tokenizer = tokenizer_for(policy.model)
    engine = policy_source.open_engine(policy, source, evaluated)
    pool = concurrent.futures.ThreadPoolExecutor(int(c.env_workers), thread_name_prefix="tts-env")
    episodes = Episodes(c, KeptKV(engine, int(c.max_context)), ChatFormat(tokenizer), pool, out)
    say(f"1/4 episodes: {len(instances)} instances x K={int(c.k)} (each graded by the harness)")
    groups = episodes.run(instances, repos, executor, int(c.k), int(c.seed), resume="policy")
    with open(out / "trajectories.jsonl", "w") as f:
        for t in (t for g in groups for t in g):
            f.write(json.dumps(t.as_json()) + "\n")

    settings = AgentlessSettings(num_samples=int(c.k), temperature=float(c.temperature), thinking=False,
                                 reproduction_tests=int(c.reproduction_tests), regression=bool(c.regression),
                                 seed=int(c.seed))
    chat = EngineChat(tokenizer, int(c.test_max_new_tokens), int(c.max_context), engine=engine, seed=int(c.seed))
    executions = []
    say(f"2/4 execution verifier: reproduction and regression tests of {len(instances)} instances")
    for n, (inst, group) in enumerate(zip(instances, groups), 1):
        say(f"    instance {n}/{len(instances)}: {inst['instance_id']}")
        samples, info = scaling.execution_samples(inst, group, chat, executor, settings,
                                                  out / "execution" / inst["instance_id"])
        executions.append((samples, "tests" in info, info))

    rows, data = verifier_training_set(c, episodes, tokenizer)
    vconfig = _verifier_config(raw_policy, c)
    trainer = verifier.VerifierTrainer(vconfig, out / "verifier", rows)
    say(f"3/4 execution-free verifier: training on {len(rows)} labelled trajectories")
    params = trainer.run()
    scores = [verifier.verifier_scores(trainer.policy.model_config, params, tokenizer,
                                       [_prompt(c, tokenizer, inst, t) for t in group])
              for inst, group in zip(instances, groups)]
    trainer.close()
    pool.shutdown()

    choices = {"execution": [scaling.select_execution(s, settings, ran) for s, ran, _ in executions],
               "verifier": [scaling.select_verifier(sc, g) for sc, g in zip(scores, groups)],
               "hybrid": [scaling.select_hybrid(s, sc, settings, ran) for (s, ran, _), sc in zip(executions, scores)]}
    choices = {name: choices[name] for name in str(c.selectors).split(",")}
    report = scaling.scaling_report(groups, choices)
    report["verifier_training"] = data
    report["evaluated"] = evaluated
    report["per_instance"] = [
        {"instance_id": inst["instance_id"], "resolved": [t.resolved for t in g],
         "terminations": [t.termination for t in g], "has_patch": [bool(t.patch.strip()) for t in g],
         "verifier_scores": [round(s, 4) for s in sc],
         "regression_failures": [s.regression_failures for s in ex[0]],
         "reproduction_passed": [sorted(s.reproduction_passed) for s in ex[0]], "tests_ran": ex[1],
         "chosen": {name: ch[i] for name, ch in choices.items()}}
        for i, (inst, g, sc, ex) in enumerate(zip(instances, groups, scores, executions))]
    (out / "report.json").write_text(json.dumps(report, indent=1))
    table = scaling.report_table(report)
    (out / "report.md").write_text(table)
    print(table, end="", flush=True)
    say(f"4/4 report: {out / 'report.md'} (and report.json, trajectories.jsonl)")
    return report


if __name__ == "__main__":
    from swerl_jax.cli import run_cli

    run_cli("python -m swerl_jax.eval.tts", main, resume="run the same command again")
