"""The by-file split invariant and the contamination report."""

from __future__ import annotations

import random

from swerl_jax.tasks import mutations, output


def _task(iid: str, repo: str, files: list[str], function: str = "f") -> dict:
    before, after = f"def {function}():\n    return 1\n", f"def {function}():\n    return 2\n"
    patch = "".join(mutations.unified_diff(f, before, after) for f in files)
    return {"instance_id": iid, "repo": repo, "patch": patch,
            "mutation": {"kind": "off_by_one", "file": files[0], "function": function, "line": 2}}


def test_no_heldout_task_shares_a_modified_file_with_a_training_task():
    rng = random.Random(0)
    files = [f"pkg/m{i}.py" for i in range(100)]
    tasks = [_task(f"t{i}", "acme/x", rng.sample(files, rng.choice((1,) * 19 + (2,)))) for i in range(200)]
    train, held = output.split_by_file(tasks, heldout_fraction=0.3, seed=1)
    assert len(train) + len(held) == 200 and held and train
    train_files = {f for t in train for f in output.modified_files(t)}
    assert not train_files & {f for t in held for f in output.modified_files(t)}
    # stable: adding tasks on new files moves no existing task across
    more = tasks + [_task("new", "acme/x", ["pkg/other.py"])]
    train2, held2 = output.split_by_file(more, heldout_fraction=0.3, seed=1)
    assert {t["instance_id"] for t in held} <= {t["instance_id"] for t in held2}


def test_contamination_names_shared_repositories_files_and_functions():
    generated = [_task("g1", "psf/requests", ["requests/utils.py"], "get_auth_from_url"),
                 _task("g2", "acme/x", ["x.py"])]
    bench = {"lite": [_task("psf__requests-1", "psf/requests", ["requests/utils.py"], "get_auth_from_url"),
                      _task("psf__requests-2", "psf/requests", ["requests/models.py"], "prepare"),
                      _task("django-1", "django/django", ["x.py"])]}
    report = output.contamination(generated, bench)
    assert report["lite"]["repositories"] == ["psf/requests"]
    assert report["lite"]["shared_ids"] == ["psf__requests-1", "psf__requests-2"]
    assert report["lite"]["files"] == ["psf/requests:requests/utils.py"]
    assert report["lite"]["functions"] == ["psf/requests:requests/utils.py:get_auth_from_url"]
    assert report["generated"]["tasks"] == 2


def test_table_counts_candidates_and_kept_by_repository_and_kind():
    rows = [{"repo": "a/b", "mutation": {"kind": "pair"}, "kept": True},
            {"repo": "a/b", "mutation": {"kind": "pair"}, "kept": False}]
    assert output.table(rows) == {"a/b": {"pair": {"candidates": 2, "kept": 1}}}
    assert "| a/b | 1/2 | 1/2 |" in output.markdown_table(output.table(rows))
