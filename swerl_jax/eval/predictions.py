"""What the harness grades, read and checked: SWE-bench instances by id, and predictions in SWE-bench's forms.

Both name files under the harness's --out by instance id, so an id must be a plain file name. A bad prediction
line is reported with its line and field, never fatal; a bad instance file is one error naming the file and
instance.
"""

from __future__ import annotations

import difflib
import json
import pathlib
import re

from swerl_jax.data.swebench import load_instances

PREDICTION_FIELDS = ("instance_id", "model_name_or_path", "model_patch")
# What other tools call a prediction's fields (a diff's "patch", a "model" label): named in the error's did-you-mean.
FIELD_ALIASES = {"patch": "model_patch", "diff": "model_patch", "model": "model_name_or_path",
                 "model_name": "model_name_or_path", "id": "instance_id"}
# An instance id names files and folders under --out: letters, digits, '_', '-', '.', not starting with '.'.
SAFE_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,199}")


def safe_id(instance_id: object) -> bool:
    """Whether `instance_id` can name a file under --out (no '/', no '..', no leading '.', at most 200 chars)."""
    return isinstance(instance_id, str) and SAFE_ID.fullmatch(instance_id) is not None


def index_instances(path: pathlib.Path) -> dict[str, dict]:
    """SWE-bench instances (`data.swebench.load_instances`: a JSON list or JSONL file) by instance_id, each
    checked for the fields grading needs and for an id that can name a file (errors name the file and instance)."""
    instances = {}
    for number, row in enumerate(load_instances(path), 1):
        missing = [k for k in ("instance_id", "repo", "base_commit", "test_patch", "version") if k not in row]
        if missing:
            # PR records (swerl_jax.data's training input) share instance_id/repo/base_commit with SWE-bench, so the
            # missing field alone does not say the wrong kind of file was given
            kind = (": this file holds PR records (oracle_patch, code_context), not SWE-bench instances; give a "
                    "SWE-bench instances file such as ../shared/data/swebench_lite.json"
                    if "oracle_patch" in row and "code_context" in row else "")
            raise ValueError(f"{path}: instance #{number} ({row.get('instance_id', '?')}) lacks {missing}{kind}")
        if not safe_id(row["instance_id"]):
            raise ValueError(f"{path}: instance #{number}: instance_id {row['instance_id']!r} cannot name a file "
                             f"(allowed: {SAFE_ID.pattern})")
        instances[row["instance_id"]] = row
    return instances


def _prediction_rows(path: pathlib.Path) -> list[tuple[int, str, object]]:
    """(number, where, row or a JSONDecodeError) per prediction: JSONL lines, or the items of a JSON list (or of a
    JSON object keyed by instance id), as SWE-bench reads them."""
    text = pathlib.Path(path).read_text(encoding="utf-8-sig")  # a byte-order mark is not part of the JSON
    stripped = text.lstrip()
    if stripped.startswith(("[", "{")):  # one JSON document: a list, or an object keyed by id (pretty-printed)
        try:
            whole = json.loads(text)
        except json.JSONDecodeError as err:
            if stripped.startswith("["):
                return [(1, f"{path}", err)]
            whole = None  # JSONL whose first line is an object
        if isinstance(whole, list):
            return [(i, f"{path}: item #{i}", row) for i, row in enumerate(whole, 1)]
        if isinstance(whole, dict) and whole and all(isinstance(v, dict) for v in whole.values()) \
                and not any(k in whole for k in PREDICTION_FIELDS):
            return [(i, f"{path}: {key}", {**row, "instance_id": row.get("instance_id", key)})
                    for i, (key, row) in enumerate(whole.items(), 1)]
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append((number, f"{path}:{number}", json.loads(line)))
            except json.JSONDecodeError as err:
                rows.append((number, f"{path}:{number}", err))
    return rows


def _renamed_fields(row: dict, missing: list[str]) -> str:
    """`; did you mean 'model_patch' (not 'patch')?` for each missing field a key of `row` seems to stand for: the
    names other tools write (`patch`, `model`), else the closest key."""
    extra = [k for k in row if isinstance(k, str) and k not in PREDICTION_FIELDS]
    pairs = []
    for field in missing:
        close = [k for k in extra if FIELD_ALIASES.get(k) == field] or difflib.get_close_matches(field, extra, n=1)
        if close:
            pairs.append(f"{field!r} (not {close[0]!r})")
            extra.remove(close[0])
    return f"; did you mean {', '.join(pairs)}?" if pairs else ""


def load_predictions(path: pathlib.Path) -> tuple[dict[str, dict], list[dict]]:
    """Predictions (JSONL, a JSON list, or a JSON object by id) -> ({instance_id: prediction}, [per-line errors]).
    A bad line is reported, not fatal."""
    predictions, errors = {}, []
    for number, where, row in _prediction_rows(path):
        if isinstance(row, json.JSONDecodeError):
            errors.append({"line": number, "status": "malformed_prediction", "error": f"{where}: bad JSON: {row}"})
            continue
        if not isinstance(row, dict) or any(k not in row for k in PREDICTION_FIELDS):
            missing = [k for k in PREDICTION_FIELDS if k not in row] if isinstance(row, dict) else "an object"
            errors.append({"line": number, "status": "malformed_prediction", "instance_id": row.get("instance_id")
                           if isinstance(row, dict) else None,
                           "error": f"{where}: missing {missing} (a prediction has the fields {PREDICTION_FIELDS})"
                           + (_renamed_fields(row, missing) if isinstance(row, dict) else "")})
            continue
        if not isinstance(row["instance_id"], str):
            errors.append({"line": number, "status": "malformed_prediction", "instance_id": None,
                           "error": f"{where}: instance_id must be a string, got {type(row['instance_id']).__name__}"})
            continue
        if not isinstance(row["model_patch"], str) and row["model_patch"] is not None:
            errors.append({"line": number, "status": "malformed_prediction", "instance_id": row["instance_id"],
                           "error": f"{where}: model_patch must be a string"})
            continue
        try:
            (row["model_patch"] or "").encode("utf-8")
        except UnicodeEncodeError as err:  # JSON allows "\udc80"; no patch file can hold it
            errors.append({"line": number, "status": "malformed_prediction", "instance_id": row["instance_id"],
                           "error": f"{where}: model_patch is not valid text (a lone surrogate at {err.start})"})
            continue
        if row["instance_id"] in predictions:
            errors.append({"line": number, "status": "duplicate_prediction", "instance_id": row["instance_id"],
                           "error": f"{where}: second prediction for {row['instance_id']} (the first is graded)"})
            continue
        predictions[row["instance_id"]] = {**row, "model_patch": row["model_patch"] or ""}
    return predictions, errors


def chosen_instances(known: dict[str, dict], instance_ids: str, source: str) -> list[dict]:
    """The instances a config's comma-separated `instance_ids` names (every one of `known` when empty);
    ValueError for an id named twice, KeyError naming the ids not in `source`, with a "did you mean"."""
    ids = [i.strip() for i in str(instance_ids).split(",") if i.strip()]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise ValueError(f"instance_ids: {twice} named more than once")
    missing = [i for i in ids if i not in known]
    if missing:
        close = difflib.get_close_matches(missing[0], list(known), n=1)
        raise KeyError(f"instance_ids: {missing} are not in {source}" + (f" (did you mean {close[0]}?)" if close
                                                                          else ""))
    return [known[i] for i in ids] if ids else list(known.values())
