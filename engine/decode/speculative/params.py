"""Speculative decoding settings (rows of the parameter table, engine.params)."""

from __future__ import annotations

from dataclasses import dataclass

from engine.params import ParamError, Params, param

DRAFTERS = ("auto", "ngram", "model", "none")


@dataclass(frozen=True)
class SpeculativeParams(Params):
    """``drafter``: auto (whichever pays now), ngram (prompt lookup), model (a draft model),
    none (plain decoding). ``draft_max``/``draft_min`` bound a draft's length; ``p_min`` stops a
    draft model early when its top probability falls below it."""

    drafter: str = param(
        "auto", "Drafter", "auto: whichever pays now; ngram: copy from the conversation; model: "
        "the draft model; none: plain decoding.", applies="load", choices=DRAFTERS)
    draft_max: int = param(64, "Draft max", "Most tokens drafted per target pass.",
                           applies="load", minimum=1, maximum=64, step=1)
    draft_min: int = param(1, "Draft min", "Fewest drafted tokens worth verifying.",
                           applies="load", minimum=1, maximum=64, step=1)
    p_min: float = param(
        0.75, "Draft p_min", "The draft model stops drafting when its top probability falls "
        "below this.", applies="load", minimum=0, maximum=0.99)
    ngram_min: int = param(2, "N-gram min", "Shortest n-gram the n-gram drafter matches.",
                           applies="load", minimum=1, maximum=16, step=1)
    ngram_max: int = param(5, "N-gram max", "Longest n-gram the n-gram drafter matches.",
                           applies="load", minimum=1, maximum=16, step=1)
    adaptive: bool = param(
        True, "Adaptive", "Draft only as much as pays on this machine, and pause a drafter that "
        "loses time (off: always draft up to draft-max; for measurements).", applies="load")

    def _check(self) -> None:
        if self.draft_min > self.draft_max:
            raise ParamError("draft-min must not exceed draft-max", "draft_min")
        if self.ngram_min > self.ngram_max:
            raise ParamError("ngram-min must not exceed ngram-max", "ngram_min")
