"""Agentless Mini fidelity: our `swerl_jax/eval/agentless` against the official release, function by function.

Each row runs one of our functions and its counterpart in the release (facebookresearch/swe-rl,
`src/swerl/agentless_mini`: localize.py, repair.py, rerank.py, utils/data.py, utils/api.py) on the same inputs and
counts identical and differing outputs (an exception counts as the output "raised <Type>"). The inputs are seeded:
this repository's own `swerl_jax/**/*.py` files as file contents and trees (plus non-Python, test and empty
entries), localization answers naming existing and missing paths, SEARCH/REPLACE repair answers built from the files
(matching, non-matching, several per file, syntax-breaking, blank-only, drafts inside <think>), a few hand-written
normalization edge cases, and rerank sample sets. The release is imported at run time from --release, never copied
here. It is a report: the exit code is always 0.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/agentless_fidelity.py --release /tmp/fidelity/swe-rl [--n 200]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import importlib
import json
import os
import pathlib
import random
import sys
import types
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from swerl_jax.eval.agentless import localize, normalize, repair, rerank  # noqa: E402
from swerl_jax.eval.agentless.pipeline import sample_patch, solution_part  # noqa: E402
from swerl_jax.eval.structure import file_contents  # noqa: E402

SCRATCH = pathlib.Path("/tmp/fidelity")
TALLY: dict[str, list] = {}  # row -> [inputs, identical, [(input, ours, release)]]
COVER: Counter[str] = Counter()  # what the random inputs reached
COUNT = lambda text: len(text.split())  # the token counter of both sides' context budget
_NESTED = "class A:\n class B:\n  def f(self):\n   return 1\nclass B:\n def f(self):\n  return "
EDGES = [  # hand-written (old, new) file pairs for normalization
    (_NESTED + "2\n", _NESTED + "3\ndef h():\n    return 0\n"),  # a nested class named like a top-level one
    ("print 'x'\nx = 1\n", "print('x')\nx = 1\n"),  # the original file does not parse (Python 2)
    ('def f():\n    """doc"""\n\ndef g():\n    return 1\n', 'def f():\n    """doc"""\n\ndef g():\n    return 2\n'),
]


def load_release(root: pathlib.Path) -> types.SimpleNamespace:
    """The release's modules. Its `utils` package imports an LLM client (openai, tenacity), tokenizers
    (transformers, tiktoken) and `datasets` at import time; none is used by the functions compared here, so each is
    a stub module in sys.modules. Its env must name a structures folder and a tokenizer (here: ours, unused)."""
    os.environ.update(PROJECT_FILE_LOC=str(SCRATCH / "structures"), TOKENIZER_MODEL="unused", THINKING="yes",
                      PLAYGROUND_DIR=str(SCRATCH / "playground"))

    class Stub(types.ModuleType):
        def __getattr__(self, name: str) -> Any:
            if name.startswith("__"):
                raise AttributeError(name)
            return (lambda *a, **k: (lambda f: f)) if self.__name__ == "tenacity" else type(name, (Exception,), {})

    for name in ("openai", "openai.types", "openai.types.chat", "tenacity", "datasets", "tiktoken", "transformers",
                 "transformers.hf_argparser"):
        sys.modules[name] = Stub(name)
    sys.path.insert(0, str(root / "src"))
    mods = {m: importlib.import_module(f"swerl.agentless_mini.{m}") for m in ("localize", "repair", "rerank")}
    utils = importlib.import_module("swerl.agentless_mini.utils")
    utils.misc.count_tokens = COUNT  # its tokenizer, replaced by the counter ours gets
    return types.SimpleNamespace(utils=utils, data=utils.data, **mods)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence stdout/stderr at the descriptor level (the release prints and runs git without capturing)."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved, null = {fd: os.dup(fd) for fd in (1, 2)}, os.open(os.devnull, os.O_WRONLY)
    for fd in saved:
        os.dup2(null, fd)
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        for fd, kept in saved.items():
            os.dup2(kept, fd)
            os.close(kept)
        os.close(null)


def call(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        with quiet():
            return fn(*args)
    except Exception as err:  # the exception is the output
        return f"raised {type(err).__name__}"


def check(row: str, inp: Any, ours: Any, theirs: Any) -> None:
    entry = TALLY.setdefault(row, [0, 0, []])
    entry[0] += 1
    entry[1] += ours == theirs
    if ours != theirs:
        entry[2].append((inp, ours, theirs))


def around_difference(ours: Any, theirs: Any, width: int = 160) -> tuple[str, str]:
    """Both outputs' reprs from a little before their first differing character."""
    a, b = repr(ours), repr(theirs)
    start = max(0, next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b))) - 50)
    return tuple(("..." if start else "") + t[start : start + width] + ("..." if len(t) > start + width else "")
                 for t in (a, b))


def fake_client(answer_for: Callable[[str], str]) -> Any:
    """A stand-in for the release's LLM client (its async steps call `safe_chat_completion`)."""

    async def safe_chat_completion(request: dict) -> Any:
        text = answer_for(request["messages"][-1]["content"])
        return types.SimpleNamespace(choices=[types.SimpleNamespace(message=types.SimpleNamespace(content=text))])

    return types.SimpleNamespace(safe_chat_completion=safe_chat_completion)


# ---- inputs -------------------------------------------------------------------------------------------------------
def make_tree(rng: random.Random, files: dict[str, list[str]]) -> dict:
    """An Agentless structure dict: some repository files plus non-Python, test-named and empty entries."""
    extra = ["README.md", "Makefile", "swerl_jax/conf.json", "tests/test_a.py", "swerl_jax/testing.py",
             "swerl_jax/eval/test_b.py", "docs/notes.txt", "testdata/x/y.py"]
    tree: dict = {"empty_dir": {}}
    for path in rng.sample(sorted(files), rng.randint(5, 25)) + rng.sample(extra, rng.randint(0, len(extra))):
        *dirs, name = path.split("/")
        node = tree
        for d in dirs:
            node = node.setdefault(d, {})
        node[name] = {"classes": [], "functions": [], "text": files.get(path, ["x = 1"])}
    return tree


def loc_answer(rng: random.Random, known: list[str]) -> str:
    pool = known + ["swerl_jax/missing.py", "tests/test_a.py", "```", "README.md"] + [f"./{p}" for p in known[:2]]
    lines = [rng.choice(pool) for _ in range(rng.randint(0, 8))]
    if rng.random() < 0.3 and lines:
        lines[0] += " "
    text = "\n".join(lines)
    return rng.choice([text, f"<think>x</think>\n<solution>\n```\n{text}\n```\n</solution>", f"```\n{text}\n```"])


def make_edit(rng: random.Random, lines: list[str], k: int) -> tuple[str, str]:
    """(search, replace) of one random edit of `lines`."""
    kind = rng.choice(["dup", "comment", "add_fn", "nomatch", "blank", "break", "rename", "delete"])
    tops = [i for i, line in enumerate(lines) if line.startswith(("def ", "class "))]
    i = rng.choice(tops) if kind == "add_fn" and tops else rng.randrange(len(lines))
    span = lines[i : i + rng.randint(1, 4)]
    indent = span[0][: len(span[0]) - len(span[0].lstrip())]
    replace = {"dup": span + span, "comment": [f"{indent}# note {k}", *span], "blank": [*span, ""],
               "add_fn": [f"def added_{k}(x):", f"    return x + {k}", "", "", *span], "break": ["def broken(:"],
               "rename": [s.replace("self", "this") for s in span], "delete": [""], "nomatch": span}[kind]
    if kind == "nomatch":
        span = [*span[:-1], span[-1] + "  # absent"]
    return "\n".join(span), "\n".join(replace)


def repair_answer(rng: random.Random, contents: dict[str, str], draft: bool = True) -> str:
    """A model answer: ```python blocks of SEARCH/REPLACE edits (a file named once per block or once per edit, some
    repeats, some malformed, one file outside the context); some answers think first, with draft edits."""
    blocks = []
    for path in rng.sample(sorted(contents) + ["swerl_jax/not_in_context.py"], rng.randint(1, len(contents) + 1)):
        lines = contents.get(path, "a = 1\nb = 2").splitlines() or [""]
        cmds = [f"<<<<<<< SEARCH\n{s}\n=======\n{r}\n>>>>>>> REPLACE"
                for s, r in (make_edit(rng, lines, k) for k in range(rng.randint(1, 3)))]
        cmds += cmds[:1] * (rng.random() < 0.15) + ["<<<<<<< SEARCH\nx = 1\n>>>>>>> REPLACE"] * (rng.random() < 0.1)
        blocks += [f"### {path}\n" + "\n".join(cmds)] if rng.random() < 0.5 else [f"### {path}\n{c}" for c in cmds]
    body = "\n\n".join(f"```python\n{b}\n```" for b in blocks)
    if not draft:
        return body
    think = repair_answer(rng, contents, False) if rng.random() < 0.5 else "t"
    return rng.choice([body, f"Fix:\n\n{body}\n\nDone.", f"<think>{think}</think>\n<solution>\n{body}\n</solution>"])


# ---- rows ---------------------------------------------------------------------------------------------------------
def localization_rows(rel: types.SimpleNamespace, rng: random.Random, files: dict[str, list[str]], k: int) -> None:
    raw, iid = make_tree(rng, files), rng.choice(["django__django-11099", "pytest-dev__pytest-5103"])

    theirs = copy.deepcopy(raw)  # the release's two in-place filters, as its localize_instance applies them
    call(rel.data.filter_none_python, theirs)
    if not iid.startswith("pytest"):
        call(rel.data.filter_out_test_files, theirs)
    tree = call(localize.shown_structure, raw, iid)
    check("localize.shown_structure", iid, tree, theirs)
    indent, shuffle, seed = rng.choice([2, 4]), rng.random() < 0.5, f"{k}:show"
    random.seed(seed)
    theirs = call(rel.data.show_project_structure, raw, 0, indent, shuffle)
    ours = call(localize.show_structure, raw, indent, random.Random(seed) if shuffle else None)
    check("localize.show_structure", f"indent={indent} shuffle={shuffle}", ours, theirs)
    known, release_files = localize.tree_files(tree), rel.data.get_full_file_paths_and_classes_and_functions(tree)[0]
    check("localize.tree_files", f"{len(known)} files", known, [f[0] for f in release_files])
    answer = loc_answer(rng, known)
    lines = rel.utils.api.parse_thinking_output(answer).strip().split("\n")
    theirs, mine = call(rel.data.correct_file_paths, lines, release_files), solution_part(answer, True)
    check("pipeline.solution_part", answer, mine, rel.utils.api.parse_thinking_output(answer))
    check("localize.found_files", answer, localize.found_files(mine, known), theirs)
    localize_files_rows(rel, tree, known, rng.choice([1, 1, 3, 5]), f"{k}:loc")
    repair_plan_row(rel, rng, tree, known, k)


def localize_files_rows(rel: types.SimpleNamespace, tree: dict, known: list[str], samples: int, seed: str) -> None:
    """Release `localize_files` (a fake client answers; answers depend on the prompt only) vs our prompts+parsing.
    The release lists samples in completion order, so both sides are compared as sorted (prompt, files) pairs."""
    problem, answer_for = "The tokenizer drops the last line.", lambda p: loc_answer(random.Random(p), known)
    args = types.SimpleNamespace(num_samples=samples, model="m", max_tokens=1, temperature=1.0)
    random.seed(seed)
    out = call(lambda: asyncio.run(rel.localize.localize_files(fake_client(answer_for), asyncio.Semaphore(4), problem,
                                                                tree, args)))
    theirs = sorted(zip([t["prompt"] for t in out[1]], out[0])) if isinstance(out, tuple) else [(out, out)]
    rng = random.Random(seed)
    asks = [localize.localization_prompt(problem, tree, samples, rng) for _ in range(samples)]
    ours = sorted((p, localize.found_files(solution_part(answer_for(p), True), known)) for p, _ in asks)
    for i, row in enumerate(("localize.localization_prompt (localize_files)", "localize_files found_files")):
        check(row, f"samples={samples}", [x[i] for x in ours], [x[i] for x in theirs])


def repair_plan_row(rel: types.SimpleNamespace, rng: random.Random, tree: dict, known: list[str], k: int) -> None:
    """Release `process_loc` (sample plan from the localization lists, file contexts, repair prompts) vs
    pipeline.run_instance's plan (its two lines, restated here) with our repair_context + repair_prompt."""
    iid, n, problem, budget = f"plan{k}", rng.choice([1, 2, 4]), "Issue text.", rng.randint(0, 3000)
    found = [rng.sample(known, rng.randint(0, min(3, len(known)))) for _ in range(rng.randint(1, 4))]
    (SCRATCH / "structures").mkdir(exist_ok=True)
    (SCRATCH / "structures" / f"{iid}.json").write_text(json.dumps({"structure": tree}))
    random.seed(f"{k}:plan")
    out = call(lambda: asyncio.run(rel.repair.process_loc(
        types.SimpleNamespace(max_input_tokens=budget), types.SimpleNamespace(num_samples=n, model="m", max_tokens=1,
        temperature=1.0), fake_client(lambda p: ""), asyncio.Semaphore(4), {"instance_id": iid, "found_files": found},
        [{"instance_id": iid, "problem_statement": problem}], [])))
    theirs = (out["all_found_files"], sorted(t["prompt"] for t in out["traj"])) if isinstance(out, dict) else out
    unique, ours_rng = list(dict.fromkeys(tuple(f) for f in found if f))[:n], random.Random(f"{k}:plan")
    plans, contents = [list(unique[i % len(unique)]) for i in range(n)] if unique else [], file_contents(tree)
    prompts = sorted(repair.repair_prompt(problem, repair.repair_context(p, contents, budget, COUNT, ours_rng if n > 1
                                                                        else None)) for p in plans)
    check("repair.repair_context+repair_prompt (process_loc)", f"n={n} found={found}",
          (plans, prompts) if plans else None, theirs)


def repair_rows(rel: types.SimpleNamespace, rng: random.Random, files: dict[str, list[str]], k: int) -> None:
    paths = rng.sample(sorted(files), rng.randint(1, 3))
    contents = {p: "\n".join(files[p]) for p in paths}
    generation = repair_answer(rng, contents)
    answer = solution_part(generation, True)
    edits = call(repair.edits_by_file, answer)
    check("repair.edits_by_file", answer, list(edits.items()) if isinstance(edits, dict) else edits, call(
        lambda a: list(rel.data.split_edit_multifile_commands(rel.data.extract_python_blocks(a)).items()), answer))
    for path, cmds in (edits.items() if isinstance(edits, dict) else []):
        if path in contents:
            check("repair.apply_edits", f"{path}: {cmds}", call(repair.apply_edits, cmds, contents[path]),
                  call(rel.data.parse_diff_edit_commands, cmds, contents[path]))
    edited = call(repair.edited_files, answer, contents)
    check("repair.edited_files", answer, edited, call(rel.repair._post_process_multifile_repair, answer, contents))
    made = call(repair.answer_patch, answer, contents)
    if not (isinstance(edited, tuple) and isinstance(made, dict)):
        return
    old = [contents[p] for p in edited[0]]
    check("repair.git_diff", edited[0], call(repair.git_diff, edited[0], old, edited[1]),
          call(rel.data.fake_git_repo, os.environ["PLAYGROUND_DIR"], edited[0], old, edited[1]))
    theirs = call(rel.repair.post_process_raw_output, answer, contents)
    fields = ("model_patch", "raw_model_patch", "original_file_content", "edited_files", "new_file_content")
    check("repair.answer_patch", answer, [made[f] for f in fields],
          [theirs[0].lstrip(), theirs[1].lstrip(), *theirs[2:]] if isinstance(theirs, tuple) else theirs)

    def release_path() -> tuple:  # release repair.py: process_loc parses the <solution>, post_process_repair all
        edited, _ = rel.repair._post_process_multifile_repair(rel.utils.api.parse_thinking_output(generation), contents)
        return rel.repair.post_process_raw_output(generation, {f: contents[f] for f in edited})

    theirs = call(release_path)
    ours = call(lambda: sample_patch(generation, contents, True)["model_patch"])
    check("pipeline.sample_patch (release's 2-pass path)", generation, ours,
          theirs[0].lstrip() if isinstance(theirs, tuple) else theirs)
    normalize_rows(rel, made, k)


def normalize_rows(rel: types.SimpleNamespace, made: dict, k: int | str) -> None:
    args = (made["model_patch"], made["original_file_content"], made["new_file_content"], made["edited_files"])
    key = call(normalize.normalize_patch, *args)
    check("normalize.normalize_patch", made["edited_files"] if k != "edge" else args[1:3], key,
          call(rel.data.normalize_patch, f"case{k}", *args))
    raw = (made["raw_model_patch"], *args[1:])
    check("normalize.normalize_patch (raw patch; off-pipeline)", args[1:3], call(normalize.normalize_patch, *raw),
          call(rel.data.normalize_patch, f"case{k}", *raw))
    COVER.update(["model_patch"] * bool(args[0]) + ["normalized key"] * bool(key.strip()))
    for old, new, path in zip(*args[1:]):
        for text in (normalize.unparsed(old), normalize.unparsed(new)):
            check("normalize.strip_comments_and_docstrings", path, call(normalize.strip_comments_and_docstrings,
                  text), call(rel.data.remove_comments_and_docstrings, text))
        pair = [call(normalize.strip_comments_and_docstrings, normalize.unparsed(c)) for c in (old, new)]
        adds = call(normalize.only_adds_functions, *pair)
        check("normalize.only_adds_functions", pair, adds, call(rel.data.is_just_new_function, *pair))
        COVER.update(["only adds functions"] * (adds is True))


def rerank_row(rel: types.SimpleNamespace, rng: random.Random) -> None:
    keys = ["", "", *[f"--- a/f.py\n+++ b/f.py\n-old\n+new{j}" for j in range(3)]]
    use_reg, use_rep = rng.random() < 0.6, rng.random() < 0.6
    samples = [rerank.Sample(f"patch-{i}", rng.choice(keys), rng.choice([0, 0, 1, 2, rerank.NO_REGRESSION_RESULT]),
                             frozenset(rng.sample(["0", "1", "2"], rng.randint(0, 3))))
               for i in range(rng.randint(1, 8))]
    chosen = call(rerank.select, samples, use_reg, use_rep)
    ours = samples[chosen].patch if isinstance(chosen, int) else "" if chosen is None else chosen
    out = SCRATCH / "rerank.jsonl"

    def release() -> str:
        rel.rerank.execution_results.clear()
        rel.rerank.execution_results["x"] = [  # as the release's _load_results fills it
            {"normalized_patch": s.normalized.strip(), "patch": s.patch,
             "regression_test_result": s.regression_failures if use_reg else 0,
             "reproduction_test_result": s.reproduction_passed if use_rep else frozenset()} for s in samples]
        rel.rerank.majority_voting(argparse.Namespace(output_file=str(out), num_samples=len(samples)))
        return json.loads(out.read_text())["model_patch"]

    desc = [(s.normalized[-4:], s.regression_failures, sorted(s.reproduction_passed)) for s in samples]
    check("rerank.select", f"reg={use_reg} rep={use_rep} {desc}", ours, call(release))


def report(n: int) -> None:
    print(f"{'function (ours)':52} {'inputs':>6} {'same':>6} {'differ':>6} {'release raised':>14}")
    for row, (count, same, diffs) in TALLY.items():
        raised = sum(isinstance(t, str) and t.startswith("raised ") for _, _, t in diffs)
        print(f"{row:52} {count:6} {same:6} {len(diffs):6} {raised:14}")
    for row, (_, _, diffs) in TALLY.items():
        for inp, ours, theirs in diffs[:2]:
            a, b = around_difference(ours, theirs)
            print(f"\n[{row}] input: {repr(inp)[:300]}\n  ours:    {a}\n  release: {b}")
    total, same = sum(v[0] for v in TALLY.values()), sum(v[1] for v in TALLY.values())
    print(f"\ninputs reached: {dict(COVER)} (of {n} repair answers)\nfidelity: {same}/{total} identical")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", type=pathlib.Path, required=True, help="the release's work tree (swe-rl)")
    parser.add_argument("--n", type=int, default=200, help="random cases per group of rows")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    SCRATCH.mkdir(parents=True, exist_ok=True)
    rel = load_release(args.release)
    files = {p.relative_to(REPO).as_posix(): p.read_text().splitlines() for p in sorted(REPO.glob("swerl_jax/**/*.py"))}
    for k in range(args.n):
        rng = random.Random(f"{args.seed}:{k}")
        localization_rows(rel, rng, files, k)
        repair_rows(rel, rng, files, k)
        rerank_row(rel, rng)
    for old, new in EDGES:
        normalize_rows(rel, {"model_patch": "edge", "raw_model_patch": "edge", "original_file_content": [old],
                             "new_file_content": [new], "edited_files": ["edge.py"]}, "edge")
    report(args.n)


if __name__ == "__main__":
    main()
