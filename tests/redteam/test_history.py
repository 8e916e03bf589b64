"""Issue 45, defect 2: model code must find no commit after the base commit, wherever it runs beside a checkout.

An adversarial bash script (`PROBES`) hunts for the fix commit from inside the sandbox the way a policy would:
`git log --all`, `rev-list --all`, every object in the store, the pack indexes, packed-refs, dangling and
unreachable objects (`fsck`), the alternates' stores, the reflog, FETCH_HEAD / ORIG_HEAD, `git grep` over every
commit. It runs where model-written code runs: at grading (the patch's module prints it when the tests import it),
in `run_script` (Agentless's and test-time scaling's reproduction tests) and in an agent's episode (a bash step).
The synthetic repository's source gets a later "fix" commit, a branch and a tag on it, and a dangling blob, each
holding a secret; the flask test looks for flask-4045's real fix (`7c52614`, blueprint names may not contain a dot)
from the shared bundle. Before the fix, grading and scripts ran in a `--shared` clone whose alternates and remote
refs exposed every commit.
"""

from __future__ import annotations

import json
import pathlib
import re
import shlex
import shutil
import subprocess
import uuid

import pytest

from swerl_jax.agent.env import SWEEnv
from swerl_jax.agent.synthetic import SyntheticTasks
from swerl_jax.sandbox.bwrap import SandboxLimits
from swerl_jax.tasks import environments
from swerl_jax.tasks.executors import LocalExecutor

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (make install-dev)")
LIMITS = SandboxLimits(memory_bytes=1 << 30, cpu_seconds=60, processes=64, timeout_s=60, file_bytes=64 << 20,
                       disk_bytes=256 << 20, output_bytes=1 << 20)
# name -> bash whose output (stdout and stderr) must show neither the fix's hash nor the secret text
PROBES = {
    "log_all": 'git log --all --format="%H %B"',
    "rev_list_all": "git rev-list --all --reflog",
    "batch_all_objects": "git cat-file --batch-all-objects --batch-check",
    "object_contents": "git cat-file --batch-all-objects --batch",
    "pack_indexes": 'for i in .git/objects/pack/*.idx; do git show-index < "$i"; done',
    "packed_refs": "cat .git/packed-refs; git for-each-ref",
    "fsck_dangling": "git fsck --lost-found --unreachable --no-reflogs; git fsck --dangling; ls .git/lost-found/*",
    "alternates": 'for a in $(cat .git/objects/info/alternates); do ls "$a"/??; '
                  'for i in "$a"/pack/*.idx; do git show-index < "$i"; done; '
                  'git --git-dir="$a/.." -c safe.directory="*" log --all --format="%H %B"; done',
    "reflog": 'git reflog --all --format="%H %gs"; cat .git/logs/HEAD .git/logs/refs/*/*',
    "head_files": "cat .git/FETCH_HEAD .git/ORIG_HEAD .git/shallow .git/info/grafts",
    "grep_history": 'git grep -F -e "$SECRET" $(git rev-list --all)',
    "remote": "git remote -v; git ls-remote origin",
}


def probe_script(fix: str, secret: str) -> str:
    """Bash that prints `PROBE <name> LEAK` or `PROBE <name> clean` per probe (one line each: an observation keeps
    them all)."""
    lines = [f"FIX={shlex.quote(fix)}", f"SECRET={shlex.quote(secret)}", "cd \"$(git rev-parse --show-toplevel)\""]
    for name, command in PROBES.items():
        lines.append(f"if {{ {command}; }} 2>&1 | grep -q -F -e \"$FIX\" -e \"$SECRET\"; "
                     f"then echo 'PROBE {name} LEAK'; else echo 'PROBE {name} clean'; fi")
    return "\n".join(lines) + "\n"


def verdicts(output: str) -> dict[str, str]:
    """{probe: 'LEAK' | 'clean'} read from the probe script's output; every probe must have reported."""
    # a grading's test output reaches the log inside the verdict driver's records (JSON): read their "out" too
    outs = [json.loads(m)["out"] for m in re.findall(r"^@@swerl-verdict@@ (\{.*\})$", output, re.M)
            if '"out"' in m]
    found = dict(re.findall(r"^PROBE (\w+) (LEAK|clean)$", "\n".join([output, *outs]), re.M))
    assert set(found) == set(PROBES), f"not every probe ran: {sorted(found)}\n{output[-3000:]}"
    return found


def git(repo: pathlib.Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "fixer", "GIT_AUTHOR_EMAIL": "f@example.invalid", "GIT_COMMITTER_NAME": "fixer",
           "GIT_COMMITTER_EMAIL": "f@example.invalid", "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(repo)}
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                          env=env).stdout.strip()


@pytest.fixture
def task(tmp_path) -> tuple[SyntheticTasks, dict, str, str]:
    """A synthetic task whose source repository has history after the base commit: the fix (the gold change and
    a new file), a branch and an annotated tag on it, an older tag on the base, a dangling blob; all hold `secret`."""
    tasks = SyntheticTasks(tmp_path / "tasks", 1, seed=0)
    instance = tasks.instances[0]
    source = tasks.root / "repos" / instance["instance_id"]
    secret = f"FIXSECRET-{uuid.uuid4().hex}"
    git(source, "tag", "-a", "v0.1", "-m", "the base release", instance["base_commit"])
    edit = instance["gold_edit"]
    (source / edit["path"]).write_text(edit["after"] + f"# {secret}\n")
    (source / "FIX_NOTES.txt").write_text(f"the fix: {secret}\n")
    git(source, "add", "-A")
    git(source, "commit", "-q", "-m", f"fix the bug ({secret})")
    fix = git(source, "rev-parse", "HEAD")
    git(source, "branch", "fix-branch", fix)
    git(source, "tag", "-a", "v0.2", "-m", f"release with {secret}", fix)
    subprocess.run(["git", "-C", str(source), "hash-object", "-w", "--stdin"], input=f"dangling {secret}\n",
                   text=True, check=True, capture_output=True)
    return tasks, instance, fix, secret


def module_printing(instance: dict, source: pathlib.Path, scratch: pathlib.Path, script: str) -> str:
    """A patch to the task's module that runs `script` and prints its output when the hidden tests import it."""
    subprocess.run(["git", "clone", "-q", str(source), str(scratch)], check=True, capture_output=True)
    git(scratch, "checkout", "-q", instance["base_commit"])
    module = scratch / instance["gold_edit"]["path"]
    module.write_text(module.read_text() + "\nimport subprocess as _sp\n"
                      f"print(_sp.run(['bash', '-c', {script!r}], capture_output=True, text=True).stdout)\n")
    return git(scratch, "diff") + "\n"


def test_grading_sees_no_later_commit(task, tmp_path):
    tasks, instance, fix, secret = task
    log_dir = tmp_path / "grade_logs"
    source = tasks.root / "repos" / instance["instance_id"]
    patch = module_printing(instance, source, tmp_path / "scratch", probe_script(fix, secret))
    tasks.executor(tmp_path / "grade").evaluate(instance, patch, log_dir)
    output = (log_dir / "test.log").read_text()
    assert verdicts(output) == dict.fromkeys(PROBES, "clean"), output[-3000:]


def test_a_reproduction_script_sees_no_later_commit(task, tmp_path):
    tasks, instance, fix, secret = task
    result = tasks.executor(tmp_path / "scripts").run_script(instance, "", probe_script(fix, secret),
                                                             tmp_path / "script_logs")
    assert result["status"] == "ran", result
    assert verdicts(result["output"]) == dict.fromkeys(PROBES, "clean"), result["output"][-3000:]


def test_an_episode_sees_no_later_commit_but_keeps_the_earlier_tags(task, tmp_path):
    tasks, instance, fix, secret = task
    root = tmp_path / "run"
    env = SWEEnv(instance, tasks.root / "repos", root, reward="execution", executor=tasks.executor(root / "grade"),
                 step_timeout_s=60, limits=LIMITS)
    env.reset()
    try:
        action = ("<function=execute_bash>\n<parameter=command>" + probe_script(fix, secret)
                  + "git describe --tags</parameter>\n</function>")
        observation, _, info = env.step(action)
        assert not info["error"], observation
        assert verdicts(observation) == dict.fromkeys(PROBES, "clean"), observation
        assert "v0.1" in observation  # the tag on the base commit is kept (versions from `git describe`)
    finally:
        env.close()


@pytest.mark.slow
def test_flask_4045_fix_is_not_reachable_from_a_script(shared_data, tmp_path):
    """flask-4045's fix (7c52614) is in the bundle's later history: a reproduction script must not find it."""
    lite = {r["instance_id"]: r for r in json.loads((shared_data / "swebench_lite.json").read_text())}
    instance = lite["pallets__flask-4045"]
    secret = "'name' may not contain a dot '.' character."
    clone = environments.resolve_clone(shared_data / "repos", instance["repo"], tmp_path / "clones")
    fix = subprocess.run(["git", "--git-dir", str(clone), "log", "--all", "--format=%H", "-S", secret], check=True,
                         capture_output=True, text=True).stdout.split()[-1]
    assert fix.startswith("7c52614")
    executor = LocalExecutor(shared_data / "repos", tmp_path / "out", environments.EnvironmentCache(),
                             SandboxLimits(timeout_s=300))
    (tmp_path / "logs").mkdir()
    result = executor.run_script(instance, "", probe_script(fix, secret) + "git log --oneline | wc -l\n",
                                 tmp_path / "logs")
    assert result["status"] == "ran", result
    assert verdicts(result["output"]) == dict.fromkeys(PROBES, "clean"), result["output"][-3000:]
    assert int(result["output"].split()[-1]) > 1000  # the base's own history is there, as in SWE-bench's images


def test_no_other_code_materialises_a_repository_for_a_sandbox():
    """The class cannot come back unseen: outside `sandbox/checkouts.py`, no code of the layers that run model code
    makes a clone that shares objects or fetches (the old grading checkout was a `--shared` clone whose store and
    refs were the source's); the three clones left are the host's own (a bundle unpacked bare, a scratch copy that
    writes a synthetic task's gold patch, the task generator's bare copy of a mirror that it writes task commits
    into, `--no-hardlinks`, read by the executors only through `sandbox/checkouts.py`), never shown to a sandbox."""
    package = pathlib.Path(__file__).resolve().parents[2] / "swerl_jax"
    allowed = {("tasks/environments.py", '"clone", "-q", "--bare"'), ("agent/synthetic.py", '"clone", "-q", str(repo)'),
               ("tasks/sources.py", '"clone", "-q", "--bare", "--no-hardlinks"'),
               ("sandbox/seccomp.py", 'for call in ("unshare", "clone"):')}  # the clone(2) system call, not git
    found = []
    for path in sorted(p for layer in ("eval", "tasks", "agent", "sandbox") for p in (package / layer).rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel == "sandbox/checkouts.py":
            continue
        for line in path.read_text().splitlines():
            for word in ('"--shared"', '"clone"', '"fetch"', '"--reference"', "alternates", '"worktree"'):
                if word in line and not any(rel == a and text in line for a, text in allowed):
                    found.append(f"{rel}: {line.strip()}")
    assert not found, found
