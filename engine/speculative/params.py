"""Speculative decoding settings."""

from __future__ import annotations

import math
from dataclasses import dataclass

DRAFTERS = ("none", "model", "ngram", "auto")


@dataclass(frozen=True)
class SpeculativeParams:
    """``drafter``: none (plain decoding), model (a draft model), ngram (prompt lookup), auto
    (whichever pays now). ``draft_max``/``draft_min`` bound a draft's length; ``p_min`` stops a
    draft model early when its top probability falls below it."""

    drafter: str = "auto"
    draft_max: int = 64
    draft_min: int = 1
    p_min: float = 0.75
    ngram_min: int = 2
    ngram_max: int = 5
    adaptive: bool = True

    def __post_init__(self) -> None:
        if self.drafter not in DRAFTERS:
            raise ValueError(f"drafter must be one of {', '.join(DRAFTERS)}")
        for name in ("draft_max", "draft_min", "ngram_min", "ngram_max"):
            if type(getattr(self, name)) is not int:
                raise ValueError(f"{name.replace('_', '-')} must be an integer")
        if not 1 <= self.draft_min <= self.draft_max <= 64:
            raise ValueError("need 1 <= draft_min <= draft_max <= 64")
        if isinstance(self.p_min, bool) or not isinstance(self.p_min, (int, float)) \
                or not math.isfinite(self.p_min) or not 0 <= self.p_min < 1:
            raise ValueError("p_min must be in [0, 1)")
        if not 1 <= self.ngram_min <= self.ngram_max <= 16:
            raise ValueError("need 1 <= ngram_min <= ngram_max <= 16")
