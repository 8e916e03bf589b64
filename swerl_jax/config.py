"""Loading an experiment config from the command line, at the bottom of the package (it imports no domain):

    config = load_experiment_config("experiments/tiny_cpu.py:short")   # the ConfigDict of get_config("short")
    problems = unknown_config_keys(config, sys.argv)   # ["unknown config key 'rl.num_step'; did you mean ..."]

Typing and checking it against the domains' registries is `swerl_jax.resolve.resolve_config`, called once by each
entry point. Every default lives in `experiments/base.py`; `tests/experiments/test_configs.py` checks that the code
reads no key the base config lacks.
"""

from __future__ import annotations

import difflib
import json
import os
import pathlib
import re
from typing import Any

import ml_collections

from swerl_jax.runs.rundir import flatten

_OVERRIDE = re.compile(r"^--(?:no)?config\.([A-Za-z0-9_.]+)(?:=|$)")


def unknown_config_keys(config: Any, argv: list[str]) -> list[str]:
    """One message per `--config.KEY=...` in `argv` whose KEY the config does not define, naming the closest
    valid key, or that names a whole section (`--config.rl=3`) rather than one of its fields (the check runs
    before absl parses the overrides, which would end in a long traceback)."""
    flat = flatten(json.loads(config.to_json()))
    sections = {k.rsplit(".", i)[0] for k in flat for i in range(1, k.count(".") + 1)}
    known = set(flat) | sections
    out = []
    for arg in argv:
        m = _OVERRIDE.match(arg)
        if m and m.group(1) in sections:
            out.append(section_message(m.group(1), [k for k in flat if k.startswith(m.group(1) + ".")]))
        elif m and m.group(1) not in known:
            close = difflib.get_close_matches(m.group(1), sorted(known), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else ""
            out.append(f"unknown config key {m.group(1)!r}{hint}")
    return out


def section_message(section: str, keys: list[str], shown: int = 8) -> str:
    """`config key 'rl' is a section, not a value: set one of its fields, --config.rl.FIELD=VALUE (FIELD: ...)`:
    ml_collections' own words ("cannot be casted to ConfigDict") do not say which fields there are."""
    fields = sorted({k[len(section) + 1:].split(".")[0] for k in keys})
    listed = ", ".join(fields[:shown]) + (f", ... ({len(fields)} in all)" if len(fields) > shown else "")
    return (f"config key {section!r} is a section, not a value: set one of its fields, "
            f"--config.{section}.FIELD=VALUE (FIELD: {listed})")


def did_you_mean(word: str, options: list[str]) -> str:
    """` (did you mean 'x'?)` for the option closest to `word`, or "": '-', '_' and '.' and case are ignored
    first, so `demo7m` finds `demo-7m` and `Qwen3_0.6B` finds `qwen3-0.6b`."""
    def bare(text: str) -> str:
        return re.sub(r"[-_.]", "", text).lower()

    same = [o for o in options if bare(o) == bare(word)]
    close = same or difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def config_file_arg(config_arg: str) -> str:
    """`--config`'s `PATH[:arg]` with PATH found from the current directory, else from the repository root (so
    `experiments/NAME.py` works from outside the clone, as data paths do); unchanged when neither has it."""
    path, sep, arg = config_arg.partition(":")
    path = os.path.expanduser(path)
    repo_path = os.path.join(str(pathlib.Path(__file__).resolve().parents[1]), path)
    if not os.path.isabs(path) and not os.path.exists(path) and os.path.exists(repo_path):
        path = repo_path
    return path + sep + arg


def load_experiment_config(config_arg: str) -> Any:
    """The ConfigDict of `experiments/NAME.py[:arg]` (`get_config(arg)`), as `--config` names it on any command line
    (a relative path from the current directory, else from the repository root); FileNotFoundError names a missing
    file. The repository root goes on sys.path (experiments import
    `experiments.base`)."""
    import importlib.util
    import sys

    repo_root = str(pathlib.Path(__file__).resolve().parents[1])
    if repo_root not in sys.path:
        sys.path.insert(0, repo_root)
    path, _, arg = config_file_arg(config_arg).partition(":")
    spec = importlib.util.spec_from_file_location("_swerl_experiment", path)
    if os.path.isfile(path) and spec is None:  # it exists: "no such file" would send the user looking elsewhere
        hint = (": a run's config.json is not one; pass the experiments/NAME.py the run was started with"
                if pathlib.Path(path).name == "config.json" else "")
        raise ValueError(f"{path} is not an experiment file (a .py defining get_config(arg))" + hint)
    if spec is None or not os.path.exists(path):
        folder = pathlib.Path(path).parent
        names = sorted(p.name for p in folder.glob("*.py")) if folder.is_dir() else []
        close = difflib.get_close_matches(pathlib.Path(path).name, names, n=1)
        if not close and os.path.exists(path + ".py"):
            close = [pathlib.Path(path).name + ".py"]
        raise FileNotFoundError(f"--config={config_arg}: no such config file {path!r}"
                                + (f" (did you mean {folder / close[0]}?)" if close else ""))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "get_config", None)):
        raise ValueError(f"{path} defines no get_config(arg): an experiment file returns its ConfigDict from "
                         "get_config (see experiments/tiny_cpu.py)")
    config = module.get_config(arg) if arg else module.get_config()
    if not isinstance(config, ml_collections.ConfigDict):  # a dict would fail later with an AttributeError
        raise ValueError(f"{path}: get_config({arg or ''}) returned a {type(config).__name__}, not an "
                         "ml_collections.ConfigDict (start from experiments/base.py's get_config())")
    return config


OVERRIDE_HELP = "--config.KEY=VALUE (or --config.KEY VALUE): override a config key (repeatable), as `train` takes"


def split_overrides(argv: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """Take the `--config.KEY=VALUE` / `--config.KEY VALUE` arguments out of `argv` (the one override style of every
    entry point; `train` and the sampler server get it from absl): (the other arguments, [(KEY, text), ...])."""
    rest, found, i = [], [], 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--config.") and len(arg) > len("--config."):
            key, sep, text = arg[len("--config."):].partition("=")
            if not sep:
                if i + 1 >= len(argv):
                    raise ValueError(f"{arg}: expected --config.{key}=VALUE")
                text, i = argv[i + 1], i + 1
            found.append((key, text))
        else:
            rest.append(arg)
        i += 1
    return rest, found


def apply_overrides(config: Any, overrides: list[tuple[str, str]]) -> dict[str, Any]:
    """Set each (KEY, text) of `split_overrides` on the ConfigDict, typed as the key's current value; an unknown key
    raises KeyError naming it and the closest known key. Returns {KEY: typed value}."""
    typed = {key: parse_value(config, key, text) for key, text in overrides}
    for key, value in typed.items():
        set_key(config, key, value)
    return typed


def parse_value(config: Any, key: str, text: str) -> Any:
    """`text` as the type of `config`'s field `key` (int, float, bool, str, None for an unset optional string)."""
    node = config
    *path, last = key.split(".")
    for part in path:
        if part not in node:
            raise unknown_key(config, key)
        node = node[part]
    if last not in node:
        raise unknown_key(config, key)
    current = node[last]
    if hasattr(current, "keys"):  # a section: ml_collections would say it "cannot be casted to ConfigDict"
        raise ValueError(section_message(key, [f"{key}.{k}" for k in current.keys()]))
    if isinstance(current, bool):
        if text.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"{key}={text!r}: expected a bool (true/false)")
        return text.lower() in ("true", "1")
    for kind in (int, float):
        if isinstance(current, kind):
            try:
                return kind(text)
            except ValueError:
                raise ValueError(f"{key}={text!r}: expected {'an int' if kind is int else 'a float'}") from None
    return None if text == "None" else text


def unknown_key(config: Any, key: str) -> KeyError:
    """KeyError naming `key`, which `config` lacks, and the closest key it has."""
    problems = unknown_config_keys(config, [f"--config.{key}="])  # its "; did you mean ..." names the closest key
    hint = problems[0].partition(";")[2] if problems else ""
    return KeyError(f"unknown config key {key}" + (f";{hint}" if hint else ""))


def set_key(config: Any, key: str, value: Any) -> None:
    """Set the dotted `key` of a ConfigDict (the key must exist: see `parse_value`)."""
    *path, last = key.split(".")
    node = config
    for part in path:
        node = node[part]
    node[last] = value


def rl_seed(config: Any) -> int:
    """The GRPO stage's seed (its prompt order and sampling keys): `rl.seed`, or `seed` where it is -1 or absent."""
    value = int(getattr(config.rl, "seed", -1))  # absent: a config written before rl.seed existed
    return int(config.seed) if value == -1 else value
