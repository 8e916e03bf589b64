"""The evaluation benchmarks' PRs, which curation leaves out of the training records by default.

SWE-RL trains on PRs and is evaluated on SWE-bench; a PR that is a SWE-bench Lite or Verified instance would put the
test answer into the training set. An instance is a PR: `psf__requests-863` is PR 863 of psf/requests (SWE-bench's
instance ids are `owner__name-NUMBER`; the `repo` field names the repository). Curation matches candidates by
(repository, PR number), case-insensitively in the repository, and counts them in the funnel as the stage
`benchmark_instance` (`swerl_jax.curate.funnel`).

Where the lists come from: `CurateConfig.benchmark_instances`, files or Hugging Face dataset names that
`swerl_jax.data.swebench.load_instances` reads (a .json list, JSONL, parquet; the SWE-bench files the project's
data folder holds are `swebench_lite.json` and `swebench_verified.jsonl`). The default names the datasets
(`princeton-nlp/SWE-bench_Lite`, `princeton-nlp/SWE-bench_Verified`), which need the `datasets` package and the
network; offline, give the files, or turn the exclusion off (`drop_benchmark_instances=false`).
"""

from __future__ import annotations

import difflib
import pathlib
import re
from collections.abc import Iterable

from swerl_jax.data.swebench import load_instances

# SWE-bench Lite and Verified on the Hugging Face hub (the names the swebench package's harness loads).
DEFAULT_BENCHMARKS = ("princeton-nlp/SWE-bench_Lite", "princeton-nlp/SWE-bench_Verified")
KEY = "--config.benchmark_instances"
OFF = "--config.drop_benchmark_instances=false"
_NUMBER = re.compile(r"-(\d+)$")


def instance_pr(instance: dict, where: str) -> tuple[str, int]:
    """(repository in lower case, PR number) of a SWE-bench instance; ValueError naming `where` and the field."""
    iid = instance.get("instance_id")
    if not isinstance(iid, str) or not (match := _NUMBER.search(iid)):
        raise ValueError(f"{where}: instance_id {iid!r} is not a SWE-bench id (owner__name-NUMBER)")
    repo = instance.get("repo") or iid[:match.start()].replace("__", "/", 1)
    if not isinstance(repo, str) or "/" not in repo:
        raise ValueError(f"{where}: instance {iid}: field 'repo' {repo!r} is not owner/name")
    return repo.lower(), int(match.group(1))


def near_file(source: str) -> str:
    """" (did you mean PATH?)" when `source` is not a file and a file of a close name sits in its folder (a typo
    such as swebench_lite.jsn), else ""."""
    path = pathlib.Path(source)
    if path.exists() or not path.parent.is_dir():
        return ""
    close = difflib.get_close_matches(path.name, sorted(p.name for p in path.parent.iterdir() if p.is_file()), n=1)
    return f" (did you mean {path.parent / close[0]}?)" if close else ""


def benchmark_prs(sources: Iterable[str]) -> frozenset[tuple[str, int]]:
    """Every (repository, PR number) of the instances in `sources`; one ValueError line naming the source, the
    config key and the way out when a source cannot be read."""
    found: set[tuple[str, int]] = set()
    for source in sources:
        try:
            instances = load_instances(source)
        except Exception as e:  # noqa: BLE001 - the network, the datasets package, a missing or malformed file
            raise ValueError(
                f"{KEY}: cannot read {source!r}{near_file(source)} ({type(e).__name__}: "
                f"{str(e).splitlines()[0] if str(e) else ''}); "
                "curation leaves SWE-bench Lite/Verified instances out of the records by default: give their "
                f"instance files ({KEY}=PATH/swebench_lite.json,PATH/swebench_verified.jsonl) or turn that off "
                f"with {OFF}") from None
        for i, instance in enumerate(instances):
            if not isinstance(instance, dict):
                raise ValueError(f"{KEY}: {source} row {i + 1}: not an instance object")
            found.add(instance_pr(instance, f"{KEY}: {source} row {i + 1}"))
    return frozenset(found)
