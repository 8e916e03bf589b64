"""Executors: how one instance is set up, patched and tested. `local` (bubblewrap sandbox) and `docker`.

Both produce the same result dict and write their logs into the instance's log dir under --out.
"""

from __future__ import annotations

import dataclasses
import pathlib
import shlex
import shutil
import subprocess
import time
import uuid
from typing import Protocol, runtime_checkable

from swerl_jax.sandbox.bwrap import INPUTS_DIR, Sandbox, SandboxLimits
from swerl_jax.sandbox.checkouts import CheckoutError, history_free_checkout
from swerl_jax.sandbox.pytest_verdict import PLUGIN_DIGEST, PluginRun
from swerl_jax.sandbox.workdirs import remove_tree
from swerl_jax.tasks import environments, grading, reach, specs
from swerl_jax.tasks import index_cutoff as cutoffs
from swerl_jax.tasks.patching import APPLY_CHAIN, apply_patch
from swerl_jax.tasks.verdicts import VERDICTS, runs_pytest, swebench_ids, verdict_status


def fresh_workdir(out_dir: pathlib.Path, instance_id: str) -> pathlib.Path:
    """A new, empty work dir for one grading or episode: OUT/work/<id>.<random>, never shared or reused."""
    work = out_dir / "work" / f"{instance_id}.{uuid.uuid4().hex[:12]}"
    work.mkdir(parents=True)
    return work


def checkout(git_dir: pathlib.Path, repo_dir: pathlib.Path, commit: str, cache: pathlib.Path | None = None) -> str:
    """Check `commit` out of `git_dir` into `repo_dir` for a sandbox: '' on success, else what failed (for
    setup.log). Always `sandbox.checkouts.history_free_checkout`: a repository of its own holding the commit, its
    ancestors and their tags, verified to hold nothing later (a grading, a script run and an episode alike: model
    code runs beside each, and the later commits hold the fix). `cache`: a host folder no sandbox sees, where the
    fetch is made once per base commit and copied from."""
    try:
        history_free_checkout(git_dir, repo_dir, commit, cache)
    except CheckoutError as err:
        return str(err)
    return ""


def eval_script(instance: dict, spec: dict, repo_dir: str, test_patch_file: str, base_conftests: bool = False) -> str:
    """The test phase, as the official harness runs it: spec eval commands, test files reset to the base commit,
    the test patch applied, the test command over the test patch's files between SWE-bench's log markers.
    base_conftests (RL verdicts): every conftest.py is the base commit's before the test patch applies (the model's
    changed, deleted or added ones reset or removed): a conftest hook passes any test, and is the grader's."""
    consts = specs.constants()
    files = specs.test_patch_files(instance["test_patch"])
    test_cmds = spec["test_cmd"] if isinstance(spec["test_cmd"], list) else [spec["test_cmd"]]
    directives = " ".join(shlex.quote(d) for d in specs.test_directives(instance))
    lines = [f"cd {shlex.quote(repo_dir)}", *spec.get("eval_commands", [])]
    git = "git -c core.hooksPath=/dev/null -c core.fsmonitor=false"
    if base_conftests:
        base = shlex.quote(instance["base_commit"])
        lines.append(f"git ls-tree -r -z --name-only {base} | grep -zE '(^|/)conftest\\.py$' | "
                     f"xargs -0 -r {git} checkout -q {base} --")
        lines.append(f"find . -path ./.git -prune -o -name conftest.py -print | while IFS= read -r f; do "
                     f"git cat-file -e {base}:\"${{f#./}}\" 2>/dev/null || rm -f -- \"$f\"; done")
    if files:
        # no hook or fsmonitor of the checkout's .git runs (a patch applied by `patch -p1` can write them)
        lines.append(f"{git} checkout -q {instance['base_commit']} -- {' '.join(map(shlex.quote, files))}")
    lines.append(f"git apply -v {shlex.quote(test_patch_file)} || {{ echo 'TEST PATCH FAILED TO APPLY'; exit 3; }}")
    lines.append(f"echo {shlex.quote(consts.START_TEST_OUTPUT)}")
    lines += [f"{cmd} {directives}" for cmd in test_cmds]
    lines.append(f"echo {shlex.quote(consts.END_TEST_OUTPUT)}")
    return "\n".join(lines) + "\n"


@runtime_checkable
class Executor(Protocol):
    """What grades an instance (the harness, the agent's verifier): `LocalExecutor` (bubblewrap) and
    `DockerExecutor` (the official images)."""

    def fingerprint(self, instance: dict) -> dict:
        """Everything besides the patch that decides a result (image or env, spec, limits): part of the harness's
        result key, so a stored result is reused only under the same executor and limits."""
        ...

    def evaluate(self, instance: dict, patch: str, log_dir: pathlib.Path) -> dict:
        """Apply `patch` to the instance's checkout and run its tests: {status, ...} (grading.py's statuses)."""
        ...


@runtime_checkable
class ScriptExecutor(Executor, Protocol):
    """An executor that also runs a model's or a pipeline's own script on a prepared checkout (Agentless's
    reproduction and regression tests) and prepares a checkout for an agent's episode: `LocalExecutor`."""

    def run_script(self, instance: dict, patch: str, script: str, log_dir: pathlib.Path,
                   files: dict[str, str] | None = None) -> dict:
        """See `LocalExecutor.run_script`."""
        ...

    def prepare(self, instance: dict, patch: str, log_dir: pathlib.Path, work: pathlib.Path) -> dict:
        """See `LocalExecutor.prepare`."""
        ...


class LocalExecutor:
    """Runs an instance on this machine: cached venv + thin overlay, install, patch and tests in the sandbox."""

    name = "local"

    def __init__(self, repos_dir: pathlib.Path, out_dir: pathlib.Path, envs: environments.EnvironmentCache,
                 limits: SandboxLimits = SandboxLimits(), keep_workdirs: bool = False, setup_timeout_s: float = 1800,
                 index_cutoff: str = "created_at", verdict: str = "log"):
        """limits bound the patch and test steps; the install step gets setup_timeout_s (it may download).
        verdict: what decides `status` (both come from the same run; `plugin_verdict` is always reported): "log",
        pytest's log by SWE-bench's parsers (official, but printed results pass); "plugin", the trusted plugin's
        record (`sandbox/pytest_verdict.py`, `tasks/verdicts.py`) for RL rewards and labels (pytest runs only).
        index_cutoff: "created_at" resolves unpinned requirements (env build and install) against the index as of
        the instance's created_at (index_cutoff.py); "images", as of 2024-06-27 (the official images' build day)
        for every instance; "off", against today's."""
        if index_cutoff not in cutoffs.MODES:
            raise cutoffs.CutoffError(f"index cut-off {index_cutoff!r}: must be one of {cutoffs.MODES}")
        if verdict not in VERDICTS:
            raise ValueError(f"verdict {verdict!r}: must be one of {VERDICTS}")
        self.verdict = verdict
        self.repos_dir, self.out_dir, self.envs = repos_dir, out_dir, envs
        self.limits, self.keep_workdirs, self.index_cutoff = limits, keep_workdirs, index_cutoff
        self.setup_limits = dataclasses.replace(limits, timeout_s=setup_timeout_s, cpu_seconds=int(setup_timeout_s))

    def fingerprint(self, instance: dict) -> dict:
        """What besides the patch and the instance determines a grading here (the harness keys results by it):
        the environment spec, the limits and the index cut-off (absent when off: today's keys stay valid)."""
        found = {"executor": self.name, "spec": _spec_or_error(instance), "limits": dataclasses.asdict(self.limits),
                 "setup_timeout_s": self.setup_limits.timeout_s}
        if self.verdict != "log":
            found["verdict"] = self.verdict
        if isinstance(found["spec"], dict) and runs_pytest(found["spec"]):  # the plugin rides in every pytest run
            found["verdict_plugin"] = PLUGIN_DIGEST
        if self.index_cutoff != "off":
            try:
                python = found["spec"].get("python") if isinstance(found["spec"], dict) else None
                found["index_cutoff"] = cutoffs.instance_cutoff(instance, self.index_cutoff, python)
            except cutoffs.CutoffError as err:
                found["index_cutoff"] = f"error: {err}"
            found.update(cutoffs.tooling_rule())
        return found

    def evaluate(self, instance: dict, patch: str, log_dir: pathlib.Path) -> dict:
        """Set up, patch, test and grade one instance; the result's `status` says where it stopped.

        Each grading gets its own fresh work dir (concurrent gradings of one instance never share files), which
        no episode has seen: only the patch's text comes from the model."""
        work = fresh_workdir(self.out_dir, instance["instance_id"])
        try:
            return self._evaluate(instance, patch, log_dir, work)
        finally:
            if not self.keep_workdirs:
                remove_tree(work)

    def run_script(self, instance: dict, patch: str, script: str, log_dir: pathlib.Path,
                   files: dict[str, str] | None = None) -> dict:
        """Set up the instance, apply `patch`, hand `files` ({name: text}) to the sandbox read-only at $INPUTS
        and run the bash `script` from the checkout in the sandbox, no network. `script` may name `$REPO` (the
        checkout), `$WORK` (the writable work dir) and `$INPUTS`. Returns {status: "ran", returncode, output,
        timed_out} (and, where the spec runs pytest, `test_statuses`: {test id: status} from the trusted plugin's
        records of the script's pytest runs; {} when none wrote one or one was tampered with) or the failed
        step's status, like `evaluate`. Agentless's reproduction and regression tests
        run through this."""
        work = fresh_workdir(self.out_dir, instance["instance_id"])
        try:
            ready = self.prepare(instance, patch, log_dir, work)
            if "status" in ready:
                return ready
            sandbox, env, repo_dir = ready["sandbox"], ready["env"], ready["repo_dir"]
            env = {**env, "REPO": str(repo_dir), "WORK": str(work)}
            # pytest runs in the script (regression tests) load the trusted plugin: their statuses come from its
            # record, not from what the patched code prints
            plugin = _plugin_for(ready)
            if plugin is not None:
                env, files = {**env, **plugin.env(env)}, {**(files or {}), **plugin.inputs()}
            done = sandbox.run(f"cd {shlex.quote(str(repo_dir))}\n{script}", work, env=env, inputs=files)
            (log_dir / "script.log").write_text(f"{script}\n---\n{done.output}")
            ran = {"status": "ran", "returncode": done.returncode, "output": done.output,
                   "timed_out": done.timed_out}
            if plugin is not None:
                statuses, tampered, _ = plugin.statuses(done.output, runs=1 << 30,
                                                        test_ids=swebench_ids(instance))
                # no record (an early exit) or a tampered one: no test counts as passed
                ran["test_statuses"] = {} if tampered or statuses is None else statuses
                ran["tampered"] = tampered
            return ran
        finally:
            if not self.keep_workdirs:
                remove_tree(work)

    def prepare(self, instance: dict, patch: str, log_dir: pathlib.Path, work: pathlib.Path) -> dict:
        """Check out, install and patch the instance in `work`: {sandbox, env, repo_dir, spec} or {status, error}.

        The checkout is history-free (`checkout`), for a grading, a script and an agent's episode alike: it holds
        the base commit's reachable set alone, and the sandbox never sees the clone it came from, whose later
        commits hold the fix."""
        try:
            git_dir = environments.resolve_clone(self.repos_dir, instance["repo"], self.out_dir / "repos")
        except FileNotFoundError:  # not fetched here (django, scikit-learn, matplotlib are too large for some hosts)
            return reach.missing_repo(instance["repo"], str(self.repos_dir)).result()
        except subprocess.CalledProcessError as err:
            return {"status": "no_repo", "error": str(err)}
        try:
            spec = specs.instance_spec(instance)
            cutoff = cutoffs.instance_cutoff(instance, self.index_cutoff, str(spec.get("python")))
            started = time.monotonic()
            env_dir = self.envs.get(instance, git_dir, cutoff, holder=work)
            env_s = time.monotonic() - started  # a cache hit is ~0; a build is minutes (BENCHMARKS.md, the harness)
        except (specs.SpecError, cutoffs.CutoffError, environments.EnvironmentError_) as err:
            log = getattr(err, "log", None)
            if log is not None:
                shutil.copy(log, log_dir / "env_build.log")
            if isinstance(err, reach.OutOfReach):
                return err.result()
            return {"status": "env_failed", "error": str(err)}
        repo_dir = work / "repo"
        failed = checkout(git_dir, repo_dir, instance["base_commit"], self.out_dir / "repos" / "history-free")
        if failed:
            (log_dir / "setup.log").write_text(failed)
            lack = reach.incomplete_clone(failed, instance["repo"], str(self.repos_dir))
            if lack is not None:  # astropy's fetched snapshot lacks blobs two Lite base commits need
                return lack.result()
            return {"status": "setup_failed", "error": f"checkout of {instance['base_commit']} failed: {failed[-300:]}"}
        venv = environments.overlay_venv(env_dir, work / "venv")
        python_home = (env_dir / "bin" / "python").resolve().parent.parent
        sandbox = Sandbox(readable=[env_dir, python_home], limits=self.limits)  # never the clone: it holds the fix
        env = {**environments.overlay_env(venv), "PIP_NO_INPUT": "1"}

        # Install the base commit (the repository's own code, before any model edit): the index is reachable.
        setup = "\n".join([f"cd {shlex.quote(str(repo_dir))}", *spec.get("pre_install", []), spec.get("install", "")])
        # Without the PYTHONPATH hook: pip's isolated build envs must not see the cached env's packages (a pinned
        # packaging 23.1 broke setuptools-scm's build of pytest 8.0).
        setup_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
        if cutoff is not None:  # the repository's own unpinned requirements (sphinx's docutils) as of its date
            setup_env = environments.dated_env(setup_env, cutoffs.shared_index().url(
                cutoff, cutoffs.spec_pins(spec)))
        started = time.monotonic()
        done = sandbox.run("set -e\n" + setup, work, network=True, env=setup_env, limits=self.setup_limits)
        (log_dir / "setup.log").write_text(f"{setup}\n---\n{done.output}")
        environment = {"env": env_dir.name, "index_cutoff": cutoff,
                       "env_cutoff": self.envs.env_date(spec, instance, git_dir, cutoff),
                       "tooling_cutoff": cutoffs.TOOLING_CUTOFF if cutoff is not None else None,
                       "env_resolved": environments.resolved(env_dir),
                       "installed": installed(venv), "env_s": round(env_s, 1),
                       "install_s": round(time.monotonic() - started, 1)}
        if done.timed_out:
            return {"status": "setup_failed", "error": f"install ran past {self.setup_limits.timeout_s:.0f}s",
                    "environment": environment}
        if done.returncode != 0:
            lack = reach.from_log(done.output, step="install")  # a compiler or the index, not the repository
            if lack is not None:
                return {**lack.result(), "environment": environment}
            return {"status": "setup_failed", "error": f"install failed (exit {done.returncode}): see setup.log",
                    "environment": environment}

        applied = apply_patch(sandbox, work, repo_dir, patch)
        (log_dir / "patch.log").write_text(applied.log)
        if not applied.applied:
            return {"status": "patch_failed", "error": f"no command of {list(APPLY_CHAIN)} applied the patch",
                    "environment": environment}

        return {"sandbox": sandbox, "env": env, "repo_dir": repo_dir, "spec": spec, "environment": environment,
                "env_dir": env_dir}

    def _evaluate(self, instance: dict, patch: str, log_dir: pathlib.Path, work: pathlib.Path) -> dict:
        ready = self.prepare(instance, patch, log_dir, work)
        if "status" in ready:
            return ready
        started = time.monotonic()
        tested = self._test(instance, log_dir, work, ready)
        return {**tested, "environment": {**ready["environment"], "test_s": round(time.monotonic() - started, 1)}}

    def _test(self, instance: dict, log_dir: pathlib.Path, work: pathlib.Path, ready: dict) -> dict:
        sandbox, env, repo_dir, spec = ready["sandbox"], ready["env"], ready["repo_dir"], ready["spec"]
        # The hidden tests enter here, after the model's last turn, read-only at $INPUTS; with them the trusted
        # pytest plugin, whose record is the verdict the code under test cannot print.
        script = eval_script(instance, spec, str(repo_dir), f"{INPUTS_DIR}/test.patch",
                             base_conftests=self.verdict == "plugin")
        inputs = {"test.patch": instance["test_patch"], "eval.sh": script}
        plugin = _plugin_for(ready)
        if plugin is not None:
            env, inputs = {**env, **plugin.env(env)}, {**inputs, **plugin.inputs()}
        elif self.verdict == "plugin":
            return reach.OutOfReach(f"{instance['repo']} runs its tests with {spec['test_cmd']!r}, not pytest: no "
                                    "trusted verdict", "grade it with --verdict log (printed results can "
                                    "forge it)").result()
        # the thin venv is read-only while the tests run: code under test cannot plant a .pth or module there for a
        # pytest it starts again (the plugin's check would then begin after it)
        tests = sandbox.run(f"bash {INPUTS_DIR}/eval.sh", work, env=env, inputs=inputs,
                            read_only=[work / "venv"] if plugin is not None else ())
        (log_dir / "test.log").write_text(f"{script}\n---\n{tests.output}")
        if tests.timed_out:
            return {"status": "timeout", "error": f"tests ran past {self.limits.timeout_s:.0f}s"}
        report = grading.grade(instance, tests.output)
        if plugin is not None:
            expected = [*grading.test_list(instance, "FAIL_TO_PASS"), *grading.test_list(instance, "PASS_TO_PASS")]
            runs = len(spec["test_cmd"]) if isinstance(spec["test_cmd"], list) else 1
            report["plugin_verdict"] = plugin.verdict(tests.output, expected, runs,
                                                      swebench_ids(instance)).as_dict()
        lack = None if report["resolved"] else reach.from_log(tests.output, step="tests")
        if lack is not None:  # psf/requests' tests reach httpbin.org: no patch passes them in the sandbox
            return {**report, **lack.result()}
        if self.verdict == "plugin":
            return {**report, "log_resolved": report["resolved"],
                    **verdict_status(report["plugin_verdict"], tests.returncode, report["resolved"])}
        if not report["tests_ran"]:
            return {"status": "error", "error": f"tests did not start (exit {tests.returncode}): see test.log",
                    **report}
        if report["runner_crashed"] and not report["resolved"]:
            return {"status": "error", "error": "the test runner crashed (INTERNALERROR, e.g. the memory cap): "
                    "see test.log", **report}
        return {"status": "resolved" if report["resolved"] else "unresolved", **report}


def _plugin_for(ready: dict) -> PluginRun | None:
    """A fresh trusted plugin for a prepared instance whose tests pytest runs (None for other test runners)."""
    if not runs_pytest(ready["spec"]):
        return None
    return PluginRun.new([environments.site_packages(ready["env_dir"])])


def installed(venv: pathlib.Path) -> list[str]:
    """`name==version` of what an instance's install put in its thin venv (beside the cached env's packages)."""
    found = []
    for meta in sorted(environments.site_packages(venv).glob("*.*-info")):
        name, _, version = meta.name.rsplit(".", 1)[0].partition("-")
        version = version.split("-")[0]  # an egg-info's "1.1.1-py3.9"
        found.append(f"{name}=={version}" if version else name)
    for link in sorted(environments.site_packages(venv).glob("*.egg-link")):
        found.append(f"{link.name.removesuffix('.egg-link')} (editable)")
    return found


def _spec_or_error(instance: dict) -> dict | str:
    try:
        return specs.instance_spec(instance)
    except (specs.SpecError, KeyError) as err:
        return f"no spec: {err}"


def docker_image(instance_id: str) -> str:
    """The official SWE-bench instance image name (x86_64)."""
    return f"swebench/sweb.eval.x86_64.{instance_id.replace('__', '_1776_').lower()}:latest"


class DockerExecutor:
    """Runs an instance in its official SWE-bench image (repo at /testbed, conda env `testbed`), no network."""

    name = "docker"

    def __init__(self, out_dir: pathlib.Path, limits: SandboxLimits = SandboxLimits()):
        if shutil.which("docker") is None:
            raise RuntimeError("--executor docker needs the docker CLI and a daemon; use --executor local")
        info = subprocess.run(["docker", "info"], capture_output=True, text=True)
        if info.returncode != 0:
            raise RuntimeError(f"--executor docker: the docker daemon is not reachable: {info.stderr.strip()[:300]}")
        self.out_dir, self.limits = out_dir, limits

    def fingerprint(self, instance: dict) -> dict:
        """The image, the spec and the limits (see `LocalExecutor.fingerprint`)."""
        return {"executor": self.name, "image": docker_image(instance["instance_id"]),
                "spec": _spec_or_error(instance), "limits": dataclasses.asdict(self.limits)}

    def evaluate(self, instance: dict, patch: str, log_dir: pathlib.Path) -> dict:
        """Apply the patch with the fallback chain and run the tests inside the instance image."""
        try:
            spec = specs.instance_spec(instance)
        except specs.SpecError as err:
            return {"status": "env_failed", "error": str(err)}
        work = fresh_workdir(self.out_dir, instance["instance_id"])
        (work / "model.patch").write_text(patch if patch.endswith("\n") else patch + "\n")
        (work / "test.patch").write_text(instance["test_patch"])
        chain = " || ".join(f"{cmd} /swerl/model.patch" for cmd in APPLY_CHAIN)
        apply = "true" if not patch.strip() else f"{{ {chain}; }} || {{ echo 'MODEL PATCH FAILED'; exit 4; }}"
        script = "\n".join(["source /opt/miniconda3/bin/activate", "conda activate testbed", "cd /testbed", apply,
                            eval_script(instance, spec, "/testbed", "/swerl/test.patch")])
        (work / "eval.sh").write_text(script)
        name = f"swerl-eval-{work.name.lower()}"
        argv = ["docker", "run", "--rm", "--name", name, "--network", "none", f"--memory={self.limits.memory_bytes}",
                f"--pids-limit={self.limits.processes}", "-v", f"{work}:/swerl", docker_image(instance["instance_id"]),
                "bash", "/swerl/eval.sh"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=self.limits.timeout_s)
        except subprocess.TimeoutExpired:
            # Killing the CLI leaves the container running: stop it by name.
            subprocess.run(["docker", "kill", name], capture_output=True)
            return {"status": "timeout", "error": f"tests ran past {self.limits.timeout_s:.0f}s"}
        log = done.stdout + done.stderr
        (log_dir / "test.log").write_text(f"{script}\n---\n{log}")
        if "MODEL PATCH FAILED" in log:
            return {"status": "patch_failed", "error": "no command of the fallback chain applied the patch"}
        report = grading.grade(instance, log)
        if not report["tests_ran"]:
            return {"status": "error", "error": f"tests did not start (exit {done.returncode})", **report}
        if report["runner_crashed"] and not report["resolved"]:
            return {"status": "error", "error": "the test runner crashed (INTERNALERROR): see test.log", **report}
        return {"status": "resolved" if report["resolved"] else "unresolved", **report}
