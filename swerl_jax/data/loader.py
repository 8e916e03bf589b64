"""Grain pipelines that stream PR records into RL and SFT batches of token ids, deterministically and resumably.

    records (JSONL / ArrayRecord / in memory) -> MapDataset: shard by process -> seeded shuffle -> repeat
    -> map: decode, validate, SWE-RL prompt, tokenize (in `worker_count` Grain worker processes)
    -> IterDataset: length/validity filter with per-reason counts (main process) -> batch

The filter runs after the worker stage so the output never depends on the number of workers, and its counts
are part of the iterator state. The iterator state (saved through Orbax with Grain's checkpoint handler, see
`save_iterator` / `restore_iterator`) restores to exactly the next batch.

Token ids are not padded here: `swerl_jax.batching` pads them once, in the layout both trainers use. RL batches:
``prompt_ids`` (B unpadded int32 arrays, at most max_prompt_len tokens), ``prompt_len`` int32 [B], and the
fields the reward needs (``instance_id``, ``code_context``, ``oracle_new_content``: lists of length B). SFT
batches: ``prompt_ids`` and ``target_ids`` (B unpadded int32 arrays each: the prompt, and the oracle answer +
end of turn that the loss scores; together at most max_len), ``prompt_len`` int32 [B], ``instance_id``.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import os
from collections.abc import Sequence
from typing import Any

import grain
import numpy as np

from swerl_jax.chat import encode_parts
from swerl_jax.config import rl_seed
from swerl_jax.data.paths import expand_record_paths
from swerl_jax.data.prompts import prompt_or_reason
from swerl_jax.data.records import RecordError, decode_record, validate_record
from swerl_jax.data.synthetic import config_records
from swerl_jax.data.targets import oracle_solution
from swerl_jax.tokenizer import load_tokenizer, tokenizer_path

log = logging.getLogger("swerl_jax.data")

DROP = "_drop"  # key of the marker element a worker returns for a record it cannot use


class JsonlSource:
    """Random access to the lines of JSONL files (Grain data source: `__len__`, `__getitem__` -> bytes).

    The line index is built once (offsets only); file descriptors open lazily so the source pickles into workers.
    """

    def __init__(self, paths: Sequence[str]):
        self._paths = [str(p) for p in paths]
        index = []
        for fi, path in enumerate(self._paths):
            if not os.path.isfile(path):
                raise FileNotFoundError(f"record file {path} does not exist")
            with open(path, "rb") as f:
                offset = 0
                for line in f:
                    if line.strip():
                        index.append((fi, offset, len(line)))
                    offset += len(line)
        self._index = np.asarray(index, dtype=np.int64).reshape(-1, 3)
        self._files: dict[int, Any] = {}

    def __len__(self) -> int:
        return int(self._index.shape[0])

    def __getitem__(self, i: int) -> bytes:
        fi, offset, size = (int(x) for x in self._index[i])
        if fi not in self._files:
            self._files[fi] = os.open(self._paths[fi], os.O_RDONLY)
        # pread, not seek + read: Grain's prefetch threads read concurrently through the same descriptor.
        return os.pread(self._files[fi], size, offset)

    def where(self, i: int) -> str:
        """`path:line` of entry i, for error messages (line numbers count blank lines too)."""
        fi, offset, _ = (int(x) for x in self._index[i])
        with open(self._paths[fi], "rb") as f:
            line = f.read(offset).count(b"\n") + 1
        return f"{self._paths[fi]}:{line}"

    def __getstate__(self) -> dict:
        return {"_paths": self._paths, "_index": self._index, "_files": {}}


def record_source(files: Sequence[str]) -> Sequence:
    """A Grain random-access source of raw records over JSONL or ArrayRecord files (one kind per call)."""
    files = [str(f) for f in files]
    if not files:
        raise ValueError("data.train_files is empty")
    if all(f.endswith(".jsonl") for f in files):
        return JsonlSource(files)
    if all(f.endswith((".arrayrecord", ".array_record")) for f in files):
        for f in files:
            if not os.path.isfile(f):
                raise FileNotFoundError(f"record file {f} does not exist")
        return grain.sources.ArrayRecordDataSource(files)
    raise ValueError(f"data.train_files {files}: use only .jsonl or only .arrayrecord/.array_record files")


def decode_any(raw: Any) -> dict:
    """A record from what a source yields (a dict, or JSON / ArrayRecord bytes), validated."""
    if isinstance(raw, dict):
        return validate_record(raw)
    return decode_record(raw, where="")


@dataclasses.dataclass(frozen=True)
class RLPrepare(grain.transforms.Map):
    """Record -> RL example (runs in the worker processes; holds the tokenizer's path, not the tokenizer)."""

    tokenizer: str
    max_prompt_len: int
    prompt_style: str = "swe_rl"

    def map(self, raw: Any) -> dict:
        """Decode, validate, build and tokenize the prompt; a drop marker with the reason when unusable."""
        try:
            record = decode_any(raw)
        except RecordError as e:
            return {DROP: f"invalid record: {e.reason}", "error": str(e)}
        tok = load_tokenizer(self.tokenizer)
        prompt, reason, detail = prompt_or_reason(record, tok, self.max_prompt_len, self.prompt_style)
        if prompt is None:  # counted in data/dropped with its reason, never raised (issue 57 item 1)
            return {DROP: reason, "error": detail}
        return {
            "prompt_ids": np.asarray(prompt.ids, np.int32), "prompt_len": np.int32(prompt.num_tokens),
            "prompt_cut": np.bool_(any(d.action != "kept" for d in prompt.decisions)),
            "instance_id": record["instance_id"], "code_context": record["code_context"],
            "oracle_new_content": record["oracle_new_content"],
        }


@dataclasses.dataclass(frozen=True)
class SFTPrepare(grain.transforms.Map):
    """Record -> SFT example: the prompt and the oracle SWE-RL answer + end of turn, at most `max_len` together."""

    tokenizer: str
    max_len: int
    max_prompt_len: int
    prompt_style: str = "swe_rl"
    prompt_loss_weight: float = 0.0

    def map(self, raw: Any) -> dict:
        """Decode, validate, build prompt and target; a drop marker with the reason when unusable.

        With `prompt_loss_weight` w > 0 the prompt's tokens after the first join the target, weighted w in
        `target_mask` (the answer's weigh 1): the next-token loss then also runs over the issue and the code, where
        identifiers recur (the issue names a function the code defines), which is where a small policy learns to
        copy from its context.
        """
        try:
            record = decode_any(raw)
            target = oracle_solution(record)
        except (RecordError, ValueError) as e:
            return {DROP: f"invalid record: {getattr(e, 'reason', 'no search/replace oracle')}", "error": str(e)}
        tok = load_tokenizer(self.tokenizer)
        # The end-of-turn token ends the completion (ChatML: <|im_end|>); the model must learn to emit it.
        # the oracle's code is the repository's text (never a control token); the end of turn is one
        target_ids = np.asarray(encode_parts(tok, [(target, False), (tok.eos_token or "", True)]), np.int32)
        budget = min(self.max_prompt_len, self.max_len - len(target_ids))
        too_long = "prompt + target longer than max_len"
        prompt, reason, detail = (prompt_or_reason(record, tok, budget, self.prompt_style, too_long=too_long)
                                  if budget > 0 else (None, too_long, record["instance_id"]))
        if prompt is None:
            return {DROP: reason, "error": detail}
        prompt_ids = np.asarray(prompt.ids, np.int32)
        out = {"prompt_ids": prompt_ids, "target_ids": target_ids, "prompt_len": np.int32(prompt.num_tokens),
               "instance_id": record["instance_id"]}
        if self.prompt_loss_weight > 0:
            out["prompt_ids"], out["target_ids"] = prompt_ids[:1], np.concatenate([prompt_ids[1:], target_ids])
            out["target_mask"] = np.concatenate([np.full(len(prompt_ids) - 1, self.prompt_loss_weight, np.float32),
                                                 np.ones(len(target_ids), np.float32)])
        return out


class _CountingFilterIterator(grain.DatasetIterator):
    """Drops marker elements and counts them by reason; the counts are part of the (restorable) state."""

    def __init__(self, parent: grain.DatasetIterator, pass_size: int):
        super().__init__(parent)
        self.kept = 0
        self.dropped: collections.Counter[str] = collections.Counter()
        self._pass_size = pass_size
        self._run = 0  # drops since the last kept element

    def __next__(self) -> dict:
        while True:
            element = next(self._parent)
            if DROP in element:
                if element[DROP] not in self.dropped:  # the first of each kind is logged; all are counted
                    log.warning("skipping a record: %s (%s); later ones are counted in the data/dropped "
                                "metrics", element[DROP], element.get("error"))
                self.dropped[element[DROP]] += 1
                self._run += 1
                if self._run >= self._pass_size:
                    # A whole pass without one usable record: repeating forever would hang, not train.
                    raise ValueError(f"every one of the {self._pass_size} records of this shard was dropped "
                                     f"(reasons: {dict(self.dropped)}); check data.train_files and raise "
                                     f"data.max_prompt_len / sft.max_len (first: {element.get('error')})")
                continue
            self.kept += 1
            self._run = 0
            return element

    def get_state(self) -> dict[str, Any]:
        """Parent state + counts."""
        return {"parent": self._parent.get_state(), "kept": self.kept, "dropped": dict(self.dropped), "run": self._run}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore parent state and counts."""
        self._parent.set_state(state["parent"])
        self.kept = int(state["kept"])
        self.dropped = collections.Counter({k: int(v) for k, v in state["dropped"].items()})
        self._run = int(state["run"])


class CountingFilter(grain.IterDataset):
    """`IterDataset` stage dropping the workers' drop markers, with counts (see `filter_stats`)."""

    def __init__(self, parent: grain.IterDataset, pass_size: int):
        super().__init__(parent)
        self._pass_size = pass_size

    def __iter__(self) -> _CountingFilterIterator:
        return _CountingFilterIterator(self._parent.__iter__(), self._pass_size)


RAGGED = ("prompt_ids", "target_ids", "target_mask")  # unpadded per-token rows: lists of B arrays


def collate(examples: Sequence[dict]) -> dict:
    """Stack scalar/array fields into [B, ...]; keep token ids (`RAGGED`) and the others (ids, file dicts) as
    lists of length B."""
    out = {}
    for key in examples[0]:
        values = [e[key] for e in examples]
        stack = key not in RAGGED and isinstance(values[0], (np.ndarray, np.generic))
        out[key] = np.stack(values) if stack else values
    return out


def filter_stats(iterator: grain.DatasetIterator) -> dict:
    """{'kept': n, 'dropped': {reason: n}} of the pipeline's filter stage, found by walking the iterator."""
    todo = [iterator]
    while todo:
        it = todo.pop()
        if isinstance(it, _CountingFilterIterator):
            return {"kept": it.kept, "dropped": dict(it.dropped)}
        todo.extend(getattr(it, "_parents", ()))
    raise ValueError("iterator has no CountingFilter stage")


def data_metrics(iterator: Any) -> dict[str, dict]:
    """{"data": {"kept": n, "dropped": {reason: n}}}: this process's running counts for the step metrics
    (empty for an iterator without a CountingFilter stage)."""
    try:
        stats = filter_stats(iterator)
    except ValueError:
        return {}
    return {"data": {"kept": stats["kept"], "dropped": stats["dropped"]}}


def shard_args(shard_index: int | None, shard_count: int | None) -> tuple[int, int]:
    """Explicit shard, or this JAX process's (`jax.process_index()`, `jax.process_count()`)."""
    if shard_index is None or shard_count is None:
        import jax

        shard_index, shard_count = jax.process_index(), jax.process_count()
    if not 0 <= shard_index < shard_count:
        raise ValueError(f"shard_index {shard_index} not in [0, shard_count={shard_count})")
    return shard_index, shard_count


def _pipeline(source, prepare: grain.transforms.Map, *, batch_size: int, seed: int, shuffle: bool,
              num_epochs: int, shard_index: int | None, shard_count: int | None, worker_count: int,
              drop_remainder: bool) -> grain.IterDataset:
    if batch_size <= 0:
        raise ValueError(f"batch_size must be > 0, got {batch_size}")
    index, count = shard_args(shard_index, shard_count)
    ds = grain.MapDataset.source(source)
    if len(ds) == 0:
        raise ValueError("the record source is empty")
    ds = ds[index::count]  # disjoint strided shards that together cover every record
    pass_size = len(ds)
    if shuffle:
        ds = ds.shuffle(seed=seed)  # after repeat each epoch gets its own permutation (seed + epoch)
    ds = ds.repeat(None if num_epochs < 0 else num_epochs)
    ds = ds.map(prepare).to_iter_dataset()
    if worker_count > 0:
        from absl import flags

        # Grain's worker processes read absl flags; programs that are not absl apps (pytest, notebooks) have
        # not parsed them, so use the defaults.
        if not flags.FLAGS.is_parsed():
            flags.FLAGS.mark_as_parsed()
        ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=worker_count, per_worker_buffer_size=2))
    return CountingFilter(ds, pass_size).batch(batch_size, drop_remainder=drop_remainder, batch_fn=collate)


def rl_dataset(source, *, tokenizer: str = "", batch_size: int, max_prompt_len: int, seed: int = 0,
               shuffle: bool = True, num_epochs: int = -1, shard_index: int | None = None,
               shard_count: int | None = None, worker_count: int = 0, drop_remainder: bool = True,
               prompt_style: str = "swe_rl") -> grain.IterDataset:
    """RL prompt batches (see the module docstring) from a source of raw records (`record_source`, or a list of
    record dicts); `num_epochs` -1 repeats forever; shards default to this JAX process's."""
    prepare = RLPrepare(tokenizer, max_prompt_len, prompt_style)
    return _pipeline(source, prepare, batch_size=batch_size, seed=seed, shuffle=shuffle, num_epochs=num_epochs,
                     shard_index=shard_index, shard_count=shard_count, worker_count=worker_count,
                     drop_remainder=drop_remainder)


def sft_dataset(source, *, tokenizer: str = "", batch_size: int, max_len: int, max_prompt_len: int | None = None,
                seed: int = 0, shuffle: bool = True, num_epochs: int = -1, shard_index: int | None = None,
                shard_count: int | None = None, worker_count: int = 0, drop_remainder: bool = True,
                prompt_style: str = "swe_rl", prompt_loss_weight: float = 0.0) -> grain.IterDataset:
    """SFT batches: prompt and oracle answer token ids (the loss scores the answer, and the prompt too with weight
    `prompt_loss_weight` > 0: `SFTPrepare`), at most `max_len` together."""
    prepare = SFTPrepare(tokenizer, max_len, max_prompt_len or max_len, prompt_style, float(prompt_loss_weight))
    return _pipeline(source, prepare, batch_size=batch_size, seed=seed, shuffle=shuffle, num_epochs=num_epochs,
                     shard_index=shard_index, shard_count=shard_count, worker_count=worker_count,
                     drop_remainder=drop_remainder)


def source_from_config(config) -> Sequence:
    """`config.data.train_files` (comma-separated files, directories or globs: `paths.expand_record_paths`) as
    a record source, or synthetic records (`data.generator`) when empty."""
    if str(config.data.train_files).strip():
        return record_source(expand_record_paths(str(config.data.train_files)))
    return config_records(config.data, int(config.data.synthetic_num_records), int(config.seed))


class FirstRecords(Sequence):
    """The first `n` records of a random-access source (a view: nothing is read until indexed)."""

    def __init__(self, source: Sequence, n: int) -> None:
        if n < 1:
            raise ValueError(f"data.rl_num_records must be >= 1 to select records, got {n}")
        self.source, self.n = source, min(int(n), len(source))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index):  # Grain indexes with ints
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.n))]
        if not -self.n <= index < self.n:
            raise IndexError(f"record {index} is outside data.rl_num_records={self.n}")
        return self.source[index % self.n]


def rl_dataset_from_config(config, batch_size: int | None = None) -> grain.IterDataset:
    """The RL pipeline of an experiment config (data.*, model.tokenizer, rl.prompts_per_step per process);
    `data.rl_num_records` > 0 keeps only the source's first N records (the SFT stage still sees them all)."""
    import jax

    d = config.data
    per_process = batch_size or max(1, int(config.rl.prompts_per_step) // jax.process_count())
    source = source_from_config(config)
    if int(d.rl_num_records) > 0:
        source = FirstRecords(source, int(d.rl_num_records))
    return rl_dataset(source, tokenizer=tokenizer_path(config.model), batch_size=per_process,
                      max_prompt_len=int(d.max_prompt_len), seed=rl_seed(config), shuffle=bool(d.shuffle),
                      num_epochs=int(d.num_epochs), worker_count=int(d.worker_count),
                      prompt_style=str(d.prompt_style))


def sft_dataset_from_config(config, batch_size: int | None = None) -> grain.IterDataset:
    """The SFT pipeline of an experiment config (data.*, sft.batch_size per process, sft.max_len)."""
    import jax

    d = config.data
    per_process = batch_size or max(1, int(config.sft.batch_size) // jax.process_count())
    return sft_dataset(source_from_config(config), tokenizer=tokenizer_path(config.model), batch_size=per_process,
                       max_len=int(config.sft.max_len), max_prompt_len=int(d.max_prompt_len), seed=int(config.seed),
                       shuffle=bool(d.shuffle), num_epochs=int(d.num_epochs), worker_count=int(d.worker_count),
                       prompt_style=str(d.prompt_style), prompt_loss_weight=float(config.sft.prompt_loss_weight))


def save_iterator(iterator: grain.DatasetIterator, directory: str | os.PathLike) -> None:
    """Save the iterator state with Orbax through Grain's checkpoint handler (one JSON file per process)."""
    import orbax.checkpoint as ocp

    with ocp.Checkpointer(grain.checkpoint.CheckpointHandler()) as ckptr:
        ckptr.save(os.path.abspath(directory), args=grain.checkpoint.CheckpointSave(iterator))


def restore_iterator(iterator: grain.DatasetIterator, directory: str | os.PathLike) -> grain.DatasetIterator:
    """Restore a state saved by `save_iterator` into a fresh iterator of the same pipeline (returned)."""
    import orbax.checkpoint as ocp

    with ocp.Checkpointer(grain.checkpoint.CheckpointHandler()) as ckptr:
        return ckptr.restore(os.path.abspath(directory), args=grain.checkpoint.CheckpointRestore(iterator))


def state_json(iterator: grain.DatasetIterator) -> str:
    """The iterator state as JSON text (what the checkpoint stores), for logs and comparisons."""
    return json.dumps(iterator.get_state(), sort_keys=True)
