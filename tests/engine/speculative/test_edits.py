"""Tests of engine.speculative.edits and of the n-gram drafter applying the edits it learns."""
from __future__ import annotations

from engine.speculative.edits import MAX_SPAN, EditMemory
from engine.speculative.ngram import NgramDrafter, NgramParams

WIDE = NgramParams(ngram_min=2, ngram_max=4)


def test_a_learned_edit_applies_where_its_span_starts() -> None:
    memory = EditMemory()
    memory.learn([7, 8], [70])
    tokens = [1, 7, 8, 2, 7, 9]
    assert memory.at(tokens, 1).output == (70,)
    assert memory.at(tokens, 4) is None  # 7 without the 8 is another span
    assert memory.at(tokens, 0) is None and memory.at(tokens, 6) is None


def test_the_longest_matching_span_wins_and_the_latest_edit_of_a_span() -> None:
    memory = EditMemory()
    memory.learn([7], [70])
    memory.learn([7, 8], [78])
    assert memory.at([7, 8], 0).output == (78,)
    assert memory.at([7, 9], 0).output == (70,)
    memory.learn([7], [71])
    assert memory.at([7, 9], 0).output == (71,) and len(memory) == 2


def test_an_edit_that_fails_as_often_as_it_holds_is_no_longer_applied() -> None:
    memory = EditMemory()
    edit = memory.learn([7], [70])
    first = edit.trust
    memory.confirm(edit, True)
    assert edit.trust > first and memory.at([7], 0) is edit
    memory.confirm(edit, False)
    assert memory.at([7], 0) is edit  # one failure against one success: still applied
    memory.confirm(edit, False)
    assert memory.at([7], 0) is None


def test_only_short_real_replacements_are_learned() -> None:
    memory = EditMemory()
    assert memory.learn([], [5]) is None  # an insertion has no span to recognise later
    assert memory.learn([5], [5]) is None
    assert memory.learn([5] * (MAX_SPAN + 1), [6]) is None
    assert memory.learn([5], [6] * (MAX_SPAN + 1)) is None
    assert memory.learn([5, 6], []) is not None  # a deletion recurs like a replacement
    assert len(memory) == 1


# -- the drafter --------------------------------------------------------------------------

# A source where the identifier 7 recurs, each time in a different context.
SOURCE = [49, 50, 51, 7, 52, 53, 54, 55, 56, 57, 7, 58, 59, 60, 61, 62, 63, 7, 64, 65, 66, 67]


def reply_with(replacement: list[int], upto: int) -> list[int]:
    """The source, copied up to ``upto`` with each 7 written as ``replacement``."""
    out = []
    for tok in SOURCE[:upto]:
        out.extend(replacement if tok == 7 else [tok])
    return out


def test_a_rename_learned_at_its_first_occurrence_is_drafted_at_the_next() -> None:
    d = NgramDrafter(WIDE)
    d.begin(SOURCE)
    reply = reply_with([70], 9)  # 49 50 51 70 52 ... : 7 renamed once, the copy resumed after it
    draft = d.propose(SOURCE + reply, 6)
    assert draft.tokens == (57, 70, 58, 59, 60, 61)
    edit = d.edits.at(SOURCE, 3)
    assert (edit.source, edit.output) == ((7,), (70,))  # learned from where the copy broke and resumed


def test_a_rename_to_several_tokens_and_its_survival() -> None:
    d = NgramDrafter(WIDE)
    d.begin(SOURCE)
    reply = reply_with([70, 71], 13)
    draft = d.propose(SOURCE + reply, 8)
    assert draft.tokens == (60, 61, 62, 63, 70, 71, 64, 65)
    assert len(draft.survival) == 8 and draft.survival[3] > draft.survival[4]  # the edit is a risk
    assert d.edits.at(SOURCE, 3).held == 1  # the second occurrence confirmed it


def test_an_edit_the_reply_stops_making_is_dropped() -> None:
    d = NgramDrafter(WIDE)
    d.begin(SOURCE)
    # renamed at the first occurrence, kept at the second (the edit fails), then up to the third
    reply = reply_with([70], 4) + SOURCE[4:16]
    draft = d.propose(SOURCE + reply, 4)
    assert draft.tokens == (63, 7, 64, 65)


def test_edits_are_forgotten_when_a_reply_starts() -> None:
    d = NgramDrafter(WIDE)
    d.begin(SOURCE)
    d.propose(SOURCE + reply_with([70], 9), 1)
    assert len(d.edits) == 1
    d.begin(SOURCE)
    assert len(d.edits) == 0


def test_a_dropped_span_is_drafted_without_it() -> None:
    d = NgramDrafter(WIDE)
    d.begin(SOURCE)
    reply = [t for t in SOURCE[:11] if t != 7]  # the 7 dropped, twice: the second time drafted
    draft = d.propose(SOURCE + reply, 7)
    assert draft.tokens == (58, 59, 60, 61, 62, 63, 64)  # ... 63, the third 7 dropped too, 64
    assert len(draft.survival) == 7 and d.edits.at(SOURCE, 3).output == ()
