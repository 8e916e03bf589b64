"""Statements are written from the failing tests and never quote a line of the gold patch's changed code."""

from __future__ import annotations

from swerl_jax.tasks import mutations, statements

SOURCE = "def area(w, h):\n    return w * h\n\n\ndef double(x):\n    return x + x\n"
OUTPUT = """
=================================== FAILURES ===================================
__________________________________ test_area ___________________________________
tests/test_geo.py:4: in test_area
    assert area(2, 3) == 6
geo.py:2: in area
    return w + h
E   assert 5 == 6
_____________________________ TestGeo.test_square ______________________________
tests/test_geo.py:9: in test_square
    assert area(4, 4) == 16
E   assert 8 == 16
=========================== short test summary info ============================
FAILED tests/test_geo.py::test_area - assert 5 == 6
"""


def _bug() -> mutations.Mutation:
    return next(m for m in mutations.file_mutations("geo.py", SOURCE) if m.kind == "wrong_arithmetic"
                and m.function == "area")


def test_statement_quotes_tests_and_assertions_but_no_changed_line():
    m = _bug()
    f2p = ["tests/test_geo.py::test_area", "tests/test_geo.py::TestGeo::test_square"]
    text = statements.statement("acme/geo", f2p, OUTPUT, m.gold_patch())
    assert "tests/test_geo.py::test_area" in text and "assert 5 == 6" in text and "assert 8 == 16" in text
    assert statements.leaks(text, m.gold_patch()) == []
    for changed in statements.changed_lines(m.gold_patch()):  # both sides: `return w + h` and `return w * h`
        assert changed not in text
    assert "return w + h" in OUTPUT  # the traceback did show it: scrubbed, not absent


def test_a_rewriter_that_leaks_the_fix_is_ignored_and_one_that_does_not_is_used():
    m = _bug()
    f2p = ["tests/test_geo.py::test_area"]
    template = statements.statement("acme/geo", f2p, OUTPUT, m.gold_patch())
    leaky = statements.statement("acme/geo", f2p, OUTPUT, m.gold_patch(), lambda t: t + "\nFix: return w * h\n")
    assert leaky == template
    calls = []
    clean = statements.statement("acme/geo", f2p, OUTPUT, m.gold_patch(),
                                 statements.client_rewriter(lambda p: calls.append(p) or "area(2, 3) is 5, not 6"))
    assert clean == "area(2, 3) is 5, not 6" and "tests/test_geo.py::test_area" in calls[0]


def test_sampler_generate_encodes_samples_once_and_decodes():
    from types import SimpleNamespace

    class Client:
        def __init__(self):
            self.asked = []

        def generate(self, prompts, sampling):
            self.asked.append((prompts, sampling))
            return [[SimpleNamespace(tokens=[7, 8], text=None)]]

    tok = SimpleNamespace(encode=lambda text: [len(text)], decode=lambda ids: "ids " + " ".join(map(str, ids)))
    client = Client()
    assert statements.sampler_generate(client, tok, "greedy")("abc") == "ids 7 8"
    assert client.asked == [([[3]], "greedy")]
