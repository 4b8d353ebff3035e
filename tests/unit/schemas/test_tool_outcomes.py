"""The tool-outcome rule on hand-built steps: every signal, where it lands, and what it ignores."""

from __future__ import annotations

from schemas.pipeline_file import ToolRewards
from schemas.records import ToolCall, ToolResult
from schemas.tool_outcomes import StepTools, ToolSignal, tool_signals

RULES = ToolRewards()


def call(call_id: str, name: str = "search", known: bool = True) -> ToolCall:
    return ToolCall(call_id, name, well_formed=True, known=known)


MALFORMED = ToolCall("", "", well_formed=False, known=False)


def test_a_malformed_call_and_an_unknown_tool_cost_at_their_step():
    steps = [StepTools(calls=(MALFORMED,)), StepTools(calls=(call("c1", "rm", known=False),))]
    assert tool_signals(steps, RULES) == [
        ToolSignal(0, "malformed_call", -0.1),
        ToolSignal(1, "unknown_tool", -0.1),
    ]


def test_an_error_result_costs_at_the_step_of_its_call():
    steps = [
        StepTools(calls=(call("c1"),)),
        StepTools(results=(ToolResult("c1", "Error: no such file"),), completion_text="ok"),
    ]
    assert tool_signals(steps, RULES) == [ToolSignal(0, "error_result", -0.05)]


def test_a_result_flagged_an_error_costs_as_one_whose_text_says_so():
    """Anthropic's is_error: the same signal, at the same step, whatever the text."""
    flagged = StepTools(results=(ToolResult("c1", "exit 2", is_error=True),), completion_text="ok")
    assert tool_signals([StepTools(calls=(call("c1"),)), flagged], RULES) == [
        ToolSignal(0, "error_result", -0.05)
    ]


def test_a_result_repeated_by_a_later_completion_is_used():
    steps = [
        StepTools(calls=(call("c1"),), completion_text="let me look"),
        StepTools(results=(ToolResult("c1", "the capital is Canberra"),), completion_text="hmm"),
        StepTools(completion_text="Answer: canberra."),
    ]
    assert tool_signals(steps, RULES) == [ToolSignal(0, "used_result", 0.05)]


def test_a_result_nobody_repeats_or_only_in_short_words_earns_nothing():
    steps = [
        StepTools(calls=(call("c1"),)),
        StepTools(results=(ToolResult("c1", "it is 42"),), completion_text="it is 42"),
    ]
    assert tool_signals(steps, RULES) == []
    assert tool_signals(steps, ToolRewards(used_min_chars=2)) == [
        ToolSignal(0, "used_result", 0.05)
    ]


def test_results_of_unknown_ids_later_calls_or_second_answers_are_ignored():
    steps = [
        StepTools(calls=(call("c1"),)),
        StepTools(
            calls=(call("c2"),),
            results=(
                ToolResult("nobody", "error"),  # no call of this rollout, and step 0 made one
                ToolResult("c2", "error"),  # its own step's call: not answered yet
                ToolResult("c1", "fine result"),
                ToolResult("c1", "error"),  # a second answer to c1
            ),
            completion_text="a fine day",
        ),
    ]
    assert tool_signals(steps, RULES) == [ToolSignal(0, "used_result", 0.05)]


def test_a_result_with_a_made_up_id_answers_the_completion_before_it():
    """A lenient agent took a bare answer as a call and named the result itself."""
    steps = [
        StepTools(completion_text="7"),
        StepTools(results=(ToolResult("call_0", "invalid: call guess with one digit"),)),
        StepTools(results=(ToolResult("call_1", "lower"), ToolResult("call_x", "error"))),
        StepTools(completion_text="it is lower"),
    ]
    assert tool_signals(steps, RULES) == [
        ToolSignal(0, "error_result", -0.05),
        ToolSignal(1, "used_result", 0.05),  # the second made-up result of step 2 counts once
    ]


def test_the_values_and_the_error_pattern_are_settings():
    steps = [
        StepTools(calls=(call("c1"), MALFORMED)),
        StepTools(results=(ToolResult("c1", "FAILED: timeout"),)),
    ]
    rules = ToolRewards(malformed_call=-1.0, error_result=-2.0, error_pattern=r"^FAILED")
    assert tool_signals(steps, rules) == [
        ToolSignal(0, "malformed_call", -1.0),
        ToolSignal(0, "error_result", -2.0),
    ]
    assert tool_signals(steps, ToolRewards(error_pattern=r"^never")) == [
        ToolSignal(0, "malformed_call", -0.1)
    ]
