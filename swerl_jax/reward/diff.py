"""Unified-diff normalisation and the difflib similarity, through cydifflib (a compiled difflib).

cydifflib compiles the standard library's difflib source, so its diffs and ratios are the same as
``difflib``'s to the last bit (tests/reward/test_diff.py checks it on many random pairs); ``difflib``
is the fallback when cydifflib is not installed.
"""

from __future__ import annotations

import difflib
import warnings

try:
    import cydifflib as fast_difflib

    BACKEND = "cydifflib"
except ImportError:  # pragma: no cover - exercised only where cydifflib is absent
    fast_difflib = difflib
    BACKEND = "difflib"

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError


def generate_unified_diff(old_code: str, new_code: str, n_context: int = 3, lib=None) -> str:
    """Unified diff of two texts by lines, without its two header lines, joined with "\\n" ("" if equal).

    ``lib`` picks the difflib implementation (default: cydifflib when available).
    """
    lib = lib or fast_difflib
    diff = lib.unified_diff(
        old_code.splitlines(), new_code.splitlines(), fromfile="old", tofile="new", lineterm="", n=n_context
    )
    # The first two lines are the ---/+++ headers; an identical pair yields nothing at all.
    if next(diff, None) is None or next(diff, None) is None:
        return ""
    return "\n".join(diff)


def get_normalized_patch(
    code_context: dict[str, str], new_content_dict: dict[str, str], lib=None
) -> dict[str, str]:
    """path -> diff of ``code_context[path]`` (missing: "") vs the new content; empty diffs omitted."""
    patch_dict: dict[str, str] = {}
    for path, new_content in new_content_dict.items():
        patch = generate_unified_diff(code_context.get(path, ""), new_content, lib=lib)
        if patch:
            patch_dict[path] = patch
    return patch_dict


def similarity(pred_change: str, oracle_change: str, lib=None) -> float:
    """``SequenceMatcher(None, pred, oracle, autojunk=False).ratio()``; 0.0 when either side is empty."""
    if oracle_change == "" or pred_change == "":
        # An empty change must not be rewarded (it would let a policy hack the reward with no-op edits).
        return 0.0
    lib = lib or fast_difflib
    return lib.SequenceMatcher(None, pred_change, oracle_change, autojunk=False).ratio()


def compute_change_similarities(
    pred_patch: dict[str, str], oracle_patch: dict[str, str], lib=None
) -> list[dict]:
    """One {path, pred_change, oracle_change, similarity} per path of the union of both patches.

    The union is built as the release builds it (a set of the oracle's keys, then union with the
    prediction's), so the iteration order, and with it the float sum of the mean, is the release's.
    """
    all_file_paths = set(oracle_patch.keys()).union(set(pred_patch.keys()))
    out = []
    for path in all_file_paths:
        pred_change = pred_patch.get(path, "")
        oracle_change = oracle_patch.get(path, "")
        out.append(
            dict(
                path=path,
                pred_change=pred_change,
                oracle_change=oracle_change,
                similarity=similarity(pred_change, oracle_change, lib=lib),
            )
        )
    return out


def mean_similarity(similarities: list[dict]) -> float:
    """Unweighted mean in list order (builtin ``sum``, as the release); 1.0 when there are no files."""
    if len(similarities) == 0:
        return 1.0
    return sum(map(lambda x: x["similarity"], similarities)) / len(similarities)


def get_filelevel_diff(patch_text: str) -> dict[str, str]:
    """path -> hunks text of one unified diff (unidiff); unparsable -> {}; binary files skipped.

    Renames are keyed by the source path with a "rename from X to Y" header line.
    """
    try:
        patch = PatchSet(patch_text)
    except UnidiffParseError:
        return {}
    except Exception as e:  # noqa: BLE001 - unidiff raises other errors (e.g. UnboundLocalError) on junk
        warnings.warn(f"Unexpected unidiff parsing error: {e}", stacklevel=2)
        return {}
    result: dict[str, str] = {}
    for patched_file in patch:
        if patched_file.is_binary_file:
            continue
        if patched_file.is_rename:
            source_file = patched_file.source_file
            target_file = patched_file.target_file
            source_file = source_file[2:] if source_file.startswith("a/") else source_file
            target_file = target_file[2:] if target_file.startswith("b/") else target_file
            header = f"rename from {source_file} to {target_file}"
            path = source_file
        else:
            header = ""
            path = patched_file.path
        body = "\n".join(str(hunk).strip() for hunk in patched_file)
        result[path] = (header + "\n" + body).strip()
    return result
