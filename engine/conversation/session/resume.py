"""``duet-cli generate --session FILE``: continue a saved conversation (or start one) and save it.

The new turn goes into the conversation's tree (engine.conversation), the same one the app
saves: every earlier version of a message and every reply's drafted spans, figures and finish
reason are kept, and the new reply gets its own, so the app shows the file as it left it plus
the new turn. A file without a usable tree (an older Duet, another tool) continues as the
linear chat of its messages.

Nothing sent is lost when the process ends, as in the window (app/control/controller.py): the
conversation with the new message is written before the model loads (``send``: the file's KV
states stay in it, for the restore that follows; a model that cannot load puts the file back;
the same message sent again after a run that ended before any of its reply is answered once),
and again every CHECKPOINT_S while the reply streams (text only, atomic), so a SIGKILL loses at
most that much of the reply; SIGTERM, SIGINT and SIGHUP stop the reply, which is then saved as
usual (KV state included) before the process exits with 128 + the signal's number.
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.chat.messages import Attachment, Image, Message
from engine.conversation.session import store
from engine.conversation.session.format import LoadedSession, read_meta, read_session
from engine.conversation.store import CUT, cut_reply, streaming_node, tree_from_json, tree_images, tree_to_json
from engine.conversation.tree import Conversation, Turn
from engine.errors import SIGPIPE, SessionError, WorkerLostError
from engine.events import Token, collect, done_json
from engine.llama import rescue
from engine.llama.abort import Cancel

if TYPE_CHECKING:
    from engine.decode.sampling import SamplingParams
    from engine.runtime.runtime import Runtime

log = logging.getLogger(__name__)

CHECKPOINT_S = 2.0  # the reply streaming is written this often (as by the window)
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP")
                     if hasattr(signal, name))


def sampling_settings(sampling: SamplingParams) -> dict[str, Any]:
    """SamplingParams as plain JSON for a session's settings."""
    d = asdict(sampling)
    d["stop"] = list(d["stop"])
    return d


@dataclass(frozen=True)
class Sent:
    """A message written to its conversation before the model loads (:func:`send`).
    ``before``: the file as it was, KV sections included (None: there was none)."""

    path: Path
    conv: Conversation
    turn: Turn
    settings: dict[str, Any]
    before: LoadedSession | None
    note: str | None


def send(path: Path, prompt: str, *, system: str | None, model: Path,
         attachments: tuple[Attachment, ...] = (), images: tuple[Image, ...] = ()) -> Sent:
    """Before the model loads: the conversation at ``path`` (a new one when there is no file)
    with ``prompt`` (and the files it carries) added and its reply begun, on disk, so that a
    process killed while the model loads keeps the message. The file's KV states stay in it for
    the restore after the load. Raises SessionError when the file cannot be read or written."""
    path = Path(path)
    conv, settings, before = Conversation(path.stem, path), {}, None
    if path.exists():
        before = read_session(path, want=("kv.target", "kv.draft", *read_meta(path).image_sections()))
        pictures, lost = store.read_pictures(before)
        if lost:
            log.warning("%s: %s", path.name, lost)
        messages = [store.from_saved(m, pictures) for m in before.meta.messages]
        root = tree_from_json(before.meta.settings.get("tree"), messages, pictures)
        if root is None:
            conv.set_messages(messages)
        else:
            conv.set_root(root)
        settings = dict(before.meta.settings)
        if system is not None:
            log.warning("--system is ignored when continuing a saved conversation")
            system = None
    if attachments or images or not _resent(conv, prompt):
        conv.add_user(prompt, system_prompt=system or "", attachments=attachments, images=images)
    turn = conv.begin_reply()
    store.save_before_load(path, before, _cut(conv, turn), settings=_cut_settings(conv, turn,
                           settings), model=model, pictures=tree_images(conv))
    note = "; ".join(p.text for p in before.problems) if before and before.problems else None
    return Sent(path, conv, turn, settings, before, note)


def _resent(conv: Conversation, prompt: str) -> bool:
    """``prompt`` sent again after a run that ended before any of its reply came (killed while
    the model loaded): the empty, cut reply is dropped and the message is answered once, not
    written twice. False (nothing changed) otherwise."""
    turns = conv.turns
    if len(turns) < 2:
        return False
    asked, reply = turns[-2], turns[-1]
    if asked.role != "user" or asked.text != prompt or asked.attachments or \
            reply.role != "assistant" or reply.text or reply.tool_calls or reply.reason != CUT:
        return False
    conv.remove(len(turns) - 1)
    return True


def unsend(sent: Sent) -> None:
    """The model could not load: the file as it was before :func:`send`."""
    store.restore_file(sent.path, sent.before)


def _cut(conv: Conversation, turn: Turn) -> list[Message]:
    """The conversation's messages with the streaming reply as far as it came."""
    return [*conv.engine_messages(), Message("assistant", turn.text, time.time())]


def _cut_settings(conv: Conversation, turn: Turn, settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` with the tree whose streaming reply holds what came so far, marked cut."""
    tree = tree_to_json(conv, streaming=True)
    return {**settings, "tree": cut_reply(tree, streaming_node(conv, tree), turn.text)}


def continue_session(runtime: Runtime, sent: Sent, sampling: SamplingParams, *,
                     as_json: bool, use_kv: bool = True) -> int:
    """Restore the KV state of the conversation :func:`send` wrote (unless ``use_kv`` is False),
    stream the reply (text, or one JSON object at the end), append the turn to the
    conversation's tree and save with KV. Returns 0, or 1 when the reply (still shown) could not
    be saved, or 128 + N when signal N stopped the reply (what came is saved)."""
    path, conv, turn, settings = sent.path, sent.conv, sent.turn, sent.settings
    restored, notes = False, [sent.note] if sent.note else []
    if sent.before is not None:
        opened = store.open_conversation(path, runtime, use_kv=use_kv)
        restored = opened.restored_kv
        notes += [opened.note] if opened.note else []
    note = "; ".join(notes) or None
    if note and not as_json:
        print(f"duet-cli: note: {note}", file=sys.stderr)
    last_checkpoint = time.monotonic()
    stopped: list[int] = []
    cancel = Cancel()
    shown = not as_json  # the reply goes to stdout while someone reads it

    def show(text: str) -> None:
        """Write to stdout; a reader gone (a closed pipe) stops the reply as SIGPIPE would,
        and what came is saved."""
        nonlocal shown
        if not shown:
            return
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except BrokenPipeError:
            shown = False
            stopped.append(SIGPIPE)
            cancel.set()

    def on_token(token: Token) -> None:
        nonlocal last_checkpoint
        conv.append_tokens([token])  # the drafted tokens become the reply's highlighted spans
        show(token.text)
        if time.monotonic() - last_checkpoint >= CHECKPOINT_S:
            checkpoint()
            last_checkpoint = time.monotonic()

    def save_cut(_why: str = "") -> None:
        """Keep the reply so far when a worker is lost: the text alone (no llama.cpp call)."""
        store.save_conversation(path, runtime, _cut(conv, turn),
                                settings=_cut_settings(conv, turn, settings), with_kv=False,
                                pictures=tree_images(conv))

    def checkpoint() -> None:
        """The conversation so far on disk (a SIGKILL next loses nothing sent)."""
        try:
            save_cut()
        except SessionError as e:
            log.warning("could not checkpoint %s: %s", path.name, e)

    # a worker lost mid-pass: ggml aborts, the hook saves; a signal ends the reply (saved below)
    with rescue.hook(save_cut), _stop_on_signals(stopped, cancel):
        try:
            done = collect(runtime.generator.chat(list(conv.engine_messages()), sampling, cancel),
                           on_token)
        except WorkerLostError:  # lost between passes: save the same way, then say so
            if turn.text:
                save_cut()
            raise
    conv.finish_reply(done)
    report, problem = save_keeping_turn(path, runtime, conv, settings,
                                        {"sampling": sampling_settings(sampling)})
    if as_json:
        out = done_json(done) | runtime.exactness.to_json()
        if turn_files(conv):
            out["sources"] = [{"name": x.name, "mode": x.mode, "page": x.page}
                              for x in runtime.generator.last_sources]
        out["session"] = {"restored_kv": restored, "note": note, "path": str(path),
                          "saved": report is not None, "save_problem": problem,
                          "bytes": report.bytes if report else 0,
                          "n_tokens": report.n_tokens if report else 0}
        print(json.dumps(out))
    else:
        show(done.tail + "\n")
    if problem:
        print(f"duet-cli: {'note' if report else 'error'}: {problem}", file=sys.stderr)
    return _exit_status(path, report is not None, stopped)


def turn_files(conv: Conversation) -> tuple[Attachment, ...]:
    """The files the last user message carries."""
    asked = [t for t in conv.turns if t.role == "user"]
    return asked[-1].attachments if asked else ()


def _exit_status(path: Path, saved: bool, stopped: list[int]) -> int:
    """0; 1 when the reply could not be saved; 128 + the number of the signal that stopped it."""
    if not stopped:
        return 0 if saved else 1
    if saved:
        why = "its reader went away" if stopped[0] == SIGPIPE \
            else f"stopped by {signal.Signals(stopped[0]).name}"
        print(f"duet-cli: {why}; the reply so far is saved in {path}", file=sys.stderr)
    return 128 + stopped[0]


@contextlib.contextmanager
def _stop_on_signals(stopped: list[int], cancel: threading.Event) -> Iterator[None]:
    """SIGTERM, SIGINT or SIGHUP while the block runs set ``cancel`` (their numbers appended to
    ``stopped``): the reply ends at once and is saved as usual. The handler only sets the event:
    it may run inside a llama.cpp callback, where an exception is lost. Outside the main thread,
    signals are left alone."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: object) -> None:
        stopped.append(signum)
        cancel.set()

    before = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def save_keeping_turn(path: Path, runtime: Runtime, conv: Conversation,
                      settings: Mapping[str, Any], new_settings: Mapping[str, Any]
                      ) -> tuple[store.SaveReport | None, str | None]:
    """Save ``conv`` so that no turn is lost to a save error: its tree with ``new_settings``
    and the KV state; if that fails, the text alone with its tree and the settings as they
    were. Returns (the report or None, one line on what went wrong or None)."""
    messages = conv.engine_messages()
    tree = {"tree": tree_to_json(conv)}
    try:
        return store.save_conversation(path, runtime, messages, pictures=tree_images(conv),
                                 settings={**settings, **new_settings, **tree}), None
    except SessionError as e:
        first = str(e)
    log.warning("%s; saving the text without the new settings", first)
    try:
        report = store.save_conversation(path, runtime, messages, settings={**settings, **tree},
                                   with_kv=False, pictures=tree_images(conv))
    except SessionError as e:
        return None, f"the reply was not saved ({e})"
    return report, f"saved without its KV state and new settings ({first})"
