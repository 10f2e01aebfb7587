"""Import test helpers: a Duet home of each test's own, and the conversations an import wrote."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engine import paths
from engine.conversation.session.format import read_meta
from engine.conversation.session.meta import SessionMeta
from engine.conversation.session.store import from_saved
from engine.conversation.store import tree_from_json
from engine.conversation.tree import Conversation

DATA = Path(__file__).resolve().parents[3] / "data" / "imports"


@pytest.fixture
def home(tmp_path, monkeypatch):
    """DUET_HOME of this test: its conversations folder (and search index) are its own."""
    monkeypatch.setenv("DUET_HOME", str(tmp_path / "home"))
    return paths.conversations_dir()


@dataclass
class Saved:
    path: Path
    meta: SessionMeta
    conv: Conversation

    @property
    def shown(self) -> list[tuple[str, str]]:
        return [(t.role, t.text) for t in self.conv.turns]

    @property
    def imported(self) -> dict[str, Any]:
        return dict(self.meta.settings["import"])


def saved(folder: Path) -> dict[str, Saved]:
    """Every conversation in ``folder`` by its title, read as the window reads it (its tree
    must match its messages, or the window would show a linear chat)."""
    out = {}
    for p in sorted(folder.glob("*.duet")):
        meta = read_meta(p)
        root = tree_from_json(meta.settings.get("tree"), [from_saved(m) for m in meta.messages])
        assert root is not None, p
        conv = Conversation(meta.settings["title"], p)
        conv.set_root(root)
        out[conv.title] = Saved(p, meta, conv)
    return out
