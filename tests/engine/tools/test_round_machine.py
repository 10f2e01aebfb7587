"""The rules of tool rounds that the window and the command line both drive (engine.tools.machine)."""

from __future__ import annotations

from engine.chat.messages import ToolCall
from engine.tools import Tool, ToolChoice
from engine.tools.machine import Ask, NextReply, Over, ToolRounds

CLOCK = Tool("clock")


def _call(n: int) -> ToolCall:
    return ToolCall(f"call_{n}", "clock", "{}")


def test_each_call_is_asked_in_turn_then_the_next_reply_follows():
    rounds = ToolRounds([CLOCK])
    first = rounds.start()
    assert first == NextReply((CLOCK,), ToolChoice(), True)
    assert rounds.replied([_call(1), _call(2)], "tool_calls") == Ask(_call(1))
    assert rounds.answered() == Ask(_call(2))
    assert rounds.answered() == NextReply((CLOCK,), ToolChoice(), True)
    assert rounds.replied([], "stop") == Over("stop")


def test_the_reply_after_the_last_round_shows_the_tools_but_is_the_answer():
    rounds = ToolRounds([CLOCK], max_rounds=2)
    step = rounds.start()
    for n in range(2):
        assert isinstance(step, NextReply) and step.read_calls
        assert rounds.replied([_call(n)], "tool_calls") == Ask(_call(n))
        step = rounds.answered()
    assert step == NextReply((CLOCK,), ToolChoice(), False)  # the same tools: the cache holds
    assert rounds.replies == 3


def test_a_required_choice_holds_for_the_first_reply_only():
    rounds = ToolRounds([CLOCK], choice=ToolChoice("required", parallel=False))
    assert rounds.start().choice == ToolChoice("required", parallel=False)
    rounds.replied([_call(1)], "tool_calls")
    assert rounds.answered() == NextReply((CLOCK,), ToolChoice("auto", parallel=False), True)


def test_no_tools_or_a_choice_of_none_reads_no_calls():
    assert ToolRounds([]).start() == NextReply((), ToolChoice(), False)
    assert ToolRounds([CLOCK], choice=ToolChoice("none")).start() == \
        NextReply((), ToolChoice("none"), False)


def test_a_stop_ends_the_round_where_it_is():
    stopped = [False]
    rounds = ToolRounds([CLOCK], cancelled=lambda: stopped[0])
    rounds.start()
    assert rounds.replied([_call(1), _call(2)], "tool_calls") == Ask(_call(1))
    stopped[0] = True
    assert rounds.answered() == Over("cancelled")  # the second call is never asked
    assert ToolRounds([CLOCK]).replied([_call(1)], "cancelled") == Over("cancelled")


def test_a_full_context_ends_the_round_even_with_calls():
    rounds = ToolRounds([CLOCK])
    rounds.start()
    assert rounds.replied([_call(1)], "context_full") == Over("context_full")
