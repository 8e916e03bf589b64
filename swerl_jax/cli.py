"""The command-line contract every entry point keeps: bad input is one line, Ctrl-C is one line.

    if __name__ == "__main__":
        run_cli("python -m swerl_jax.eval.export", main, resume="run the same command again")

Bad input (a wrong key, path, id, type or value) reaches the user as the exception's own message, which names
the key, file or record and, where it fits, a "did you mean"; it is never a 10-20-line traceback. Ctrl-C stops
the command and says how to resume. A bug (any other exception) keeps its traceback.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
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


@contextlib.contextmanager
def one_line_input_errors(prog: str) -> Iterator[None]:
    """Around the checks of a command's input only (flags, config values, names): `INPUT_ERRORS` there exit with
    one line. Not around the work itself, where the same exception types are bugs and keep their traceback."""
    try:
        yield
    except INPUT_ERRORS as err:
        raise SystemExit(input_error_line(prog, err)) from None


def absl_flags_parser(prog: str) -> Callable[[list[str]], list[str]]:
    """`app.run(main, flags_parser=absl_flags_parser(prog))`: absl flag parsing whose errors are one line: an
    unknown config key (with the closest valid one), a value of the wrong type, a missing flag or config file, an
    experiment's own argument check (an unknown `:variant`)."""
    import pathlib

    from absl import flags

    from swerl_jax.config import config_file_arg, load_experiment_config, unknown_config_keys

    def parse(argv: list[str]) -> list[str]:
        config_arg = config_flag(argv)
        if config_arg and config_file_arg(config_arg) != config_arg:  # absl reads the file from the current folder
            argv = [f"--config={config_file_arg(config_arg)}" if a == f"--config={config_arg}" else
                    config_file_arg(config_arg) if a == config_arg and i and argv[i - 1] == "--config" else a
                    for i, a in enumerate(argv)]
            config_arg = config_file_arg(config_arg)
        if config_arg:
            repo_root = str(pathlib.Path(__file__).resolve().parents[1])
            if repo_root not in sys.path:  # experiments/ import `experiments.base` from the repository root
                sys.path.insert(0, repo_root)
            try:
                problems = unknown_config_keys(load_experiment_config(config_arg), argv[1:])
            except FileNotFoundError as e:
                raise SystemExit(f"{prog}: {e}") from None
            except (ValueError, KeyError) as e:  # an experiment's own argument check (e.g. an unknown variant)
                raise SystemExit(input_error_line(f"{prog}: --config={config_arg}", e)) from None
            if problems:
                raise SystemExit(f"{prog}: " + "; ".join(problems))
        try:
            return flags.FLAGS(argv)
        except flags.Error as e:
            raise SystemExit(f"{prog}: {e}") from None

    return parse


def config_flag(argv: list[str]) -> str | None:
    """The value of `--config` in `argv` (`--config=X` or `--config X`), or None."""
    for i, arg in enumerate(argv):
        if arg.startswith("--config="):
            return arg.split("=", 1)[1]
        if arg == "--config" and i + 1 < len(argv):
            return argv[i + 1]
    return None
