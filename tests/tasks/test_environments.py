"""Interpreter lookup, clone resolution and the thin per-instance venv over a cached environment."""

import fcntl
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from swerl_jax.tasks import environments


def test_missing_python_names_the_version(monkeypatch, tmp_path):
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(environments.EnvironmentError_, match=r"no Python 2\.1 interpreter"):
        environments.find_python("2.1")


def test_pyenv_newest_patch_release_wins(monkeypatch, tmp_path):
    for version in ("3.9.2", "3.9.18", "3.9.9", "3.10.1"):
        (tmp_path / "versions" / version / "bin").mkdir(parents=True)
        (tmp_path / "versions" / version / "bin" / "python").touch()
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))
    assert environments.find_python("3.9") == tmp_path / "versions" / "3.9.18" / "bin" / "python"


def test_resolve_clone_names(tmp_path, shared_data):
    repos = tmp_path / "repos"
    (repos / "o__plain" / ".git").mkdir(parents=True)
    (repos / "o__bare.git").mkdir()
    (repos / "o__bare.git" / "HEAD").touch()
    scratch = tmp_path / "out" / "repos"
    assert environments.resolve_clone(repos, "o/plain", scratch) == repos / "o__plain" / ".git"
    assert environments.resolve_clone(repos, "o/bare", scratch) == repos / "o__bare.git"
    with pytest.raises(FileNotFoundError, match="no clone of o/none .*o__none.bundle"):
        environments.resolve_clone(repos, "o/none", scratch)
    unpacked = environments.resolve_clone(shared_data / "repos", "pallets/flask", scratch)
    assert unpacked == scratch / "pallets__flask.git" and (unpacked / "HEAD").exists()


def test_overlay_sees_the_env_and_keeps_its_own_installs(tmp_path):
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    (environments.site_packages(env) / "cachedmod.py").write_text("VALUE = 'from the cache'\n")
    tool = env / "bin" / "mytool"
    tool.write_text(f"#!{env}/bin/python\nimport sys, cachedmod\nprint(cachedmod.VALUE, sys.prefix)\n")
    tool.chmod(0o755)
    overlay = environments.overlay_venv(env, tmp_path / "work" / "venv")
    out = subprocess.run([str(overlay / "bin" / "mytool")], capture_output=True, text=True, check=True).stdout
    # The cached script ran with the overlay's python (so an editable install in the overlay is what it imports).
    assert out.split() == ["from", "the", "cache", str(overlay)]
    (environments.site_packages(overlay) / "cachedmod.py").write_text("VALUE = 'overlay'\n")
    out = subprocess.run([str(overlay / "bin" / "python"), "-c", "import cachedmod; print(cachedmod.VALUE)"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "overlay" and pathlib.Path(environments.site_packages(env) / "cachedmod.py").exists()
    # Regression: tox --current-env runs python through its own symlink (.tox/py39/bin/python), which finds no
    # pyvenv.cfg; with the overlay's environment the packages are still there (sphinx's tests found no pytest).
    elsewhere = tmp_path / "tox" / "bin"
    elsewhere.mkdir(parents=True)
    (elsewhere / "python").symlink_to(overlay / "bin" / "python")
    env_vars = environments.overlay_env(overlay)
    out = subprocess.run([str(elsewhere / "python"), "-c", "import cachedmod; print(cachedmod.VALUE)"],
                         capture_output=True, text=True, env=env_vars)
    assert out.stdout.strip() == "overlay", out.stderr


def test_pip_build_isolation_hides_the_cached_env(tmp_path):
    """Regression: pip's isolated builds must not see the cached env's packages (old setuptools made pylint
    install as UNKNOWN). pip drops the sys.path entries that re-adding the site dirs appends; mirror that."""
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    overlay = environments.overlay_venv(env, tmp_path / "work" / "venv")
    code = ("import os, site, sys\norig = sys.path[:]\nknown = set()\n"
            "for p in site.getsitepackages(): site.addsitedir(p, known_paths=known)\n"
            "dropped = {os.path.normcase(p) for p in sys.path[len(orig):]}\n"
            "print([p for p in orig if os.path.normcase(p) not in dropped and 'site-packages' in p])\n")
    out = subprocess.run([str(overlay / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True)
    assert str(environments.site_packages(env)) not in out.stdout, out.stdout


def test_versions_with_identical_specs_share_one_env(shared_data, tmp_path):
    """sympy's Lite versions 1.0-1.12 have one spec: one env serves them all (builds are minutes each)."""
    environments.find_python("3.9")  # the machine's pyenv interpreters are part of the harness's environment
    lite = [r for r in json.loads((shared_data / "swebench_lite.json").read_text()) if r["repo"] == "sympy/sympy"]
    cache = environments.EnvironmentCache(tmp_path)
    by_version = {r["version"]: r for r in lite if r["version"] != "1.13"}
    dirs = {cache.plan(r, tmp_path)[3] for r in by_version.values()}
    assert len(by_version) > 5 and len(dirs) == 1
    flask = [r for r in json.loads((shared_data / "swebench_lite.json").read_text()) if r["repo"] == "pallets/flask"]
    git_dir = environments.resolve_clone(shared_data / "repos", "pallets/flask", tmp_path / "repos")
    assert len({cache.plan(r, git_dir)[3] for r in flask}) == 2  # flask 2.0 and 2.3 differ


def test_what_the_machine_lacks_is_out_of_reach_with_the_fix(monkeypatch, tmp_path):
    """Issue 49.3: a missing interpreter, a conda spec, a compiler or the index: named, with the fix."""
    from swerl_jax.tasks import reach

    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(reach.OutOfReach) as err:
        environments.find_python("2.1")
    assert err.value.reason == "no Python 2.1 interpreter on this machine" and "pyenv install 2.1" in err.value.fix
    monkeypatch.undo()
    with pytest.raises(reach.OutOfReach) as err:
        environments.EnvironmentCache(tmp_path).plan({"repo": "pydata/xarray", "version": "0.12"}, tmp_path)
    assert "conda" in err.value.reason and "--executor docker" in err.value.fix
    gcc = "error: command 'gcc' failed: No such file or directory\n"
    assert reach.from_log(gcc).reason == "building it needs a C compiler, which this machine lacks"
    offline = "WARNING: Retrying ... NewConnectionError('<...>: Failed to establish a new connection')\n"
    assert "package index" in reach.from_log(offline, step="build").reason
    assert reach.from_log("ERROR: No matching distribution found for foo\n") is None
    submodule = ("fatal: unable to access 'https://github.com/astropy/astropy-helpers.git/': Could not resolve host: "
                 "github.com\n")  # astropy 1.3's install clones its astropy_helpers submodule
    assert reach.from_log(submodule, step="install").reason.startswith("its install fetches from github.com")
    git = ("remote: fatal: unable to read 4a48cb86af7454056316ceca5011ba607cf1f31d\n"
           "fatal: git upload-pack: aborting due to possible repository corruption on the remote side.\n")
    partial = reach.incomplete_clone(git, "astropy/astropy", "R")
    assert "lacks objects" in partial.reason and "git clone --mirror https://github.com/astropy/astropy" in partial.fix
    assert reach.incomplete_clone("fatal: not a git repository", "o/r", "R") is None


def test_the_index_cutoff_names_the_env_and_off_keeps_todays(shared_data, tmp_path):
    """Issue 49.1: an env built as of the instance's date is another env; the cut-off off is today's env."""
    lite = [r for r in json.loads((shared_data / "swebench_lite.json").read_text()) if r["repo"] == "sympy/sympy"]
    a = lite[0]
    b = next(r for r in lite[1:] if r["version"] == a["version"] and r["created_at"] != a["created_at"])
    cache = environments.EnvironmentCache(tmp_path)
    spec, python, requirements, today = cache.plan(a, tmp_path)
    key = json.dumps([spec, requirements, str(python.resolve())], sort_keys=True, default=str)
    assert today.name == f"py3.9-{hashlib.sha256(key.encode()).hexdigest()[:12]}"  # the name it had before

    assert cache.plan(b, tmp_path, cutoff=None)[3] == today
    dated = {cache.plan(r, tmp_path, cutoff=r["created_at"])[3] for r in (a, b)}
    assert len(dated) == 2 and today not in dated


def test_build_steps_under_a_cutoff_pin_first_then_resolve_the_rest_as_of_the_date(tmp_path):
    """Issue 49.1: the spec's pins (tox 4.16.0 and its 2024 dependencies) come from today's index, as the official
    images got them; every unpinned requirement resolves through the dated view; off is today's steps exactly."""
    spec = {"packages": "mpmath flake8", "pip_packages": ["mpmath==1.3.0", "flake8-comprehensions"]}
    python, tmp = pathlib.Path("/py/bin/python"), tmp_path / "env"
    pip = [str(tmp / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
    off = environments.build_steps(spec, None, python, tmp, dated=False)
    assert off == [([str(python), "-m", "venv", str(tmp)], "config"), (pip + ["mpmath", "flake8"], "config"),
                   (pip + ["mpmath==1.3.0", "flake8-comprehensions"], "config")]
    on = environments.build_steps(spec, None, python, tmp, dated=True)
    assert on == [([str(python), "-m", "venv", str(tmp)], "config"), (pip + ["mpmath==1.3.0"], "pypi"),
                  (pip + ["mpmath", "flake8"], "dated"), (pip + ["flake8-comprehensions"], "dated")]
    astropy13 = {"packages": "setuptools==38.2.4", "pip_packages": ["numpy==1.16.0"]}  # all pinned: today's PyPI
    assert [i for _, i in environments.build_steps(astropy13, None, python, tmp, dated=True)] == [
        "config", "pypi", "pypi"]
    env = environments.dated_env({"PIP_FIND_LINKS": "/opt/wheels", "PATH": "/bin", "PIP_CERT": "/ca.pem"},
                                 "http://127.0.0.1:1/v/simple/")
    # the config files are off (their find-links hold wheels of any date) but their CA is kept (sphinx-7686's
    # install failed its TLS checks through this machine's proxy without it)
    assert env == {"PATH": "/bin", "PIP_INDEX_URL": "http://127.0.0.1:1/v/simple/", "PIP_CONFIG_FILE": os.devnull,
                   "PIP_CERT": "/ca.pem"}
    assert environments.unpinned(spec, "") == ["mpmath", "flake8", "flake8-comprehensions"]
    sphinx = {"packages": None, "pip_packages": ["tox==4.16.0", "tox-current-env==0.0.11", "Jinja2==3.0.3"]}
    assert environments.unpinned(sphinx, "") == []  # nothing a cut-off changes: the env stays today's, shared
    assert environments.EnvironmentCache.env_cutoff(sphinx, "", "2020-01-01T00:00:00Z") is None
    assert environments.unpinned({"packages": "requirements.txt"}, "a==1\n# c\nb>=2\n-e .\n") == ["b>=2"]


def test_requirements_of_a_later_setup_commit_resolve_as_of_that_commit(tmp_path):
    """Issue 49.1: pylint-5859 (2022-04) builds its env from requirements of its environment-setup commit (2022-06),
    which name contributors-txt>=0.7.3, uploaded after 2022-04: the env is resolved as of the commit, the
    instance's own install as of the instance."""
    git = tmp_path / "repo.git"
    subprocess.run(["git", "init", "-q", "--bare", str(git)], check=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a",
           "GIT_COMMITTER_EMAIL": "a@b", "GIT_COMMITTER_DATE": "2022-06-14T08:00:00Z"}
    tree = subprocess.run(["git", "--git-dir", str(git), "mktree"], input="", capture_output=True, text=True,
                          check=True, env=env).stdout.strip()
    commit = subprocess.run(["git", "--git-dir", str(git), "commit-tree", tree, "-m", "setup"], capture_output=True,
                            text=True, check=True, env=env).stdout.strip()
    reqs = {"packages": "requirements.txt"}
    instance = {"base_commit": "b", "environment_setup_commit": commit}
    cache = environments.EnvironmentCache(tmp_path)
    assert cache.env_date(reqs, instance, git, "2022-04-01T00:00:00Z") == "2022-06-14T08:00:00Z"
    assert cache.env_date(reqs, instance, git, "2022-07-01T00:00:00Z") == "2022-07-01T00:00:00Z"  # the later
    assert cache.env_date(reqs, instance, git, None) is None  # the cut-off off: today's index, as before
    assert cache.env_date({"packages": "numpy"}, instance, git, "2022-04-01T00:00:00Z") == "2022-04-01T00:00:00Z"


def _fake_env(root: pathlib.Path, name: str, size: int, last_use: float) -> pathlib.Path:
    """A built env as the cache lays it out: the folder, its lock (mtime = last use), size and log."""
    env = root / "o__r" / name
    env.mkdir(parents=True)
    (env / ".complete").write_text("{}")
    env.with_name(name + ".bytes").write_text(str(size))
    env.with_name(name + ".log").write_text("built")
    lock = env.with_name(name + ".lock")
    lock.touch()
    os.utime(lock, (last_use, last_use))
    return env


def test_the_env_cache_keeps_its_bound_but_never_an_env_a_work_dir_still_uses(monkeypatch, tmp_path):
    """Under an index cut-off an env is built per instance date (the Lite calibration left 9.6 GB): past
    `cache_bytes` a build removes the least recently used envs, but never one whose user's work dir exists (a
    grading or an episode in flight, which the lock alone cannot show: it is not held while tests run), nor one
    being built, nor the one just built. What killed builds left goes too, unless its build runs again now."""
    root = tmp_path / "envs"
    held = _fake_env(root, "py3.9-aaa", 10**6, 1_000)  # oldest, used by a live work dir
    idle = _fake_env(root, "py3.9-bbb", 10**6, 2_000)
    building = _fake_env(root, "py3.9-ccc", 10**6, 3_000)
    recent = _fake_env(root, "py3.9-ddd", 10**6, 4_000)
    abandoned = root / "o__r" / "py3.9-eee.building"  # a build a killed process left
    abandoned.mkdir()
    work = tmp_path / "work" / "inst.1234"
    work.mkdir(parents=True)
    environments._hold(held, work)

    cache = environments.EnvironmentCache(root, cache_bytes=1_500_000)  # one and a half fakes
    monkeypatch.setattr(cache, "plan", lambda *a: ({}, pathlib.Path("/py"), "", root / "o__r" / "py3.9-new"))

    def build(spec, python, requirements, env_dir, cutoff, dated=False):  # the real build is minutes of pip
        env_dir.mkdir()
        (env_dir / ".complete").write_text("{}")
    monkeypatch.setattr(cache, "_build", build)

    with open(building.with_name("py3.9-ccc.lock"), "a") as lock:  # another process builds or rebuilds it now
        fcntl.flock(lock, fcntl.LOCK_EX)
        new = cache.get({}, tmp_path, holder=tmp_path / "work" / "inst.5678")
    assert new == root / "o__r" / "py3.9-new" and cache.built == 1
    assert held.is_dir() and building.is_dir() and new.is_dir()
    assert not idle.exists() and not recent.exists() and not abandoned.exists()
    assert not idle.with_name("py3.9-bbb.log").exists() and not idle.with_name("py3.9-bbb.bytes").exists()

    shutil.rmtree(work)  # its grading ended: the env is free
    assert cache.evict(keep=new) == [held]
    assert cache.get({}, tmp_path) == new and cache.built == 1  # a hit: nothing built, nothing removed
    assert building.is_dir()
