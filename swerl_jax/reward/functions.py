"""The SWE-RL reward functions (bit-compatible with the official release) and the variants registry.

``calculate_search_replace_reward`` returns the release's float to the last bit. What makes it fast
without changing a result:

* block parsing is linear (swerl_jax/answer.py);
* what the 16 samples of a GRPO group share is prepared once per (code_context, oracle_new_content) and
  cached: the oracle's normalised diff and its context files split into lines; a predicted file is split
  reusing those lines (diff.edited_lines) and a predicted file equal to the oracle's gets the oracle's diff;
* the character-level similarity is computed in near-linear time (swerl_jax/reward/ratio.py).
"""

from __future__ import annotations

import collections
import importlib
import numbers
import threading
from collections.abc import Callable

from swerl_jax.answer import FormatError, extract_thought_solution, parse_search_replace
from swerl_jax.reward.apply import MAX_FILE_CHARS, apply_code_change
from swerl_jax.reward.diff import (
    SplitText,
    compute_change_similarities,
    diff_against,
    generate_unified_diff,
    get_filelevel_diff,
    mean_similarity,
)

RewardFn = Callable[[dict, dict, str], tuple[float, dict]]

_ORACLE_CACHE_SIZE = 32
_oracle_cache: collections.OrderedDict = collections.OrderedDict()
_oracle_lock = threading.Lock()


class _Group:
    """What the rollouts of one group share: the oracle's new contents and diffs, the split context files.

    Only the oracle's paths are prepared: they are the cache key, so nothing here can come from another
    context. Immutable once built (shared between threads).
    """

    __slots__ = ("oracle_new_content", "patch", "bases")

    def __init__(self, code_context: dict[str, str], oracle_new_content: dict[str, str]):
        self.oracle_new_content = oracle_new_content
        self.bases = {path: SplitText(code_context.get(path, "")) for path in oracle_new_content}
        self.patch: dict[str, str] = {}
        for path, new_content in oracle_new_content.items():
            patch = diff_against(self.bases[path], new_content)
            if patch:
                self.patch[path] = patch

    def predicted_patch(self, code_context: dict[str, str], pred_new_content: dict[str, str]) -> dict[str, str]:
        """``get_normalized_patch(code_context, pred_new_content)``, from the prepared files where it can."""
        patch_dict: dict[str, str] = {}
        for path, new_content in pred_new_content.items():
            base = self.bases.get(path)
            if base is None:
                patch = generate_unified_diff(code_context.get(path, ""), new_content)
            elif new_content == self.oracle_new_content[path]:
                patch = self.patch.get(path, "")  # same context, same new content: the oracle's diff
            else:
                patch = diff_against(base, new_content)
            if patch:
                patch_dict[path] = patch
        return patch_dict


def _group(code_context: dict[str, str], oracle_new_content: dict[str, str]) -> _Group:
    """The prepared group, memoised (small LRU) on the exact contents of the oracle's paths.

    The key holds the strings themselves, so equal inputs hit and a hash collision can never alias.
    """
    key = tuple((path, code_context.get(path, ""), new) for path, new in oracle_new_content.items())
    with _oracle_lock:
        hit = _oracle_cache.get(key)
        if hit is not None:
            _oracle_cache.move_to_end(key)
            return hit
    group = _Group(code_context, oracle_new_content)
    with _oracle_lock:
        _oracle_cache[key] = group
        while len(_oracle_cache) > _ORACLE_CACHE_SIZE:
            _oracle_cache.popitem(last=False)
    return group


def oracle_patch(code_context: dict[str, str], oracle_new_content: dict[str, str]) -> dict[str, str]:
    """The oracle's normalised diff per path, memoised with its group. Shared: callers must not mutate it."""
    return _group(code_context, oracle_new_content).patch


def calculate_reward(
    code_context: dict[str, str], oracle_new_content: dict[str, str], pred_new_content: dict[str, str]
) -> tuple[float, dict]:
    """Mean difflib similarity of predicted vs oracle per-file diffs; 1.0 when neither changes anything."""
    group = _group(code_context, oracle_new_content)
    pred = group.predicted_patch(code_context, pred_new_content)
    similarities = compute_change_similarities(pred, group.patch)
    return mean_similarity(similarities), dict(similarities=similarities)


def _predicted_content(
    code_context: dict[str, str], output: str, max_file_chars: int
) -> tuple[str, str, dict[str, str]]:
    """(thought, answer, new contents) of a model output; raises FormatError."""
    thought, answer = extract_thought_solution(output)
    edits = parse_search_replace(answer)
    if len(edits) == 0:
        raise FormatError("No valid search blocks found", "no_blocks")
    return thought, answer, apply_code_change(code_context, edits, max_file_chars=max_file_chars)


def calculate_search_replace_reward(
    code_context: dict[str, str],
    oracle_new_content: dict[str, str],
    output: str,
    max_file_chars: int = MAX_FILE_CHARS,
) -> tuple[float, dict]:
    """The SWE-RL reward of a ``<think>..</think><solution>..</solution>`` output with SEARCH/REPLACE blocks.

    Returns (reward, info): reward in [0, 1], or -1.0 on a format error with info {error (the release's
    message), reason, tag / block_index / path}; otherwise info {similarities, thought, answer} as the
    release. ``max_file_chars`` bounds a predicted file (see apply.MAX_FILE_CHARS).
    """
    try:
        thought, answer, pred_new_content = _predicted_content(code_context, output, max_file_chars)
    except FormatError as e:
        return -1.0, e.info()
    reward, metadata = calculate_reward(code_context, oracle_new_content, pred_new_content)
    metadata["thought"] = thought
    metadata["answer"] = answer
    return reward, metadata


def calculate_discrete_reward(
    code_context: dict[str, str],
    oracle_new_content: dict[str, str],
    output: str,
    max_file_chars: int = MAX_FILE_CHARS,
) -> tuple[float, dict]:
    """Discrete ablation: 1.0 if the per-file diffs equal the oracle's, else 0.0; -1.0 on format error."""
    try:
        thought, answer, pred_new_content = _predicted_content(code_context, output, max_file_chars)
    except FormatError as e:
        return -1.0, e.info()
    group = _group(code_context, oracle_new_content)
    exact = group.predicted_patch(code_context, pred_new_content) == group.patch
    return (1.0 if exact else 0.0), dict(exact_match=exact, thought=thought, answer=answer)


def calculate_reward_unidiff(oracle_patches: list[str], pred_patches: list[str]) -> tuple[float, dict]:
    """The release's reward between two sets of unified diffs (later patches override earlier per path)."""
    pred_patch_dict: dict[str, str] = {}
    oracle_patch_dict: dict[str, str] = {}
    for patch_text in oracle_patches:
        oracle_patch_dict.update(get_filelevel_diff(patch_text))
    for patch_text in pred_patches:
        pred_patch_dict.update(get_filelevel_diff(patch_text))
    similarities = compute_change_similarities(pred_patch_dict, oracle_patch_dict)
    return mean_similarity(similarities), dict(similarities=similarities)


REWARD_KINDS: dict[str, RewardFn] = {
    "continuous": calculate_search_replace_reward,
    "discrete": calculate_discrete_reward,
}


def get_reward_fn(kind: str) -> RewardFn:
    """The reward function named by ``config.reward.kind``: continuous | discrete | python:pkg.module.fn.

    A ``python:`` hook must be a module-level callable (code_context, oracle_new_content, output) ->
    (float, dict), importable in worker processes.
    """
    if kind in REWARD_KINDS:
        return REWARD_KINDS[kind]
    if kind.startswith("python:"):
        target = kind[len("python:"):]
        module_name, _, attr = target.rpartition(".")
        if not module_name or not attr:
            raise ValueError(f"reward.kind={kind!r}: expected 'python:package.module.function'")
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise ValueError(f"reward.kind={kind!r}: cannot import module {module_name!r}: {e}") from e
        fn = getattr(module, attr, None)
        if not callable(fn):
            raise ValueError(f"reward.kind={kind!r}: {module_name!r} has no callable {attr!r}")
        return fn
    raise ValueError(
        f"reward.kind={kind!r} is unknown; choose one of {sorted(REWARD_KINDS)} or 'python:module.fn'"
    )


def reward_pair(value: object, kind: str = "reward function") -> tuple[float, dict]:
    """A reward function's return checked: (float reward, info dict), or a TypeError naming the expected
    ``(float, dict)`` and what came back (a bare float, a str like "0.5", a dict ...)."""
    shown = repr(value)[:80]
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise TypeError(f"{kind} returned {shown} ({type(value).__name__}); expected a (float, dict) pair: "
                        "return (reward, info), e.g. (0.5, {})")
    reward, info = value
    numeric = getattr(reward, "shape", None) == () and getattr(getattr(reward, "dtype", None), "kind", "") in "fiu"
    if isinstance(reward, bool | str | bytes) or not (isinstance(reward, numbers.Real) or numeric):
        raise TypeError(f"{kind} returned reward {repr(reward)[:80]} ({type(reward).__name__}); expected a "
                        "(float, dict) pair whose reward is a number, e.g. (0.5, {})")
    if not isinstance(info, dict):
        raise TypeError(f"{kind} returned info {repr(info)[:80]} ({type(info).__name__}); expected a "
                        "(float, dict) pair whose info is a dict, e.g. (0.5, {})")
    return float(reward), info


def compact_info(info: dict, max_chars: int = 500) -> dict:
    """A small, picklable summary of an info dict (no file contents): for logs, metrics and the service."""
    out: dict = {}
    for key in ("reason", "tag", "block_index", "path", "exact_match"):
        if key in info:
            out[key] = info[key]
    if "error" in info:
        out["error"] = str(info["error"])[:max_chars]
    if "similarities" in info:
        out["similarities"] = [
            {"path": s["path"], "similarity": s["similarity"]} for s in info["similarities"]
        ]
    return out
