"""Never slower than plain decoding: a ledger of what drafting saved, and quiet spells when it loses.

A verified draft gains ``(n_accepted + 1) * verify(1)`` (plain decoding's steps for its tokens)
less what drafting and verifying took. After ``loss_streak`` losses in a row the drafter is quiet
for as many proposals, twice as long each time it loses again (up to ``quiet_max``).
"""

from __future__ import annotations

from engine.decode.speculative.controller import CostModel
from engine.decode.speculative.tuning import TUNING, Tuning


class PayoffLedger:
    """One drafter's record in one reply: what its drafts saved, and the quiet spell in force."""

    def __init__(self, cost: CostModel, tuning: Tuning = TUNING) -> None:
        self.cost, self.tuning = cost, tuning
        self.reset()

    def reset(self) -> None:
        self.losses, self.spell, self.quiet_left, self.saved_s = 0, self.tuning.loss_streak, 0, 0.0

    def allows(self) -> bool:
        """Whether a proposal may be verified now (call once per proposal)."""
        if self.quiet_left <= 0:
            return True
        self.quiet_left -= 1
        return False

    def record(self, n_drafted: int, n_accepted: int, seconds: float = 0.0) -> float:
        """Book one verified draft (``seconds``: what drafting and verifying took, 0 if not
        measured); return its gain in seconds, negative where it lost time."""
        return self._book((n_accepted + 1) * self.cost.verify_cost(1) - (seconds or self.cost.pass_cost(n_drafted)))

    def wasted(self, seconds: float) -> float:
        """Book a proposal that cost ``seconds`` and offered nothing to verify (a draft model
        unsure of its first token still decoded the tokens it had not seen): a loss."""
        return self._book(-seconds)

    def _book(self, gain: float) -> float:
        self.saved_s += gain
        if gain > 0:
            self.losses, self.spell = 0, self.tuning.loss_streak
        else:
            self.losses += 1
            if self.losses >= self.tuning.loss_streak:
                self.losses, self.quiet_left = 0, self.spell
                self.spell = min(2 * self.spell, self.tuning.quiet_max)
        return gain
