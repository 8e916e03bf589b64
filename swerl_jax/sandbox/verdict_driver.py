"""The verdict driver: run inside the sandbox by the host's interpreter as `python -I -S verdict_driver.py TASKS MARK
HEAD TAIL` (standard library only; never imported by the project). `sandbox/verdict.py` says what it guarantees and
hands this file to the sandbox as a read-only input."""

import ctypes
import importlib
import importlib.util
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import time
import traceback
import types
import unittest

MARK = sys.argv[2].encode()
HEAD, TAIL = int(sys.argv[3]), int(sys.argv[4])
# Set by the host when the sandbox runs this driver as a uid of its own (Sandbox.run(supervisor=True)): every test
# child drops to this uid and every capability before any repository code runs, so it cannot signal this driver.
TEST_UID = os.environ.get("SWERL_TEST_UID")
BEAT_S = 1.0  # a heartbeat record this often while a task's tests run (verdict.BEAT_S)
try:  # non-dumpable first: no other process of the sandbox may read this one's memory or descriptors
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
except Exception:
    pass
# The nonce lives only in this bytearray (never a str or bytes copy): a forked child zeroes it before running tests.
RAW, NONCE = bytearray(16), bytearray(32)
with open("/dev/urandom", "rb", buffering=0) as f:
    f.readinto(RAW)
for k in range(16):
    NONCE[2 * k], NONCE[2 * k + 1] = b"0123456789abcdef"[RAW[k] >> 4], b"0123456789abcdef"[RAW[k] & 15]
RAW[:] = bytes(16)


def emit(record):
    sys.stdout.flush()
    body = json.dumps(record).encode()
    os.writev(1, [MARK, b'{"nonce": "', NONCE, b'", ', body[1:], b"\n"])


def reclaim(folder):
    """Give the driver back every folder under `folder`: a task's code runs as the driver's uid and can chmod them
    (the work dir itself to 0500, a folder to 0) so that the next task's clean or lay-out fails."""
    os.chmod(folder, 0o700)
    for path, dirs, _ in os.walk(folder):
        for name in dirs:
            sub = os.path.join(path, name)
            if not os.path.islink(sub):
                os.chmod(sub, 0o700)


def clean(folder):
    try:
        reclaim(folder)
    except OSError:
        pass
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        except BaseException:  # unreadable or nested too deep for Python's recursion: rm copes
            subprocess.run(["rm", "-rf", "--", path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def lay_out(root, files):
    os.mkdir(root)
    for path, text in files.items():
        parts = path.split("/")
        if path.startswith("/") or "\\" in path or "\0" in path or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"unsafe path {path!r}")
        folder = root
        for part in parts[:-1]:
            folder = os.path.join(folder, part)
            if not os.path.isdir(folder):
                os.mkdir(folder)
        fd = os.open(os.path.join(root, path), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f:
            f.write(text)
    for folder, _, names in os.walk(root):  # regular packages: an installed `tests` package cannot shadow ours
        if folder != root and any(n.endswith(".py") for n in names) and "__init__.py" not in names:
            os.close(os.open(os.path.join(folder, "__init__.py"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))


class Recorder(unittest.TextTestResult):
    """Each test id's outcome; a test with any failing subtest fails."""

    outcomes = {}

    def addSuccess(self, test):
        super().addSuccess(test)
        self.outcomes.setdefault(test.id(), "ok")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.outcomes[test.id()] = "fail"

    def addError(self, test, err):
        super().addError(test, err)
        self.outcomes[test.id()] = "error"

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.outcomes[test.id()] = "skip"

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self.outcomes[test.id()] = "xfail"

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self.outcomes[test.id()] = "xpass"

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            self.outcomes[test.id()] = "fail"


class Forged(Exception):
    """The tests the child would run are not the test file's own, or unittest changed under them."""


def code_objects(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from code_objects(const)


def load_tests(root, module, real_case):
    """The test module loaded from its file under our own reference (a module under test that swaps
    sys.modules[name] during the import is not what runs), and its tests, each checked: a real TestCase of a class
    defined in that module, every function of its classes compiled from the test file itself."""
    path = os.path.join(root, *module.split(".")) + ".py"
    with open(path, "rb") as f:
        trusted = set(code_objects(compile(f.read(), path, "exec", dont_inherit=True)))
    parent = module.rpartition(".")[0]
    if parent:
        importlib.import_module(parent)
    spec = importlib.util.spec_from_file_location(module, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module] = mod
    spec.loader.exec_module(mod)
    suite = unittest.defaultTestLoader.loadTestsFromModule(mod)
    pending = [suite]
    while pending:
        item = pending.pop()
        if isinstance(item, unittest.TestSuite):
            pending.extend(item)
            continue
        cls = type(item)
        if not isinstance(item, real_case) or cls.__module__ != module or getattr(mod, cls.__name__, None) is not cls:
            raise Forged(f"{item!r} is not a test case of {module}")
        for klass in cls.__mro__:
            if klass.__module__ != module:
                continue
            for name, value in vars(klass).items():
                code = getattr(value, "__code__", None)
                if isinstance(value, types.FunctionType) and code not in trusted:
                    raise Forged(f"{klass.__qualname__}.{name} is not the test file's own code")
    return suite


def unittest_state():
    """What the run's verdict rests on, by identity: the attributes of unittest's case, suite, result and runner
    classes and of the driver's own result class."""
    return {(cls.__name__, k): v for cls in (unittest.TestCase, unittest.TestSuite, unittest.TestResult,
                                            unittest.TextTestResult, unittest.TextTestRunner, Recorder)
            for k, v in vars(cls).items()}


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_to(uid):
    """This process becomes `uid` (its group too, no supplementary groups) with no capability left, checked in
    /proc: the driver's uid differs, so nothing this process runs can signal, trace or read the driver."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL
    if libc.capset(ctypes.byref(_CapHeader(0x20080522, 0)), (_CapData * 2)()) != 0:  # _LINUX_CAPABILITY_VERSION_3
        raise OSError(ctypes.get_errno(), "capset")
    with open("/proc/self/status") as f:
        status = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
    held = [k for k in ("CapInh", "CapPrm", "CapEff", "CapAmb") if int(status[k].strip(), 16)]
    if held or status["Uid"].split() != [str(uid)] * 4:
        raise OSError(f"the test child kept {held or status['Uid']}")


def child(root, module, out_w, res_w, token, ok_code, files=None):
    code = 2
    try:
        NONCE[:] = bytes(len(NONCE))  # the nonce is gone from this process before any repository code runs
        os.setsid()
        os.dup2(out_w, 1)
        os.dup2(out_w, 2)
        fd = random.SystemRandom().randrange(64, 1000)  # not at a guessable number (it can still be found)
        os.dup2(res_w, fd)
        os.closerange(3, fd)  # only stdin, the output pipe and the result pipe: nothing else of the driver's
        os.closerange(fd + 1, 1 << 16)
        if TEST_UID is not None:
            drop_to(int(TEST_UID))
        if files is not None:  # a laid-out task, by the test uid: nothing of the one before it is left
            for folder in (os.path.dirname(root), "/tmp", "/dev/shm"):
                clean(folder)
            lay_out(root, files)
        os.chdir(root)
        sys.path.append(root)  # after the standard library: the repository cannot shadow it
        os.environ["HOME"] = root
        before, real_case, runner = unittest_state(), unittest.TestCase, unittest.TextTestRunner
        suite = load_tests(root, module, real_case)
        result = runner(stream=sys.stderr, verbosity=2, resultclass=Recorder).run(suite)
        sys.stdout.flush()
        sys.stderr.flush()
        after = unittest_state()
        if after.keys() != before.keys() or any(after[k] is not v for k, v in before.items()):
            raise Forged("unittest's classes changed during the run")
        os.write(fd, json.dumps({"token": token, "outcomes": Recorder.outcomes, "ran": result.testsRun}).encode())
        code = ok_code
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def run(root, module, timeout, files=None):
    sys.stdout.flush()
    out_r, out_w = os.pipe()
    res_r, res_w = os.pipe()
    # Per task, known to the child: a results message counts only with this token and this exit status, so a
    # module that writes a made-up message to every descriptor and exits must first find them in the runner's frames.
    token, ok_code = f"{random.SystemRandom().getrandbits(128):032x}", random.SystemRandom().randrange(10, 100)
    pid = os.fork()
    if pid == 0:
        os.close(out_r)
        os.close(res_r)
        child(root, module, out_w, res_w, token, ok_code, files)
    os.close(out_w)
    os.close(res_w)
    head, tail, total, status, timed_out, res = bytearray(), bytearray(), 0, None, False, bytearray()
    open_fds = [out_r, res_r]
    deadline = time.monotonic() + timeout
    next_beat = time.monotonic() + BEAT_S
    while True:
        if time.monotonic() >= next_beat:  # the host's sign of life: a stopped or killed driver goes quiet
            emit({"beat": True})
            next_beat = time.monotonic() + BEAT_S
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        ready = select.select(open_fds, [], [], min(left, 0.05))[0] if open_fds else []
        for fd in ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                open_fds.remove(fd)
            elif fd == res_r:
                res += chunk[:(1 << 20) - len(res)]
            else:
                total += len(chunk)
                room = HEAD - len(head)
                head += chunk[:max(room, 0)]
                tail = (tail + chunk[max(room, 0):])[-TAIL:]
        if not ready:
            if status is not None:
                break  # the child exited and its pipes are drained; a process it left may hold them
            done, waited = os.waitpid(pid, os.WNOHANG)
            if done:
                status = waited
            elif not open_fds:
                time.sleep(0.005)
    os.close(out_r)
    os.close(res_r)
    try:
        os.kill(-1, signal.SIGKILL)  # every other process of the sandbox: the child, anything it started
    except ProcessLookupError:
        pass
    if status is None:
        status = os.waitpid(pid, 0)[1]
    out = head.decode("utf-8", "replace")
    if total > len(head) + len(tail):
        out += f"\n[... {total - len(head) - len(tail)} bytes cut ...]\n"
    out += tail.decode("utf-8", "replace")
    rc = os.waitstatus_to_exitcode(status)
    outcomes = None
    if rc == ok_code and not timed_out:  # a child that did not finish its run reported nothing, whatever it wrote
        try:
            message = json.loads(bytes(res))
            if message["token"] == token:
                outcomes = {str(k): str(v) for k, v in dict(message["outcomes"]).items()}
                rc = 0
        except Exception:
            outcomes = None
    return rc, out, timed_out, outcomes


def main():
    sys.dont_write_bytecode = True
    with open(sys.argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    emit({"hello": True})  # the announcement: the first record line, before any repository code runs
    work = os.getcwd()
    for i, task in enumerate(spec["tasks"]):
        try:
            if task.get("files") is not None:  # a laid-out task: nothing of the one before it is left
                root = os.path.join(work, f"t{i}-{random.SystemRandom().getrandbits(64):016x}")  # unguessable
            else:
                root = task["root"]
            rc, out, timed_out, outcomes = run(root, task["module"], spec["timeout"], task.get("files"))
        except Exception as e:
            rc, out, timed_out, outcomes = 3, f"verdict driver: {e!r}", False, None
        emit({"i": i, "expected": task["expected"], "outcomes": outcomes, "rc": rc, "timed_out": timed_out,
              "out": out})


if __name__ == "__main__":
    main()
