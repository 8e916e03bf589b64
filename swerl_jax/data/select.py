"""Choosing records: a subset by instance id or count (`select_records`: repair_score's `--instance_ids` /
`--limit`), and a seeded train / held-out split of record files (`split_records`: `python -m swerl_jax.data split`).

The split is by hash, not by position: a record's side depends only on (seed, its instance id or its repository),
so the same records split the same way whatever their order or file, and adding records never moves another.
`--by repo` keeps every repository on one side (no repository's code is seen in training and evaluated), `--by
instance` (the default) splits a single repository's PRs, e.g. one curated repository.
"""

from __future__ import annotations

import hashlib
import pathlib

from swerl_jax.config import did_you_mean
from swerl_jax.data.paths import user_path


def select_records(records: list[dict], instance_ids: str, limit: int, spec: str) -> list[dict]:
    """The records `--instance_ids` names (comma-separated, or `@FILE` with one id per line; in the order of
    `records`), then the first `--limit` of them (0: all). An id that no record has, a missing @FILE or a negative
    limit is a ValueError naming it (with the closest id)."""
    if limit < 0:
        raise ValueError(f"--limit {limit}: must be >= 0 (0: every record)")
    if instance_ids:
        if instance_ids.startswith("@"):
            path = pathlib.Path(user_path(instance_ids[1:]))
            if not path.is_file():
                raise FileNotFoundError(f"--instance_ids {instance_ids}: no such file")
            wanted = [line.strip() for line in path.read_text().splitlines() if line.strip()]
        else:
            wanted = [i.strip() for i in instance_ids.split(",") if i.strip()]
        if not wanted:
            raise ValueError(f"--instance_ids {instance_ids!r}: names no instance id")
        held = {r["instance_id"] for r in records}
        for iid in wanted:
            if iid not in held:
                raise ValueError(f"--instance_ids: {iid!r} is not a record of --records {spec} ({len(held)} records)"
                                 + did_you_mean(iid, sorted(held)))
        keep = set(wanted)
        records = [r for r in records if r["instance_id"] in keep]
    return records[:limit] if limit else records


SPLIT_UNITS = ("instance", "repo")


def heldout_side(key: str, seed: int, fraction: float) -> bool:
    """Whether the record keyed `key` (an instance id or a repository) is held out: sha256 of (seed, key) read as
    a number in [0, 1) is below `fraction`. Pure: the same on every machine and Python version."""
    digest = hashlib.sha256(f"{seed}\0{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64 < fraction


def split_records(records: list[dict], fraction: float, seed: int, by: str = "instance"
                  ) -> tuple[list[dict], list[dict]]:
    """(train, held-out) records, in their order: a record is held out when `heldout_side` of its instance id
    (`by="instance"`) or its repository (`by="repo"`) says so. ValueError naming the flag for a fraction outside
    (0, 1), an unknown `by`, or a split that leaves a side empty."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"--heldout-fraction {fraction}: must be between 0 and 1 (exclusive)")
    if by not in SPLIT_UNITS:
        raise ValueError(f"--by {by!r}: not one of {', '.join(SPLIT_UNITS)}" + did_you_mean(by, list(SPLIT_UNITS)))
    field = "instance_id" if by == "instance" else "repo"
    train, heldout = [], []
    for record in records:
        (heldout if heldout_side(record[field], seed, fraction) else train).append(record)
    if not train or not heldout:
        units = len({r[field] for r in records})
        raise ValueError(f"--heldout-fraction {fraction} --seed {seed} --by {by}: {len(train)} train and "
                         f"{len(heldout)} held-out records of {len(records)} ({units} {by}s): a side is empty; "
                         "change the fraction or the seed" + (", or split --by instance" if by == "repo" else ""))
    return train, heldout
