"""What the engine worker's slots (app.engine_link.worker) run besides dispatching: a reply's
turn, a conversation opened on the engine's thread, and the guard that turns any exception
into one ``Failure``."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path

from app.engine_link.messages import Failure
from engine.cache.prefix import common_prefix
from engine.conversation.session.format import read_meta
from engine.conversation.session.store import OpenResult, open_conversation
from engine.errors import DuetError, LoadCancelled, MessageTooLongError, WorkerLostError
from engine.llama.model import Model
from engine.prompts.completion import completion_turn
from engine.prompts.request import Chat, Policy, PreparedTurn, prepare
from engine.runtime.service import Engine

log = logging.getLogger(__name__)


@contextlib.contextmanager
def guard(op: str, failed: Callable[[Failure], None],
          conversation_id: str | None = None) -> Iterator[None]:
    """A slot's body: a DuetError becomes one ``Failure`` with its line, anything else is logged
    with its traceback and reported in one line; nothing propagates (no thread dies of it)."""
    try:
        yield
    except LoadCancelled as e:
        log.info("%s: %s", op, e)
        failed(Failure(op, str(e), conversation_id, cancelled=True))
    except DuetError as e:
        log.warning("%s failed: %s", op, e)
        too_long = (e.n_tokens, e.room) if isinstance(e, MessageTooLongError) else None
        failed(Failure(op, str(e), conversation_id,
                       worker_lost=isinstance(e, WorkerLostError), too_long=too_long))
    except MemoryError:
        log.exception("%s ran out of memory", op)
        failed(Failure(op, "out of memory; try a smaller model or context size",
                       conversation_id))
    except Exception as e:  # noqa: BLE001 - the worker must survive anything
        log.exception("%s failed unexpectedly", op)
        line = " ".join(f"{type(e).__name__}: {e}".split())[:300]
        failed(Failure(op, f"unexpected error: {line}", conversation_id))


def log_read_ahead(future: Future) -> None:
    error = future.exception()
    if isinstance(error, DuetError):
        log.info("reading ahead of a tool result: %s", error)
    elif error is not None:
        log.error("reading ahead of a tool result failed", exc_info=error)


def reply_turn(model: Model, chat: Chat, n_ctx: int, cancel: threading.Event | None = None) -> PreparedTurn:
    """A reply's turn: the chat as the model's template renders it, or, for a model with none
    (a base model), its messages as one text to continue (engine.prompts.completion)."""
    if model.chat_template is None:
        return completion_turn(model, chat.messages, chat.sampling, n_ctx, chat.continue_text)
    return prepare(model, chat, Policy(n_ctx), cancel)


def open_live(path: Path, engine: Engine, shown: bool = False) -> tuple[OpenResult, int, int]:
    """On the engine's thread: keep what sequence 0 holds in the state cache, then open the
    file into it (its KV state, when it fits). ``shown``: only if the file's state covers more
    than sequence 0 or the state cache already hold (else the text alone: the next reply takes
    the held state)."""
    rt = engine.runtime
    if shown:
        kv = read_meta(path).kv_target
        held = max(common_prefix(rt.ctx.tokens, kv.tokens), rt.cache.covers(kv.tokens)) \
            if kv is not None else 0
        if kv is None or held >= len(kv.tokens):
            return open_conversation(path, rt, use_kv=False), rt.ctx.n_past, rt.ctx.n_ctx
    if rt.cache.max_bytes > 0:
        rt.cache.keep(rt.ctx)
    res = open_conversation(path, rt)
    return res, rt.ctx.n_past, rt.ctx.n_ctx

