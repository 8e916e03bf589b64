"""The package's import rules (issue 32), read from the source with `ast`: no import circle between modules (module
level or inside functions), no module imports or reads another module's private (underscore) name, and the config
layer (`config.py`, `sections.py`) imports no domain package."""

from __future__ import annotations

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "swerl_jax"
CONFIG_LAYER = ("swerl_jax.config", "swerl_jax.sections")
BELOW_CONFIG = ("swerl_jax.runs.rundir",)  # run-directory helpers the config layer may use (no domain code)
# training never imports evaluation (issue 58 item 9): what both need (tasks, environments, executors, grading, the
# held-out repair metric) lives below them, in `swerl_jax.tasks` and `swerl_jax.rl.heldout`
TRAINING = ("swerl_jax.agent", "swerl_jax.rl", "swerl_jax.sft", "swerl_jax.train")
EVALUATION = ("swerl_jax.eval",)
# executable tasks sit below both: they import neither training nor evaluation
TASKS = ("swerl_jax.tasks",)


def _modules(root: pathlib.Path) -> dict[str, ast.Module]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        name = ".".join(path.relative_to(root.parent).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = ast.parse(path.read_text(), str(path))
    return out


def import_graph(modules: dict[str, ast.Module]) -> tuple[dict[str, set[str]], list[str]]:
    """(module -> the package modules it imports, ["a imports b._x", ...] private names taken from another)."""
    edges: dict[str, set[str]] = {m: set() for m in modules}
    private = []
    for name, tree in modules.items():
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "swerl_jax":
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    if full in modules:  # `from pkg import module`
                        edges[name].add(full)
                        aliases[a.asname or a.name] = full
                    else:
                        edges[name].add(node.module)
                        if a.name.startswith("_"):
                            private.append(f"{name} imports {full}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == "swerl_jax":
                        edges[name].add(a.name)
                        aliases[a.asname or a.name] = a.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                private.append(f"{name} reads {aliases[node.value.id]}.{node.attr}")
    # a module importing its own package's __init__ (`from swerl_jax import x`) is not a circle through it
    edges = {m: {t for t in ts if t in modules and t != m and not m.startswith(t + ".")} for m, ts in edges.items()}
    return edges, sorted(set(private))


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def layer_violations(edges: dict[str, set[str]]) -> list[str]:
    """["a imports b", ...] for every import (module level or in a function) from training into evaluation, or from
    executable tasks into training or evaluation."""
    found = []
    for module, targets in sorted(edges.items()):
        for target in sorted(targets):
            if _within(module, TRAINING) and _within(target, EVALUATION):
                found.append(f"{module} imports {target} (training never imports evaluation)")
            elif _within(module, TASKS) and _within(target, TRAINING + EVALUATION):
                found.append(f"{module} imports {target} (tasks sit below training and evaluation)")
    return found


def test_the_layer_rule_catches_training_importing_evaluation(tmp_path):
    pkg = tmp_path / "swerl_jax"
    for sub in ("agent", "eval", "tasks", "rl"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "eval" / "harness.py").write_text("from swerl_jax.tasks import specs\nfrom swerl_jax.agent import env\n")
    (pkg / "tasks" / "specs.py").write_text("")
    (pkg / "agent" / "env.py").write_text("def f():\n    from swerl_jax.eval import harness\n")
    (pkg / "rl" / "build.py").write_text("import swerl_jax.eval.harness\n")
    (pkg / "tasks" / "grading.py").write_text("from swerl_jax.agent import env\n")
    (pkg / "train.py").write_text("from swerl_jax.tasks import specs\n")
    edges, _ = import_graph(_modules(pkg))
    assert layer_violations(edges) == [
        "swerl_jax.agent.env imports swerl_jax.eval.harness (training never imports evaluation)",
        "swerl_jax.rl.build imports swerl_jax.eval.harness (training never imports evaluation)",
        "swerl_jax.tasks.grading imports swerl_jax.agent.env (tasks sit below training and evaluation)"]


def test_training_never_imports_evaluation_and_tasks_sit_below_both():
    edges, _ = import_graph(_modules(PACKAGE))
    assert layer_violations(edges) == []


def test_the_rules_catch_what_they_claim(tmp_path):
    pkg = tmp_path / "swerl_jax"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from swerl_jax.b import _hidden\n")
    (pkg / "b.py").write_text("def f():\n    from swerl_jax import a\n    return a._x\n")
    (pkg / "sub" / "c.py").write_text("from swerl_jax.sub import d\n")
    (pkg / "sub" / "d.py").write_text("import swerl_jax.a\n")
    edges, private = import_graph(_modules(pkg))
    assert circles(edges) == [["swerl_jax.a", "swerl_jax.b"]]
    assert private == ["swerl_jax.a imports swerl_jax.b._hidden", "swerl_jax.b reads swerl_jax.a._x"]


def test_no_import_circle_and_no_private_name_across_modules():
    edges, private = import_graph(_modules(PACKAGE))
    assert circles(edges) == []
    assert private == []


def test_the_config_layer_imports_no_domain():
    edges, _ = import_graph(_modules(PACKAGE))
    for module in CONFIG_LAYER:
        assert edges[module] <= set(CONFIG_LAYER) | set(BELOW_CONFIG), (module, sorted(edges[module]))
