"""Tests of engine.speculative.styles and of the n-gram drafter converting identifiers to a learned style
(the Qwen tokenizer, real)."""
from __future__ import annotations

import pytest

from engine.speculative.ngram import NgramDrafter
from engine.speculative.styles import Words, camel_to_snake, snake_to_camel, stated_renames


@pytest.mark.parametrize("name, snake", [
    ("addItem", "add_item"), ("findByTag", "find_by_tag"), ("parseHTTPReply", "parse_http_reply"),
    ("toUTF8", "to_utf8"), ("Item", None), ("MAX_SIZE", None), ("add_item", None), ("sku", None),
])
def test_camel_to_snake(name: str, snake: str | None) -> None:
    assert camel_to_snake(name) == snake


@pytest.mark.parametrize("name, camel", [
    ("add_item", "addItem"), ("find_by_tag", "findByTag"), ("_private_name", "_privateName"),
    ("__init__", None), ("sku", None), ("addItem", None), ("MAX_SIZE", None),
])
def test_snake_to_camel(name: str, camel: str | None) -> None:
    assert snake_to_camel(name) == camel


def tokens(model, text: str) -> list[int]:
    return model.tokenize(text, add_special=False, parse_special=False)


def test_identifiers_read_across_tokens(qwen_draft) -> None:
    words = Words(qwen_draft)
    toks = tokens(qwen_draft, "    def removeItem(self, sku):")
    pieces = [qwen_draft.piece(t).decode() for t in toks]
    start = pieces.index(" remove")
    ident = words.identifier_at(toks, start)
    assert (ident.lead, ident.name, ident.trail) == (" ", "removeItem", "")
    assert "".join(pieces[start:ident.end]) == " removeItem"
    assert words.identifier_at(toks, start + 1) is None  # inside the word
    assert words.identifier_at(toks, pieces.index("(self")).name == "self"  # after punctuation


SOURCE = '''class Shop:
    def addItem(self, item):
        self.items.append(item)

    def removeItem(self, item):
        self.items.remove(item)

    def countItems(self):
        return len(self.items)
'''


def test_a_style_learned_from_one_rename_converts_the_next_names(qwen_draft) -> None:
    d = NgramDrafter(vocab=qwen_draft)
    source = tokens(qwen_draft, SOURCE)
    d.begin(source)
    reply = tokens(qwen_draft, SOURCE.replace("addItem", "add_item").split("    def remove")[0] + "    def")
    draft = d.propose(source + reply, 12)
    assert qwen_draft.detokenize(draft.tokens).startswith(" remove_item(self, item):")
    assert [r.style.name for r in d.edits.styles] == ["snake_case"]


def test_a_style_the_reply_does_not_follow_is_dropped(qwen_draft) -> None:
    d = NgramDrafter(vocab=qwen_draft)
    source = tokens(qwen_draft, SOURCE)
    d.begin(source)
    kept = SOURCE.replace("addItem", "add_item")  # removeItem and countItems stay as they are
    reply = tokens(qwen_draft, kept.split("    def count")[0] + "    def")
    draft = d.propose(source + reply, 4)
    assert not d.edits.styles[0].active
    assert qwen_draft.detokenize(draft.tokens).startswith(" countItems(")


def test_without_a_tokenizer_no_style_is_learned(qwen_draft) -> None:
    d = NgramDrafter()
    source = tokens(qwen_draft, SOURCE)
    d.begin(source)
    reply = tokens(qwen_draft, SOURCE.replace("addItem", "add_item").split("    def remove")[0] + "    def")
    draft = d.propose(source + reply, 12)
    assert not d.edits.styles
    assert qwen_draft.detokenize(draft.tokens).startswith(" removeItem(")


VARS = '''def total(item, items):
    seen = {item.sku}
    for other in items:
        seen.add(other.sku)
    return [item] + sorted(seen)
'''


def test_a_rename_learned_once_applies_however_the_name_is_tokenized(qwen_draft) -> None:
    d = NgramDrafter(vocab=qwen_draft)
    source = tokens(qwen_draft, VARS)
    d.begin(source)
    renamed = VARS.replace("item", "entry").replace("entrys", "items")
    upto = renamed.index("    for")
    reply = tokens(qwen_draft, renamed[:upto])  # `item` renamed as a parameter and after `{`
    draft = d.propose(source + reply, 40)
    assert qwen_draft.detokenize(draft.tokens).startswith(renamed[upto:].rstrip("\n")[:60])
    assert [r.style.name for r in d.edits.styles] == ["item -> entry"]


def test_the_latest_rename_of_a_name_wins(qwen_draft) -> None:
    from engine.speculative.edits import EditMemory

    memory = EditMemory(qwen_draft)
    for new in ("entry", "thing"):
        toks = tokens(qwen_draft, f"x = item\ny = {new}\n")
        memory.learn_style(toks, toks.index(tokens(qwen_draft, " item")[0]),
                           len(toks) - 2)
    assert [r.style.name for r in memory.styles] == ["item -> thing"]


@pytest.mark.parametrize("text, renames", [
    ("Rename every method to snake_case (addItem -> add_item and so on).", [("addItem", "add_item")]),
    ("rename the variable `item` to `entry` everywhere", [("item", "entry")]),
    ("Rename `foo` into `bar`, and `a` → `b`.", [("a", "b"), ("foo", "bar")]),
    ("rename it to match the spec", []),  # prose, not a stated rename
    ("x => x + 1", []),
    ("keep `n` -> `n`", []),
])
def test_stated_renames(text: str, renames: list[tuple[str, str]]) -> None:
    assert stated_renames(text) == renames


def test_a_rename_stated_in_the_prompt_is_drafted_at_its_first_occurrence(qwen_draft) -> None:
    d = NgramDrafter(vocab=qwen_draft)
    source = tokens(qwen_draft, "Rename `item` to `entry`.\n\n" + VARS)
    d.begin(source)
    reply = tokens(qwen_draft, "def total")
    draft = d.propose(source + reply, 8)
    assert qwen_draft.detokenize(draft.tokens).startswith("(entry, items):\n")


def test_a_rename_that_extends_a_name_is_learned_too(qwen_draft) -> None:
    """``item`` -> ``item_old``: the reply keeps the name's token and inserts after it, so the
    copy breaks on the token after the name, not on the name itself."""
    d = NgramDrafter(vocab=qwen_draft)
    source = tokens(qwen_draft, VARS)
    d.begin(source)
    renamed = VARS.replace("item", "item_old").replace("item_olds", "items")
    assert tokens(qwen_draft, " item_old")[0] == tokens(qwen_draft, " item")[0]  # an insertion
    upto = renamed.index("    for")
    reply = tokens(qwen_draft, renamed[:upto])
    draft = d.propose(source + reply, 40)
    assert qwen_draft.detokenize(draft.tokens).startswith(renamed[upto:].rstrip("\n")[:60])
    assert [r.style.name for r in d.edits.styles] == ["item -> item_old"]
