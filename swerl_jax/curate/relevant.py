"""Relevant-but-unmodified files: pluggable predictors and the size-budgeted merge into ``code_context``.

A predictor is any object with ``predict(problem_statement, modified: dict[path, content], tree: list[path])
-> list[path]`` (best first). ``HeuristicPredictor`` is cheap (imports of the modified files, same-folder
siblings, lexical overlap with the issue); ``LLMPredictor`` asks a language model, as the paper does,
through any ``generate(prompt) -> text`` callable (``SamplerGenerate``: our sampler server, in production).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Sequence

from swerl_jax.curate.filters import is_generated_file, is_programming_file
from swerl_jax.data.prompts import render
from swerl_jax.sampler.client import SamplerClient, parse_address
from swerl_jax.sampler.types import SamplingParams

_PY_IMPORT = re.compile(r"^\s*(?:from\s+(\.*)([\w.]*)\s+import\s+([\w., ()]+)|import\s+([\w., ]+))", re.MULTILINE)
_JS_IMPORT = re.compile(r"""(?:from\s+|require\(\s*|import\s*\(\s*)['"](\.{1,2}/[^'"]+)['"]""")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]+")
_STOP = frozenset(
    "the and for with that this from not are was but when have has use using used into can will should would "
    "there their which what than then also only does its self none true false return import def class".split()
)
_JS_EXTS = (".js", ".ts", ".jsx", ".tsx", ".mjs")


def _tokens(text: str) -> set[str]:
    out = set()
    for word in _WORD.findall(text):
        for part in re.sub(r"([a-z])([A-Z])", r"\1 \2", word).replace("_", " ").split():
            part = part.lower()
            if len(part) >= 3 and part not in _STOP:
                # A light stem, so "sessions.py" matches "session" in the issue.
                out.add(part[:-1] if len(part) > 3 and part.endswith("s") and not part.endswith("ss") else part)
    return out


def suffix_index(tree: set[str]) -> dict[str, list[str]]:
    """Every path suffix ("pkg/mod.py", "mod.py") of the tree's Python files -> the files ending with it."""
    index: dict[str, list[str]] = {}
    for p in tree:
        if p.endswith(".py"):
            parts = p.split("/")
            for i in range(len(parts)):
                index.setdefault("/".join(parts[i:]), []).append(p)
    return index


def imported_paths(path: str, content: str, tree: set[str], index: dict[str, list[str]] | None = None) -> list[str]:
    """Files of ``tree`` that ``path`` imports (Python absolute/relative imports, JS/TS relative imports).

    Absolute Python imports may live under a source root (src/pkg/...), so they match by path suffix; of
    several matches the shallowest wins (``flask`` is src/flask/__init__.py, not tests/apps/flask.py).
    """
    found: list[str] = []
    folder = posixpath.dirname(path)

    def add(candidates: Sequence[str]) -> None:
        for c in candidates:
            c = posixpath.normpath(c)
            if c in tree and c != path and c not in found:
                found.append(c)
                return

    if path.endswith(".py"):
        by_suffix = suffix_index(tree) if index is None else index
        for m in _PY_IMPORT.finditer(content):
            dots, mod, names, plain = m.group(1) or "", m.group(2) or "", m.group(3) or "", m.group(4) or ""
            modules = []
            if plain:
                modules = [(0, n.split(" as ")[0].strip()) for n in plain.split(",")]
            else:
                subs = [n.split(" as ")[0].strip(" ()") for n in names.split(",")]
                modules = [(len(dots), mod)] + [(len(dots), f"{mod}.{s}" if mod else s) for s in subs if s]
            for level, module in modules:
                if not module:
                    continue
                rel = module.replace(".", "/")
                if level:
                    base = folder
                    for _ in range(level - 1):
                        base = posixpath.dirname(base)
                    add([posixpath.join(base, rel + ".py"), posixpath.join(base, rel, "__init__.py")])
                else:
                    hits = by_suffix.get(rel + ".py", []) + by_suffix.get(rel + "/__init__.py", [])
                    add(sorted(hits, key=lambda h: (h.count("/"), h))[:1])
    elif path.endswith(_JS_EXTS):
        for m in _JS_IMPORT.finditer(content):
            target = posixpath.join(folder, m.group(1))
            add([target, *(target + e for e in _JS_EXTS), *(posixpath.join(target, "index" + e) for e in _JS_EXTS)])
    return found


class HeuristicPredictor:
    """Scores unmodified programming files: imported by a modified file (+3), same folder and extension (+1),
    path words shared with the problem statement (+0.5 each, at most +2). Best first, score > 0 only."""

    def predict(self, problem_statement: str, modified: dict[str, str], tree: list[str]) -> list[str]:
        """Rank candidate relevant files for one PR."""
        tree_set = set(tree)
        scores: dict[str, float] = {}
        index = suffix_index(tree_set)
        for path, content in modified.items():
            for p in imported_paths(path, content, tree_set, index):
                scores[p] = scores.get(p, 0.0) + 3.0
        folders = {(posixpath.dirname(p), posixpath.splitext(p)[1]) for p in modified}
        words = _tokens(problem_statement)
        for p in tree:
            if p in modified or not is_programming_file(p) or is_generated_file(p):
                continue
            if (posixpath.dirname(p), posixpath.splitext(p)[1]) in folders:
                scores[p] = scores.get(p, 0.0) + 1.0
            overlap = len(words & _tokens(posixpath.splitext(p)[0]))
            if overlap:
                scores[p] = scores.get(p, 0.0) + min(2.0, 0.5 * overlap)
        ranked = [p for p in scores if p not in modified and scores[p] > 0]
        return sorted(ranked, key=lambda p: (-scores[p], p))


class LLMPredictor:
    """Asks a model which unmodified files are relevant, through ``generate(prompt) -> completion``.

    The prompt lists the issue, the modified files and up to ``max_listed`` candidate paths; every line of the
    answer that names a listed path counts (bullets, backticks and numbering are stripped). When ``generate``
    has a ``fits(prompt) -> bool`` method (``SamplerGenerate``: the server's prompt-length limit), the candidate
    list, then the issue text, are halved until the prompt fits.
    """

    def __init__(self, generate: Callable[[str], str], max_listed: int = 300, max_files: int = 5):
        self.generate = generate
        self.max_listed = max_listed
        self.max_files = max_files

    @classmethod
    def from_sampler(cls, address: str, tokenizer: str = "", secret: bytes | None = None,
                     **kwargs) -> LLMPredictor:
        """A predictor backed by our sampler server at ``address`` ("host:port"); see ``SamplerGenerate``."""
        return cls(SamplerGenerate(address, tokenizer=tokenizer, secret=secret), **kwargs)

    def prompt(self, problem_statement: str, modified: dict[str, str], tree: list[str],
               max_listed: int | None = None) -> tuple[str, list[str]]:
        """The question and the candidate paths it lists (at most ``max_listed``, default ``self.max_listed``)."""
        limit = self.max_listed if max_listed is None else max_listed
        candidates = [p for p in tree if p not in modified and is_programming_file(p)][:limit]
        text = (
            "Below is a GitHub issue, the files a fix modifies, and other files of the repository.\n"
            f"List up to {self.max_files} of the other files that a developer must read to understand or make "
            "the fix, one path per line, most relevant first, and nothing else.\n\n"
            f"--- ISSUE ---\n{problem_statement.strip()}\n\n--- MODIFIED FILES ---\n"
            + "\n".join(sorted(modified)) + "\n\n--- OTHER FILES ---\n" + "\n".join(candidates) + "\n"
        )
        return text, candidates

    def fitted_prompt(self, problem_statement: str, modified: dict[str, str], tree: list[str]
                      ) -> tuple[str, list[str]]:
        """``prompt`` shrunk until ``generate.fits`` accepts it: fewer listed files first, then a shorter issue."""
        fits = getattr(self.generate, "fits", None)
        listed, issue = self.max_listed, problem_statement
        text, candidates = self.prompt(issue, modified, tree, listed)
        while fits is not None and not fits(text):
            if listed > 0:
                listed = min(listed, len(candidates)) // 2
            elif len(issue) > 1:
                issue = issue[: len(issue) // 2]
            else:
                raise ValueError("the relevant-file prompt does not fit the sampler's max_prompt_len even without "
                                 "the issue and the file list; raise the server's data.max_prompt_len")
            text, candidates = self.prompt(issue, modified, tree, listed)
        return text, candidates

    def predict(self, problem_statement: str, modified: dict[str, str], tree: list[str]) -> list[str]:
        """Query the model and keep the listed paths it names, in its order."""
        text, candidates = self.fitted_prompt(problem_statement, modified, tree)
        allowed, picked = set(candidates), []
        for line in self.generate(text).splitlines():
            path = re.sub(r"^\s*(?:[-*+]|\d+[.)])?\s*", "", line).strip().strip("`'\"")
            if path in allowed and path not in picked:
                picked.append(path)
        return picked[: self.max_files]


class SamplerGenerate:
    """``generate(prompt text) -> completion text`` through a running sampler server (the LLM predictor's model).

    The server takes token ids, so the question is chat-templated and tokenized with the server model's
    tokenizer (``tokenizer``: a Hugging Face directory, empty for SmolLM2's, the server's own default) and the
    answer decoded with it; sampling is greedy, so the same PR gets the same answer.
    """

    def __init__(self, address: str, tokenizer: str = "", secret: bytes | None = None, max_new_tokens: int = 256,
                 timeout_s: float = 600.0):

        # transformers is imported only here: heuristic curation (the default) never loads it
        from swerl_jax.tokenizer import load_tokenizer

        self.client = SamplerClient(parse_address(address), secret=secret, timeout_s=timeout_s)
        self.client.close()  # see complete()
        self.tokenizer = load_tokenizer(tokenizer)
        limits = self.client.ping()
        self.client.close()
        self.max_prompt_len = int(limits["max_prompt_len"])
        self.max_new_tokens = min(max_new_tokens, int(limits["max_new_tokens"]))

    def encode(self, prompt: str) -> list[int]:
        """Token ids of ``prompt`` as the user turn of a chat, ready for the assistant's answer (the project's
        ``data.prompts.render``); a tokenizer without a chat template encodes the bare text."""
        if getattr(self.tokenizer, "chat_template", None):
            return render(self.tokenizer, [{"role": "user", "content": prompt}])[1].tolist()
        return self.tokenizer(prompt)["input_ids"]

    def fits(self, prompt: str) -> bool:
        """Whether the server accepts ``prompt`` (its ``max_prompt_len``)."""
        return len(self.encode(prompt)) <= self.max_prompt_len

    def complete(self, prompt: str):
        """The server's greedy ``Completion`` of ``prompt``."""
        params = SamplingParams(temperature=0.0, max_new_tokens=self.max_new_tokens)
        try:
            return self.client.generate([self.encode(prompt)], params)[0][0]  # one prompt, one sample
        finally:
            # The server answers one connection at a time: a connection held between PRs would stall every
            # other Beam worker's predictor (and the trainer) until this worker finished. For a client that did
            # not start the server, close() only disconnects; the next request reconnects.
            self.client.close()

    def __call__(self, prompt: str) -> str:
        """The completion's text (special tokens dropped)."""
        return self.tokenizer.decode(self.complete(prompt).tokens.tolist(), skip_special_tokens=True)

    def close(self) -> None:
        """Close the connection (the server keeps running)."""
        self.client.close()


def add_relevant_files(
    record: dict, ranked: Sequence[str], read: Callable[[str], str | None], max_files: int, budget_bytes: int
) -> dict:
    """A copy of ``record`` with up to ``max_files`` of ``ranked`` added to ``code_context`` and listed in
    ``relevant_files``, skipping unreadable ones (``read`` returns None) and any that would pass the byte budget."""
    context = dict(record["code_context"])
    chosen, used = [], 0
    for path in ranked:
        if len(chosen) >= max_files:
            break
        if path in context or path in record["oracle_new_content"]:
            continue
        content = read(path)
        if content is None or used + len(content) > budget_bytes:
            continue
        context[path] = content
        chosen.append(path)
        used += len(content)
    return {**record, "code_context": context, "relevant_files": chosen}
