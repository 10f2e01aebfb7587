"""An attached file lives in the conversation, not on the disk where it was: its text and SHA-256
go into the .duet file (and come back with the conversation tree), into both exports, and into
the search; a file whose attachment was tampered with is refused as damaged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.conversation.export import to_json, to_markdown
from engine.conversation.search_index import saved_texts
from engine.conversation.session import store
from engine.conversation.session.format import read_meta
from engine.conversation.store import tree_from_json, tree_to_json
from engine.conversation.tree import Conversation
from engine.documents.extract import read_document
from engine.errors import SessionError
from engine.llama.context import LlamaSequence
from engine.llama.context_params import ContextParams
from engine.prompts.attachments import attachment


def _conversation(tmp_path: Path) -> Conversation:
    f = tmp_path / "notes.md"
    f.write_text("The pump runs at 1450 rpm; the spare impeller is in locker B.", encoding="utf-8")
    conv = Conversation("c", None)
    conv.add_user("Where is the spare impeller?", attachments=(attachment(read_document(f)),))
    f.unlink()  # the path is never read again
    return conv


def test_the_file_goes_into_the_duet_file_and_back(smol, tmp_path: Path) -> None:
    conv = _conversation(tmp_path)
    path = tmp_path / "c.duet"
    with LlamaSequence(smol, ContextParams(n_ctx=256)) as ctx:
        store.save_contexts(path, ctx, None, conv.engine_messages(),
                            settings={"tree": tree_to_json(conv)}, with_kv=False)
    meta = read_meta(path)
    (saved,) = meta.messages[0].attachments
    assert saved.name == "notes.md" and "locker B" in saved.text and len(saved.sha256) == 64
    messages = [store.from_saved(m) for m in meta.messages]
    assert messages[0].attachments == conv.turns[0].attachments
    root = tree_from_json(meta.settings["tree"], messages)
    assert root is not None and root.current.turn.attachments == conv.turns[0].attachments
    assert any("locker B" in t for t in saved_texts(path))  # the search reads it


def test_both_exports_hold_the_file(tmp_path: Path) -> None:
    conv = _conversation(tmp_path)
    md = to_markdown(conv)
    assert "**Attached:** `notes.md`" in md and "locker B" in md
    data = json.loads(to_json(conv))
    assert data["messages"][0]["attachments"][0]["text"].endswith("locker B.")


def test_a_tampered_attachment_is_refused(smol, tmp_path: Path) -> None:
    conv = _conversation(tmp_path)
    path = tmp_path / "c.duet"
    with LlamaSequence(smol, ContextParams(n_ctx=256)) as ctx:
        store.save_contexts(path, ctx, None, conv.engine_messages(), settings={}, with_kv=False)
    raw = path.read_bytes()
    sha = conv.turns[0].attachments[0].sha256.encode()
    path.write_bytes(raw.replace(sha, b"not-a-sha" + sha[9:]))
    with pytest.raises(SessionError):
        read_meta(path)
