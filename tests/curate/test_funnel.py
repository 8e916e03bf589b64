"""Funnel arithmetic, consistency checks and the printed table; config validation."""

import pytest

from swerl_jax.curate.config import CurateConfig
from swerl_jax.curate.funnel import build_funnel, format_table


def test_funnel_order_and_table():
    counts = {"candidate": 10, "drop:duplicate": 1, "drop:bot": 3, "drop:docs_only": 2, "drop:weird": 1,
              "kept": 3, "seed:no_linked_issue": 2, "seed:selected": 1, "input:repo": 2}
    f = build_funnel(counts)
    assert [(s["stage"], s["remaining"]) for s in f["stages"]] == [
        ("bot", 7), ("docs_only", 5), ("duplicate", 4), ("weird", 3)]
    assert f["rl_seeds"] == 1 and f["inputs"] == {"repo": 2}
    table = format_table(f)
    assert "PR candidates" in table and "= RL seeds" in table and table.splitlines()[-1] == "inputs: repo=2"


def test_inconsistent_counts_raise():
    with pytest.raises(ValueError, match="does not add up"):
        build_funnel({"candidate": 3, "drop:bot": 1, "kept": 1})
    with pytest.raises(ValueError, match="RL-seed"):
        build_funnel({"candidate": 1, "kept": 1, "seed:selected": 2})


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="max_changed_lines"):
        CurateConfig(max_changed_lines=0)
    with pytest.raises(ValueError, match="sampler_address"):
        CurateConfig(relevant_predictor="llm")
    with pytest.raises(ValueError, match="formats"):
        CurateConfig(formats=("parquet",))


def test_swebench_lite_and_verified_instances_are_prs_by_repo_and_number(shared_data):
    from swerl_jax.curate.benchmarks import benchmark_prs, instance_pr

    prs = benchmark_prs([str(shared_data / "swebench_lite.json"), str(shared_data / "swebench_verified.jsonl")])
    assert ("psf/requests", 863) in prs and ("pallets/flask", 4045) in prs and ("psf/requests", 864) not in prs
    assert 500 <= len(prs) <= 800  # 300 Lite + 500 Verified, partly the same instances
    assert instance_pr({"instance_id": "Psf__Requests-863"}, "x") == ("psf/requests", 863)  # repo from the id
    with pytest.raises(ValueError, match=r"lite.json row 1: instance_id 'requests' is not a SWE-bench id"):
        instance_pr({"instance_id": "requests"}, "lite.json row 1")


def test_a_mistyped_instance_file_is_one_line_with_a_did_you_mean(tmp_path):
    """Issue 57's held-out check: `swebench_lite.jsn` beside `swebench_lite.json` was named without a suggestion."""
    from swerl_jax.curate.benchmarks import benchmark_prs

    (tmp_path / "swebench_lite.json").write_text("[]")
    with pytest.raises(ValueError, match=r"cannot read '.*swebench_lite.jsn' \(did you mean .*swebench_lite.json\?\)"):
        benchmark_prs([str(tmp_path / "swebench_lite.jsn")])


def test_the_benchmark_switch_and_its_lists_on_the_command_line():
    from swerl_jax.curate.__main__ import parse_args

    args, _ = parse_args(["--clones", "c", "--out", "o"])
    assert args.drop_benchmark_instances is True
    assert args.benchmark_instances == ("princeton-nlp/SWE-bench_Lite", "princeton-nlp/SWE-bench_Verified")
    args, _ = parse_args(["--clones", "c", "--out", "o", "--config.drop_benchmark_instances=false",
                          "--config.benchmark_instances=a.json,b.jsonl"])
    assert args.drop_benchmark_instances is False and args.benchmark_instances == ("a.json", "b.jsonl")
    with pytest.raises(ValueError, match=r"--config.drop_benchmark_instances='no': expected true or false"):
        parse_args(["--clones", "c", "--out", "o", "--config.drop_benchmark_instances=no"])
    with pytest.raises(ValueError, match="benchmark_instances is empty while drop_benchmark_instances is on"):
        CurateConfig(benchmark_instances=())
