"""`python -m swerl_jax.eval`: one entry point over the evaluation commands."""

import pytest

from swerl_jax.eval import __main__ as cli


def test_unknown_or_missing_subcommand_prints_the_commands():
    with pytest.raises(SystemExit) as e:
        cli.main([])
    assert "run,repair-score,harness,calibrate,export" in str(e.value) and "Agentless Mini" in str(e.value)
    # a typo is one line with a did-you-mean (issue 31.9: `eval harnes`)
    with pytest.raises(ValueError, match=r"unknown command 'harnes' \(did you mean 'harness'\?\); the commands: "
                                         r"run, repair-score, harness, calibrate, export"):
        cli.main(["harnes"])
    with pytest.raises(ValueError, match="unknown command 'grade'; the commands"):
        cli.main(["grade"])


def test_subcommands_dispatch_to_their_modules(capsys):
    with pytest.raises(SystemExit):
        cli.main(["harness", "--help"])
    assert "--predictions" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    assert "eval_agentless_mini.py" in capsys.readouterr().out
