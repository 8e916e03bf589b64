"""What a generation run hands on: the kept instances split train / held-out by file, a contamination report
against SWE-bench Lite/Verified, and the table by repository and mutation kind."""

from __future__ import annotations

import collections
import hashlib
import json
import pathlib
import re

import unidiff


def modified_files(instance: dict) -> list[str]:
    """The files an instance's gold patch modifies (the files its bug is in)."""
    return sorted({f.path for f in unidiff.PatchSet(instance["patch"])})


def split_by_file(instances: list[dict], heldout_fraction: float = 0.2, seed: int = 0) -> tuple[list, list]:
    """(train, held-out): tasks that share a modified file (transitively) fall on one side, so no held-out task
    shares a modified file with a training task. A group's side is a hash of its files and `seed` (stable as
    tasks are added), so about `heldout_fraction` of the files are held out."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    keys = []
    for instance in instances:
        files = [f"{instance['repo']}:{f}" for f in modified_files(instance)]
        if not files:
            raise ValueError(f"instance {instance.get('instance_id')!r}: field 'patch' modifies no file")
        root = find(files[0])
        for f in files[1:]:
            parent[find(f)] = root
        keys.append(files[0])
    groups: dict[str, list[str]] = collections.defaultdict(list)
    for f in list(parent):
        groups[find(f)].append(f)

    def held(root: str) -> bool:
        digest = hashlib.sha256(f"{seed}|{min(groups[root])}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2 ** 64 < heldout_fraction

    train, heldout = [], []
    for instance, key in zip(instances, keys):
        (heldout if held(find(key)) else train).append(instance)
    return train, heldout


def _functions(patch: str) -> set[tuple[str, str]]:
    """(file, function) pairs a patch changes: for each changed line, the nearest `def` above it in the hunk (or
    in the hunk's section header, which git writes and difflib does not)."""
    found = set()
    for patched in unidiff.PatchSet(patch):
        for hunk in patched:
            names = re.findall(r"\bdef\s+(\w+)", hunk.section_header or "")
            current = names[-1] if names else None
            for line in hunk:
                name = re.match(r"\s*(?:async\s+)?def\s+(\w+)", line.value)
                if name:
                    current = name.group(1)
                if (line.is_added or line.is_removed) and current:
                    found.add((patched.path, current))
    return found


def contamination(generated: list[dict], benchmarks: dict[str, list[dict]]) -> dict:
    """Which benchmark instances share a repository, a file or a function with the generated tasks:
    {benchmark: {"instances": n, "repositories": [...], "files": [...], "functions": [...], "shared_ids": [...]}}.
    A generated task's functions are its mutation's (or, for a reverted PR, its patch's)."""
    repos = {g["repo"] for g in generated}
    files = {(g["repo"], f) for g in generated for f in modified_files(g)}
    functions = set()
    for g in generated:
        parts = (g.get("mutation") or {}).get("parts") or [g.get("mutation") or {}]
        functions |= {(g["repo"], p["file"], p["function"].rsplit(".", 1)[-1]) for p in parts if p}
        functions |= {(g["repo"], f, name) for f, name in _functions(g["patch"])}
    report = {}
    for name, instances in benchmarks.items():
        shared = {"instances": len(instances), "repositories": set(), "files": set(), "functions": set(),
                  "shared_ids": set()}
        for inst in instances:
            repo = inst["repo"]
            if repo not in repos:
                continue
            shared["repositories"].add(repo)
            shared["shared_ids"].add(inst["instance_id"])
            for f in modified_files(inst):
                if (repo, f) in files:
                    shared["files"].add(f"{repo}:{f}")
            for f, fn in _functions(inst["patch"]):
                if (repo, f, fn) in functions:
                    shared["functions"].add(f"{repo}:{f}:{fn}")
        report[name] = {k: sorted(v) if isinstance(v, set) else v for k, v in shared.items()}
    report["generated"] = {"tasks": len(generated), "repositories": sorted(repos), "files": len(files)}
    return report


def load_benchmarks(data_dir: pathlib.Path) -> dict[str, list[dict]]:
    """SWE-bench Lite (swebench_lite.json) and Verified (swebench_verified.jsonl) from the shared data folder;
    a missing file is an error naming it."""
    out = {}
    for name, file in (("swebench_lite", "swebench_lite.json"), ("swebench_verified", "swebench_verified.jsonl")):
        path = data_dir / file
        if not path.is_file():
            raise FileNotFoundError(f"contamination report: {path} does not exist (pass --benchmarks DIR)")
        text = path.read_text()
        out[name] = json.loads(text) if file.endswith(".json") else [json.loads(x) for x in text.splitlines() if x]
    return out


def table(rows: list[dict]) -> dict:
    """Counts by repository and mutation kind: {repo: {kind: {"candidates", "kept"}}} over decided results."""
    out: dict = {}
    for row in rows:
        cell = out.setdefault(row["repo"], {}).setdefault(row["mutation"]["kind"], {"candidates": 0, "kept": 0})
        cell["candidates"] += 1
        cell["kept"] += int(row["kept"])
    return out


def markdown_table(counts: dict) -> str:
    """`table`'s counts as a markdown table: kept/candidates per repository and kind."""
    kinds = sorted({k for per in counts.values() for k in per})
    lines = ["| repository | " + " | ".join(kinds) + " | all |", "|---" * (len(kinds) + 2) + "|"]
    for repo in sorted(counts):
        cells = [counts[repo].get(k, {"kept": 0, "candidates": 0}) for k in kinds]
        total = (sum(c["kept"] for c in cells), sum(c["candidates"] for c in cells))
        lines.append(f"| {repo} | " + " | ".join(f"{c['kept']}/{c['candidates']}" for c in cells)
                     + f" | {total[0]}/{total[1]} |")
    return "\n".join(lines)
