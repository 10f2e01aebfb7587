"""Tests of engine.decode.speculative.edits and of the n-gram drafter making the edits it learns: token
edits on synthetic ids, renames with the real Qwen tokenizer."""
from __future__ import annotations

from engine.decode.speculative.edits import Edits
from engine.decode.speculative.ngram import NgramDrafter
from engine.decode.speculative.tuning import TUNING
from engine.llama.model import Model


def wide() -> NgramDrafter:
    """A drafter matching 2- to 4-grams."""
    return NgramDrafter(ngram_min=2, ngram_max=4)
SPAN = TUNING.edit_span


def learn(edits: Edits, source: list[int], output: list[int]) -> None:
    """Teach ``edits`` that the reply wrote ``output`` where its source has ``source``."""
    tokens = source + output
    edits.learn(tokens, 0, len(source), len(source), len(tokens))


def test_a_learned_edit_applies_where_its_span_starts_the_longest_and_latest_winning() -> None:
    edits = Edits(None, SPAN)
    learn(edits, [7, 8], [70])
    assert edits.at([1, 7, 8, 2, 7, 9], 1).output == (70,)
    assert edits.at([1, 7, 8, 2, 7, 9], 4) is None  # 7 without the 8 is another span
    learn(edits, [7], [71])
    assert edits.at([7, 8], 0).output == (70,) and edits.at([7, 9], 0).output == (71,)
    learn(edits, [7], [72])
    assert edits.at([7, 9], 0).output == (72,)


def test_an_edit_is_made_while_it_held_more_often_than_it_failed() -> None:
    edits = Edits(None, SPAN)
    learn(edits, [7], [70])
    rule = edits.at([7], 0).rule
    assert rule.trust == 2 / 3  # the occurrence it was learned from counts as one
    rule.held += 1
    rule.failed += 1
    assert edits.at([7], 0).rule is rule and rule.trust == 3 / 5
    rule.failed += 1
    assert edits.at([7], 0) is None


def test_only_short_spans_are_learned() -> None:
    edits = Edits(None, SPAN)
    for source, output in (([], [5]), ([5] * (SPAN + 1), [6]), ([5], [6] * (SPAN + 1))):
        learn(edits, source, output)
        assert edits.at(source + [0], 0) is None
    learn(edits, [5, 6], [])  # a deletion recurs like a replacement
    assert edits.at([5, 6], 0).output == ()


# -- the drafter, on ids: an identifier 7 recurring in different contexts ----------------------
SOURCE = [49, 50, 51, 7, 52, 53, 54, 55, 56, 57, 7, 58, 59, 60, 61, 62, 63, 7, 64, 65, 66, 67]


def reply_with(replacement: list[int], upto: int) -> list[int]:
    """The source copied up to ``upto`` with each 7 written as ``replacement``."""
    return [t for tok in SOURCE[:upto] for t in (replacement if tok == 7 else [tok])]


def test_an_edit_learned_at_its_first_occurrence_is_drafted_at_the_next() -> None:
    d = wide()
    d.begin(SOURCE)
    draft = d.propose(SOURCE + reply_with([70], 9), 6)
    assert draft.tokens == (57, 70, 58, 59, 60, 61)
    assert draft.survival[1] / draft.survival[0] <= 2 / 3  # the edit is a risk (trust 2/3)


def test_an_edit_to_several_tokens_is_confirmed_and_one_the_reply_stops_making_dropped() -> None:
    d = wide()
    d.begin(SOURCE)
    assert d.propose(SOURCE + reply_with([70, 71], 13), 8).tokens == (60, 61, 62, 63, 70, 71, 64, 65)
    assert d.edits.at(SOURCE, 3).rule.held == 2  # learned, then made again at the second 7
    kept = wide()
    kept.begin(SOURCE)
    # renamed at the first 7, not at the second: dropped
    reply = reply_with([70], 4) + SOURCE[4:16]
    assert kept.propose(SOURCE + reply, 3).tokens == (63, 7, 64)
    d.begin(SOURCE)
    assert d.edits.at(SOURCE, 3) is None  # a new reply starts without edits


def test_a_dropped_span_is_drafted_without_it() -> None:
    d = wide()
    d.begin(SOURCE)
    draft = d.propose(SOURCE + [t for t in SOURCE[:11] if t != 7], 7)
    assert draft.tokens == (58, 59, 60, 61, 62, 63, 64)  # the third 7 dropped too


# -- renames, with the real tokenizer ----------------------------------------------------------
CODE = '''def total(items, item):
    seen = set()
    for other in items:
        seen.add(other.sku)
    first = min(item, other)
    return [first, item.sku] + sorted(seen)
'''


def tokens(model: Model, text: str) -> list[int]:
    return model.tokenize(text, add_special=False, parse_special=False)


def drafted_after(vocab: Model, renamed: str, upto: str,
                  renames: bool = True) -> tuple[NgramDrafter, str, str]:
    """The drafter (given ``vocab`` if ``renames``) after a reply that wrote ``renamed`` up to
    ``upto``: its draft's text, and what the reply goes on with."""
    d = NgramDrafter(vocab if renames else None)
    source = tokens(vocab, CODE)
    d.begin(source)
    cut = renamed.index(upto)
    draft = d.propose(source + tokens(vocab, renamed[:cut]), 40)
    return d, vocab.detokenize(draft.tokens), renamed[cut:]


def test_a_rename_learned_once_applies_however_the_name_is_tokenized(qwen_target: Model) -> None:
    """Learned at `` item`` and made at ``(item``, another token."""
    renamed = CODE.replace("item", "entry").replace("entrys", "items")
    d, text, rest = drafted_after(qwen_target, renamed, "    for")
    assert text.startswith(rest) and "min(entry" in rest
    assert list(d.edits.renames) == ["item"]
    without = drafted_after(qwen_target, renamed, "    for", renames=False)[1]
    assert not without.startswith(rest)  # token edits alone miss it


def test_a_rename_that_extends_a_name_is_learned_too(qwen_target: Model) -> None:
    """``item`` -> ``item_old``: the reply keeps the name's token and writes more after it, so
    the copy breaks on the token after the name, not on the name."""
    assert tokens(qwen_target, " item_old")[0] == tokens(qwen_target, " item")[0]
    renamed = CODE.replace("item", "item_old").replace("item_olds", "items")
    d, text, rest = drafted_after(qwen_target, renamed, "    for")
    assert text.startswith(rest)
    assert d.edits.renames["item"].new == "item_old"


def test_code_with_arrows_teaches_no_rename(qwen_target: Model) -> None:
    """A prompt's text is never read for renames: ``node->next`` in C is copied as it is."""
    source = tokens(qwen_target, "Explain: `node->next = prev->next;` and `a -> b`.\n")
    d = NgramDrafter(qwen_target)
    d.begin(source)
    assert not d.edits.renames
    draft = d.propose(source + tokens(qwen_target, "The line `node"), 6)
    assert qwen_target.detokenize(draft.tokens).startswith("->next")
