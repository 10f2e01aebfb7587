"""Never slower: a ledger of what drafting has actually saved, and quiet spells when it loses.

A drafter's own estimate (an n-gram survival, a draft model's acceptance) decides how long a
draft is. This ledger checks the result: after each verified draft it books what the pass saved
against plain decoding, in target time from the calibrated cost curve:

    gain = (n_accepted + 1) * verify(1) - (drafting + verifying, as measured)

(plain decoding would have taken n_accepted + 1 single steps for the same tokens; where no
time was measured, the curve's ``pass_cost(k)`` stands in). After
``streak`` losing drafts in a row the source goes quiet: its next ``spell`` proposals are not
verified. A source that goes on losing after its spell gets a spell twice as long (up to
``quiet_max``); any draft that pays resets it. On work where drafts are not accepted (math,
open chat) drafting stops within a few passes and costs one short probe per spell; on a copy,
losses come singly between paying drafts and nothing changes. Each reply starts afresh.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.speculative.controller import CostModel


@dataclass(frozen=True)
class PayoffParams:
    """Set by replaying the n-gram speculator on plain greedy traces of the benchmark suite (16
    prompts, two per category) with the 1.5B target's CPU cost curve (scripts/simulate_spec.py),
    over streak {2, 3, 4, 6} x quiet_min {2, 4, 8}: streak 2 made summarization, RAG or code
    editing slower (a copy's losses can come in pairs); streak 3 with quiet_min 4 was the best
    setting that left no category slower (math 0.960x -> 0.978x, the rest unchanged). A decayed
    balance of gains instead of a streak silenced copies and lost 3-4% on code editing."""

    streak: int = 3
    quiet_min: int = 4
    quiet_max: int = 64


class PayoffLedger:
    """One drafter's record of what its drafts saved, and the quiet spell in force."""

    def __init__(self, cost: CostModel, params: PayoffParams = PayoffParams()) -> None:
        self.cost = cost
        self.params = params
        self.saved_s = 0.0  # this reply's total, for reports
        self.reset()

    def reset(self) -> None:
        """A new reply: no losses counted, no spell."""
        self.losses = 0
        self.spell = self.params.quiet_min
        self.quiet_left = 0
        self.saved_s = 0.0

    def allows(self) -> bool:
        """Whether a proposal may be verified now (call once per proposal)."""
        if self.quiet_left <= 0:
            return True
        self.quiet_left -= 1
        return False

    def record(self, n_drafted: int, n_accepted: int, seconds: float = 0.0) -> float:
        """Book one verified draft; return its gain in seconds (negative: it lost time).
        ``seconds``: what drafting and verifying really took (0: estimate it from the curve).
        Measured time counts what the curve does not: a draft model catching up on the
        accepted tokens, sampling, Python."""
        c = self.cost
        spent = seconds if seconds > 0 else c.pass_cost(n_drafted)
        gain = (n_accepted + 1) * c.verify_cost(1) - spent
        self.saved_s += gain
        if gain > 0:
            self.losses = 0
            self.spell = self.params.quiet_min
        else:
            self.losses += 1
            if self.losses >= self.params.streak:
                self.quiet_left = self.spell
                self.spell = min(2 * self.spell, self.params.quiet_max)
                self.losses = 0
        return gain
