"""The `rl.*` registries' decorator and lookup, and where a user's registered function comes from.

`register_in(table, name)` is what `register_advantage`, `register_kl` and `register_loss_agg` are built with. A user
registers a function in an experiment file or in their own module; two things follow from that:

* The same file may be executed more than once in one process (`--config` is loaded by absl's config flag and by
  `config.load_experiment_config`; a sweep loads its experiment once per variant; a notebook cell runs again).
  Registering the same function again (same qualified name, same source file) replaces the earlier definition
  instead of raising "already registered"; a *different* function under a taken name is still an error.
* Another process (the sampler server, reading the run's config.json) has not executed that file. `origin(fn)` says
  where to import it from (its module's name when importable, else its source file), `resolve_config` records the
  origins of the functions the config names in `rl.imports`, and any process resolving that config imports them
  first (`import_origins`), so the name is registered there too.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterable

_imported: set[str] = set()  # origins this process has imported through `import_origins`


def _identity(fn: Callable) -> tuple[str | None, str | None]:
    """(qualified name, absolute source file) of `fn`: equal for the same def executed again."""
    code = getattr(fn, "__code__", None)
    return getattr(fn, "__qualname__", None), os.path.abspath(code.co_filename) if code is not None else None


def _same_def(old: Callable, fn: Callable) -> bool:
    """Whether `fn` is `old`'s def executed again (its file run once more): same name and file, and equal code
    objects (CPython compares the bytecode, constants, names and first line), so another body under the same name in
    the same file, or a second lambda, is not mistaken for it (issue 57's held-out check)."""
    code = getattr(fn, "__code__", None)
    return (_identity(old) == _identity(fn) and code is not None
            and getattr(old, "__code__", None) == code)


def _describe(fn: Callable) -> str:
    name, path = _identity(fn)
    return f"{name} in {path}" if path else repr(fn)


def register_in(table: dict[str, Callable], name: str) -> Callable[[Callable], Callable]:
    """Decorator adding `fn` to a registry `table` as `name`. The same def registered again (its file executed
    once more) replaces the earlier definition; another function under a taken name (another body or line under the
    same name in the same file included) is a ValueError naming both."""
    def deco(fn: Callable) -> Callable:
        old = table.get(name)
        if old is not None and old is not fn and not _same_def(old, fn):
            raise ValueError(f"{name!r} is already registered (by {_describe(old)}); {_describe(fn)} needs "
                             "another name")
        table[name] = fn
        return fn
    return deco


def lookup(table: dict[str, Callable], name: str, key: str) -> Callable:
    """`table[name]`, or ValueError naming the config `key` and the registered names."""
    if name not in table:
        raise ValueError(f"{key}={name!r} is not one of {sorted(table)} (a function registered in a .py file is "
                         "imported from the config's rl.imports, which resolving the config in the process that "
                         "registered it fills)")
    return table[name]


def _importable_by_name(module: str) -> bool:
    """Whether `module` (loaded in this process) is its file found by name on sys.path (not a file executed under
    a made-up name, e.g. `_swerl_experiment` or absl's `config_config`)."""
    spec = getattr(sys.modules.get(module), "__spec__", None)
    if module in ("", "__main__") or spec is None or spec.name != module or not spec.origin:
        return False
    file, parts = os.path.abspath(spec.origin), module.split(".")
    roots = {os.path.abspath(p or os.getcwd()) for p in sys.path if isinstance(p, str)}
    for tail in (os.path.join(*parts) + ".py", os.path.join(*parts, "__init__.py")):
        if file.endswith(os.sep + tail) and file[:-len(tail) - 1] in roots:
            return True
    return False


def origin(fn: Callable) -> str | None:
    """Where another process imports `fn` from: None for swerl_jax's own functions, the module's name when it can be
    imported by that name (a user's package on the path), else the absolute path of its .py file (an experiment
    file, which is executed by path, not imported by name); None too for a function no file holds (a notebook
    cell's: another process cannot have it, so define it in a .py file for `sampler.mode=process`)."""
    module = getattr(fn, "__module__", None) or ""
    if module == "swerl_jax" or module.startswith("swerl_jax."):
        return None
    if _importable_by_name(module):
        return module
    path = _identity(fn)[1]
    return path if path is not None and path.endswith(".py") and os.path.isfile(path) else None


def origins(uses: Iterable[tuple[dict[str, Callable], str]]) -> list[str]:
    """The origins (`origin`) of the registered functions named by `uses` ((table, name) pairs), in order, once
    each; names not registered and swerl_jax's own are left out."""
    out: list[str] = []
    for table, name in uses:
        fn = table.get(name)
        where = origin(fn) if fn is not None else None
        if where is not None and where not in out:
            out.append(where)
    return out


def import_origins(found: Iterable[str], key: str = "rl.imports") -> None:
    """Import each origin (a module name, or a .py file executed by path) once per process, so the functions
    registered there are in this process's registries; ValueError naming `key` and the origin when one fails."""
    for where in found:
        if where in _imported:
            continue
        try:
            if where.endswith(".py"):
                if not os.path.isfile(where):
                    raise FileNotFoundError(f"no such file {where}")
                name = "_swerl_registered_" + hashlib.sha1(where.encode()).hexdigest()[:12]
                spec = importlib.util.spec_from_file_location(name, where)
                module = importlib.util.module_from_spec(spec)
                sys.modules[name] = module
                spec.loader.exec_module(module)
            else:
                importlib.import_module(where)
        except Exception as e:  # noqa: BLE001 - a user's file: whatever it raises is named with the key
            raise ValueError(f"{key}: cannot import {where!r}, where a registered rl.* function of this run is "
                             f"defined: {type(e).__name__}: {e}") from None
        _imported.add(where)
