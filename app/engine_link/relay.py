"""One reply's events, relayed from the engine's thread to the worker's signals (tokens coalesced,
tool calls taken out, thinking marked), and what a reply cut by a lost RPC worker leaves saved."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from app.engine_link.messages import ChatReply, ChatRequest, Failure, Progress, RescuePlan, TokenBatch
from app.engine_link.throttle import Coalescer
from engine.chat.messages import Message, ToolCall
from engine.chat.reasoning import CLOSE, OPEN
from engine.conversation.session.meta import MAX_TOOL_CALLS
from engine.conversation.session.store import save_conversation
from engine.conversation.store import cut_reply
from engine.errors import DuetError, WorkerLostError
from engine.events import Done, PromptProgress, Token
from engine.llama import rescue
from engine.prompts.request import Call, Piece, PreparedTurn, Reader, Text

if TYPE_CHECKING:
    from engine.prompts.attachments import Source
    from engine.runtime.runtime import Runtime

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outlet:
    """Where a relay sends what it makes (the engine worker's signals, emitted from the engine's
    thread), and what it needs of the worker."""

    tokens: Callable[[TokenBatch], None]
    progress: Callable[[Progress], None]
    finished: Callable[[ChatReply], None]
    failed: Callable[[Failure], None]
    rescued: Callable[[tuple[Path, str]], None]  # the file a cut reply was saved to, and why
    runtime: Runtime | None
    token_interval: float


class Relay:
    """One reply's events, on the engine's thread, turned into the worker's signals: tokens
    coalesced (with tools, the calls taken out by the turn's reader), the reply so far kept for
    a rescue if an RPC worker dies mid-pass."""

    def __init__(self, out: Outlet, req: ChatRequest, turn: PreparedTurn) -> None:
        self.out, self.req, self.dropped = out, req, turn.dropped
        self.sources = sources_in_words(turn.sources)
        self.batches: Coalescer[Token] = Coalescer(out.token_interval)
        self.parts: list[str] = []  # the reply so far
        self.reader = Reader(turn)
        self.shown: list[str] = []  # the text released (calls taken out)
        self.calls: list[ToolCall] = []
        self.runtime = out.runtime
        self.hook = self._rescue_hook()
        # a reasoning model's thinking comes split from its answer (engine.prompts.request.Reader);
        # the window folds a <think> section in the text, so the markers are put back around
        # it, the opening one too where the prompt opened the section (DeepSeek-R1's template)
        self.opening = OPEN if turn.think is not None and turn.think.inside else ""
        self.thinking = False

    def emit(self, item: object) -> None:
        w, cid = self.out, self.req.conversation_id
        try:
            if isinstance(item, Token):
                self.parts.append(item.text)
                for tok in self._shown(self.reader.feed(item)):
                    batch = self.batches.add(tok, boundary=tok.step_end)
                    if batch:
                        w.tokens(TokenBatch(cid, tuple(batch), *self._fill()))
            elif isinstance(item, PromptProgress):
                w.progress(Progress("prompt", item.done, item.total))
            elif isinstance(item, Done):
                self.end()
                self._shown(self.reader.feed(item))
                if self.reader.reads_calls:  # the reply's text is what is left of the calls
                    item = replace(item, text="".join(self.shown))
                if self.opening and not item.text.lstrip().startswith(OPEN):
                    item = replace(item, text=OPEN + item.text)
                rest = self.batches.flush()
                if rest:
                    w.tokens(TokenBatch(cid, tuple(rest), *self._fill()))
                ctx = self.runtime.ctx if self.runtime is not None and not self.runtime.closed else None
                w.finished(ChatReply(cid, item, ctx.n_past if ctx else 0, ctx.n_ctx if ctx else 0,
                                      self.dropped, item.note, tuple(self.calls), self.sources))
            elif isinstance(item, Exception):
                self.end()
                log.warning("chat failed: %s", item)
                w.failed(Failure("chat", _line(item), cid,
                                      worker_lost=isinstance(item, WorkerLostError)))
        except Exception:  # never let a relay break the engine's thread
            log.exception("relaying a reply's event failed")

    def _fill(self) -> tuple[int, int]:
        """The context's fill now, and its size (on the engine's thread, which owns it)."""
        rt = self.runtime
        return (rt.ctx.n_past, rt.ctx.n_ctx) if rt is not None and not rt.closed else (0, 0)

    def _shown(self, pieces: list[Piece]) -> list[Token]:
        """The tokens to show for ``pieces``: each text piece as its token with that text (a
        call's text is never shown); the calls kept."""
        out = []
        for p in pieces:
            if isinstance(p, Call):
                if len(self.calls) < MAX_TOOL_CALLS:  # (more than a file may hold are dropped)
                    self.calls.append(p.call)
            elif isinstance(p, Text):
                p = self._marked(p)
                self.shown.append(p.text)
                if p.source is not None and (p.text or not self.reader.reads_calls):
                    out.append(p.source if p.text == p.source.text else replace(p.source, text=p.text))
        return out

    def _marked(self, p: Text) -> Text:
        """``p`` with the <think> section's markers where its thinking starts and ends."""
        if p.thinking and not self.thinking and p.text:
            self.thinking = True
            return replace(p, text=OPEN + p.text)
        if not p.thinking and self.thinking and p.text:
            self.thinking = False
            return replace(p, text=CLOSE + p.text)
        return p

    def end(self) -> None:
        if self.hook is not None:
            rescue.remove(self.hook)
            self.hook = None

    def _rescue_hook(self) -> Callable[[str], None] | None:
        """While the reply runs: if an RPC worker dies mid-pass (the process then ends, see
        engine.llama.rescue), save the conversation with the reply so far, marked as cut."""
        plan, rt, req = self.req.rescue, self.runtime, self.req
        if plan is None or rt is None or not (rt.config.target.rpc or
                                              (rt.config.draft and rt.config.draft.rpc)):
            return None

        def save(why: str) -> None:
            text = (req.continue_text or "") + "".join(self.parts)
            self.out.rescued((save_cut(plan, rt, req.messages, text), why))

        rescue.add(save)
        return save


def sources_in_words(sources: Sequence[Source]) -> tuple[str, ...]:
    """"manual.pdf (whole)", "codes.pdf p. 136, 137 (passages)": one line per file."""
    pages: dict[str, list[int]] = {}
    whole: list[str] = []
    for s in sources:
        if s.mode == "whole":
            whole.append(s.name)
        else:
            pages.setdefault(s.name, []).extend([s.page] if s.page is not None else [])
    out = [f"{name} (whole)" for name in whole]
    for name, ps in pages.items():
        where = f" p. {', '.join(str(p) for p in sorted(set(ps)))}" if ps else ""
        out.append(f"{name}{where} (passages)")
    return tuple(out)


def save_cut(plan: RescuePlan, rt: Runtime, messages: tuple[Message, ...], text: str) -> Path:
    """Write the conversation of ``plan`` with the reply ``text`` cut where it stopped: the text
    alone (no llama.cpp call: it runs while ggml aborts)."""
    settings = dict(plan.settings)
    settings["tree"] = cut_reply(settings["tree"], plan.node, text)
    plan.path.parent.mkdir(parents=True, exist_ok=True)
    save_conversation(plan.path, rt, (*messages, Message("assistant", text, time.time())),
                      settings=settings, with_kv=False)
    return plan.path


def _line(e: BaseException) -> str:
    return str(e) if isinstance(e, DuetError) else \
        "unexpected error: " + " ".join(f"{type(e).__name__}: {e}".split())[:300]
