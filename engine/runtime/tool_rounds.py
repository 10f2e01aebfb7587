"""Tool rounds: the model replies; when the reply calls tools, each call is put to the person
(``ask``), the allowed ones run, every call gets a result back (a refused one says so), and the
model continues; until it answers without a call or the rounds run out (the last reply's calls are
not read: it is the answer). ``duet-cli generate --mcp-config`` and the window share it.

A result is untrusted text: it goes back as a ``tool`` message, which the prompt renders as a
message's text (never markup: engine.chat.messages), and nothing in it can answer ``ask``. The next
round's prompt shares the conversation so far with the context (Generator aligns on the cached
prefix), and the part of it before a result (the reply's calls as the template renders them)
is read while the call waits and runs: the answer reads only the results.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from engine.chat.messages import Message, ToolCall
from engine.decode.decoding import GrammarState
from engine.decode.sampling import SamplingParams
from engine.errors import DecodeError, DuetError
from engine.events import Done, Event, Stats
from engine.llama.abort import Cancel
from engine.llama.context import LlamaSequence
from engine.llama.model import Model
from engine.prompts.request import Call, Chat, Piece, Policy, PreparedTurn, Reader, Text, prepare
from engine.tools import MAX_ROUNDS, Tool, ToolChoice
from engine.tools.calls import Runner, ToolResult, cancelled, crashed, refused, run_call
from engine.tools.machine import Ask, NextReply, Over, Step, ToolRounds
from engine.tools.prompting import result_prefix

log = logging.getLogger(__name__)

class Completer(Protocol):
    model: Model
    ctx: LlamaSequence

    def complete(self, prompt: Sequence[int], params: SamplingParams,
                 cancel: threading.Event | None = None, *, grammar: GrammarState | None = None,
                 logprobs: int | None = None) -> Iterator[Event]: ...

    def read_ahead(self, tokens: Sequence[int], cancel: threading.Event | None = None) -> int: ...


@dataclass(frozen=True)
class ToolOffer:
    """The tools a conversation offers, and how an allowed call runs (its result, or a one-line
    error result; it must stop when ``cancel`` is set)."""

    tools: tuple[Tool, ...]
    run: Runner


@dataclass(frozen=True)
class CallAnswered:
    """A call the model made and what came back: ``allowed`` False when the person refused."""

    call: ToolCall
    result: ToolResult
    allowed: bool


@dataclass(frozen=True)
class RoundsDone:
    """The end: the messages the rounds added (assistant calls, tool results, the answer), the
    last reply's Done, and how many replies there were."""

    messages: tuple[Message, ...]
    done: Done
    replies: int


RoundEvent = Text | Done | CallAnswered | RoundsDone


def tool_rounds(gen: Completer, messages: Sequence[Message], offer: ToolOffer, params: SamplingParams,
                *, ask: Callable[[ToolCall], bool], choice: ToolChoice = ToolChoice(),
                max_rounds: int = MAX_ROUNDS, cancel: threading.Event | None = None) -> Iterator[RoundEvent]:
    """Reply to ``messages`` with up to ``max_rounds`` rounds of tool calls, as the round machine
    (engine.tools.machine) says. Yields the text, each reply's Done, each answered call, then
    RoundsDone. The calls a reply completed run even when it was cut at max_tokens (what was
    cut off is text)."""
    cancel = cancel or Cancel()
    rounds = ToolRounds(offer.tools, choice=choice, max_rounds=max_rounds, cancelled=cancel.is_set)
    history, added = list(messages), list[Message]()
    step: Step = rounds.start()
    while isinstance(step, NextReply):
        chat = Chat(tuple(history), params, step.tools, step.choice, read_calls=step.read_calls)
        try:
            turn = prepare(gen.model, chat, Policy(gen.ctx.n_ctx, drop_oldest=False), cancel)
        except DecodeError:
            if not cancel.is_set():
                raise
            cut = Done("cancelled", "", (), Stats())  # cancelled while the prompt was made
            yield cut
            yield RoundsDone(tuple(added), cut, rounds.replies - 1)
            return
        text: list[str] = []
        calls: list[ToolCall] = []
        done: Done | None = None
        for piece in _pieces(gen, turn, cancel):
            if isinstance(piece, Call):
                calls.append(piece.call)
            elif isinstance(piece, Text):
                text.append(piece.text)
                yield piece
            else:
                done = piece.done
        assert done is not None
        yield done
        step = rounds.replied(calls, done.reason)
        if isinstance(step, Over):
            added.append(Message("assistant", "".join(text)))
            yield RoundsDone(tuple(added), done, rounds.replies)
            return
        said = Message("assistant", "".join(text).strip(), tool_calls=tuple(calls))
        history.append(said)
        added.append(said)
        while isinstance(step, Ask):
            allowed, result = _answer(gen, history, step.call, offer, ask, cancel)
            yield CallAnswered(step.call, result, allowed)
            history.append(Message("tool", result.text, tool_call_id=step.call.id, name=step.call.name))
            added.append(history[-1])
            step = rounds.answered()
    cut = Done("cancelled", "", (), Stats())  # stopped between a call and the next reply
    yield cut
    yield RoundsDone(tuple(added), cut, rounds.replies)


def _pieces(gen: Completer, turn: PreparedTurn, cancel: threading.Event) -> Iterator[Piece]:
    """One reply as text (non-empty), calls and its end."""
    reader = Reader(turn)
    grammar = turn.grammar.matcher() if turn.grammar is not None else None
    for ev in gen.complete(turn.prompt, turn.sampling, cancel, grammar=grammar):
        for piece in reader.feed(ev):
            if not isinstance(piece, Text) or piece.text:
                yield piece


def _answer(gen: Completer, history: Sequence[Message], call: ToolCall,
            offer: ToolOffer, ask: Callable[[ToolCall], bool],
            cancel: threading.Event) -> tuple[bool, ToolResult]:
    """Put ``call`` to the person and run it if allowed, in a thread, while the part of the
    next prompt before its result is read (the answer then reads only the result)."""
    answer: list[tuple[bool, ToolResult]] = []

    def put() -> None:
        allowed = not cancel.is_set() and ask(call)
        answer.append((allowed, run_call(offer.run, call, cancel) if allowed
                       else cancelled() if cancel.is_set() else refused()))

    worker = threading.Thread(target=put, name=f"tool-call-{call.name}", daemon=True)
    worker.start()
    try:
        gen.read_ahead(result_prefix(gen.model, history, offer.tools, call, cancel=cancel), cancel)
    except DuetError as e:  # the answer's own prompt will say what is wrong
        log.info("reading ahead of %s's result failed: %s", call.name, e)
    worker.join()
    return answer[0] if answer else (False, crashed(call.name))  # ``ask`` itself raised
