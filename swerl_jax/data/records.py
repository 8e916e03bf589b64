"""The PR record: schema, validation with errors that name the record and field, JSONL/ArrayRecord I/O.

A record is one merged pull request (or SWE-bench instance) as SWE-RL trains on it (see DESIGN.md):
``instance_id, repo, base_commit, problem_statement, code_context {path: content},
oracle_new_content {path: content}, oracle_patch, created_at, source`` plus the optional
``relevant_files`` (paths in ``code_context`` that the PR does not modify) and ``test_patch``.

Files ending in ``.jsonl`` hold one JSON object per line; ``.arrayrecord`` / ``.array_record`` files hold one
UTF-8 JSON object per record (Grain's random-access format, written with ``group_size:1``).
"""

from __future__ import annotations

import collections
import json
import os
import pathlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

REQUIRED_FIELDS: dict[str, type] = {
    "instance_id": str,
    "repo": str,
    "base_commit": str,
    "problem_statement": str,
    "code_context": dict,
    "oracle_new_content": dict,
    "oracle_patch": str,
    "created_at": str,
    "source": str,
}
OPTIONAL_FIELDS: dict[str, type] = {"relevant_files": list, "test_patch": str}
JSONL_SUFFIXES = (".jsonl",)
ARRAY_RECORD_SUFFIXES = (".arrayrecord", ".array_record")


class RecordError(ValueError):
    """A record that breaks the schema; names the record and the field."""

    def __init__(self, record_id: str, field: str, message: str):
        self.record_id = record_id
        self.field = field
        self.message = message
        super().__init__(f"record {record_id!r}: field {field!r}: {message}")

    @property
    def reason(self) -> str:
        """A short key for counting errors by kind (field + message without specifics)."""
        return f"{self.field}: {self.message.split(':')[0]}"


def _utf8_problem(text: str) -> str | None:
    """Why `text` cannot be UTF-8 encoded (lone surrogates from bad escapes), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"not valid UTF-8 (character {e.start}: {text[e.start]!r})"
    return None


def _path_problem(path: str) -> str | None:
    """Why `path` is unsafe to use as a repository-relative path, or None."""
    if not path:
        return "empty path"
    if "\x00" in path:
        return "unsafe path (NUL byte)"
    if "\\" in path:
        return "unsafe path (backslash)"
    if path.startswith("/") or (len(path) > 1 and path[1] == ":"):
        return "unsafe path (absolute)"
    if any(part in ("..", "") for part in path.split("/")):
        return "unsafe path ('..' or empty component)"
    return None


def _check_files(rid: str, field: str, files: dict) -> None:
    for path, content in files.items():
        if not isinstance(path, str):
            raise RecordError(rid, field, f"wrong type: path {path!r} is {type(path).__name__}, expected str")
        problem = _path_problem(path) or _utf8_problem(path)
        if problem:
            raise RecordError(rid, field, f"{problem}: {path!r}")
        if isinstance(content, bytes):
            raise RecordError(rid, field, f"not valid UTF-8 (bytes, not text): {path!r}")
        if not isinstance(content, str):
            raise RecordError(rid, field, f"wrong type: content of {path!r} is {type(content).__name__}, expected str")
        problem = _utf8_problem(content)
        if problem:
            raise RecordError(rid, field, f"{problem}: {path!r}")


def validate_record(record: Any, where: str = "") -> dict:
    """Check one record against the schema and return it unchanged.

    Args:
      record: the decoded record.
      where: where it came from (``file.jsonl:12``), used as its name when it has no usable instance_id.

    Raises:
      RecordError: naming the record and the field, for a missing field, a wrong type, an empty problem
        statement, an oracle identical to the context, an unsafe path or text that is not UTF-8.
    """
    if not isinstance(record, dict):
        raise RecordError(where or "?", "<record>", f"wrong type: {type(record).__name__}, expected a JSON object")
    rid = record.get("instance_id")
    rid = rid if isinstance(rid, str) and rid else (where or "?")
    if where and rid != where:
        rid = f"{rid} ({where})"
    for field, kind in REQUIRED_FIELDS.items():
        if field not in record:
            raise RecordError(rid, field, "missing field")
        value = record[field]
        if isinstance(value, bytes):
            raise RecordError(rid, field, "not valid UTF-8 (bytes, not text)")
        if not isinstance(value, kind):
            raise RecordError(rid, field, f"wrong type: {type(value).__name__}, expected {kind.__name__}")
        if kind is str:
            problem = _utf8_problem(value)
            if problem:
                raise RecordError(rid, field, problem)
    for field, kind in OPTIONAL_FIELDS.items():
        if field in record and not isinstance(record[field], kind):
            raise RecordError(rid, field, f"wrong type: {type(record[field]).__name__}, expected {kind.__name__}")
    if not record["instance_id"].strip():
        raise RecordError(rid, "instance_id", "empty instance_id")
    if not record["problem_statement"].strip():
        raise RecordError(rid, "problem_statement", "empty problem statement")
    _check_files(rid, "code_context", record["code_context"])
    _check_files(rid, "oracle_new_content", record["oracle_new_content"])
    if not record["oracle_new_content"]:
        raise RecordError(rid, "oracle_new_content", "empty: the PR changes no file")
    changed = [p for p, c in record["oracle_new_content"].items() if record["code_context"].get(p) != c]
    if not changed:
        raise RecordError(rid, "oracle_new_content", "oracle identical to code_context: the PR changes nothing")
    for path in record.get("relevant_files", []):
        if not isinstance(path, str):
            raise RecordError(rid, "relevant_files", f"wrong type: {type(path).__name__}, expected str")
        if path not in record["code_context"]:
            raise RecordError(rid, "relevant_files", f"path not in code_context: {path!r}")
        if path in changed:
            raise RecordError(rid, "relevant_files", f"path modified by the oracle, not merely relevant: {path!r}")
    return record


def _kind(path: str | os.PathLike) -> str:
    name = str(path)
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if name.endswith(ARRAY_RECORD_SUFFIXES):
        return "array_record"
    raise ValueError(f"{name}: unknown record file type (expected {JSONL_SUFFIXES + ARRAY_RECORD_SUFFIXES})")


def iter_raw(path: str | os.PathLike) -> Iterator[tuple[str, bytes]]:
    """(location, raw JSON bytes) for every entry of a JSONL or ArrayRecord file, undecoded."""
    kind = _kind(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"record file {path} does not exist")
    if kind == "jsonl":
        with open(path, "rb") as f:
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    yield f"{path}:{lineno}", line
    else:
        from array_record.python.array_record_module import ArrayRecordReader

        reader = ArrayRecordReader(str(path))
        try:
            for i in range(reader.num_records()):
                yield f"{path}[{i}]", reader.read([i])[0]
        finally:
            reader.close()


def decode_record(raw: bytes | str, where: str) -> dict:
    """Decode and validate one raw JSON entry; malformed JSON is a RecordError on field '<json>'."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as e:
        raise RecordError(where, "<json>", f"not valid UTF-8 (byte {e.start})") from None
    # A UTF-8 byte-order mark (editors on Windows put one before the first line) is not part of the JSON.
    text = text.removeprefix("\ufeff")
    try:
        record = json.loads(text)
    except json.JSONDecodeError as e:
        # Some json messages end in "at" ("Invalid control character at"): say the position once.
        raise RecordError(where, "<json>", f"malformed JSON: {e.msg.removesuffix(' at')} at column {e.colno}") from None
    except RecursionError:
        raise RecordError(where, "<json>", "malformed JSON: nested too deeply") from None
    except ValueError as e:
        # json turns an integer literal over sys.get_int_max_str_digits() digits into a plain ValueError.
        raise RecordError(where, "<json>", f"malformed JSON: {str(e).split(';')[0]}") from None
    return validate_record(record, where=where)


class ErrorCounter:
    """Counts invalid records by reason and keeps the first few messages (the default `on_error`)."""

    def __init__(self, keep: int = 20):
        self.counts: collections.Counter[str] = collections.Counter()
        self.messages: list[str] = []
        self._keep = keep

    def __call__(self, error: RecordError) -> None:
        self.counts[error.reason] += 1
        if len(self.messages) < self._keep:
            self.messages.append(str(error))

    @property
    def total(self) -> int:
        """Number of invalid records seen."""
        return sum(self.counts.values())


def read_records(path: str | os.PathLike, on_error: Callable[[RecordError], None] | None = None,
                 first_seen: dict[str, str] | None = None) -> Iterator[dict]:
    """Stream the valid records of a JSONL or ArrayRecord file (by extension).

    Malformed JSON and invalid records never stop the stream: each is passed to `on_error` (default: an
    `ErrorCounter`, i.e. counted and dropped; pass a list's ``append`` to collect them). A record whose
    instance_id an earlier valid record already has is invalid too (field 'instance_id': duplicate); pass one
    `first_seen` dict (instance_id -> location) to several calls to find duplicates across shards.
    """
    on_error = on_error or ErrorCounter()
    first_seen = {} if first_seen is None else first_seen  # instance_id -> location of its first valid record
    for where, raw in iter_raw(path):
        try:
            record = decode_record(raw, where)
            rid = record["instance_id"]
            if rid in first_seen:
                raise RecordError(f"{rid} ({where})", "instance_id", f"duplicate: first seen at {first_seen[rid]}")
            first_seen[rid] = where
        except RecordError as e:
            on_error(e)
            continue
        yield record


def write_records(path: str | os.PathLike, records: Iterable[dict], validate: bool = True) -> int:
    """Write records to JSONL or ArrayRecord (by extension) atomically: temp file, fsync, rename.

    Returns the number written; with `validate` a bad record raises RecordError and nothing is written.
    """
    kind = _kind(path)
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    n = 0
    try:
        if kind == "jsonl":
            with open(tmp, "w", encoding="utf-8") as f:
                for r in records:
                    f.write(json.dumps(validate_record(r) if validate else r, ensure_ascii=False) + "\n")
                    n += 1
                f.flush()
                os.fsync(f.fileno())
        else:
            from array_record.python.array_record_module import ArrayRecordWriter

            # group_size:1 keeps every record individually addressable for Grain's random access.
            writer = ArrayRecordWriter(str(tmp), "group_size:1")
            try:
                for r in records:
                    writer.write(json.dumps(validate_record(r) if validate else r, ensure_ascii=False).encode())
                    n += 1
            finally:
                writer.close()
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return n


def changed_paths(record: dict) -> list[str]:
    """Paths whose oracle content differs from the context (new files included), in oracle order."""
    ctx = record["code_context"]
    return [p for p, c in record["oracle_new_content"].items() if ctx.get(p) != c]
