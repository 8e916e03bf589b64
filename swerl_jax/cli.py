"""The command-line contract every entry point keeps: bad input is one line, Ctrl-C is one line.

    if __name__ == "__main__":
        run_cli("python -m swerl_jax.eval.export", main, resume="run the same command again")

Bad input (a wrong key, path, id, type or value) reaches the user as the exception's own message, which names
the key, file or record and, where it fits, a "did you mean"; it is never a 10-20-line traceback. Ctrl-C stops
the command and says how to resume. A bug (any other exception) keeps its traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

# What a user's mistake raises: the message names the input; the traceback would only hide it.
INPUT_ERRORS = (ValueError, KeyError, TypeError, FileNotFoundError, FileExistsError, NotADirectoryError,
                IsADirectoryError)


def input_error_line(prog: str, err: BaseException) -> str:
    """`prog: message` (KeyError's quotes dropped)."""
    text = str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)
    return f"{prog}: {text}"


def run_cli(prog: str, main: Callable[[list[str]], Any], resume: str = "run the same command again",
            argv: list[str] | None = None, exit_code: Callable[[Any], int] | None = None) -> None:
    """Run `main(argv)` as a command: exit 2 with one line on bad input, 130 with one line on Ctrl-C (naming how
    to resume), else `exit_code(result)` (0 without it)."""
    try:
        result = main(sys.argv[1:] if argv is None else argv)
    except KeyboardInterrupt:
        print(f"\n{prog}: interrupted; to resume, {resume}", file=sys.stderr, flush=True)
        sys.exit(130)
    except INPUT_ERRORS as err:
        print(input_error_line(prog, err), file=sys.stderr, flush=True)
        sys.exit(2)
    sys.exit(exit_code(result) if exit_code else 0)
