"""The package index as it was on an instance's date: a local, read-only view of PyPI without later uploads.

SWE-bench's official images froze each environment's unpinned requirements when they were built; resolving them
against today's index gives packages the repository never saw (sphinx 3.1 with docutils 0.23, which dropped
`docutils.utils.roman`). Here every unpinned requirement of an environment build and of an instance's install
resolves against the index as it was at the instance's `created_at`: pip is pointed (PIP_INDEX_URL, understood by
every pip, old ones included) at a small HTTP server on 127.0.0.1 that serves PyPI's simple pages (PEP 691 JSON,
upload times from PEP 700) as PEP 503 HTML listing only the files uploaded before the cut-off. Versions the spec
pins (`name==version`) are listed whatever their date: the official harness pinned them when it built its images;
the build tooling (`TOOLING`), which runs on the spec's interpreter, is listed as of `TOOLING_CUTOFF` instead.

    url = shared_index().url(cutoff="2020-05-27T12:00:00Z", pins={"setuptools": "68.0.0"})
"""

from __future__ import annotations

import datetime as dt
import hashlib
import html
import http.server
import json
import os
import re
import threading
import urllib.error
import urllib.request

MODES = ("created_at", "images", "off")
UPSTREAM = os.environ.get("SWERL_JAX_INDEX_UPSTREAM", "https://pypi.org/simple")
# A pinned requirement in a spec's strings: `name==version` (pip_packages, packages, sed'ed pins in pre_install).
PIN = re.compile(r"(?<![\w.-])([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([0-9][A-Za-z0-9.+!_-]*)")
_SUFFIXES = (".tar.gz", ".tar.bz2", ".tar.xz", ".tgz", ".zip", ".egg", ".exe", ".msi", ".rpm", ".tar")


# Build tooling, which pip's isolated builds fetch to run on the spec's interpreter, and what that tooling needs, is
# listed as of the day SWE-bench's containerized harness built its images (2024-06-27: their builds, and every
# unpinned requirement in them, got that day's versions), or of the instance's date when that is later. Not the
# instance's date: the spec's interpreter is often newer than the instance (pytest-5413, 2019: setuptools 41 imports
# HTMLParser.unescape, gone in Python 3.9). Not today's: today moves, so an env's key would not say what it holds,
# and today's tooling broke the same instance (setuptools 82 ships no pkg_resources, and with setuptools-scm's own
# needs dated out pip backtracked it to 6.0.1, which imports pkg_resources). The tooling's needs (tomli, packaging,
# typing-extensions for setuptools-scm 8) come along: with them dated, pip backtracks setuptools-scm again, to a
# release that reads pkg_resources.packaging, gone from 2024's setuptools. They are runtime requirements of some
# instances too, which then get 2024's versions, as the official images did.
TOOLING = frozenset({"setuptools", "setuptools-scm", "wheel", "pip", "tomli", "packaging", "typing-extensions"})
TOOLING_CUTOFF = "2024-06-27T00:00:00Z"


def tooling_rule() -> dict:
    """What the view lists at the tooling's date instead of the instance's: part of every dated env's and result's
    key, since it changes what a build resolves."""
    return {"tooling_cutoff": TOOLING_CUTOFF, "tooling": sorted(TOOLING)}


class CutoffError(ValueError):
    """A cut-off that cannot be applied (an unknown mode, an instance without a usable created_at)."""


# pip's config files, in the order pip reads them (later wins); a dated pip reads none (their find-links and extra
# indexes list files of any date) but keeps their TLS settings.
PIP_CONFIG_FILES = ("/etc/pip.conf", "/etc/xdg/pip/pip.conf", "~/.pip/pip.conf", "~/.config/pip/pip.conf")
TLS_KEYS = ("cert", "client-cert", "trusted-host")


def tls_settings(env: dict[str, str]) -> dict[str, str]:
    """PIP_CERT / PIP_CLIENT_CERT / PIP_TRUSTED_HOST from this process's environment or pip's config files, for a pip
    that runs with PIP_CONFIG_FILE=/dev/null (a sandbox's pip too: its environment is cleared)."""
    import configparser

    found: dict[str, str] = {}
    for path in PIP_CONFIG_FILES:
        parser = configparser.ConfigParser()
        try:
            parser.read(os.path.expanduser(path))
        except configparser.Error:
            continue
        for section in ("global", "install"):
            for key in TLS_KEYS:
                if parser.has_option(section, key):
                    found[f"PIP_{key.upper().replace('-', '_')}"] = parser.get(section, key)
    for name in [f"PIP_{k.upper().replace('-', '_')}" for k in TLS_KEYS]:
        value = env.get(name) or os.environ.get(name)
        if value:
            found[name] = value
    return found


def normalize(name: str) -> str:
    """PEP 503's project name normalization."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_time(text: str) -> dt.datetime:
    """An ISO-8601 time (`Z` or an offset; naive means UTC) as an aware UTC datetime."""
    when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return (when if when.tzinfo else when.replace(tzinfo=dt.UTC)).astimezone(dt.UTC)


# First releases of the interpreters SWE-bench's specs name (python.org). A package released before its interpreter
# was made for an older one: pytest-5413 and -5495 (2019-06, spec Python 3.9) got importlib_metadata 0.17 / 0.18,
# which break on 3.9's importlib.metadata (AttributeError: 'str' object has no attribute 'name') before any test.
PYTHON_RELEASED = {"3.5": "2015-09-13", "3.6": "2016-12-23", "3.7": "2018-06-27", "3.8": "2019-10-14",
                   "3.9": "2020-10-05", "3.10": "2021-10-04", "3.11": "2022-10-24", "3.12": "2023-10-02",
                   "3.13": "2024-10-07"}


def instance_cutoff(instance: dict, mode: str, python: str | None = None) -> str | None:
    """The cut-off for an instance under `mode` ("created_at": its created_at as `YYYY-MM-DDTHH:MM:SSZ`, or the
    release of the spec's interpreter `python` when that is later; "images": `TOOLING_CUTOFF` for every
    instance, what the official images froze when they were built; "off": None, today's index); CutoffError
    naming the mode or the instance's field."""
    if mode not in MODES:
        raise CutoffError(f"index cut-off {mode!r}: must be one of {MODES}")
    if mode == "off":
        return None
    if mode == "images":  # every Lite and Verified instance predates the build day; a later one keeps its own date
        raw = instance.get("created_at")
        try:
            return max(TOOLING_CUTOFF, parse_time(str(raw)).strftime("%Y-%m-%dT%H:%M:%SZ"), key=parse_time)
        except ValueError:
            return TOOLING_CUTOFF
    raw = instance.get("created_at")
    try:
        when = parse_time(str(raw))
        if python in PYTHON_RELEASED:
            when = max(when, parse_time(PYTHON_RELEASED[python] + "T00:00:00Z"))
        return when.strftime("%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        raise CutoffError(f"{instance.get('instance_id', '?')}: created_at {raw!r} is not an ISO time, so the index "
                          "cut-off has no date (fix the instance, or --index-cutoff off)") from None


def spec_pins(*texts: object) -> dict[str, str]:
    """{normalized name: version} of every `name==version` in the given spec values (strings, lists, dicts)."""
    pins: dict[str, str] = {}

    def strings(value: object) -> list[str]:  # the texts themselves: JSON-escaping a newline hides the next name
        if isinstance(value, str):
            return [value]
        if isinstance(value, dict):
            return [s for v in value.values() for s in strings(v)]
        if isinstance(value, (list, tuple)):
            return [s for v in value for s in strings(v)]
        return []

    for text in strings(list(texts)):
        for name, version in PIN.findall(text):
            pins[normalize(name)] = version
    return pins


def file_version(filename: str, project: str) -> str | None:
    """The version in a distribution's file name (wheel, sdist, egg), or None when it cannot be told."""
    if filename.endswith(".whl"):
        parts = filename[:-4].split("-")
        return parts[1] if len(parts) >= 5 else None
    stem = next((filename[: -len(s)] for s in _SUFFIXES if filename.endswith(s)), None)
    if stem is None:
        return None
    if stem.endswith(".egg") or filename.endswith(".egg"):
        stem = stem.removesuffix(".egg")
    # The project part may hold dashes ("sphinxcontrib-applehelp-1.0.7"): cut as many fields as the name has.
    fields = stem.split("-")
    for cut in range(1, len(fields)):
        if normalize("-".join(fields[:cut])) == normalize(project):
            return fields[cut]
    return None


def visible_files(page: dict, project: str, cutoff: str, pins: dict[str, str]) -> list[dict]:
    """The files of a PEP 691 project page the index showed before `cutoff`, plus the pinned version's files."""
    limit, pinned = parse_time(cutoff), pins.get(normalize(project))
    if normalize(project) in TOOLING:
        limit = max(limit, parse_time(TOOLING_CUTOFF))
    kept = []
    for entry in page.get("files", []):
        uploaded = entry.get("upload-time")
        if uploaded is None or parse_time(uploaded) < limit:  # no time on record: PyPI has one for every file
            kept.append(entry)
        elif pinned is not None and file_version(entry["filename"], project) == pinned:
            kept.append(entry)
    return kept


def render(project: str, files: list[dict]) -> str:
    """A PEP 503 simple page (hash fragments, data-requires-python, data-yanked), which pip 9 onwards reads."""
    rows = []
    for entry in files:
        href = entry["url"]
        digests = entry.get("hashes") or {}
        if "sha256" in digests:
            href += f"#sha256={digests['sha256']}"
        attrs = f' href="{html.escape(href, quote=True)}"'
        if entry.get("requires-python"):
            attrs += f' data-requires-python="{html.escape(entry["requires-python"], quote=True)}"'
        yanked = entry.get("yanked")
        if yanked:
            attrs += f' data-yanked="{html.escape(yanked if isinstance(yanked, str) else "", quote=True)}"'
        rows.append(f"<a{attrs}>{html.escape(entry['filename'])}</a><br/>")
    return (f"<!DOCTYPE html>\n<html><head><title>Links for {html.escape(project)}</title></head><body>\n"
            + "\n".join(rows) + "\n</body></html>\n")


class CutoffIndex:
    """The local index server: `url(cutoff, pins)` names a view; pages are fetched from `upstream` once each."""

    def __init__(self, upstream: str = UPSTREAM):
        self.upstream = upstream.rstrip("/")
        self._views: dict[str, tuple[str, dict[str, str]]] = {}
        self._pages: dict[str, dict | None] = {}
        self._lock = threading.Lock()
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                status, body = index.page(self.path)
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # pip's own log says what it fetched
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="index-cutoff", daemon=True).start()

    @property
    def port(self) -> int:
        """The port it listens on (127.0.0.1 only)."""
        return self._server.server_address[1]

    def url(self, cutoff: str, pins: dict[str, str] | None = None) -> str:
        """An index URL (for PIP_INDEX_URL) that lists what PyPI listed before `cutoff`, and the pinned versions."""
        pins = dict(sorted((pins or {}).items()))
        view = hashlib.sha256(json.dumps([cutoff, pins]).encode()).hexdigest()[:16]
        with self._lock:
            self._views[view] = (cutoff, pins)
        return f"http://127.0.0.1:{self.port}/{view}/simple/"

    def _upstream_page(self, project: str) -> dict | None:
        with self._lock:
            if project in self._pages:
                return self._pages[project]
        request = urllib.request.Request(f"{self.upstream}/{project}/",
                                         headers={"Accept": "application/vnd.pypi.simple.v1+json"})
        try:
            with urllib.request.urlopen(request, timeout=120) as answer:
                page = json.load(answer)
        except urllib.error.HTTPError as err:
            if err.code != 404:
                raise
            page = None
        with self._lock:
            self._pages[project] = page
        return page

    def page(self, path: str) -> tuple[int, str]:
        """(HTTP status, body) for a request path `/<view>/simple/<project>/`."""
        parts = [p for p in path.split("?")[0].split("/") if p]
        if len(parts) != 3 or parts[1] != "simple" or parts[0] not in self._views:
            return 404, "not a project page of a known cut-off view\n"
        cutoff, pins = self._views[parts[0]]
        project = normalize(parts[2])
        try:
            page = self._upstream_page(project)
        except (OSError, ValueError) as err:  # pip then says it could not fetch the page (and reach.py names it)
            return 502, f"upstream {self.upstream}/{project}/: {err}\n"
        if page is None:
            return 404, f"no project {project}\n"
        return 200, render(project, visible_files(page, project, cutoff, pins))


_shared: CutoffIndex | None = None
_shared_lock = threading.Lock()


def shared_index() -> CutoffIndex:
    """This process's one index server (started on first use; a daemon thread)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = CutoffIndex()
        return _shared
