"""Relevant-file predictors (heuristic, LLM with a fake model) and the size-budgeted merge."""

from swerl_jax.data.curate.relevant import HeuristicPredictor, LLMPredictor, add_relevant_files, imported_paths

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
