"""SWE-bench's spec tables and log parsers load without the package's heavy dependencies, from many threads."""

import concurrent.futures
import subprocess
import sys

import pytest

from swerl_jax.tasks import specs


def test_package_registered_by_another_thread_first():
    """Regression: two harness workers importing the tables at once failed with `swebench.__spec__ is None`: the
    second found the first's bare (spec-less) package in sys.modules. Reproduce that state deterministically."""
    code = (
        "import importlib.util, sys, types\n"
        "root = importlib.util.find_spec('swebench').submodule_search_locations[0]\n"
        "bare = types.ModuleType('swebench'); bare.__path__ = [root]; sys.modules['swebench'] = bare\n"
        "from swerl_jax.tasks import specs\n"
        "print(specs.env_spec('pallets/flask', '2.0')['python'])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "3.9"


def test_concurrent_first_use_from_worker_threads():
    code = (
        "import concurrent.futures as f; from swerl_jax.tasks import specs\n"
        "with f.ThreadPoolExecutor(8) as pool:\n"
        "    rows = pool.map(lambda _: specs.env_spec('pallets/flask', '2.0'), range(8))\n"
        "    print(sorted({r['python'] for r in rows}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['3.9']"


def test_tables_and_parsers():
    assert specs.env_spec("pallets/flask", "2.3")["python"] == "3.11"
    with pytest.raises(specs.SpecError, match="no SWE-bench spec for version '9.9'"):
        specs.env_spec("pallets/flask", "9.9")
    with pytest.raises(specs.SpecError, match="repository 'nobody/nothing'"):
        specs.env_spec("nobody/nothing", "1.0")
    parse = specs.log_parser("pallets/flask")
    assert parse("PASSED tests/test_a.py::test_x\nFAILED tests/test_a.py::test_y - boom\n") == {
        "tests/test_a.py::test_x": "PASSED", "tests/test_a.py::test_y": "FAILED"}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        assert all(pool.map(lambda _: specs.constants().START_TEST_OUTPUT, range(4)))


def test_requirements_read_from_the_clone_at_the_env_commit(shared_data, tmp_path):
    git_dir = tmp_path / "flask.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(shared_data / "repos" / "pallets__flask.bundle"),
                    str(git_dir)], check=True)
    # flask 2.0's environment-setup commit (pallets__flask-4045): requirements/dev.txt includes -r docs.txt etc.
    text = specs.requirements_from_clone(str(git_dir), "pallets/flask", "4346498c85848c53843b810537b83a8f6124c9d3")
    lines = [x for x in text.splitlines() if x.strip()]
    assert any(x.startswith("pytest==") for x in lines) and any(x.lower().startswith("sphinx==") for x in lines)
    assert not any(x.startswith(("#", "-r", "-e .")) for x in lines)
    with pytest.raises(specs.SpecError, match="none of"):
        specs.requirements_from_clone(str(git_dir), "pallets/flask", "0" * 40)


def test_an_instance_with_its_own_spec_uses_it_and_the_generic_pytest_parser():
    own = {"python": "3.11", "install": "pip install -e .", "test_cmd": "pytest -rA", "pip_packages": ["pytest"]}
    instance = {"instance_id": "acme__x.1", "repo": "acme/x", "version": "inferred", "spec": own}
    assert specs.instance_spec(instance) == own
    assert specs.instance_log_parser(instance)("PASSED tests/t.py::test_a\nFAILED tests/t.py::test_b - x") == {
        "tests/t.py::test_a": "PASSED", "tests/t.py::test_b": "FAILED"}
    with pytest.raises(specs.SpecError, match=r"acme__x.1.*field 'spec' lacks \['test_cmd'\]"):
        specs.instance_spec({**instance, "spec": {"python": "3.11", "install": ""}})
    with pytest.raises(specs.SpecError, match="has no SWE-bench spec"):
        specs.instance_spec({"repo": "acme/x", "version": "1.0"})
