"""Versioned policy weights shared by the trainer (publisher) and the sampler (reader).

Layout of a weights directory (local disk, NFS or a gs:// path; Orbax/tensorstore does the I/O):

    <dir>/v_<n>/     params of policy version n (an Orbax checkpoint, finalised atomically by Orbax)
    <dir>/LATEST     {"version": n, "path": "v_<n>", "published_at": unix time}, written last

A reader trusts only LATEST, so it never sees a half-written version; the marker itself is written to a
temporary name and renamed. Each version carries a per-file CRC-32 manifest (`swerl_jax.runs.integrity`, written
before LATEST moves); `load` verifies it and refuses a corrupt version with an error naming the file, and
`WeightWatcher` then keeps serving the version it has.
"""

from __future__ import annotations

import difflib
import json
import logging
import time

import jax
import numpy as np
import orbax.checkpoint as ocp
from etils import epath

from swerl_jax.runs.integrity import CorruptCheckpointError, has_manifest, verify_manifest, write_manifest

log = logging.getLogger(__name__)
LATEST = "LATEST"


def version_path(directory: str | epath.PathLike, version: int) -> epath.Path:
    """Where version `version` lives."""
    return epath.Path(directory) / f"v_{version}"


def publish(directory: str | epath.PathLike, params: dict, version: int, keep_last: int = 0) -> epath.Path:
    """Write `params` as policy `version`, then point LATEST at it; older versions beyond `keep_last` are deleted.

    Versions must increase: publishing a version <= the current LATEST raises ValueError.
    """
    root = epath.Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    current = latest_version(root)
    if current is not None and version <= current:
        raise ValueError(f"policy version {version} is not newer than the published version {current} in {root}")
    path = version_path(root, version)
    main = jax.process_index() == 0  # every process writes its shards; one writes the marker
    if path.exists() and main:
        path.rmtree()  # a leftover from a crashed publisher that never reached LATEST
    ckptr = ocp.StandardCheckpointer()
    ckptr.save(path, params)
    ckptr.wait_until_finished()
    ckptr.close()
    if not main:
        return path
    write_manifest(path)  # before LATEST: a reader never sees a version without its checksums
    tmp = root / f"{LATEST}.tmp"
    tmp.write_text(json.dumps({"version": version, "path": path.name, "published_at": time.time()}))
    tmp.replace(root / LATEST)  # atomic on POSIX; readers see the old or the new marker
    if keep_last > 0:
        for old in root.glob("v_*"):
            n = _version_of(old)
            if n is not None and n <= version - keep_last:
                old.rmtree()
    return path


def reset(directory: str | epath.PathLike) -> None:
    """Remove every published version and the marker (a resumed run re-publishes from its checkpoint).

    In a multi-process run every process calls it: process 0 removes, and none returns before it has. Otherwise
    another process's `publish` that follows could still read the old marker and refuse its version as "not newer"
    (issue 57: a resume after one of two processes was killed), or write into a `v_*` folder being removed.
    """
    root = epath.Path(directory)
    if jax.process_index() == 0 and root.exists():
        (root / LATEST).unlink(missing_ok=True)
        for old in root.glob("v_*"):
            old.rmtree()
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices("swerl_jax weights reset")  # not the path: hosts may spell it differently


def _version_of(path: epath.Path) -> int | None:
    try:
        return int(path.name[2:])
    except ValueError:
        return None


def read_marker(directory: str | epath.PathLike) -> dict | None:
    """The LATEST marker as a dict, or None when nothing is published yet."""
    marker = epath.Path(directory) / LATEST
    if not marker.exists():
        return None
    try:
        data = json.loads(marker.read_text())
        return {"version": int(data["version"]), "path": str(data["path"]),
                "published_at": float(data.get("published_at", 0.0))}
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"corrupt policy marker {marker}: {e}") from e


def latest_version(directory: str | epath.PathLike) -> int | None:
    """The newest published version, or None."""
    marker = read_marker(directory)
    return None if marker is None else marker["version"]


def require_policy(directory: str | epath.PathLike, version: int = -1) -> int:
    """The version to evaluate in `directory` (`version`, or the newest when -1), or FileNotFoundError naming the
    path, with a "did you mean": a weights path that holds no policy is an error, never a random init."""
    root = epath.Path(directory)
    hint = ""
    if not root.exists():
        parent = root.parent
        siblings = [p.name for p in parent.iterdir()] if parent.exists() else []
        close = difflib.get_close_matches(root.name, siblings, n=1)
        hint = f" (did you mean {parent / close[0]}?)" if close else ""
        raise FileNotFoundError(f"weights {root}: no such directory{hint}")
    newest = latest_version(root)
    if newest is None:
        if latest_version(root / "policy") is not None:
            hint = f" (did you mean {root / 'policy'}? a run's published policies are in RUN/policy)"
        elif (root / "checkpoints").is_dir():  # a training stage (RUN/sft, an SFT-only run): checkpoints only
            run, stage = (root.parent, " --stage sft") if root.name == "sft" else (root, "")
            hint = (f" (it holds training checkpoints: export them first, python -m swerl_jax.eval.export --run "
                    f"{run}{stage} --out HF_DIR, and evaluate HF_DIR as the model, e.g. --hf_dir HF_DIR)")
        raise FileNotFoundError(f"weights {root}: no published policy in it (no {LATEST} marker){hint}")
    wanted = newest if version < 0 else version
    if not version_path(root, wanted).exists():  # the newest too: a LATEST naming a deleted version
        kept = sorted(n for p in root.glob("v_*") if (n := _version_of(p)) is not None)
        what = f"policy version {version}" if version >= 0 else f"the newest policy, version {newest} ({LATEST})"
        raise FileNotFoundError(f"weights {root}: {what} is not there (kept: {kept})")
    return wanted


def load(directory: str | epath.PathLike, version: int, like: dict | None = None) -> dict:
    """Restore version `version`; `like` (a params tree) fixes dtypes/shapes/shardings and is checked against.

    Raises:
      CorruptCheckpointError: a file of the version does not match its manifest (named in the message).
    """
    path = version_path(directory, version)
    if not path.exists():
        raise FileNotFoundError(f"policy version {version} is not in {directory} (no {path})")
    if has_manifest(path):
        verify_manifest(path)
    else:
        log.info("policy version %s has no integrity manifest (published before checksums): loading it unverified",
                 path)
    target = None if like is None else jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
    ckptr = ocp.StandardCheckpointer()
    try:
        return ckptr.restore(path, target)
    finally:
        ckptr.close()


class WeightWatcher:
    """Reader side: remembers the loaded version and picks up newer ones when asked (between requests)."""

    def __init__(self, directory: str | epath.PathLike, like: dict | None = None, poll_s: float = 0.05) -> None:
        self.directory = epath.Path(directory)
        self.like = like
        self.poll_s = poll_s
        self.version: int | None = None
        self.corrupt: dict[int, str] = {}  # refused versions -> why (not re-read until a newer one is published)
        self.last_ready_latency_s: float | None = None  # publish (marker time) -> params in memory

    def poll(self) -> tuple[int, dict] | None:
        """(version, params) when a version newer than the loaded one is published, else None.

        A corrupt new version is refused with a warning naming the file and the loaded version stays in use;
        with nothing loaded yet there is nothing to keep, so the `CorruptCheckpointError` propagates.
        """
        marker = read_marker(self.directory)
        if marker is None or (self.version is not None and marker["version"] <= self.version):
            return None
        if marker["version"] in self.corrupt:
            return None
        try:
            params = load(self.directory, marker["version"], self.like)
        except CorruptCheckpointError as e:
            if self.version is None:
                raise
            self.corrupt[marker["version"]] = str(e)
            log.warning("refusing policy version %d, keeping version %d: %s", marker["version"], self.version, e)
            return None
        params = jax.block_until_ready(params)
        self.version = marker["version"]
        self.last_ready_latency_s = max(0.0, time.time() - marker["published_at"])
        return self.version, params

    def wait_for(self, min_version: int, timeout_s: float) -> tuple[int, dict] | None:
        """Poll until a version >= `min_version` is loaded; returns the newest newly loaded (version, params).

        Returns None when the loaded version already satisfies it; raises TimeoutError after `timeout_s`.
        """
        deadline = time.monotonic() + timeout_s
        found = None
        while True:
            got = self.poll()
            found = got or found
            if self.version is not None and self.version >= min_version:
                return found
            if time.monotonic() >= deadline:
                refused = "".join(f"; refused version {v}: {why}" for v, why in self.corrupt.items())
                raise TimeoutError(f"policy version {min_version} was not published in {self.directory} within "
                                   f"{timeout_s:.1f}s (newest: {self.version}{refused})")
            time.sleep(self.poll_s)


def tree_nbytes(params: dict) -> int:
    """Total bytes of a params tree (for latency reports)."""
    return int(sum(np.asarray(x).nbytes if not hasattr(x, "nbytes") else x.nbytes for x in jax.tree.leaves(params)))
