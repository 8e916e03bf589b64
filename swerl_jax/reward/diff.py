"""Unified-diff normalisation and the difflib similarity, through cydifflib (a compiled difflib).

cydifflib compiles the standard library's difflib source, so its diffs and ratios are the same as
``difflib``'s to the last bit (tests/reward/test_diff.py checks it on many random pairs); ``difflib``
is the fallback when cydifflib is not installed. The character-level similarity goes through
swerl_jax/reward/ratio.py (the same number, near-linear instead of quadratic).

An edited file is split into lines reusing the unedited lines of its original (``SplitText`` /
``edited_lines``): the same list of equal strings as ``new.splitlines()``, so the same diff, but the
line objects (and their cached hashes) are shared with the original and with every other rollout of the
group, which makes the line matcher's indexing and comparisons cheaper.
"""

from __future__ import annotations

import bisect
import difflib
import itertools
import warnings

try:
    import cydifflib as fast_difflib

    BACKEND = "cydifflib"
except ImportError:  # pragma: no cover - exercised only where cydifflib is absent
    fast_difflib = difflib
    BACKEND = "difflib"

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from swerl_jax.reward.ratio import common_run_left, common_run_right
from swerl_jax.reward.ratio import ratio as _exact_ratio


def generate_unified_diff(old_code: str, new_code: str, n_context: int = 3, lib=None) -> str:
    """Unified diff of two texts by lines, without its two header lines, joined with "\\n" ("" if equal).

    ``lib`` picks the difflib implementation (default: cydifflib when available).
    """
    return unified_diff_lines(old_code.splitlines(), new_code.splitlines(), n_context, lib)


def unified_diff_lines(old_lines: list[str], new_lines: list[str], n_context: int = 3, lib=None) -> str:
    """``generate_unified_diff`` of two texts given as their ``splitlines()``."""
    if old_lines == new_lines:
        return ""  # difflib yields no hunk, hence no header, for equal sequences
    lib = lib or fast_difflib
    diff = lib.unified_diff(old_lines, new_lines, fromfile="old", tofile="new", lineterm="", n=n_context)
    # The first two lines are the ---/+++ headers; a pair with equal lines yields nothing at all.
    if next(diff, None) is None or next(diff, None) is None:
        return ""
    return "\n".join(diff)


class SplitText:
    """A text, its ``splitlines()`` and the offset where each line (with its line break) ends."""

    __slots__ = ("text", "lines", "ends")

    def __init__(self, text: str):
        self.text = text
        self.lines = text.splitlines()
        self.ends = list(itertools.accumulate(map(len, text.splitlines(True))))


def _common_prefix_len(a: str, b: str) -> int:
    """Length of the longest common prefix of a and b (galloping slice comparisons)."""
    return common_run_right(a, b, 0, 0, 0, min(len(a), len(b)))


def _common_suffix_len(a: str, b: str, start: int) -> int:
    """Length of the longest common suffix of a[start:] and b[start:]."""
    return common_run_left(a, b, len(a), len(b), min(len(a), len(b)) - start)


def edited_lines(base: SplitText, new: str) -> list[str]:
    """``new.splitlines()``, taking the lines before and after the edited span from ``base``.

    A "\\n" always ends a line (alone or in "\\r\\n"), so for a cut right after one,
    ``(x + y).splitlines() == x.splitlines() + y.splitlines()``. The head is cut after the last "\\n"
    of the common prefix and the tail after the first "\\n" of the common suffix; both are the same text
    in ``base`` and ``new``, hence the same lines.
    """
    old = base.text
    cut = old.rfind("\n", 0, _common_prefix_len(old, new)) + 1  # 0: no "\n" in the common prefix
    head = bisect.bisect_right(base.ends, cut) if cut else 0
    suffix = _common_suffix_len(old, new, cut)
    nl = old.find("\n", len(old) - suffix) if suffix else -1
    old_tail = nl + 1 if nl >= 0 else len(old)
    tail = bisect.bisect_right(base.ends, old_tail) if old_tail < len(old) else len(base.lines)
    middle = new[cut:old_tail + len(new) - len(old)].splitlines()
    return base.lines[:head] + middle + base.lines[tail:]


def diff_against(base: SplitText, new: str) -> str:
    """``generate_unified_diff(base.text, new)``, splitting ``new`` with ``edited_lines``."""
    if new == base.text:
        return ""
    return unified_diff_lines(base.lines, edited_lines(base, new))


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
    """``SequenceMatcher(None, pred, oracle, autojunk=False).ratio()``; 0.0 when either side is empty.

    Computed by swerl_jax/reward/ratio.py (bit-identical) unless ``lib`` names a difflib implementation.
    """
    if oracle_change == "" or pred_change == "":
        # An empty change must not be rewarded (it would let a policy hack the reward with no-op edits).
        return 0.0
    if lib is None:
        return _exact_ratio(pred_change, oracle_change)
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
