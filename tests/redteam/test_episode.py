"""Adversarial episodes (issue 30, defects 1-6): a policy that plants links for the host to write through, reads the
grader's data, reaches host sockets, fills the disk and the host's memory, and feeds the tools input that used to
make `env.step` raise. Each runs through `SWEEnv` on a synthetic task, as an RL episode does."""

from __future__ import annotations

import os
import pathlib
import shutil
import socket
import sys
import tracemalloc

import pytest

from swerl_jax.agent.actions import format_action
from swerl_jax.agent.env import SWEEnv
from swerl_jax.agent.synthetic import SyntheticTasks
from swerl_jax.sandbox.bwrap import SandboxLimits

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (make install-dev)")
REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
LIMITS = SandboxLimits(memory_bytes=1 << 30, cpu_seconds=60, processes=64, timeout_s=60, file_bytes=64 << 20,
                       disk_bytes=48 << 20, tmp_bytes=16 << 20, shm_bytes=8 << 20, output_bytes=1 << 20)


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> SyntheticTasks:
    return SyntheticTasks(tmp_path_factory.mktemp("tasks"), 2, seed=0)


@pytest.fixture
def make_env(tasks, tmp_path):
    envs = []

    def make(index: int = 0) -> SWEEnv:
        root = tmp_path / "run" / "episodes"
        env = SWEEnv(tasks.instances[index], tasks.root / "repos", root, reward="execution",
                     executor=tasks.executor(root / "grade"), step_timeout_s=30, limits=LIMITS)
        env.reset()
        envs.append(env)
        return env

    yield make
    for env in envs:
        env.close()


def bash(env: SWEEnv, command: str) -> tuple[str, dict]:
    observation, _, info = env.step(format_action("execute_bash", command=command))
    return observation, info


def edit(env: SWEEnv, **params: str) -> tuple[str, dict]:
    observation, _, info = env.step(format_action("file_editor", **params))
    return observation, info


def test_planted_links_never_make_the_host_write_outside(make_env, tmp_path):
    """Defect 1: links planted where the host writes logs and attributes, then finish and grade."""
    env = make_env()
    victim = tmp_path / "victim.txt"
    victim.write_text("ORIGINAL\n")
    absent = tmp_path / "created_through_a_link.txt"
    plant = ["../grade/test.log", "../grade/patch.log", "../.agent_gitattributes", "../logs/setup.log",
             "../model.patch", "../test.patch", "../eval.sh", "../../grade/work", "../../host"]
    script = "; ".join(f"mkdir -p $(dirname {p}); rm -rf {p}; ln -s {victim if i % 2 else absent} {p}"
                       for i, p in enumerate(plant))
    bash(env, script + "; echo '* * * * * root evil' ; true")
    edit(env, command="create", path="new_module.py", file_text="X = 1\n")
    env.step(format_action("finish"))
    reward, info = env.reward()
    assert victim.read_text() == "ORIGINAL\n"
    assert not absent.exists() and not absent.is_symlink()
    assert reward == 0.0 and info["status"] == "unresolved"  # graded, not crashed: the planted links changed nothing


def test_the_editor_never_follows_a_link(make_env, tmp_path):
    env = make_env()
    victim = tmp_path / "victim.txt"
    victim.write_text("ORIGINAL\n")
    bash(env, f"ln -s {victim} evil.py; ln -s {tmp_path} evil_dir; ln -s loop1 loop2; ln -s loop2 loop1")
    for params in ({"command": "view", "path": "evil.py"},
                   {"command": "str_replace", "path": "evil.py", "old_str": "ORIGINAL", "new_str": "OWNED"},
                   {"command": "insert", "path": "evil.py", "insert_line": "0", "new_str": "OWNED"},
                   {"command": "create", "path": "evil_dir/new.txt", "file_text": "OWNED"},
                   {"command": "view", "path": "evil_dir/victim.txt"},
                   {"command": "view", "path": "loop1"}):
        observation, info = edit(env, **params)
        assert info["error"] and "ORIGINAL" not in observation, (params, observation)
    assert victim.read_text() == "ORIGINAL\n" and not (tmp_path / "new.txt").exists()
    # the checkout's own folder replaced by a link to the host: still nothing written there
    bash(env, f"cd .. && mv repo repo.real && ln -s {tmp_path} repo")
    observation, info = edit(env, command="create", path="victim2.txt", file_text="OWNED")
    assert info["error"] and not (tmp_path / "victim2.txt").exists()


def test_the_grader_and_the_host_are_not_visible(make_env, tasks, tmp_path):
    """Defects 2 and 3: the grader's files, the project, the task repositories, another episode, host sockets."""
    env, other = make_env(0), make_env(1)
    secret = tmp_path / "run" / "grader_instances.json"
    secret.write_text(tasks.instances[0]["test_patch"])
    listener = socket.socket(socket.AF_UNIX)
    sock_path = tmp_path / "run" / "host.sock"
    listener.bind(str(sock_path))
    listener.listen(1)
    os.chmod(sock_path, 0o777)
    try:
        readable = [secret, REPO_ROOT / "README.md", tasks.root / "repos", other._work / "repo",
                    pathlib.Path(__file__), REPO_ROOT.parent / "shared" / "data" / "swebench_lite.json",
                    pathlib.Path.home() / ".cache"]
        for path in readable:
            observation, _ = bash(env, f"ls -d {path} && head -c 200 {path}")
            assert "No such file or directory" in observation, (path, observation)
        connect = (f"{pathlib.Path(sys._base_executable).resolve()} -c \"import socket; "
                   f"s = socket.socket(socket.AF_UNIX); s.connect('{sock_path}'); print('CONNECTED')\"")
        observation, _ = bash(env, connect)
        assert "CONNECTED" not in observation and "No such file or directory" in observation
        observation, _ = bash(env, "git log --all --format=%H | wc -l; ls -A /run/swerl 2>/dev/null | wc -l")
        assert observation.split()[:2] == ["1", "0"]  # the base commit alone; no grader input during the episode
    finally:
        listener.close()


def test_disk_limits_are_named_in_the_observation(make_env):
    """Defect 4: /tmp and /dev/shm are size-limited tmpfs, a file is capped, the work dir has a quota."""
    env = make_env()
    observation, _ = bash(env, "head -c 64M /dev/zero > /tmp/fill; echo rc=$?")
    assert "No space left on device" in observation and "rc=1" in observation
    observation, _ = bash(env, "head -c 32M /dev/zero > /dev/shm/fill; echo rc=$?")
    assert "No space left on device" in observation
    observation, _ = bash(env, "truncate -s 100G sparse; echo rc=$?")
    assert "File size limit exceeded" in observation or "File too large" in observation, observation
    assert "rc=0" not in observation
    bash(env, "rm -f sparse")
    observation, info = bash(env, "for i in $(seq 200); do head -c 1M /dev/zero > fill_$i; done; echo finished")
    assert "disk quota" in observation, observation
    # the quota is the work dir's, fixed (issue 45): past it the episode ends, no later command could run
    assert info["termination"] == "disk" and "the episode ends" in observation


def test_host_memory_does_not_follow_the_models_output(make_env):
    """Defect 5: a command printing 64 MB and a 64 MB file viewed: the host holds a bounded part of either."""
    env = make_env()
    bash(env, "truncate -s 64M big.txt")
    tracemalloc.start()
    try:
        observation, _ = bash(env, "head -c 64M /dev/zero | tr '\\0' x")
        _, peak_bash = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        view, info = edit(env, command="view", path="big.txt")
        _, peak_view = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "characters cut" in observation and len(observation) < 10_000
    assert peak_bash < 8 << 20, peak_bash
    assert info["error"] and "over the editor's limit" in view and peak_view < 8 << 20, (view, peak_view)


HOSTILE_ACTIONS = {
    "NUL in a path": format_action("file_editor", command="view", path="a\0b"),
    "NUL in a command": format_action("execute_bash", command="echo a\0b"),
    "symlink loop": None,  # planted below
    "create over a directory": format_action("file_editor", command="create", path="sub", file_text="x"),
    "create under a file": format_action("file_editor", command="create", path="latin1.txt/x.py", file_text="x"),
    "300-character name": format_action("file_editor", command="create", path="n" * 300, file_text="x"),
    "lone surrogate in file_text": format_action("file_editor", command="create", path="s.py", file_text="\ud800"),
    "lone surrogate in a command": format_action("execute_bash", command="echo \udc80"),
    "non-UTF-8 file under str_replace": format_action("file_editor", command="str_replace", path="latin1.txt",
                                                      old_str="caf", new_str="cafe"),
    "non-UTF-8 file under insert": format_action("file_editor", command="insert", path="latin1.txt",
                                                 insert_line="0", new_str="x"),
    "a FIFO under view": format_action("file_editor", command="view", path="fifo"),
    "200 KB command": format_action("execute_bash", command="echo " + "x" * 200_000),
    "200 KB search term": format_action("search", search_term="y" * 200_000),
    "view_range of garbage": format_action("file_editor", command="view", path="latin1.txt", view_range="1 1e99"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_ACTIONS))
def test_step_never_raises_on_what_the_model_writes(make_env, name):
    """Defect 6: every failure is an observation with its reason, counted as a tool error."""
    env = make_env()
    bash(env, "mkdir sub; printf 'caf\\xe9\\n' > latin1.txt; ln -s l1 l0; ln -s l0 l1; mkfifo fifo")
    text = HOSTILE_ACTIONS[name] or format_action("file_editor", command="view", path="l0")
    errors_before = env.stats.tool_errors
    observation, done, info = env.step(text)
    assert info["error"] and observation.startswith("ERROR: ") and not done, observation
    assert env.stats.tool_errors == errors_before + 1
    assert "Traceback" not in observation


def test_a_deep_tree_neither_crashes_the_host_nor_hides_from_the_quota(make_env):
    """Found on the way: 1,500 nested folders made Python's rmtree raise RecursionError in `env.close()`, which the
    rollout calls for every episode; a file nested past PATH_MAX could not be measured by a path-based walk."""
    env = make_env()
    observation, _ = bash(env, "mkdir -p $(printf 'd/%.0s' $(seq 1500)); echo done")
    assert "disk quota" in observation  # deeper than the walk measures: counted as over the quota
    work = env._work
    env.close()
    assert not work.exists()
    env = make_env()
    nest = "import os\nfor _ in range(30):\n    os.mkdir('n' * 200)\n    os.chdir('n' * 200)\n" \
           "open('hidden', 'wb').write(bytes(64 << 20))\nprint('made')\n"
    edit(env, command="create", path="nest.py", file_text=nest)
    observation, _ = bash(env, "python nest.py")
    assert "disk quota" in observation, observation  # 6,000 characters deep: still measured (fd-based walk)


def test_the_quota_sees_what_a_command_deleted_but_holds_open(make_env):
    """Red-team pass: a file unlinked while open takes disk space no walk of the work dir sees."""
    env = make_env()
    hold = ("import os, time\nheld = []\nfor name in ('a', 'b'):\n    f = open(name, 'wb')\n    os.unlink(name)\n"
            "    held.append(f)\n    for _ in range(10):\n        f.write(bytes(4 << 20))\n        f.flush()\n"
            "        os.fsync(f.fileno())\ntime.sleep(600)\nprint('kept')\n")  # 80 MiB held; ends only if killed
    edit(env, command="create", path="hold.py", file_text=hold)
    observation, _ = bash(env, "python hold.py")
    assert "disk quota" in observation and "kept" not in observation, observation


def test_output_that_looks_like_bubblewrap_is_the_commands_own(make_env):
    """Red-team pass: a command printing 'bwrap: ...' and failing made env.step raise SandboxUnavailable."""
    env = make_env()
    observation, info = bash(env, 'echo "bwrap: not really"; exit 3')
    assert "bwrap: not really" in observation and "[exit code 3]" in observation and not info["error"]


def test_a_planted_git_hook_cannot_break_the_patch_or_the_reward(make_env):
    """Red-team pass: a core.fsmonitor hook printing 'bwrap: ...' on stderr, and a broken diff setting, made
    env.patch() and env.reward() raise SandboxUnavailable."""
    env = make_env()
    bash(env, "printf '#!/bin/sh\\necho bwrap: fake >&2\\n' > /tmp/h; cp /tmp/h .git/hook; chmod +x .git/hook; "
              "git config core.fsmonitor \"$PWD/.git/hook\"; git config diff.algorithm bogus")
    assert env.patch() == ""  # git refuses its own broken config: an empty diff, not an exception
    env.step(format_action("finish"))
    reward, info = env.reward()
    assert reward == 0.0


def test_names_that_are_not_utf8_become_valid_text(make_env):
    """Red-team pass: a file named with byte 0xff put lone surrogates in a listing, and the tokenizer raised."""
    env = make_env()
    bash(env, "touch $'bad\\xffname.py'")
    observation, _, info = env.step(format_action("file_editor", command="view", path="."))
    assert "bad?name.py" in observation and not info["error"]
    observation.encode("utf-8")  # strict: no surrogate left
    observation, _, info = env.step(format_action("file_editor", command="view", path="\udc80x"))
    assert info["error"] and "?" in observation
    observation.encode("utf-8")


def test_the_undo_history_is_bounded(make_env, monkeypatch):
    """Red-team pass: every edit kept the whole old text for undo_edit (8 MiB a turn, 400 MiB an episode)."""
    from swerl_jax.agent import tools

    monkeypatch.setattr(tools, "MAX_UNDO_BYTES", 3 << 19)  # three of the old texts below
    env = make_env()
    for k in range(6):
        edit(env, command="create", path=f"f{k}.txt", file_text="x" * (1 << 19))
        edit(env, command="str_replace", path=f"f{k}.txt", old_str="x" * (1 << 19), new_str="y")
    ws = env.workspace
    assert ws._undo_bytes <= 3 << 19 and sum(len(t or "") for h in ws.history.values() for t in h) == ws._undo_bytes
    observation, info = edit(env, command="undo_edit", path="f5.txt")  # the newest edits can still be undone
    assert not info["error"] and (ws.repo / "f5.txt").read_text() == "x" * (1 << 19)
    observation, info = edit(env, command="undo_edit", path="f0.txt")  # the oldest went first
    assert info["error"] and "no edit to undo" in observation
