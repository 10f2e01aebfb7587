"""What quitting now would interrupt, in words, for the question the window asks first. Pure
Python."""

from __future__ import annotations


def unfinished(generating: bool, draft: str) -> str | None:
    """``generating``: a reply is being written; ``draft``: the composer's unsent text. None:
    nothing would be lost, quit without asking."""
    why = []
    if generating:
        why.append("A reply is being written: it stops here.")
    if draft.strip():
        why.append("Your unsent message is kept: it is in the composer at the next start.")
    return " ".join(why) or None
