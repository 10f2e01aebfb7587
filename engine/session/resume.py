"""``duet-cli generate --session FILE``: continue a saved conversation (or start one) and save it.

The new turn goes into the conversation's tree (engine.conversation), the same one the app
saves: every earlier version of a message and every reply's drafted spans, figures and finish
reason are kept, and the new reply gets its own, so the app shows the file as it left it plus
the new turn. A file without a usable tree (an older Duet, another tool) continues as the
linear chat of its messages.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine import rescue
from engine.chat import Message
from engine.conversation.store import cut_reply, streaming_node, tree_from_json, tree_to_json
from engine.conversation.tree import Conversation
from engine.errors import SessionError, WorkerLostError
from engine.events import Token, collect, done_json
from engine.session import store

if TYPE_CHECKING:
    from engine.runtime import Runtime
    from engine.sampling import SamplingParams

log = logging.getLogger(__name__)


def sampling_settings(sampling: SamplingParams) -> dict[str, Any]:
    """SamplingParams as plain JSON for a session's settings."""
    d = asdict(sampling)
    d["stop"] = list(d["stop"])
    return d


def continue_session(runtime: Runtime, path: Path, prompt: str, sampling: SamplingParams, *,
                     as_json: bool, system: str | None, use_kv: bool = True) -> int:
    """Open ``path`` (restoring its KV state unless ``use_kv`` is False) or start a new
    conversation, reply to ``prompt`` (streamed text, or one JSON object), append the turn to
    the conversation's tree and save with KV. Returns 0, or 1 when the reply (still shown)
    could not be saved."""
    path = Path(path)
    conv = Conversation(path.stem, path)
    if path.exists():
        opened = store.open_conversation(path, runtime, use_kv=use_kv)
        settings, restored, note = opened.settings, opened.restored_kv, opened.note
        root = tree_from_json(settings.get("tree"), opened.messages)
        if root is None:
            conv.set_messages(opened.messages)
        else:
            conv.set_root(root)
        if system is not None:
            log.warning("--system is ignored when continuing a saved conversation")
            system = None
    else:
        settings, restored, note = {}, False, None
    if note and not as_json:
        print(f"duet-cli: note: {note}", file=sys.stderr)
    conv.add_user(prompt, system_prompt=system or "")
    turn = conv.begin_reply()

    def on_token(token: Token) -> None:
        conv.append_tokens([token])  # the drafted tokens become the reply's highlighted spans
        if not as_json:
            sys.stdout.write(token.text)
            sys.stdout.flush()

    def save_cut(_why: str = "") -> None:
        """Keep the reply so far when a worker is lost: the text alone (no llama.cpp call)."""
        tree = tree_to_json(conv, streaming=True)
        tree = cut_reply(tree, streaming_node(conv, tree), turn.text)
        cut = [*conv.engine_messages(), Message("assistant", turn.text, time.time())]
        store.save_conversation(path, runtime, cut, settings={**settings, "tree": tree},
                          with_kv=False)

    with rescue.hook(save_cut):  # a worker lost mid-pass: ggml aborts, the hook saves
        try:
            done = collect(runtime.generator.chat(list(conv.engine_messages()), sampling),
                           on_token)
        except WorkerLostError:  # lost between passes: save the same way, then say so
            if turn.text:
                save_cut()
            raise
    conv.finish_reply(done)
    report, problem = save_keeping_turn(path, runtime, conv, settings,
                                        {"sampling": sampling_settings(sampling)})
    if as_json:
        out = done_json(done)
        out["session"] = {"restored_kv": restored, "note": note, "path": str(path),
                          "saved": report is not None, "save_problem": problem,
                          "bytes": report.bytes if report else 0,
                          "n_tokens": report.n_tokens if report else 0}
        print(json.dumps(out))
    else:
        sys.stdout.write(done.tail + "\n")
    if problem:
        print(f"duet-cli: {'note' if report else 'error'}: {problem}", file=sys.stderr)
    return 0 if report is not None else 1


def save_keeping_turn(path: Path, runtime: Runtime, conv: Conversation,
                      settings: Mapping[str, Any], new_settings: Mapping[str, Any]
                      ) -> tuple[store.SaveReport | None, str | None]:
    """Save ``conv`` so that no turn is lost to a save error: its tree with ``new_settings``
    and the KV state; if that fails, the text alone with its tree and the settings as they
    were. Returns (the report or None, one line on what went wrong or None)."""
    messages = conv.engine_messages()
    tree = {"tree": tree_to_json(conv)}
    try:
        return store.save_conversation(path, runtime, messages,
                                 settings={**settings, **new_settings, **tree}), None
    except SessionError as e:
        first = str(e)
    log.warning("%s; saving the text without the new settings", first)
    try:
        report = store.save_conversation(path, runtime, messages, settings={**settings, **tree},
                                   with_kv=False)
    except SessionError as e:
        return None, f"the reply was not saved ({e})"
    return report, f"saved without its KV state and new settings ({first})"
