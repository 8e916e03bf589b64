"""Red-team: what the model sees of a repository and of its tools (issue 45, defects 5, 6 and 8).

Each test is an adversarial input a policy (or the repository it works in) can write: a file built to cost the host
memory when viewed, text that spells the chat template's role tokens, terminal control bytes in a tool's output,
paths that climb out of the host's scratch repository.
"""

from __future__ import annotations

import pathlib
import tracemalloc

import pytest

from swerl_jax.agent.tools import MAX_OBSERVATION, Workspace


def _workspace(tmp_path: pathlib.Path) -> tuple[Workspace, pathlib.Path]:
    repo = tmp_path / "work" / "repo"
    repo.mkdir(parents=True)
    return Workspace(repo, tmp_path / "work", sandbox=None), repo  # the editor runs on the host: no sandbox call


# --- defect 5: one editor call must not cost the host hundreds of MB -------------------------------------------

@pytest.mark.parametrize("view_range", ["", "1 -1", "4000000 4000100"])
def test_viewing_a_file_of_newlines_keeps_host_memory_bounded(tmp_path, view_range):
    """8 MiB of newlines is 8M lines: listing them all took +720 MB of host memory per view. Only the lines the
    8,000-character observation keeps may be formatted."""
    ws, repo = _workspace(tmp_path)
    (repo / "lines.txt").write_bytes(b"\n" * ((8 << 20) - 1))
    tracemalloc.start()
    try:
        out = ws.view("lines.txt", view_range)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, f"view held {peak >> 20} MiB of host memory"
    assert len(out) < MAX_OBSERVATION + 100
    first = 4000000 if view_range.startswith("4") else 1
    assert out.startswith(f"{first:6d}\t\n{first + 1:6d}\t\n")


def test_inserting_into_a_file_of_newlines_keeps_host_memory_bounded(tmp_path):
    """insert split the whole file into a list of lines too (and str_replace counted them that way)."""
    ws, repo = _workspace(tmp_path)
    (repo / "lines.txt").write_bytes(b"\n" * (4 << 20))
    tracemalloc.start()
    try:
        ws.insert("lines.txt", "2000000", "x = 1")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 96 << 20, f"insert held {peak >> 20} MiB of host memory"
    text = (repo / "lines.txt").read_text()
    assert text.index("x = 1") == 2000000 and len(text) == (4 << 20) + 6
