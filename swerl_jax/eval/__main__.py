"""`python -m swerl_jax.eval {run,repair-score,harness,calibrate,export} ...`: the evaluation commands.

    run            Agentless Mini predictions (and their grading): swerl_jax.eval.run
    repair-score   the paper's oracle-file repair metric on PR records: swerl_jax.eval.repair_score
    harness        grade SWE-bench predictions in the sandbox: swerl_jax.eval.harness
    calibrate      gold vs empty patches per instance: swerl_jax.eval.calibrate
    export         a run's checkpoint or policy version as a Hugging Face directory: swerl_jax.eval.export
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {"run": "run", "repair-score": "repair_score", "harness": "harness", "calibrate": "calibrate",
            "export": "export"}


def main(argv: list[str]) -> None:
    """Dispatch to the subcommand's module `main`."""
    if not argv or argv[0] not in COMMANDS:
        sys.exit(f"usage: python -m swerl_jax.eval {{{','.join(COMMANDS)}}} ...\n\n{__doc__}")
    importlib.import_module(f"swerl_jax.eval.{COMMANDS[argv[0]]}").main(argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
