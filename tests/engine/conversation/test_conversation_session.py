"""A conversation tree saved in a ``.duet`` file: reopened with its versions, shown by inspect;
a file without a tree still opens as a linear chat."""

from __future__ import annotations

from engine.cli.main import main
from engine.conversation.session import store
from engine.conversation.store import tree_from_json, tree_to_json
from engine.conversation.tree import Conversation
from engine.events import Done, Stats
from engine.llama.context import LlamaSequence
from engine.llama.context_params import ContextParams


def _branched() -> Conversation:
    c = Conversation()
    c.add_user("Say hi.")
    c.begin_reply()
    c.finish_reply(Done("stop", "Hi!", (1,), Stats(n_tokens=1, gen_s=0.1)))
    c.begin_reply(1)
    c.finish_reply(Done("length", "Hello", (2,), Stats(n_tokens=1, gen_s=0.1)))
    return c


def test_tree_saved_in_the_settings_reopens_and_inspect_shows_it(smol, tmp_path, capsys):
    conv = _branched()
    path = tmp_path / "t.duet"
    with LlamaSequence(smol, ContextParams(n_ctx=256, n_threads=1)) as ctx:
        store.save_contexts(path, ctx, None, conv.engine_messages(),
                            settings={"tree": tree_to_json(conv)}, with_kv=False)
        opened = store.open_contexts(path, ctx)
    root = tree_from_json(opened.settings.get("tree"), opened.messages)
    again = Conversation()
    again.set_root(root)
    assert [t.text for t in again.turns] == ["Say hi.", "Hello"] and again.versions(1) == (2, 2)
    assert again.turns[1].reason == "length" and again.turns[1].stats.n_tokens == 1
    assert main(["session", "inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "conversation tree: 3 messages in all, 2 on the path shown, 1 message with " \
           "several versions" in out


def test_a_file_without_a_tree_opens_as_a_linear_chat(smol, tmp_path, capsys):
    conv = _branched()
    path = tmp_path / "old.duet"
    with LlamaSequence(smol, ContextParams(n_ctx=256, n_threads=1)) as ctx:
        store.save_contexts(path, ctx, None, conv.engine_messages(), settings={}, with_kv=False)
        opened = store.open_contexts(path, ctx)
    assert tree_from_json(opened.settings.get("tree"), opened.messages) is None
    linear = Conversation()
    linear.set_messages(opened.messages)
    assert [t.text for t in linear.turns] == ["Say hi.", "Hello"]
    assert main(["session", "inspect", str(path)]) == 0
    assert "conversation tree" not in capsys.readouterr().out
