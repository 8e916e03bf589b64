"""Per-(repo, version) Python environments built from the SWE-bench specs, cached; the clones they come from.

An environment is a venv of the spec's Python version (from the interpreters on the machine: pyenv's versions,
then `pythonX.Y` on PATH) with the spec's requirements (read from the clone at the environment-setup commit),
packages and pinned pip packages installed from the package index. It holds dependencies only: each instance
gets a thin venv in its own work dir layered on top (see `overlay_venv`), so one cached environment serves every
instance of that version, concurrently. The cache lives in $SWERL_JAX_HOME/eval/envs (outside the run's --out):
builds take minutes, runs reuse them. Builds run pinned installs from the index, never model-written code.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pathlib
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from swerl_jax.sandbox import lru
from swerl_jax.tasks import index_cutoff, reach, specs


class EnvironmentError_(RuntimeError):
    """An environment could not be built; `log` names the build log."""

    def __init__(self, message: str, log: pathlib.Path | None = None):
        super().__init__(message if log is None else f"{message} (log: {log})")
        self.log = log


class OutOfReach(EnvironmentError_, reach.OutOfReach):
    """An environment this machine cannot build (no interpreter, compiler, conda or index): `reason` and `fix`."""

    def __init__(self, reason: str, fix: str, log: pathlib.Path | None = None):
        reach.OutOfReach.__init__(self, reason, fix)
        self.log = log


def default_cache_dir() -> pathlib.Path:
    """$SWERL_JAX_HOME/eval/envs (default ~/.cache/swerl_jax/eval/envs)."""
    home = pathlib.Path(os.environ.get("SWERL_JAX_HOME", pathlib.Path.home() / ".cache" / "swerl_jax"))
    return home / "eval" / "envs"


def find_python(version: str) -> pathlib.Path:
    """An interpreter for Python `version` ("3.9"): pyenv's newest X.Y.*, else pythonX.Y on PATH, else an error."""
    root = pathlib.Path(os.environ.get("PYENV_ROOT", pathlib.Path.home() / ".pyenv")) / "versions"
    candidates = sorted(
        (p for p in root.glob(f"{version}.*") if p.name.removeprefix(f"{version}.").isdigit()),
        key=lambda p: int(p.name.rsplit(".", 1)[1]),
    )
    for path in reversed(candidates):
        if (path / "bin" / "python").exists():
            return path / "bin" / "python"
    on_path = shutil.which(f"python{version}")
    if on_path:
        return pathlib.Path(on_path)
    raise OutOfReach(f"no Python {version} interpreter on this machine",
                     f"`pyenv install {version}` (looked for {root}/{version}.*/bin/python and python{version} "
                     "on PATH)")


def resolve_clone(repos_dir: pathlib.Path, repo: str, scratch: pathlib.Path) -> pathlib.Path:
    """The git dir for `repo` ("owner/name") from --repos: owner__name, owner__name.git or owner__name.bundle.

    A bundle is cloned (bare) once into `scratch` (inside the run's --out); plain and bare clones are used as-is.
    """
    name = repo.replace("/", "__")
    for candidate in (repos_dir / name, repos_dir / f"{name}.git"):
        if (candidate / ".git").exists():
            return candidate / ".git"
        if (candidate / "HEAD").exists():
            return candidate
    bundle = repos_dir / f"{name}.bundle"
    if bundle.is_file():
        target = scratch / f"{name}.git"
        with file_lock(scratch / f"{name}.lock"):
            if not (target / "HEAD").exists():
                tmp = scratch / f"{name}.git.tmp"
                shutil.rmtree(tmp, ignore_errors=True)
                subprocess.run(["git", "clone", "-q", "--bare", str(bundle), str(tmp)], check=True, capture_output=True)
                tmp.rename(target)
        return target
    raise FileNotFoundError(f"no clone of {repo} in {repos_dir} (expected {name}, {name}.git or {name}.bundle)")


_thread_locks: dict[str, threading.Lock] = {}
_thread_locks_guard = threading.Lock()


@contextmanager
def file_lock(path: pathlib.Path) -> Iterator[None]:
    """Exclusive across threads of this process and across processes (fcntl), so one build per key at a time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with _thread_locks_guard:
        lock = _thread_locks.setdefault(str(path), threading.Lock())
    with lock, open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_steps(spec: dict, requirements_file: pathlib.Path | None, python: pathlib.Path, tmp: pathlib.Path,
                dated: bool) -> list[tuple[list[str], str]]:
    """The build's commands, each with the index it resolves against: "config" (pip's own settings: today's index
    and this machine's wheel folders), "pypi" (today's PyPI alone) or "dated" (the view as of the cut-off).

    Today's order (`dated` False, all "config"): the venv, the requirements file or the spec's packages, the pip
    packages. Dated: the spec's pinned pip packages first, from today's PyPI with their dependencies (the official
    images got them so when they were built), then every unpinned requirement through the view as of the
    instance's date, where what is installed already and satisfies it stays. No dated build reads this machine's
    wheel folders: they hold files of any date, and lack the Python bounds that let pip 18 (Python 3.6) pass over
    today's trio when astropy 1.3's pins need one."""
    pip = [str(tmp / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
    steps: list[tuple[list[str], str]] = [([str(python), "-m", "venv", str(tmp)], "config")]
    pip_packages = list(spec.get("pip_packages") or [])
    pinned = [p for p in pip_packages if index_cutoff.PIN.fullmatch(p.strip())] if dated else []
    if pinned:
        steps.append((pip + pinned, "pypi"))

    def index(wanted: list[str]) -> str:
        if not dated:
            return "config"
        return "dated" if unpinned({"pip_packages": wanted}, "") else "pypi"

    if requirements_file is not None:
        steps.append((pip + ["-r", str(requirements_file)], index(requirements_file.read_text().splitlines())))
    elif spec.get("packages"):
        steps.append((pip + shlex.split(spec["packages"]), index(shlex.split(spec["packages"]))))
    rest = [p for p in pip_packages if p not in pinned]
    if rest:
        steps.append((pip + rest, index(rest)))
    return steps


def unpinned(spec: dict, requirements: str) -> list[str]:
    """The env build's requirements that are not `name==version` pins: what a cut-off can change. None (sphinx's
    and astropy 4-5's specs pin everything) means the dated env is today's env, so it is shared, not rebuilt."""
    if requirements:
        wanted = [x.split("#")[0].strip() for x in requirements.splitlines()]
    else:
        wanted = shlex.split(spec.get("packages") or "") if spec.get("packages") != "requirements.txt" else []
    wanted += list(spec.get("pip_packages") or [])
    return [x for x in wanted if x and not x.startswith("-") and not index_cutoff.PIN.fullmatch(x)]


def dated_env(env: dict[str, str], index_url: str) -> dict[str, str]:
    """`env` for a pip that must see only the dated view: its index, and no config file, find-links or extra index
    (this machine's wheel folders hold files of any date); the config's TLS settings are kept (a proxy's CA)."""
    env = {k: v for k, v in env.items() if k not in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_INDEX_URL")}
    return {**index_cutoff.tls_settings(env), **env, "PIP_INDEX_URL": index_url, "PIP_CONFIG_FILE": os.devnull}


def resolved(env_dir: pathlib.Path) -> list[str]:
    """`name==version` of every distribution in a built env (`pip freeze --all` at build time; [] for an env built
    before it was recorded)."""
    path = env_dir / "resolved.txt"
    return path.read_text().split() if path.exists() else []


# What the env cache keeps by default. Under an index cut-off an env is built per instance date where
# requirements are unpinned: the Lite calibration left 115 envs, 9.6 GB, for ~60 instances (seaborn's 3.7 GB).
CACHE_BYTES = 32 << 30


def _holders(env_dir: pathlib.Path) -> pathlib.Path:
    return env_dir.with_name(env_dir.name + ".holders")


def _hold(env_dir: pathlib.Path, holder: pathlib.Path) -> None:
    """Record that the work dir `holder` uses `env_dir` (called under the env's lock, so no eviction runs)."""
    records = _holders(env_dir)
    records.mkdir(exist_ok=True)
    record = records / hashlib.sha256(str(holder).encode()).hexdigest()[:16]
    record.write_text(str(holder))
    if sum(1 for _ in records.iterdir()) > 256:  # an RL run holds one per episode: forget the finished
        _held(env_dir)


def _held(env_dir: pathlib.Path) -> bool:
    """Whether a work dir that used `env_dir` still exists (a grading or an episode runs, or keeps its work dir);
    records of removed ones are dropped. A work dir is removed when its use ends, so existence is the lease."""
    records = _holders(env_dir)
    live = False
    for record in (records.iterdir() if records.is_dir() else ()):
        try:
            holder = record.read_text()
        except OSError:
            continue
        if os.path.lexists(holder):
            live = True
        else:
            record.unlink(missing_ok=True)
    return live


class EnvironmentCache:
    """Builds and caches one dependency venv per (repo, version, spec, requirements, interpreter, index cut-off)."""

    def __init__(self, root: pathlib.Path | None = None, cache_bytes: int = CACHE_BYTES):
        """`root`: default $SWERL_JAX_HOME/eval/envs. `cache_bytes`: what the cache keeps; a build past it
        removes the least recently used envs nothing uses (`evict`)."""
        self.root = pathlib.Path(root) if root else default_cache_dir()
        self.cache_bytes = cache_bytes
        self.built = 0  # how many this object built (the rest were cache hits)

    def plan(self, instance: dict, git_dir: pathlib.Path, cutoff: str | None = None
             ) -> tuple[dict, pathlib.Path, str, pathlib.Path]:
        """(spec, interpreter, requirements text, env dir) for an instance, without building anything. `cutoff`
        (index_cutoff.instance_cutoff) names another env: one resolved as of that time; None is today's index."""
        spec = specs.instance_spec(instance)
        if spec.get("packages") == "environment.yml":
            raise OutOfReach(f"{instance['repo']} {instance['version']} needs a conda environment (environment.yml); "
                             "this machine's builder makes venvs", "--executor docker on a machine with a docker "
                             "daemon (the official image has the conda env)")
        python = find_python(spec["python"])
        requirements = ""
        if spec.get("packages") == "requirements.txt":
            commit = instance.get("environment_setup_commit") or instance["base_commit"]
            requirements = specs.requirements_from_clone(str(git_dir), instance["repo"], commit)
        cutoff = self.env_date(spec, instance, git_dir, cutoff)
        material: list = [spec, requirements, str(python.resolve())]
        if cutoff is not None:  # else the key is exactly today's; all pinned: one env for every instance date
            material.append({"index_cutoff": self.env_cutoff(spec, requirements, cutoff), "pins_from": "pypi",
                             **index_cutoff.tooling_rule()})
        key = json.dumps(material, sort_keys=True, default=str)
        digest = hashlib.sha256(key.encode()).hexdigest()[:12]
        # Named by content, not version: versions with identical specs (all of sympy's but one) share one env.
        env_dir = self.root / instance["repo"].replace("/", "__") / f"py{spec['python']}-{digest}"
        return spec, python, requirements, env_dir

    @staticmethod
    def env_date(spec: dict, instance: dict, git_dir: pathlib.Path, cutoff: str | None) -> str | None:
        """The date an env is resolved as of: the instance's `cutoff`, or, for requirements read at a later
        environment-setup commit, that commit's date: pylint's requirements of 2022-06 name contributors-txt>=0.7.3,
        which did not exist at pylint-5859's date (2022-04), so no index of that date could build them."""
        if cutoff is None or spec.get("packages") != "requirements.txt":
            return cutoff
        commit = instance.get("environment_setup_commit") or instance["base_commit"]
        return max(cutoff, specs.commit_time(str(git_dir), commit), key=index_cutoff.parse_time)

    @staticmethod
    def env_cutoff(spec: dict, requirements: str, cutoff: str | None) -> str | None:
        """The cut-off the env build applies: `cutoff`, or None when every requirement is pinned (`unpinned`)."""
        return cutoff if cutoff is not None and unpinned(spec, requirements) else None

    def get(self, instance: dict, git_dir: pathlib.Path, cutoff: str | None = None,
            holder: pathlib.Path | None = None) -> pathlib.Path:
        """The env dir for an instance, building it first when absent (EnvironmentError_ with the log on failure).

        `holder`: the work dir that will use the env (its overlay venv points into it); the env is not evicted
        while that folder exists. After a build, the cache is cut back to `cache_bytes` (`evict`)."""
        spec, python, requirements, env_dir = self.plan(instance, git_dir, cutoff)
        lock = lru.lock_path(env_dir)
        with file_lock(lock):
            built = not (env_dir / ".complete").exists()
            if built:
                self._build(spec, python, requirements, env_dir,
                            self.env_cutoff(spec, requirements, self.env_date(spec, instance, git_dir, cutoff)),
                            dated=cutoff is not None)
                lru.remember_size(env_dir)
                self.built += 1
            if holder is not None:
                _hold(env_dir, pathlib.Path(holder))
            os.utime(lock)  # the lock file's mtime is the env's last use
        if built:
            self.evict(keep=env_dir)
        return env_dir

    def evict(self, keep: pathlib.Path | None = None) -> list[pathlib.Path]:
        """Remove envs, least recently used first, until those left fit `cache_bytes`; never `keep`, one being
        built, or one a live holder's work dir still uses (an instance's grading, an agent's episode). Also
        clears what killed builds and evictions left. Returns the removed env dirs."""
        if not self.root.is_dir():
            return []
        repos = [d for d in self.root.iterdir() if d.is_dir() and not d.name.startswith(".")]
        for repo in repos:
            lru.remove_trash(repo)
            for partial in repo.glob("*.building"):  # a build a killed process left half done
                lru.remove_abandoned(partial, partial.with_name(partial.name[:-len(".building")]))
        envs = [lock.with_name(lock.name[:-len(".lock")]) for repo in repos for lock in repo.glob("*.lock")]
        return lru.evict_least_recent(envs, self.cache_bytes, keep=keep, in_use=_held,
                                      siblings=(".log", ".requirements.txt", ".holders"))

    def _build(self, spec: dict, python: pathlib.Path, requirements: str, env_dir: pathlib.Path,
               cutoff: str | None, dated: bool = False) -> None:
        tmp = env_dir.with_name(env_dir.name + ".building")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(env_dir, ignore_errors=True)
        log_path = env_dir.with_name(env_dir.name + ".log")
        tmp_reqs = None
        if requirements:
            tmp_reqs = env_dir.with_name(env_dir.name + ".requirements.txt")
            tmp_reqs.parent.mkdir(parents=True, exist_ok=True)
            tmp_reqs.write_text(requirements)
        steps = build_steps(spec, tmp_reqs, python, tmp, dated=dated)
        pins = index_cutoff.spec_pins(spec, requirements)
        # Byte-compile everything now: the sandbox mounts the env read-only, and compiling at import time under a
        # test suite's `filterwarnings = error` turns old packages' invalid escapes into SyntaxErrors (blinker 1.4
        # under flask 2.0), which the official images avoid by shipping compiled files.
        compile_all = [str(tmp / "bin" / "python"), "-m", "compileall", "-q", "-j0", str(tmp / "lib")]
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "PIP_USER")}
        env["PIP_CACHE_DIR"] = str(self.root / ".pip-cache")  # downloads stay beside the envs, not in ~/.cache
        log_path.parent.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        with open(log_path, "w") as log:
            if cutoff is not None:
                log.write(f"# index cut-off {cutoff}: unpinned requirements as of then; pins kept: {pins}\n")
            for step, index in steps:
                step_env = {"config": env, "pypi": dated_env(env, index_cutoff.UPSTREAM + "/")}.get(index) or \
                    dated_env(env, index_cutoff.shared_index().url(cutoff, pins))
                shown = f"PIP_INDEX_URL={step_env['PIP_INDEX_URL']} " if index != "config" else ""
                log.write(f"$ {shown}{shlex.join(step)}\n")
                log.flush()
                done = subprocess.run(step, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      env=step_env)
                if done.returncode != 0:
                    log.flush()
                    lack = reach.from_log(log_path.read_text(errors="replace"), step="build")
                    if lack is not None:  # not the spec's fault: say what the machine lacks
                        raise OutOfReach(lack.reason, lack.fix, log_path)
                    raise EnvironmentError_(f"environment build step failed: {shlex.join(step)}", log_path)
            log.write(f"$ {shlex.join(compile_all)}\n")
            log.flush()
            # Not fatal: packages may ship files of other Python versions that never get imported.
            subprocess.run(compile_all, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
            # What the build resolved, for the report (each result names its env's versions).
            freeze = subprocess.run([str(tmp / "bin" / "python"), "-m", "pip", "freeze", "--all"],
                                    capture_output=True, text=True, env=env)
            (tmp / "resolved.txt").write_text(freeze.stdout if freeze.returncode == 0 else "")
            log.write(f"built in {time.monotonic() - start:.1f}s\n")
        (tmp / ".complete").write_text(json.dumps({"spec": spec, "index_cutoff": cutoff, "pins": pins}, default=str))
        tmp.rename(env_dir)
        # The venv's scripts name the .building path in their shebangs; the overlay runs them with its own python.


def overlay_env(overlay: pathlib.Path) -> dict[str, str]:
    """Environment variables that put an overlay venv first for every command in the sandbox."""
    return {"PATH": f"{overlay}/bin:/usr/local/bin:/usr/bin:/bin", "VIRTUAL_ENV": str(overlay),
            "PYTHONPATH": str(overlay / "swerl_site")}


def site_packages(venv: pathlib.Path) -> pathlib.Path:
    """The venv's site-packages folder."""
    found = sorted(venv.glob("lib/python*/site-packages"))
    if not found:
        raise FileNotFoundError(f"{venv} has no lib/python*/site-packages")
    return found[0]


def overlay_venv(env_dir: pathlib.Path, target: pathlib.Path) -> pathlib.Path:
    """A thin venv at `target` whose python sees the cached env's packages (behind its own) and scripts.

    The instance's own install (`pip install -e .`) lands in the thin venv, so instances never write to the
    shared cache. The cached env's console scripts (pytest, tox, ...) get wrappers that run them with the thin
    venv's python, so the tests import the instance's checkout.
    """
    base_python = (env_dir / "bin" / "python").resolve()
    subprocess.run([str(base_python), "-m", "venv", "--without-pip", str(target)], check=True, capture_output=True)
    # A plain path line first: pip's build isolation drops what re-adding the site dirs appends, which an
    # `import site` line alone hides (then old pinned setuptools/packaging leaked into isolated builds: pylint
    # installed as UNKNOWN, pytest 8.0's setuptools-scm failed). The import line then runs the env's own .pth files.
    cached = str(site_packages(env_dir))
    (site_packages(target) / "_swerl_jax_env.pth").write_text(f"{cached}\nimport site; site.addsitedir({cached!r})\n")
    # Tools that re-run "python" through a symlink of their own (tox --current-env links .tox/py39/bin/python to
    # sys.executable) lose the venv: a symlink elsewhere finds no pyvenv.cfg. A sitecustomize on PYTHONPATH (see
    # `overlay_env`) gives any run of this interpreter the overlay's and the cached env's packages, .pth files too.
    hook = target / "swerl_site"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import site\n"
        f"site.addsitedir({str(site_packages(target))!r})\n"
        f"site.addsitedir({str(site_packages(env_dir))!r})\n"
    )
    for script in sorted((env_dir / "bin").iterdir()):
        wrapper = target / "bin" / script.name
        if wrapper.exists() or wrapper.is_symlink() or not script.is_file() or script.name.startswith("activate"):
            continue
        if script.read_bytes()[:2] != b"#!":
            continue
        wrapper.write_text(f'#!/bin/sh\nexec "{target}/bin/python" "{script}" "$@"\n')
        wrapper.chmod(0o755)
    return target
