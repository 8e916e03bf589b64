"""Funnel report: label counts from the pipeline -> ``funnel.json`` and a printed table (the paper's 24M -> 11M).

Labels: "candidate" (one per PR seen), "drop:<reason>" (first filter that dropped it), "kept",
"seed:<reason>" (RL-seed outcome of each kept PR), "input:<what>" (repos read, corrupt inputs).
"""

from __future__ import annotations

from swerl_jax.curate.filters import FILTER_ORDER

# The order stages appear in the table: where each drop happens in the pipeline.
STAGE_ORDER = (
    "not_merged", "benchmark_instance", "no_clone", "bot", "commit_not_in_clone", "missing_object", "root_commit",
    "no_merge_base", "non_utf8", "git_error", "extract_error", *FILTER_ORDER[1:], "no_problem_statement",
    "invalid_record", "duplicate",
)
SEED_ORDER = ("no_linked_issue", "linked_issue_text_unknown", "issue_not_bug_fix", "non_programming_files")


def build_funnel(counts: dict[str, int]) -> dict:
    """Counts of labels -> the funnel dict written as funnel.json.

    Raises ValueError when the counts are inconsistent (candidates != drops + kept), which would mean a PR
    was lost or counted twice.
    """
    candidates = counts.get("candidate", 0)
    drops = {k.split(":", 1)[1]: v for k, v in counts.items() if k.startswith("drop:")}
    order = [s for s in STAGE_ORDER if s in drops] + sorted(s for s in drops if s not in STAGE_ORDER)
    remaining, stages = candidates, []
    for stage in order:
        remaining -= drops[stage]
        stages.append({"stage": stage, "dropped": drops[stage], "remaining": remaining})
    kept = counts.get("kept", 0)
    if remaining != kept:
        raise ValueError(f"funnel does not add up: {candidates} candidates, {sum(drops.values())} dropped, {kept} kept")
    seeds = {k.split(":", 1)[1]: v for k, v in counts.items() if k.startswith("seed:")}
    seed_stages, left = [], kept
    for stage in [s for s in SEED_ORDER if s in seeds] + sorted(s for s in seeds if s not in (*SEED_ORDER, "selected")):
        left -= seeds[stage]
        seed_stages.append({"stage": stage, "dropped": seeds[stage], "remaining": left})
    if left != seeds.get("selected", 0):
        raise ValueError(f"RL-seed funnel does not add up: {kept} kept, {seeds}")
    inputs = {k.split(":", 1)[1]: v for k, v in sorted(counts.items()) if k.startswith("input:")}
    return {
        "inputs": inputs, "pr_candidates": candidates, "stages": stages, "kept": kept,
        "rl_seed_stages": seed_stages, "rl_seeds": left,
    }


def format_table(funnel: dict) -> str:
    """A plain-text table of the funnel."""
    lines = [f"{'stage':<34}{'dropped':>10}{'remaining':>12}", "-" * 56]
    lines.append(f"{'PR candidates':<34}{'':>10}{funnel['pr_candidates']:>12}")
    for s in funnel["stages"]:
        lines.append(f"{s['stage']:<34}{s['dropped']:>10}{s['remaining']:>12}")
    lines.append(f"{'= PR records':<34}{'':>10}{funnel['kept']:>12}")
    for s in funnel["rl_seed_stages"]:
        lines.append(f"{'seed: ' + s['stage']:<34}{s['dropped']:>10}{s['remaining']:>12}")
    lines.append(f"{'= RL seeds':<34}{'':>10}{funnel['rl_seeds']:>12}")
    if funnel["inputs"]:
        lines.append("inputs: " + ", ".join(f"{k}={v}" for k, v in funnel["inputs"].items()))
    return "\n".join(lines)
