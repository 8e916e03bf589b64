"""The trusted pytest plugin of execution verdicts: copied by the host into a grading's read-only inputs under a random
module name, with TOKEN and ROOTS filled in, and loaded with `-p` before any repository code runs (never imported by
the project; `sandbox/pytest_verdict.py` says what it guarantees). Standard library and pytest only, and written
for every Python and pytest a SWE-bench spec pins (no f-strings, no walrus)."""
# ruff: noqa: UP031

import json
import os
import sys

TOKEN = "@@TOKEN@@"  # the host's per-grading secret: a record without it is no record
ROOTS = []  # @@ROOTS@@: folders whose code the grader installed (the environment's site-packages, pytest's own)
MARK = "@@swerl-verdict@@ "

# Before pytest reads it (this module is imported while -p arguments are handled, before setuptools entry points):
# no plugin loads that the grader did not name, whatever launched pytest (tox passes only some variables).
os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
# Only the graded pytest writes a record: one that the tests start in a subprocess (pytester's runpytest_subprocess
# inherits PYTEST_ADDOPTS, so it loads this file too) stays passive, though it knows the token.
_ACTIVE = not os.environ.get("SWERL_VERDICT_ACTIVE")
os.environ["SWERL_VERDICT_ACTIVE"] = "1"
_OUT = os.dup(1)  # the real stdout, before pytest's capture replaces fd 1
try:
    os.set_inheritable(_OUT, False)
except Exception:
    pass

import pytest  # noqa: E402  (after the variable above is set)

_OUTCOMES = {}
_STATE = {}
_XFAIL_MARKED = set()  # node ids whose item carries an xfail marker: only their expected failures count as passes
# The primitives the record is made with, bound before any repository code runs (a patched json.dumps or os.write
# then cannot rewrite it; code that reaches this module's own globals still can: SECURITY.md).
_dumps, _write, _realpath = json.dumps, os.write, os.path.realpath


def _watched_modules():
    return [(name, mod) for name, mod in list(sys.modules.items())
            if mod is not None and (name == "pytest" or name.split(".")[0] in ("_pytest", "pluggy", "py"))]


def _snapshot():
    """What the verdict rests on, by identity: every attribute of every class that pytest and pluggy define, every
    function and class a pytest or pluggy module holds, and the plugins registered so far."""
    classes, functions = {}, {}
    for name, mod in _watched_modules():
        for attr, value in list(vars(mod).items()):
            if isinstance(value, type) and getattr(value, "__module__", None) == name:
                classes[value] = dict(vars(value))
            if callable(value):
                functions[(name, attr)] = value
    return classes, functions


_CLASSES, _FUNCTIONS = _snapshot()


def _under(path, roots):
    if not path:
        return False
    path = os.path.realpath(path)
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def _code_file(obj):
    func = getattr(obj, "__func__", obj)
    code = getattr(func, "__code__", None)
    return getattr(code, "co_filename", None)


def _roots():
    """Where the grader's code lives, read-only to the sandbox: the environment's site-packages (pytest's own
    folder among them), the interpreter's standard library and this plugin's inputs folder. Never the work dir:
    code under test can write there."""
    here = os.path.dirname(os.path.abspath(__file__))
    stdlib = os.path.dirname(os.path.abspath(os.__file__))  # the interpreter's own library (read-only too)
    return [os.path.realpath(r) for r in ROOTS + [here, stdlib, os.path.dirname(os.path.dirname(pytest.__file__))]]


def _functions_of(owner):
    """The ids of the functions an object or class (and its bases) holds, plain or wrapped."""
    found = set()
    for klass in (getattr(owner, "__mro__", None) or (owner,)):
        for value in list(vars(klass).values()):
            found.add(id(value))
            found.add(id(getattr(value, "__func__", value)))
            found.add(id(getattr(value, "__wrapped__", value)))
    return found


def _hook_owner(plugin, roots, pm):
    """Where `plugin`'s hooks may come from ('' when from nowhere the grader named): a conftest module pytest itself
    loaded from a file, a module of the environment or pytest, or an instance of a class one of those defines."""
    if isinstance(plugin, type(sys)):
        path = getattr(plugin, "__file__", None) or ""
        if os.path.basename(path) in ("conftest.py", "conftest.pyc"):
            loaded = getattr(pm, "_conftest_plugins", None)  # pytest's own record of the conftests it imported
            known = loaded is None or any(plugin is c for c in loaded)
            return "conftest" if known and os.path.isfile(path) else ""
        if plugin.__name__ in _declared_plugins(pm) and sys.modules.get(plugin.__name__) is plugin:
            return "declared"  # named by a conftest's `pytest_plugins` (sphinx.testing.fixtures): the repo's own
        return "module" if _under(path, roots) and sys.modules.get(plugin.__name__) is plugin else ""
    cls = type(plugin)
    if cls in _CLASSES:
        return "pytest"
    mod = sys.modules.get(getattr(cls, "__module__", ""), None)
    if mod is not None and _under(getattr(mod, "__file__", None), roots) and getattr(mod, cls.__name__, None) is cls:
        return "class"
    return ""


def _trusted_code(obj, roots, lenient=False):
    """Whether `obj` (a function, property, class- or staticmethod, partial or class) is code from the grader's
    folders: pytest's own plugins replace class attributes too (legacypath's `Config.rootdir`). `lenient`: objects
    with no Python code (C-level descriptors, builtins) or generated code pass; only code from a file elsewhere
    fails."""
    if obj is None:
        return True
    if isinstance(obj, type):
        mod = sys.modules.get(getattr(obj, "__module__", ""), None)
        return mod is not None and _under(getattr(mod, "__file__", None), roots)
    parts = [getattr(obj, name, None) for name in ("fget", "fset", "fdel", "__func__", "func")]
    parts = [p for p in parts if p is not None] or [obj]
    files = [_code_file(p) for p in parts]
    # lenient: generated code ("<string>": dataclasses' and attrs' methods) passes too
    return all((lenient and (f is None or f.startswith("<"))) or (f is not None and _under(f, roots)) for f in files)


def _foreign_at_start():
    """What pytest's and pluggy's classes and modules already hold of code from outside the grader's folders when
    this plugin loads (a .pth or sitecustomize that ran first)."""
    roots, found = _roots(), []
    for cls, attrs in _CLASSES.items():
        for key, value in attrs.items():
            if hasattr(value, "__get__") and not _trusted_code(value, roots, lenient=True):
                found.append("class %s.%s.%s is foreign code at start" % (cls.__module__, cls.__qualname__, key))
    for (name, attr), value in _FUNCTIONS.items():
        if not isinstance(value, type) and not _trusted_code(value, roots, lenient=True):
            found.append("%s.%s is foreign code at start" % (name, attr))
    return found


def _declared_plugins(pm):
    """The module names the conftests pytest loaded declare in `pytest_plugins` (pytest imported them for it)."""
    names = set()
    for conftest in list(getattr(pm, "_conftest_plugins", None) or ()):
        declared = getattr(conftest, "pytest_plugins", ())
        names.update([declared] if isinstance(declared, str) else [str(d) for d in declared or ()])
    return names


def _tampering(run):
    """What changed in pytest's machinery since this plugin loaded: [] when nothing did."""
    found, roots = [], _roots()
    for cls, attrs in _CLASSES.items():
        now = vars(cls)
        for key in set(attrs) | set(now):
            before, after = attrs.get(key), now.get(key)
            if key.startswith("_abc_") or key in ("__slotnames__", "__abstractmethods__", "__parameters__"):
                continue
            if not (hasattr(before, "__get__") or hasattr(after, "__get__")):
                continue  # plain data (counters, caches): the verdict rests on methods and descriptors
            if before is not after and not _trusted_code(after, roots):
                found.append("class %s.%s.%s changed" % (cls.__module__, cls.__qualname__, key))
    for (name, attr), value in _FUNCTIONS.items():
        mod = sys.modules.get(name)
        now = getattr(mod, attr, None) if mod is not None else None
        if now is not value and not _trusted_code(now, roots):
            found.append("%s.%s replaced" % (name, attr))
    pm = run.pluginmanager
    if type(pm) is not _STATE["pm_type"] or pm is not _STATE["pm"]:
        found.append("the plugin manager was replaced")
    for key, value in _STATE["pm_attrs"].items():
        if pm.__dict__.get(key) is not value:
            found.append("plugin manager attribute %s replaced" % key)
    owners = {}
    for hook_name in sorted(k for k in vars(pm.hook) if not k.startswith("_")):  # (old pluggy keeps _trace there)
        caller = getattr(pm.hook, hook_name)
        if type(caller) is not _STATE["caller_type"]:
            found.append("hook %s is not pluggy's" % hook_name)
            continue
        execute = getattr(caller, "_hookexec", None)  # how it runs its implementations: the manager's own
        if execute is not None and execute != _STATE["hookexec"]:
            found.append("hook %s runs through %r" % (hook_name, execute))
        impls = caller.get_hookimpls() if hasattr(caller, "get_hookimpls") else (
            list(getattr(caller, "_nonwrappers", [])) + list(getattr(caller, "_wrappers", [])))
        for impl in impls:
            plugin = impl.plugin
            if id(plugin) not in owners:
                why = _hook_owner(plugin, roots, pm)
                owner = plugin if isinstance(plugin, type(sys)) else type(plugin)
                owners[id(plugin)] = (why, _functions_of(owner) if why else set())
            why, functions = owners[id(plugin)]
            func = impl.function
            code = _code_file(func)
            if not why:
                found.append("hook %s implemented by %r (%s)" % (hook_name, plugin, code))
            elif id(func) not in functions and id(getattr(func, "__func__", func)) not in functions:
                found.append("hook %s of %r is not its own function" % (hook_name, plugin))
            elif why in ("conftest", "declared") and (code is None or _realpath(code) != _realpath(plugin.__file__)):
                found.append("hook %s of %s is code from %s" % (hook_name, plugin.__file__, code))
            elif why not in ("conftest", "declared") and not _trusted_code(func, roots, lenient=True):
                found.append("hook %s of %r is code from %s" % (hook_name, plugin, code))
    return found


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config):
    # Before the first conftest (repository code) is imported: the plugin manager as pytest made it.
    pluginmanager = early_config.pluginmanager
    if not _ACTIVE or ("pm" in _STATE and pluginmanager is not _STATE["pm"]):
        # a pytest session run inside the graded one, in its process or a child (pytest's own tests: pytester's
        # runs inherit PYTEST_ADDOPTS): the verdict is the outer session's; this one runs without the plugin
        pluginmanager.unregister(sys.modules[__name__])
        return
    _STATE["pm"] = pluginmanager
    _STATE["pm_type"] = type(pluginmanager)
    _STATE["pm_attrs"] = {k: v for k, v in vars(pluginmanager).items() if callable(v)}
    _STATE["caller_type"] = type(pluginmanager.hook.pytest_addoption)
    _STATE["hookexec"] = getattr(pluginmanager.hook.pytest_addoption, "_hookexec", None)  # (slots in pluggy 1.5)
    _STATE["foreign"] = _foreign_at_start()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    # xfail markers are the test files' (the grader's); an xfail raised by the code under test is a failure
    marker = item.get_closest_marker("xfail") if hasattr(item, "get_closest_marker") else item.get_marker("xfail")
    if marker is not None:
        _XFAIL_MARKED.add(item.nodeid)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report):
    """Each test id's outcome, by SWE-bench's log rules: a failed setup or teardown is an error, a failed call a
    failure, an expected failure XFAIL, an unexpected pass XPASS (neither passed nor failed there)."""
    nodeid = report.nodeid
    xfail = hasattr(report, "wasxfail")
    if xfail and nodeid not in _XFAIL_MARKED and report.when == "call" and report.skipped:
        _OUTCOMES[nodeid] = "FAILED"  # pytest.xfail() from the code under test: no marker names it expected
        return
    if report.when == "call":
        if report.passed:
            status = "XPASS" if xfail else "PASSED"
        elif report.skipped:
            status = "XFAIL" if xfail else "SKIPPED"
        else:
            status = "FAILED"
        if _OUTCOMES.get(nodeid) != "ERROR":
            _OUTCOMES[nodeid] = status
    elif report.failed:
        _OUTCOMES[nodeid] = "ERROR"
    elif report.skipped and report.when == "setup":
        _OUTCOMES[nodeid] = "XFAIL" if xfail else "SKIPPED"


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    _STATE["exitstatus"] = int(exitstatus)
    _STATE["finished"] = True


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """After the whole run: the outcomes, pytest's exit status and what was tampered with, as one record line."""
    if not _STATE.get("finished") or "pm" not in _STATE:
        return
    run = config  # (the hook's argument name is pluggy's; the run's settings are read from it below)
    try:
        tampered = list(_STATE.get("foreign", [])) + _tampering(run)
    except Exception as err:  # the machinery itself is broken: no verdict rests on it
        tampered = ["the check failed: %r" % (err,)]
    if _STATE.get("exitstatus") == 1 and not any(v in ("FAILED", "ERROR") for v in _OUTCOMES.values()):
        tampered.append("pytest exited 1 (tests failed) but no outcome failed")
    rel = getattr(type(run), "cwd_relative_nodeid", None)  # the class's method: an instance attribute may lie
    outcomes = {}
    for nodeid, status in list(_OUTCOMES.items()):
        try:
            outcomes[rel(run, nodeid) if rel else nodeid] = status
        except Exception:
            outcomes[nodeid] = status
    body = _dumps({"nonce": TOKEN, "outcomes": outcomes, "exitstatus": _STATE.get("exitstatus"),
                   "tampered": tampered[:50]})
    data = ("\n" + MARK + body + "\n").encode("utf-8", "replace")
    while data:
        data = data[_write(_OUT, data):]
