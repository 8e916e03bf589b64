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
