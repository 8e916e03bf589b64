"""The Beam graph: clones (+ events, + issues) -> merged PRs -> filtered, deduplicated records -> shards.

Every transform is a pure function or a DoFn whose state (open clones) lives in ``setup``/``teardown``;
nothing global, so the same graph runs on the local FnApiRunner, Dataflow, Flink or Spark. Each PR leaves
exactly one funnel label ("drop:<reason>" or "kept"), each kept PR one "seed:<reason>" label; labels
are counted with Count.PerElement and written to ``<staging>/funnel_counts.json``.
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Any

import apache_beam as beam
from apache_beam.typehints import with_output_types

from swerl_jax.curate import events as ev
from swerl_jax.curate import sinks
from swerl_jax.curate.config import CurateConfig
from swerl_jax.curate.extract import extract_pr, is_binary, rl_seed_reason
from swerl_jax.curate.git_source import GitError, GitRepo, discover_clones, repo_name_from_dir
from swerl_jax.curate.relevant import HeuristicPredictor, LLMPredictor, add_relevant_files
from swerl_jax.sampler.types import SECRET_ENV

FUNNEL = "funnel"
DROPPED = "dropped"  # {"instance_id", "reason"} per dropped PR: the funnel's audit trail


def _dropped(repo: str, number: int, reason: str) -> beam.pvalue.TaggedOutput:
    owner, name = repo.split("/", 1)
    return beam.pvalue.TaggedOutput(DROPPED, {"instance_id": f"{owner}__{name}-{number}", "reason": reason})
_MENTION = re.compile(r"(?:#|/issues/)(\d+)")


@with_output_types(Any)  # tagged outputs defeat Beam's inference
class ParseEvents(beam.DoFn):
    """GH Archive line -> ((repo, kind, number), item); bad lines -> funnel "input:<reason>"."""

    def process(self, line: str):
        try:
            parsed = ev.parse_event(line)
        except ev.EventError as e:
            yield beam.pvalue.TaggedOutput(FUNNEL, f"input:{e.reason}")
            return
        if parsed is not None:
            (repo, kind, number), item = parsed
            yield (repo.lower(), kind, number), item  # GitHub names are case-insensitive


@with_output_types(Any)  # tagged outputs defeat Beam's inference
class ParseIssues(beam.DoFn):
    """Issues-file line -> (repo, issue); bad lines -> funnel "input:unparsable_issue"."""

    def process(self, line: str):
        if not line.strip():
            return
        try:
            repo, issue = ev.parse_issue_line(line)
            yield repo.lower(), issue  # GitHub names are case-insensitive: join on the lower-case name
        except ev.EventError as e:
            yield beam.pvalue.TaggedOutput(FUNNEL, f"input:{e.reason}")


def aggregate(item: tuple[tuple[str, str, int], list[dict]]):
    """Grouped events of one PR or issue -> ("pr", repo, pr) / ("issue", repo, issue).

    A PR that no event shows merged becomes ``{"number", "repo", "unmerged": True}``: git history may still
    show it merged (maintainers who squash or cherry-pick by hand), which ListCandidates decides.
    """
    (repo, kind, number), items = item
    if kind == "issue":
        return ("issue", repo, ev.aggregate_issue(number, list(items)))
    pr = ev.aggregate_pr(repo, number, list(items))
    return ("pr", repo, pr if pr is not None else {"number": number, "repo": repo, "unmerged": True})


def _keyed_by_repo(aggregated: tuple, kind: str):
    """("pr"|"issue", repo, item) of the wanted kind -> (lower-case repo, item)."""
    if aggregated[0] == kind:
        yield aggregated[1].lower(), aggregated[2]


@with_output_types(Any)  # tagged outputs defeat Beam's inference
class ListCandidates(beam.DoFn):
    """Per repository: merged PRs from events, plus PRs recovered from git history that events lack.

    Emits (repo, clone_path, pr, issues mentioned by the PR) and one funnel "candidate" per PR; a merged PR that is
    an evaluation instance (`excluded`: (repository in lower case, number), `curate.benchmarks`) is dropped first.
    """

    def __init__(self, excluded: frozenset = frozenset()):
        super().__init__()
        self.excluded = excluded

    def _benchmark(self, repo: str, numbers: dict) -> Any:
        """Drop the evaluation instances among `numbers` (in place): their labels."""
        for number in sorted(n for n in numbers if (repo.lower(), n) in self.excluded):
            del numbers[number]
            yield beam.pvalue.TaggedOutput(FUNNEL, "candidate")
            yield beam.pvalue.TaggedOutput(FUNNEL, "drop:benchmark_instance")
            yield _dropped(repo, number, "benchmark_instance")

    def process(self, item):
        _, groups = item
        clones, prs, issues = list(groups["clone"]), list(groups["prs"]), list(groups["issues"])
        candidates = {pr["number"]: pr for pr in prs if not pr.get("unmerged")}
        unmerged = {pr["number"] for pr in prs if pr.get("unmerged")} - set(candidates)
        # The clone folder's spelling names the repo (instance ids); events may spell it in another case.
        repo = clones[0][0] if clones else prs[0]["repo"]
        if not clones:
            yield from self._benchmark(repo, candidates)
            for number in sorted(candidates):
                yield beam.pvalue.TaggedOutput(FUNNEL, "candidate")
                yield beam.pvalue.TaggedOutput(FUNNEL, "drop:no_clone")
                yield _dropped(repo, number, "no_clone")
            yield from self._not_merged(repo, unmerged)
            return
        path = clones[0][1]
        yield beam.pvalue.TaggedOutput(FUNNEL, "input:repo")
        git = GitRepo(path)
        try:
            for pr in git.pr_candidates():
                candidates.setdefault(pr["number"], pr)
        except GitError as e:
            yield beam.pvalue.TaggedOutput(FUNNEL, f"input:corrupt_repo:{e.reason}")
        finally:
            git.close()
        yield from self._benchmark(repo, candidates)  # once, with the PRs git history found
        yield from self._not_merged(repo, unmerged - set(candidates))  # each PR is counted once
        by_number = {i["number"]: i for i in issues}
        for number in sorted(candidates):
            pr = candidates[number]
            mentioned = {int(n) for n in _MENTION.findall(f"{pr.get('title', '')}\n{pr.get('body', '')}")}
            yield beam.pvalue.TaggedOutput(FUNNEL, "candidate")
            yield (repo, path, pr, {n: by_number[n] for n in mentioned if n in by_number})


    @staticmethod
    def _not_merged(repo: str, numbers: set[int]):
        for number in sorted(numbers):
            yield beam.pvalue.TaggedOutput(FUNNEL, "candidate")
            yield beam.pvalue.TaggedOutput(FUNNEL, "drop:not_merged")
            yield _dropped(repo, number, "not_merged")


class _RepoCache(beam.DoFn):
    """Keeps one GitRepo (and its cat-file process) per clone for the life of the worker."""

    def setup(self):
        self._repos: dict[str, GitRepo] = {}

    def repo(self, path: str) -> GitRepo:
        if path not in self._repos:
            if len(self._repos) >= 64:  # bound open processes on workers that see many repos
                self._repos.pop(next(iter(self._repos))).close()
            self._repos[path] = GitRepo(path)
        return self._repos[path]

    def teardown(self):
        for r in self._repos.values():
            r.close()
        close = getattr(getattr(getattr(self, "predictor", None), "generate", None), "close", None)
        if close is not None:
            close()  # the LLM predictor's connection to the sampler


@with_output_types(Any)  # tagged outputs defeat Beam's inference
class ExtractPRs(_RepoCache):
    """(repo, path, pr, issues) -> (content_hash, (record, meta, path)), or a funnel "drop:<reason>"."""

    def __init__(self, config: CurateConfig):
        self.config = config

    def process(self, item):
        repo, path, pr, issues = item
        try:
            reason, record, meta = extract_pr(self.repo(path), repo, pr, issues, self.config)
        except Exception:  # a bug or an input we did not foresee must not stop a run over millions of PRs
            logging.exception("curation: extracting %s#%s failed", repo, pr.get("number"))
            reason = "extract_error"
        if reason is not None:
            yield beam.pvalue.TaggedOutput(FUNNEL, f"drop:{reason}")
            yield _dropped(repo, pr["number"], reason)
            return
        yield meta["content_hash"], (record, meta, path)


@with_output_types(Any)  # tagged outputs defeat Beam's inference
def dedupe(item):
    """Keep the earliest PR of each content hash (ties: smallest instance_id); count the others."""
    _, group = item
    ordered = sorted(group, key=lambda g: (g[0]["created_at"], g[0]["instance_id"]))
    yield ordered[0]
    for record, _, _ in ordered[1:]:
        yield beam.pvalue.TaggedOutput(FUNNEL, "drop:duplicate")
        yield beam.pvalue.TaggedOutput(DROPPED, {"instance_id": record["instance_id"], "reason": "duplicate"})


@with_output_types(Any)  # tagged outputs defeat Beam's inference
class AddRelevant(_RepoCache):
    """Adds predicted relevant-but-unmodified files to each kept record within the byte budget."""

    def __init__(self, config: CurateConfig):
        self.config = config

    def setup(self):
        super().setup()
        c = self.config
        self.predictor = None
        if c.relevant_predictor == "heuristic":
            self.predictor = HeuristicPredictor()
        elif c.relevant_predictor == "llm":
            secret = os.environ.get(SECRET_ENV, "").encode() or None  # the server's own secret variable
            self.predictor = LLMPredictor.from_sampler(c.sampler_address, tokenizer=c.sampler_tokenizer,
                                                       secret=secret, max_files=c.max_relevant_files)

    def process(self, item):
        record, meta, path = item
        yield beam.pvalue.TaggedOutput(FUNNEL, "kept")
        if self.predictor is None:
            yield {**record, "relevant_files": []}, meta
            return
        git = self.repo(path)
        try:
            files = dict(git.ls_tree(record["base_commit"]))
        except GitError:
            files = {}

        def read(p: str) -> str | None:
            try:
                data = git.read_blob(files[p])
                return None if is_binary(data) else data.decode("utf-8")
            except (GitError, UnicodeDecodeError, KeyError):
                return None

        modified = {p: record["code_context"].get(p, "") for p in record["oracle_new_content"]}
        try:
            ranked = self.predictor.predict(record["problem_statement"], modified, sorted(files))
        except Exception:  # e.g. the sampler is unreachable: keep the record without relevant files
            logging.exception("curation: relevant-file prediction for %s failed", record["instance_id"])
            yield beam.pvalue.TaggedOutput(FUNNEL, "input:relevant_predictor_error")
            ranked = []
        c = self.config
        yield add_relevant_files(record, ranked, read, c.max_relevant_files, c.relevant_bytes_budget), meta


@with_output_types(Any)  # tagged outputs defeat Beam's inference
def select_seed(item):
    """Tag each kept PR with its RL-seed outcome; seeds go to the "seed" output."""
    record, meta = item
    reason = rl_seed_reason(meta)
    yield beam.pvalue.TaggedOutput(FUNNEL, f"seed:{reason or 'selected'}")
    if reason is None:
        yield beam.pvalue.TaggedOutput("seed", record)
    yield record


@with_output_types(Any)  # tagged outputs defeat Beam's inference
class WriteShard(beam.DoFn):
    """(shard index, records) -> the shard's files in staging (temp + rename)."""

    def __init__(self, staging_dir: str, dataset: str, num_shards: int, formats: tuple[str, ...]):
        self.staging_dir, self.dataset, self.num_shards, self.formats = staging_dir, dataset, num_shards, formats

    def process(self, item):
        index, records = item
        yield from sinks.write_shard(self.staging_dir, self.dataset, index, self.num_shards, records, self.formats)


def _write(pcoll, staging_dir: str, dataset: str, num_shards: int, formats: tuple[str, ...]):
    return (
        pcoll
        | f"Key{dataset}" >> beam.Map(lambda r: (sinks.shard_index(r["instance_id"], num_shards), r))
        | f"Group{dataset}" >> beam.GroupByKey()
        | f"Write{dataset}" >> beam.ParDo(WriteShard(staging_dir, dataset, num_shards, formats))
    )


def _write_counts(counts: list[tuple[str, int]], path: str) -> str:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(dict(sorted(counts)), f, indent=1)
    os.replace(tmp, path)
    return path


def build(
    p: beam.Pipeline,
    clones_dir: str,
    staging_dir: str,
    config: CurateConfig,
    event_files: list[str] = (),
    issue_files: list[str] = (),
    excluded: frozenset = frozenset(),
) -> None:
    """Add the curation graph to ``p``: outputs land in ``staging_dir`` (records/, rl_seeds/, meta/,
    dropped/, funnel_counts.json); ``swerl_jax.curate.runner`` publishes them. ``excluded``: the (repository,
    PR number) pairs of evaluation instances (`curate.benchmarks.benchmark_prs`), dropped as benchmark_instance."""
    funnel = []
    named = []
    for name, path in discover_clones(clones_dir):
        repo = repo_name_from_dir(name)
        if repo is None:
            funnel.append("input:bad_clone_name")
        else:
            named.append((repo.lower(), (repo, path)))
    clones = p | "Clones" >> beam.Create(named)
    if funnel:
        funnel_pcolls = [p | "BadNames" >> beam.Create(funnel)]
    else:
        funnel_pcolls = []

    prs, issues, dropped = [], [], []
    for i, pattern in enumerate(event_files):
        parsed = (
            p | f"ReadEvents{i}" >> beam.io.ReadFromText(pattern)
            | f"ParseEvents{i}" >> beam.ParDo(ParseEvents()).with_outputs(FUNNEL, main="main")
        )
        funnel_pcolls.append(parsed[FUNNEL])
        agg = (
            parsed.main | f"GroupEvents{i}" >> beam.GroupByKey() | f"Aggregate{i}" >> beam.Map(aggregate)
        )
        prs.append(agg | f"PRs{i}" >> beam.FlatMap(_keyed_by_repo, "pr"))
        issues.append(agg | f"Issues{i}" >> beam.FlatMap(_keyed_by_repo, "issue"))
    for i, pattern in enumerate(issue_files):
        parsed = (
            p | f"ReadIssues{i}" >> beam.io.ReadFromText(pattern)
            | f"ParseIssues{i}" >> beam.ParDo(ParseIssues()).with_outputs(FUNNEL, main="main")
        )
        funnel_pcolls.append(parsed[FUNNEL])
        issues.append(parsed.main)

    def merged(parts, label):
        return parts | label >> beam.Flatten() if parts else p | label >> beam.Create([])

    cands = (
        {"clone": clones, "prs": merged(prs, "AllPRs"), "issues": merged(issues, "AllIssues")}
        | "JoinByRepo" >> beam.CoGroupByKey()
        | "ListCandidates" >> beam.ParDo(ListCandidates(excluded)).with_outputs(FUNNEL, DROPPED, main="main")
    )
    extracted = (
        cands.main
        | "Spread" >> beam.Reshuffle()  # one repo's PRs fan out over all workers
        | "Extract" >> beam.ParDo(ExtractPRs(config)).with_outputs(FUNNEL, DROPPED, main="main")
    )
    unique = (
        extracted.main | "GroupByHash" >> beam.GroupByKey()
        | "Dedupe" >> beam.ParDo(dedupe).with_outputs(FUNNEL, DROPPED, main="main")
    )
    with_context = unique.main | "Relevant" >> beam.ParDo(AddRelevant(config)).with_outputs(FUNNEL, main="main")
    seeded = with_context.main | "Seeds" >> beam.ParDo(select_seed).with_outputs(FUNNEL, "seed", main="main")
    records = seeded.main
    metas = with_context.main | "Meta" >> beam.Map(lambda rm: rm[1])
    funnel_pcolls += [cands[FUNNEL], extracted[FUNNEL], unique[FUNNEL], with_context[FUNNEL], seeded[FUNNEL]]

    c = config
    _write(records, staging_dir, "records", c.num_shards, c.formats)
    _write(seeded["seed"], staging_dir, "rl_seeds", c.num_shards, c.formats)
    _write(metas, staging_dir, "meta", c.num_shards, ("jsonl",))
    dropped += [cands[DROPPED], extracted[DROPPED], unique[DROPPED]]
    _write(dropped | "AllDropped" >> beam.Flatten(), staging_dir, "dropped", c.num_shards, ("jsonl",))
    counts_path = os.path.join(staging_dir, "funnel_counts.json")
    (
        funnel_pcolls | "AllFunnel" >> beam.Flatten()
        | "Count" >> beam.combiners.Count.PerElement()
        | "ToList" >> beam.combiners.ToList()
        | "WriteFunnel" >> beam.Map(_write_counts, counts_path)
    )
