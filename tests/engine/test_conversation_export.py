"""Export (Markdown of the branch shown, JSON of every version) and search."""

from __future__ import annotations

import json

from engine.conversation.export import export, matches, to_markdown
from engine.conversation.tree import Conversation
from engine.events import Done, Stats


def _conv() -> Conversation:
    c = Conversation()
    c.add_user("How do I reverse a list?")
    c.begin_reply()
    c.finish_reply(Done("stop", "Use `xs[::-1]`:\n\n```python\nxs[::-1]\n```", (1,), Stats()))
    c.begin_reply(1)
    c.finish_reply(Done("stop", "Call reversed(xs).", (2,), Stats()))
    return c


def test_markdown_has_the_branch_shown_and_json_every_version(tmp_path) -> None:
    c = _conv()
    md = to_markdown(c)
    assert md.startswith("# How do I reverse a list?") and "Call reversed(xs)." in md
    assert "xs[::-1]" not in md  # the other version is not on the branch shown
    export(c, tmp_path / "c.json")
    data = json.loads((tmp_path / "c.json").read_text())
    assert [m["content"] for m in data["messages"]][-1] == "Call reversed(xs)."
    assert len(data["tree"]["nodes"]) == 3
    export(c, tmp_path / "c.md")
    assert (tmp_path / "c.md").read_text() == md


def test_search_looks_at_titles_and_every_version() -> None:
    c = _conv()
    assert matches(c, "REVERSE") and matches(c, "xs[::-1]")  # in the hidden version too
    assert not matches(c, "dictionary")
