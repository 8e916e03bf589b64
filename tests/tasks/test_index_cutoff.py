"""The index as of an instance's date (issue 49 item 1): which files a cut-off view lists, and the local server."""

import http.server
import json
import threading
import urllib.request

import pytest

from swerl_jax.tasks import index_cutoff

PAGE = {"meta": {"api-version": "1.1"}, "files": [
    {"filename": "docutils-0.16.tar.gz", "url": "https://files.example/docutils-0.16.tar.gz",
     "hashes": {"sha256": "ab"}, "requires-python": ">=2.7, !=3.0.*", "upload-time": "2019-12-24T16:32:05Z",
     "yanked": False},
    {"filename": "docutils-0.17-py2.py3-none-any.whl", "url": "https://files.example/docutils-0.17-py2.py3-none-any.whl",
     "hashes": {"sha256": "cd"}, "requires-python": None, "upload-time": "2021-04-07T08:00:00.123456Z",
     "yanked": False},
    {"filename": "docutils-0.23.tar.gz", "url": "https://files.example/docutils-0.23.tar.gz", "hashes": {},
     "requires-python": ">=3.9", "upload-time": "2026-01-01T00:00:00Z", "yanked": "broken"}]}


def test_a_cutoff_view_lists_what_was_uploaded_before_it_and_the_pinned_versions():
    names = [f["filename"] for f in index_cutoff.visible_files(PAGE, "docutils", "2020-05-27T12:00:00Z", {})]
    assert names == ["docutils-0.16.tar.gz"]  # sphinx-7686's date: 0.16, never today's 0.23
    pinned = index_cutoff.visible_files(PAGE, "docutils", "2020-05-27T12:00:00Z", {"docutils": "0.23"})
    assert [f["filename"] for f in pinned] == ["docutils-0.16.tar.gz", "docutils-0.23.tar.gz"]


def test_build_tooling_is_listed_as_of_the_official_images_build_day():
    """pytest-5413 (2019): dated setuptools 41 fails on the spec's Python 3.9; today's setuptools (82, no
    pkg_resources) failed too, beside the setuptools-scm 6.0.1 pip backtracked to, its tomli dated out. The
    tooling of 2024-06-27, and what it needs, is what the official images' builds used; a later instance gets its
    own date's; everything else keeps the instance's date."""
    files = [{**PAGE["files"][0], "filename": f"setuptools-{v}.tar.gz", "upload-time": t}
             for v, t in (("41.0.1", "2019-04-23T00:00:00Z"), ("70.1.0", "2024-06-19T00:00:00Z"),
                          ("71.0.0", "2024-07-16T00:00:00Z"), ("82.0.1", "2026-03-01T00:00:00Z"))]
    for cutoff, newest in (("2019-06-06T00:00:00Z", "70.1.0"), ("2024-08-01T00:00:00Z", "71.0.0")):
        seen = [f["filename"] for f in index_cutoff.visible_files({"files": files}, "setuptools", cutoff, {})]
        assert seen[-1] == f"setuptools-{newest}.tar.gz" and len(seen) == 2 + (newest == "71.0.0")
    scm = [{**files[0], "filename": "setuptools_scm-10.3.4.tar.gz", "upload-time": "2026-03-01T00:00:00Z"}]
    assert index_cutoff.visible_files({"files": scm}, "setuptools_scm", "2019-06-06T00:00:00Z", {}) == []
    deps = [{**files[0], "filename": "tomli-2.0.1.tar.gz", "upload-time": "2022-02-08T00:00:00Z"}]
    assert len(index_cutoff.visible_files({"files": deps}, "tomli", "2019-06-06T00:00:00Z", {})) == 1  # scm 8 needs it
    other = [{**files[0], "filename": "docutils-0.17.tar.gz", "upload-time": "2021-04-07T00:00:00Z"}]
    assert index_cutoff.visible_files({"files": other}, "docutils", "2019-06-06T00:00:00Z", {}) == []


def test_a_cutoff_view_renders_pep_503():
    pinned = index_cutoff.visible_files(PAGE, "docutils", "2020-05-27T12:00:00Z", {"docutils": "0.23"})
    html = index_cutoff.render("docutils", pinned)
    assert 'href="https://files.example/docutils-0.16.tar.gz#sha256=ab"' in html
    assert 'data-requires-python="&gt;=2.7, !=3.0.*"' in html and 'data-yanked="broken"' in html


def test_versions_pins_and_the_instance_date():
    assert index_cutoff.file_version("sphinxcontrib-applehelp-1.0.7.tar.gz", "sphinxcontrib_applehelp") == "1.0.7"
    assert index_cutoff.file_version("numpy-1.25.2-cp39-cp39-manylinux_2_17_x86_64.whl", "numpy") == "1.25.2"
    spec = {"pip_packages": ["tox==4.16.0", "flake8-comprehensions", "Jinja2==3.0.3"],
            "pre_install": ["sed -i 's/requires = \\[\"setuptools\",/requires = \\[\"setuptools==68.0.0\",/' x"]}
    assert index_cutoff.spec_pins(spec) == {"tox": "4.16.0", "jinja2": "3.0.3", "setuptools": "68.0.0"}
    # a requirements file's pins, every line (flask-4992's env failed on babel==2.12.1, pinned at the env commit
    # a month after the instance: the escaped newline of the JSON hid every name after the first line)
    assert index_cutoff.spec_pins(spec, "alabaster==0.7.13\nbabel==2.12.1\n") == {
        "tox": "4.16.0", "jinja2": "3.0.3", "setuptools": "68.0.0", "alabaster": "0.7.13", "babel": "2.12.1"}
    inst = {"instance_id": "i", "created_at": "2020-05-27T12:00:31Z"}
    assert index_cutoff.instance_cutoff(inst, "created_at") == "2020-05-27T12:00:31Z"
    assert index_cutoff.instance_cutoff({"created_at": "2020-05-27 12:00:31"}, "created_at") == "2020-05-27T12:00:31Z"
    assert index_cutoff.instance_cutoff(inst, "off") is None
    # never before the spec's interpreter existed (pytest-5413: 2019-06, Python 3.9)
    assert index_cutoff.instance_cutoff(inst, "created_at", "3.9") == "2020-10-05T00:00:00Z"
    assert index_cutoff.instance_cutoff(inst, "created_at", "3.6") == "2020-05-27T12:00:31Z"
    assert index_cutoff.instance_cutoff(inst, "off", "3.9") is None
    # images: the official images' build day for every instance (a later instance keeps its own date)
    assert index_cutoff.instance_cutoff(inst, "images", "3.9") == index_cutoff.TOOLING_CUTOFF == "2024-06-27T00:00:00Z"
    assert index_cutoff.instance_cutoff({"created_at": "2025-01-02T03:04:05Z"}, "images") == "2025-01-02T03:04:05Z"
    with pytest.raises(index_cutoff.CutoffError, match=r"index cut-off 'of': must be one of"):
        index_cutoff.instance_cutoff(inst, "of")
    with pytest.raises(index_cutoff.CutoffError, match=r"i: created_at None is not an ISO time.*--index-cutoff off"):
        index_cutoff.instance_cutoff({"instance_id": "i"}, "created_at")


def test_the_local_index_serves_a_dated_view_of_its_upstream(tmp_path):
    class Upstream(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = json.dumps(PAGE).encode() if self.path == "/docutils/" else b"{}"
            self.send_response(200 if self.path == "/docutils/" else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    try:
        index = index_cutoff.CutoffIndex(f"http://127.0.0.1:{upstream.server_address[1]}")
        url = index.url("2020-05-27T12:00:00Z", {"tox": "4.16.0"})
        assert url.startswith(f"http://127.0.0.1:{index.port}/") and url.endswith("/simple/")
        page = urllib.request.urlopen(url + "Docutils/", timeout=10).read().decode()
        assert "docutils-0.16.tar.gz" in page and "0.17" not in page and "0.23" not in page
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(url + "nothere/", timeout=10)
    finally:
        upstream.shutdown()
