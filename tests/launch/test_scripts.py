"""The launchers, run for real: failure propagation of multiprocess_cpu.sh; local.sh, tpu_pod.sh and
slurm_h100.sbatch start the real planner and trainer (only gcloud / srun are recorders on PATH that run the
command they are given)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = ["local.sh", "multiprocess_cpu.sh", "tpu_pod.sh", "slurm_h100.sbatch", "async_node.sh"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_scripts_parse_and_are_executable(script):
    path = REPO / "launch" / script
    assert os.access(path, os.X_OK)
    subprocess.run(["bash", "-n", str(path)], check=True)


def test_multiprocess_env_and_failure_propagation(tmp_path):
    # Process 1 fails, but only after processes 0 and 2 have printed (their logs are non-empty): the launcher
    # stops the others as soon as one fails, so an early exit would race with their start-up on a busy machine.
    code = ("import os, sys, time; e = os.environ; print(e['JAX_PROCESS_ID'], e['JAX_NUM_PROCESSES'], "
            "e['JAX_COORDINATOR_ADDRESS'].split(':')[0], e['XLA_FLAGS'].split()[0], flush=True)\n"
            "if e['JAX_PROCESS_ID'] == '1':\n"
            "    logs = [os.path.join(e['LOG_DIR'], f'process_{i}.log') for i in (0, 2)]\n"
            "    end = time.time() + 50\n"
            "    while time.time() < end and not all(os.path.getsize(p) for p in logs): time.sleep(0.05)\n"
            "    sys.exit(3)\n"
            "time.sleep(0 if e['JAX_PROCESS_ID'] == '0' else 60)\n")
    out = subprocess.run(["bash", "launch/multiprocess_cpu.sh", "3", "2", sys.executable, "-c", code], cwd=REPO,
                         capture_output=True, text=True, timeout=90, env={**os.environ, "LOG_DIR": str(tmp_path)})
    assert out.returncode == 3  # process 1's status, not that of process 2, which the launcher stopped
    assert "process 1 failed (exit 3)" in out.stderr
    assert "[0] 0 3 127.0.0.1 --xla_force_host_platform_device_count=2" in out.stdout
    assert "[2] 2 3 127.0.0.1" in out.stdout


def test_multiprocess_lines_appear_while_the_processes_run(tmp_path):
    # issue 57 item 7: every line came only after the last process had ended. Both processes run until this test
    # has read their lines from the launcher (it then creates `go`); without live lines they give up, status 3.
    go = tmp_path / "go"
    code = ("import os, sys, time; i = os.environ['JAX_PROCESS_ID']\n"
            "print('hello from', i); print('warning from', i, file=sys.stderr)\n"  # no flush: the launcher's job
            "end = time.time() + 60\n"
            f"while not os.path.exists({str(go)!r}):\n"
            "    if time.time() > end: sys.exit(3)\n"
            "    time.sleep(0.02)\n")
    proc = subprocess.Popen(["bash", "launch/multiprocess_cpu.sh", "2", "1", sys.executable, "-c", code], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "LOG_DIR": str(tmp_path / "logs")})
    seen = []
    try:
        for line in proc.stdout:  # as the launcher prints them; ends when it (and its printers) end
            seen.append(line)
            if {f"[{i}] {what} from {i}\n" for i in (0, 1) for what in ("hello", "warning")} <= set(seen):
                go.touch()
        proc.wait(timeout=60)
    finally:  # a failed assertion must not leave the launcher running
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert proc.returncode == 0, seen  # 3: a process gave up waiting, the lines had not come
    assert (tmp_path / "logs" / "process_1.log").read_text() == "hello from 1\nwarning from 1\n"  # the log as is


def test_multiprocess_ctrl_c_lets_the_processes_stop_by_themselves(tmp_path):
    # A terminal's Ctrl-C reaches the launcher and its processes (one process group); each stops by itself, as a
    # trainer closes its sampler and checkpoint writes. The launcher used to SIGTERM them at once, and SIGTERM
    # ends a JAX process since its preemption service is off (swerl_jax.sharding.initialize_distributed). Here
    # each process closes when the test says so, after the launcher has said it is waiting.
    go = tmp_path / "go"
    code = ("import os, sys, time; i = os.environ['JAX_PROCESS_ID']\n"
            "try:\n"
            "    print('ready', i); end = time.time() + 60\n"
            "    while time.time() < end: time.sleep(0.02)\n"  # until the Ctrl-C
            "    sys.exit(3)\n"
            "except KeyboardInterrupt:\n"
            "    end = time.time() + 60\n"
            f"    while not os.path.exists({str(go)!r}) and time.time() < end: time.sleep(0.02)\n"
            "    print('closed', i); sys.exit(130)\n")
    proc = subprocess.Popen(["bash", "launch/multiprocess_cpu.sh", "2", "1", sys.executable, "-c", code], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env={**os.environ, "LOG_DIR": str(tmp_path / "logs")})
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if line in ("[0] ready 0\n", "[1] ready 1\n") and {"[0] ready 0\n", "[1] ready 1\n"} <= set(seen):
                os.killpg(proc.pid, signal.SIGINT)  # what a terminal does on Ctrl-C
            if line.startswith("multiprocess_cpu.sh: interrupted; waiting"):
                go.touch()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert {"[0] closed 0\n", "[1] closed 1\n"} <= set(seen), seen
    assert proc.returncode == 130, seen
    assert not any("failed" in line for line in seen), seen  # stopping on Ctrl-C is not a failure


# Every launcher run below starts the real planner and the real trainer with both stages at 0 steps: the trainer
# parses every flag, writes the resolved config and prints its summary, so a flag either side rejects fails here.
ZERO = ["--config.rl.num_steps=0", "--config.sft.num_steps=0"]


def _env(bin_dir: Path, **extra: str) -> dict:
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PY": sys.executable, "PYTHONPATH": str(REPO),
            "JAX_PLATFORMS": "cpu", **extra}


def _summary(stdout: str) -> dict:
    return json.loads(stdout[stdout.index("\n{") + 1:stdout.rindex("}") + 1])


def _recorder(bin_dir: Path, name: str, log: Path, then: str = "") -> None:
    """`name` on PATH: appends its argv (one line, each argument quoted) to `log`, then runs `then`."""
    path = bin_dir / name
    path.write_text(f'#!/usr/bin/env bash\n{{ printf %s "{name}"; printf " %q" "$@"; echo; }} >> {log}\n{then}\n')
    path.chmod(0o755)


def test_launchers_name_only_modules_and_experiments_that_exist():
    for script in SCRIPTS:
        text = (REPO / "launch" / script).read_text()
        for module in re.findall(r"-m (swerl_jax[\w.]*)|MODULE=(swerl_jax[\w.]*)", text):
            name = module[0] or module[1]
            assert importlib.util.find_spec(name) is not None, f"launch/{script} names {name}, which does not exist"
        for exp in re.findall(r"experiments/\w+\.py", text):
            assert exp == "experiments/NAME.py" or (REPO / exp).is_file(), f"launch/{script} names {exp}"


class Launched:
    """A launcher started in the background (the three below run side by side: each is two JAX processes, the
    planner then the trainer, mostly single-threaded start-up)."""

    def __init__(self, root: Path, argv: list[str], env: dict) -> None:
        self.root = root
        self._out, self._err = root / "stdout.txt", root / "stderr.txt"
        with open(self._out, "w") as out, open(self._err, "w") as err:  # files: a full pipe would block it
            self.proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=err)

    def result(self, timeout: float = 300) -> subprocess.CompletedProcess:
        """Wait for it: (returncode, stdout, stderr)."""
        self.proc.wait(timeout=timeout)
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode, self._out.read_text(),
                                           self._err.read_text())


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """local.sh, tpu_pod.sh (a fake gcloud) and slurm_h100.sbatch (a fake srun), started at once."""
    runs = {}
    # launch/local.sh X.py --workdir=...: the planner used to get --workdir too, reject it and print no plan
    tmp = tmp_path_factory.mktemp("local")
    runs["local"] = Launched(tmp, ["bash", "launch/local.sh", "experiments/tiny_cpu.py", f"--workdir={tmp / 'run'}",
                                   "--config.data.max_prompt_len=512", *ZERO], _env(tmp))
    # the fake gcloud runs the --command it is given in a stand-in for the worker's home: REMOTE_DIR holds the
    # checkout and its .venv, as SETUP=1 leaves it
    tmp = tmp_path_factory.mktemp("tpu")
    home, remote = tmp / "home", tmp / "home" / "swerl_jax"
    remote.mkdir(parents=True)
    for name in ("swerl_jax", "experiments", "launch"):
        (remote / name).symlink_to(REPO / name)
    (remote / ".venv").symlink_to(Path(sys.executable).parents[1])
    _recorder(tmp, "gcloud", tmp / "calls.log", then=f'cd {home}; for a in "$@"; do [[ "$a" == --command=* ]] && '
                                                     'exec bash -c "${a#--command=}"; done; exit 0')
    # one host: the explicit one-process settings win over SWERL_DISTRIBUTED=auto (no TPU metadata here)
    tpu_args = [f"--workdir={tmp / 'run'}", "--config.mesh.coordinator_address=127.0.0.1:1",
                "--config.mesh.num_processes=1", *ZERO]
    runs["tpu"] = Launched(tmp, ["bash", "launch/tpu_pod.sh", "experiments/tiny_cpu.py", *tpu_args],
                           _env(tmp, TPU_NAME="pod", ZONE="z1", REMOTE_DIR="swerl_jax"))
    runs["tpu"].args = tpu_args
    # the fake srun records its argv, drops its own options and runs the command, as srun does on each node
    tmp = tmp_path_factory.mktemp("slurm")
    _recorder(tmp, "srun", tmp / "calls.log", then='while [[ "$1" == --* ]]; do shift; done; exec "$@"')
    runs["slurm"] = Launched(tmp, ["bash", "launch/slurm_h100.sbatch", "experiments/tiny_cpu.py",
                                   f"--workdir={tmp / 'run'}", *ZERO], _env(tmp, SLURM_SUBMIT_DIR=str(REPO)))
    yield runs
    for run in runs.values():  # a test that failed early must not leave its launcher running
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait(timeout=30)


def test_local_sh_its_own_example_with_workdir_plans_then_trains(launched):
    run = launched["local"].root / "run"
    out = launched["local"].result()
    assert out.returncode == 0, out.stderr[-3000:]
    assert "model demo-7m on cpu" in out.stdout and "verdict: fits" in out.stdout, out.stderr[-3000:]
    assert "FATAL" not in out.stderr
    assert _summary(out.stdout) == {"workdir": str(run)}
    config = json.loads((run / "config.json").read_text())
    assert config["data"]["max_prompt_len"] == 512 and config["rl"]["num_steps"] == 0


def test_tpu_pod_plans_then_runs_the_trainer_on_every_worker(launched):
    tpu = launched["tpu"]
    out = tpu.result()
    assert out.returncode == 0, out.stderr[-3000:]
    assert "verdict: fits" in out.stdout  # the plan's last lines
    assert _summary(out.stdout) == {"workdir": str(tpu.root / "run")}
    assert (tpu.root / "calls.log").read_text().splitlines() == [
        "gcloud compute tpus tpu-vm ssh pod --zone=z1 --worker=all --command=cd\\ swerl_jax\\ \\&\\&\\ "
        "SWERL_DISTRIBUTED=auto\\ .venv/bin/python\\ -m\\ swerl_jax.train\\ --config=experiments/tiny_cpu.py"
        + "".join(f"\\ {a}" for a in tpu.args) + "\\ 2\\>\\&1\\ \\|\\ tee\\ -a\\ /tmp/swerl_jax_train.log"]


def test_slurm_plans_then_sruns_the_trainer(launched):
    slurm = launched["slurm"]
    run = slurm.root / "run"
    out = slurm.result()
    assert out.returncode == 0, out.stderr[-3000:]
    assert "verdict: fits" in out.stdout
    assert _summary(out.stdout) == {"workdir": str(run)}
    assert (slurm.root / "calls.log").read_text().splitlines() == [
        f"srun --kill-on-bad-exit=1 {sys.executable} -m swerl_jax.train --config=experiments/tiny_cpu.py "
        f"--workdir={run} {' '.join(ZERO)}"]
    text = (REPO / "launch" / "slurm_h100.sbatch").read_text()
    assert "#SBATCH --nodes=64" in text and "#SBATCH --ntasks-per-node=1" in text
    assert "JAX_LOCAL_DEVICE_IDS=0,1,2,3,4,5,6,7" in text


def test_async_node_places_each_role_and_its_flags_resolve(tmp_path):
    """launch/async_node.sh on an 8-GPU node and on this machine's cores: the trainer's CUDA_VISIBLE_DEVICES and
    the flags that place the sampler fleet, recorded by a stand-in python; the flags then resolve as the real
    trainer resolves them."""
    from swerl_jax.config import load_experiment_config, parse_value, set_key, split_overrides
    from swerl_jax.resolve import resolve_config

    log = tmp_path / "argv.log"
    fake = tmp_path / "python"
    fake.write_text(f'#!/usr/bin/env bash\necho "CUDA_VISIBLE_DEVICES=${{CUDA_VISIBLE_DEVICES:-unset}}" > {log}\n'
                    f'printf "%s\\n" "$@" >> {log}\n')
    fake.chmod(0o755)

    def launch(**env: str) -> tuple[str, list[str]]:
        out = subprocess.run(["bash", "launch/async_node.sh", "experiments/tiny_cpu.py", "--config.rl.num_steps=3"],
                             cwd=REPO, env={**{k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"},
                                                   "PY": str(fake), **env}, capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        lines = log.read_text().splitlines()
        return out.stdout + lines[0], lines[1:]

    said, argv = launch(TRAINER_GPUS="0-5", SAMPLER_GPUS="6-7", SAMPLERS="2")
    assert "trainer on GPUs 0-5, cores any; 2 sampler process(es) on GPUs 6-7" in said
    assert said.endswith("CUDA_VISIBLE_DEVICES=0,1,2,3,4,5")
    rest, overrides = split_overrides(argv)
    assert rest == ["-m", "swerl_jax.train", "--config=experiments/tiny_cpu.py"]
    config = load_experiment_config("experiments/tiny_cpu.py")
    for key, text in overrides:
        set_key(config, key, parse_value(config, key, text))
    config = resolve_config(config)
    assert (config.sampler.devices, config.sampler.num_processes, config.rl.max_staleness) == ("6-7", 2, 1)
    assert config.sampler.mode == "process" and config.rl.num_steps == 3  # the user's flags come last and win

    said, argv = launch(STALENESS="0")  # no placement given: the cores split in two (on a machine of 2 or more)
    n = os.cpu_count() or 1
    if n >= 2:
        assert f"--config.sampler.cpus=0-{n // 2 - 1}" in argv and f"--config.rl.trainer_cpus={n // 2}-{n - 1}" in argv
    assert "--config.rl.max_staleness=0" in argv and said.endswith("CUDA_VISIBLE_DEVICES=unset")


def test_local_sh_takes_the_users_paths_from_where_they_typed_them(tmp_path):
    """New-user check: local.sh cd'ed into the repository, so `launch/local.sh my_exp.py --workdir=myrun` from the
    user's folder found no config (and would have written myrun into the repository)."""
    import shutil

    shutil.copy(REPO / "experiments" / "tiny_cpu.py", tmp_path / "my_exp.py")
    out = subprocess.run(["bash", str(REPO / "launch" / "local.sh"), "my_exp.py", "--workdir=myrun",
                          "--config.sft.num_steps=1", "--config.rl.num_steps=0"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, env={**os.environ, "SKIP_PLAN": "1", "JAX_PLATFORMS": "cpu"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "myrun" / "sft" / "checkpoints" / "1").is_dir() and not (REPO / "myrun").exists()
