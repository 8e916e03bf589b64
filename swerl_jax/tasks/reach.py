"""Instances out of reach of this machine: what their grading needs that it lacks, and what would fix it.

An instance is out of reach when no patch could change its grade here: its repository is not in --repos, its
environment needs an interpreter, a compiler, conda or the package index the machine lacks, or its tests need the
network the sandbox never gives. The harness counts such instances apart (never as unresolved, never in the rate's
denominator) and names each with its reason and fix in one line. Pure: no imports from the rest of the package.
"""

from __future__ import annotations

import re

STATUS = "out_of_reach"

# Signs, in a test or install log, that a command needed the network it did not have.
NETWORK_SIGNS = re.compile(
    r"Temporary failure in name resolution|Name or service not known|NewConnectionError|Max retries exceeded"
    r"|Network is unreachable|nodename nor servname|getaddrinfo failed"
)
# A host other than the package index that an install tried to reach (git submodules, URL requirements).
HOST_SIGN = re.compile(r"Could not resolve host: ([\w.-]+)|unable to access 'https?://([\w.-]+)/")
# Signs that a build wanted a C/C++ compiler the machine does not have (distutils/setuptools and pip's wording).
COMPILER_SIGNS = re.compile(
    r"command '[\w./+-]*(?:gcc|cc|g\+\+|c\+\+|clang)' failed: No such file or directory"
    r"|unable to execute '[\w./+-]*(?:gcc|cc|g\+\+|clang)': No such file or directory"
    r"|error: Microsoft Visual C\+\+|(?:gcc|cc|g\+\+): (?:command )?not found"
)


# Signs that a clone lacks objects a checkout needs (a fetched snapshot leaves its largest files out).
MISSING_OBJECTS = re.compile(r"unable to read [0-9a-f]{40}|possible repository corruption|missing (?:blob|tree) "
                             r"[0-9a-f]{40}|did not receive expected object|bad object [0-9a-f]{40}")


class OutOfReach(RuntimeError):
    """What the machine lacks for an instance (`reason`) and what would give it (`fix`)."""

    def __init__(self, reason: str, fix: str):
        super().__init__(line(reason, fix))
        self.reason, self.fix = reason, fix

    def result(self) -> dict:
        """The harness's per-instance result for it."""
        return {"status": STATUS, "reason": self.reason, "fix": self.fix, "error": line(self.reason, self.fix)}


def line(reason: str, fix: str) -> str:
    """`REASON; fix: FIX`: how an out-of-reach instance is named everywhere (report, stdout, calibration)."""
    return f"{reason}; fix: {fix}"


def missing_repo(repo: str, repos_dir: str) -> OutOfReach:
    """The repository is not among the clones in --repos."""
    name = repo.replace("/", "__")
    return OutOfReach(f"{repo} is not in --repos {repos_dir}",
                      f"git clone --mirror https://github.com/{repo} {repos_dir}/{name}.git (or a {name}.bundle)")


def incomplete_clone(text: str, repo: str, repos_dir: str) -> OutOfReach | None:
    """The clone in --repos lacks objects the checkout needed (git's words in `text`), or None."""
    if not MISSING_OBJECTS.search(text):
        return None
    name = repo.replace("/", "__")
    return OutOfReach(f"the clone of {repo} in --repos {repos_dir} lacks objects its base commit needs (a partial "
                      "snapshot)", f"a complete clone: git clone --mirror https://github.com/{repo} "
                      f"{repos_dir}/{name}.git")


def from_log(text: str, step: str = "build") -> OutOfReach | None:
    """The lack a failed step's log shows (a compiler; the network: the package index for an environment build or
    install `step`, the tests' own for `step="tests"`), or None when the log shows neither (a real failure)."""
    if step != "tests" and COMPILER_SIGNS.search(text):  # a test may compile on purpose and fail
        return OutOfReach("building it needs a C compiler, which this machine lacks",
                          "install one (apt-get install gcc g++) and grade it again")
    found = HOST_SIGN.search(text)
    host = (found.group(1) or found.group(2)) if found else ""
    if host and step != "tests" and not host.endswith(("pypi.org", "pythonhosted.org")):
        return OutOfReach(f"its install fetches from {host} (e.g. astropy 1.3's astropy_helpers git submodule), "
                          f"which this machine cannot reach", f"a machine that reaches {host}, or the source "
                          "vendored into the clone")
    if NETWORK_SIGNS.search(text):
        if step == "tests":
            return OutOfReach("its tests need the network, which the sandbox never gives",
                              "none here (model code runs in the sandbox); grade it where its tests may reach "
                              "their hosts")
        return OutOfReach("its environment needs the package index, which this machine cannot reach",
                          "a machine that reaches PyPI, or a local index or wheelhouse (PIP_INDEX_URL, "
                          "PIP_FIND_LINKS)")
    return None


def report_lines(report: dict, shown: int = 5) -> list[str]:
    """One line per distinct (reason, fix): `out of reach (N): REASON; fix: FIX: id, id, ...` (every id and its
    own line are in report.json's `out_of_reach`)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for iid, why in report.get("out_of_reach", {}).items():
        groups.setdefault((why["reason"], why["fix"]), []).append(iid)
    lines = []
    for (reason, fix), ids in groups.items():
        more = f" and {len(ids) - shown} more (report.json: out_of_reach)" if len(ids) > shown else ""
        lines.append(f"out of reach ({len(ids)}): {line(reason, fix)}: {', '.join(ids[:shown])}{more}")
    return lines
