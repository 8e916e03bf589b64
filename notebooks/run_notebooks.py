"""Execute the analysis notebooks headless with nbclient and write executed copies (with their figures).

    python notebooks/run_notebooks.py --out notebooks/executed            # every notebook, default parameters
    python -m notebooks.run_notebooks --out /tmp/nb -p workdir=/path/run  # parameters, papermill-style
    python notebooks/run_notebooks.py ablation_analysis.ipynb -p sweep_dir=$PWD/sweeps/reward_kind  # one notebook
    make notebooks

Parameters are injected the papermill way: a cell tagged "injected-parameters" is inserted right after the
cell tagged "parameters", so the notebook's defaults stay visible and the overrides follow them. Folder parameters
(workdir, sweep_dir, data_dir, compare_with) are resolved from the current directory first (the kernel runs in
notebooks/). A cell error on the user's input (a folder that is not there) is one line; any other stops the run
with the failing cell's source and traceback (nbclient's CellExecutionError).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import os
import pathlib
import sys
import time

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from swerl_jax.data.paths import config_path, user_path

NOTEBOOK_DIR = pathlib.Path(__file__).resolve().parent
NOTEBOOKS = ("reward_analysis.ipynb", "advantage_analysis.ipynb", "ablation_analysis.ipynb")
# Parameters that name folders: the kernel runs in notebooks/, so a relative one typed on the command line is made
# absolute here, from the user's current directory. data_dir as a config names data (current directory, then the
# repository root: its default "../shared/data"); compare_with is a comma-separated list of workdirs.
PATH_PARAMETERS = {"workdir": user_path, "sweep_dir": user_path, "data_dir": config_path}
PATH_LIST_PARAMETERS = ("compare_with",)
# A cell failing on one of these is the user's input (a folder that is not there, a step the run lacks): one line.
USER_ERRORS = ("FileNotFoundError", "ValueError", "KeyError")


def _parameters_cell(nb: nbformat.NotebookNode) -> int:
    index = next((i for i, c in enumerate(nb.cells) if "parameters" in c.get("metadata", {}).get("tags", [])), None)
    if index is None:
        raise ValueError("notebook has no cell tagged 'parameters'")
    return index


def notebook_parameters(nb: nbformat.NotebookNode) -> set[str]:
    """Names assigned in the notebook's cell tagged "parameters"."""
    source = nb.cells[_parameters_cell(nb)].source
    return {t.id for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Assign)
            for t in node.targets if isinstance(t, ast.Name)}


def inject_parameters(nb: nbformat.NotebookNode, parameters: dict) -> nbformat.NotebookNode:
    """Insert a cell assigning `parameters` after the cell tagged "parameters" (papermill convention).

    Raises ValueError when the notebook has no parameters cell or a name is not one of its parameters.
    """
    index = _parameters_cell(nb)
    known = notebook_parameters(nb)
    unknown = sorted(set(parameters) - known)
    if unknown:
        raise ValueError(f"unknown notebook parameter(s) {unknown}; the parameters cell defines {sorted(known)}")
    nb.cells = [c for c in nb.cells if "injected-parameters" not in c.get("metadata", {}).get("tags", [])]
    source = "# Parameters injected by notebooks/run_notebooks.py\n" + "\n".join(
        f"{k} = {v!r}" for k, v in parameters.items())
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": ["injected-parameters"]})
    nb.cells.insert(index + 1, cell)
    return nb


def execute_notebook(
    path: str | os.PathLike,
    out_path: str | os.PathLike | None = None,
    parameters: dict | None = None,
    timeout_s: int = 600,
    kernel_name: str = "python3",
) -> nbformat.NotebookNode:
    """Execute one notebook in its own folder (so relative paths behave as in Jupyter) and return it.

    Writes the executed copy to `out_path` when given. Raises nbclient's CellExecutionError on any cell error.
    """
    path = pathlib.Path(path)
    nb = nbformat.read(path, as_version=4)
    if parameters:
        inject_parameters(nb, parameters)
    # The kernel is "python3" started with this interpreter (jupyter_client maps the spec's "python" to
    # sys.executable), so the notebook sees the same venv and editable install as the caller.
    # A caller's MPLBACKEND (e.g. Agg in CI) would stop the inline backend from capturing figures.
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env.setdefault("JAX_PLATFORMS", "cpu")
    NotebookClient(nb, timeout=timeout_s, kernel_name=kernel_name,
                   resources={"metadata": {"path": str(path.parent)}}).execute(env=env)
    if out_path is not None:
        out_path = pathlib.Path(out_path)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, out_path)
    return nb


def resolve_path_parameters(parameters: dict) -> dict:
    """`parameters` with every folder parameter (PATH_PARAMETERS, PATH_LIST_PARAMETERS) that is a non-empty string
    made absolute from the current directory, once, before any kernel (running elsewhere) reads it."""
    out = dict(parameters)
    for name, resolve in PATH_PARAMETERS.items():
        if isinstance(out.get(name), str) and out[name]:
            out[name] = resolve(out[name])
    for name in PATH_LIST_PARAMETERS:
        if isinstance(out.get(name), str) and out[name].strip():
            out[name] = ",".join(user_path(w.strip()) for w in out[name].split(",") if w.strip())
    return out


def parse_parameter(text: str) -> tuple[str, object]:
    """`name=value` with value a Python literal (falls back to the plain string)."""
    name, sep, value = text.partition("=")
    if not sep or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    try:
        return name, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return name, value


def main(argv: list[str] | None = None) -> int:
    """CLI: execute the notebooks and write executed copies to --out."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", default=[], help="notebook names in notebooks/ (default: all of "
                        "them, or with -p the ones that take one of its parameters)")
    parser.add_argument("--out", default=str(NOTEBOOK_DIR / "executed"), help="folder for the executed copies")
    parser.add_argument("-p", "--param", action="append", default=[], type=parse_parameter,
                        help="NAME=VALUE parameter (Python literal) for every notebook that has it")
    parser.add_argument("--timeout", type=int, default=600, help="per-cell timeout in seconds")
    args = parser.parse_args(argv)
    params = resolve_path_parameters(dict(args.param))
    sources = [NOTEBOOK_DIR / name for name in args.notebooks or NOTEBOOKS]
    for src in sources:
        if not src.exists():
            parser.error(f"no notebook {src}" + _did_you_mean(src.name, NOTEBOOKS))
    if pathlib.Path(args.out).resolve() == NOTEBOOK_DIR:  # the executed copies would replace the notebooks
        parser.error(f"--out {args.out}: that is notebooks/ itself; the executed copies would overwrite the "
                     "notebooks: choose another folder (default: notebooks/executed)")
    known = {src: notebook_parameters(nbformat.read(src, as_version=4)) for src in sources}
    unknown = sorted(set(params) - set().union(*known.values()))
    if unknown:
        parser.error(f"no notebook has parameter(s) {unknown}"
                     + _did_you_mean(unknown[0], sorted(set().union(*known.values()))))
    if params and not args.notebooks:  # `-p workdir=RUN` is about that run: not a sweep the ablation notebook makes
        skipped = [src.name for src in sources if not set(params) & known[src]]
        sources = [src for src in sources if set(params) & known[src]]
        if skipped:
            print(f"not run (none of {sorted(params)} is theirs; name them to run them): {', '.join(skipped)}")
    for src in sources:
        out = pathlib.Path(args.out) / src.name
        t0 = time.perf_counter()
        # -p applies to every notebook that has the parameter.
        try:
            execute_notebook(src, out, {k: v for k, v in params.items() if k in known[src]}, timeout_s=args.timeout)
        except CellExecutionError as e:
            if e.ename not in USER_ERRORS:
                raise  # a bug in a notebook: the failing cell and its traceback
            raise SystemExit(f"run_notebooks: {src.name}: {e.ename}: {e.evalue}") from None
        except KeyboardInterrupt:  # the kernel is shut down by nbclient; what finished is already written
            left = " ".join(s.name for s in sources[sources.index(src):])
            raise SystemExit(f"\nrun_notebooks: interrupted in {src.name} (nothing written for it); to resume, run "
                             f"the same command naming {left}") from None
        print(f"{src.name}: executed in {time.perf_counter() - t0:.1f} s -> {out}")
    return 0


def _did_you_mean(name: str, choices: list[str] | tuple[str, ...]) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


if __name__ == "__main__":
    sys.exit(main())
