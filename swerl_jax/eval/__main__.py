"""`python -m swerl_jax.eval {run,repair-score,harness,calibrate,export} ...`: the evaluation commands.

    run            Agentless Mini predictions (and their grading): swerl_jax.eval.run
    repair-score   the paper's oracle-file repair metric on PR records: swerl_jax.eval.repair_score
    harness        grade SWE-bench predictions in the sandbox: swerl_jax.eval.harness
    calibrate      gold vs empty patches per instance: swerl_jax.eval.calibrate
    export         a run's checkpoint or policy version as a Hugging Face directory: swerl_jax.eval.export
"""

from __future__ import annotations

import difflib
import importlib
import sys
from typing import Any

COMMANDS = {"run": "run", "repair-score": "repair_score", "harness": "harness", "calibrate": "calibrate",
            "export": "export"}


def main(argv: list[str]) -> Any:
    """Dispatch to the subcommand's module `main`; an unknown command is one line with a "did you mean"."""
    if not argv or argv[0] in ("-h", "--help"):
        sys.exit(f"usage: python -m swerl_jax.eval {{{','.join(COMMANDS)}}} ...\n\n{__doc__}")
    if argv[0] not in COMMANDS:
        close = difflib.get_close_matches(argv[0], list(COMMANDS), n=1)
        raise ValueError(f"unknown command {argv[0]!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                         + f"; the commands: {', '.join(COMMANDS)}")
    return importlib.import_module(f"swerl_jax.eval.{COMMANDS[argv[0]]}").main(argv[1:])


if __name__ == "__main__":
    from swerl_jax.cli import run_cli

    command = sys.argv[1] if len(sys.argv) > 1 else ""
    # the commands whose result says more than "it ran": a report with nothing graded, an instance that failed
    codes = {"harness": "swerl_jax.eval.harness", "run": "swerl_jax.eval.run"}
    code = importlib.import_module(codes[command]).exit_code if command in codes else None
    run_cli(f"python -m swerl_jax.eval {command}".rstrip(), main, resume="run the same command again",
            exit_code=code)
