"""Out of reach before any generation (issue 57 item 7: Agentless generated for 1m26s for two instances the harness
then found out of reach). The static check runs end to end in tests/eval/test_run.py; here the empty-patch grading
(`precheck=grade_empty`, which finds what only a grading shows: psf/requests' tests need the network) with a fake
executor, and a bad `precheck` value."""

from __future__ import annotations

import pytest

from swerl_jax.eval import precheck
from swerl_jax.eval import run as eval_run


class Grader:
    """Grades the empty patch: requests-863 out of reach (its tests need the network), flask unresolved."""

    def __init__(self):
        self.calls = []

    def evaluate(self, instance, patch, log_dir):
        self.calls.append((instance["instance_id"], patch, log_dir.name))
        if instance["repo"] == "psf/requests":
            return {"status": "out_of_reach", "reason": "its tests need the network, which the sandbox never gives",
                    "fix": "none here"}
        return {"status": "unresolved"}


def test_grading_the_empty_patch_first_skips_what_the_harness_would_find_out_of_reach(tmp_path):
    instances = [{"instance_id": "psf__requests-863", "repo": "psf/requests"},
                 {"instance_id": "pallets__flask-4045", "repo": "pallets/flask"}]
    grader = Grader()
    kept, far = precheck.split_by_empty_grading(instances, grader, tmp_path / "logs")
    assert [i["instance_id"] for i in kept] == ["pallets__flask-4045"]
    assert far["psf__requests-863"].reason == "its tests need the network, which the sandbox never gives"
    assert grader.calls == [("psf__requests-863", "", "psf__requests-863"), ("pallets__flask-4045", "",
                                                                              "pallets__flask-4045")]
    assert (tmp_path / "logs" / "psf__requests-863").is_dir()


def test_a_bad_precheck_is_named_with_the_choices(tmp_path):
    with pytest.raises(ValueError, match=r"precheck='grade-empty' is not one of \('static', 'grade_empty', 'off'\) "
                                         r"\(did you mean 'grade_empty'\?\)"):
        eval_run.main(["--config", "experiments/eval_agentless_mini.py:cpu", "--out", str(tmp_path / "o"),
                       "--config.precheck=grade-empty", "--config.backend=oracle"])
    assert not (tmp_path / "o").exists()
