"""The action format: well-formed calls parse; every malformed one is an ActionError with a useful message."""

import pytest

from swerl_jax.agent.actions import ActionError, format_action, parse_action


def test_a_call_parses_with_its_parameters_and_the_first_block_wins():
    text = ("I will look.\n" + format_action("file_editor", command="view", path="src/a.py", view_range="1 20")
            + "\n" + format_action("finish"))
    a = parse_action(text)
    assert a.function == "file_editor" and a.params == {"command": "view", "path": "src/a.py", "view_range": "1 20"}
    multi = parse_action("<function=file_editor>\n<parameter=command>str_replace</parameter>\n<parameter=path>a.py"
                         "</parameter>\n<parameter=old_str>\n    x = 1\n</parameter>\n<parameter=new_str>\n    x = 2\n"
                         "</parameter>\n</function>")
    assert multi.params["old_str"] == "    x = 1" and multi.params["new_str"] == "    x = 2"
    assert parse_action(format_action("finish")).function == "finish"


@pytest.mark.parametrize("text,message", [
    ("no call at all", "No function call found"),
    ("<function=execute_bash><parameter=command>ls</parameter>", "No function call found"),  # never closed
    ("<function=rm_rf><parameter=path>/</parameter></function>", "Unknown function 'rm_rf'"),
    ("<function=execute_bash></function>", "Missing parameter(s) ['command']"),
    ("<function=execute_bash><parameter=cmd>ls</parameter></function>", "Unknown parameter(s) ['cmd']"),
    ("<function=execute_bash><parameter=command>a</parameter><parameter=command>b</parameter></function>",
     "given twice"),
    ("<function=file_editor><parameter=command>delete</parameter><parameter=path>a</parameter></function>",
     "is not one of"),
])
def test_malformed_actions_are_errors_that_name_the_problem(text, message):
    with pytest.raises(ActionError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
                       .replace("]", r"\]")):
        parse_action(text)
