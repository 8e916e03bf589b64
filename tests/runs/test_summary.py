"""The lines a run ends with say what its metrics measure: an agent run's resolved rate and tool-error rate, a
single-turn run's malformed and exact-fix rates (issue 31.10: an agent run reported 'exact fixes' and
'malformed', which its episodes never have)."""

import json

from swerl_jax.runs.summary import summarize_run


def write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_an_agent_run_reports_resolved_and_tool_errors(tmp_path):
    write_rows(tmp_path / "metrics.jsonl", [
        {"step": s, "reward_mean": r, "agent/resolved_rate": r, "agent/tool_error_rate": e,
         "format_error_rate": 0.0, "reward_solved_frac": 0.0, "time/step_s": 2.0}
        for s, r, e in ((1, 0.25, 0.5), (2, 0.5, 0.25))])
    line = summarize_run(tmp_path).splitlines()[0]
    assert "resolved 25% -> 50%" in line and "tool errors 50% -> 25%" in line
    assert "exact fixes" not in line and "malformed" not in line


def test_a_single_turn_run_reports_malformed_and_exact_fixes(tmp_path):
    write_rows(tmp_path / "metrics.jsonl", [
        {"step": s, "reward_mean": r, "format_error_rate": f, "reward_solved_frac": x}
        for s, r, f, x in ((1, -0.5, 0.6, 0.0), (2, 0.3, 0.2, 0.1))])
    line = summarize_run(tmp_path).splitlines()[0]
    assert "malformed 60% -> 20%" in line and "exact fixes 0% -> 10%" in line and "resolved" not in line


def test_an_asynchronous_run_reports_staleness_and_who_waited(tmp_path):
    write_rows(tmp_path / "metrics.jsonl", [
        {"step": s, "reward_mean": 0.0, "staleness_mean": m, "staleness_max": x, "async/trainer_idle_frac": t,
         "async/producer_idle_frac": p} for s, m, x, t, p in ((1, 0.0, 0, 0.5, 0.0), (2, 1.0, 1, 0.0, 0.8))])
    line = summarize_run(tmp_path).splitlines()[0]
    assert "staleness 0.50 (max 1)  idle: trainer 25%, producer 40%" in line
    write_rows(tmp_path / "metrics.jsonl", [{"step": 1, "reward_mean": 0.0}])
    assert "staleness" not in summarize_run(tmp_path)  # a synchronous run says nothing of it


def test_a_reward_that_fails_on_every_rollout_is_named_not_read_as_well_formed_answers(tmp_path):
    # issue 57 item 4: every rollout got the fallback -1 with reason exception; the line said "malformed 0% -> 0%"
    write_rows(tmp_path / "metrics.jsonl", [
        {"step": s, "reward_mean": -1.0, "format_error_rate": 0.0, "reward_failure_rate": 1.0,
         "reward_solved_frac": 0.0, "reward_timeout_rate": 0.0} for s in (1, 2)])
    (tmp_path / "rollouts").mkdir()
    write_rows(tmp_path / "rollouts" / "step_000001.jsonl", [
        {"step": 1, "reward": -1.0, "format_error": None, "reward_failure": "exception",
         "reward_info": {"reason": "exception", "error": "ValueError('boom')"}}])
    line = summarize_run(tmp_path).splitlines()[0]
    assert "reward_failure_rate 100% -> 100%" in line and "first step 1: exception: ValueError('boom')" in line
    assert "malformed n/a (no answer was scored)" in line and "malformed 0%" not in line
    # some failed: malformed is a share of the answers the reward did score
    write_rows(tmp_path / "metrics.jsonl", [
        {"step": s, "reward_mean": 0.0, "format_error_rate": 0.25, "reward_failure_rate": 0.5} for s in (1, 2)])
    line = summarize_run(tmp_path).splitlines()[0]
    assert "reward_failure_rate 50% -> 50%" in line and "malformed (of the scored answers) 50% -> 50%" in line
