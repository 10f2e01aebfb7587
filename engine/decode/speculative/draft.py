"""What a drafter proposes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, eq=False)
class Draft:
    """Proposed continuation. ``source``: the drafter (ngram, model; grammar for the tokens a
    grammar forces). ``seconds``: time spent drafting.
    ``match_len``: for n-gram drafts, how many tokens of history agree with the matched context.
    ``survival``: where the drafter can tell, P(the first j tokens are all accepted), j = 1..k."""

    tokens: tuple[int, ...] = ()
    source: str = "none"
    seconds: float = 0.0
    match_len: int = 0
    survival: tuple[float, ...] = ()
