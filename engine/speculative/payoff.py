"""Never slower: a ledger of what drafting has actually saved, and quiet spells when it loses.

A drafter's own estimate (an n-gram survival, a draft model's acceptance) decides how long a
draft is. This ledger checks the result: after each verified draft it books what the pass saved
against plain decoding, in target-step time from the calibrated cost curve:

    gain = (n_accepted + 1) * verify(1) - verify(k + 1) - k * draft_s_per_token

(plain decoding would have taken n_accepted + 1 single steps for the same tokens). The balance
decays (recent passes count most). When it falls below zero, the source goes quiet: no drafts
of it for ``quiet`` target passes, after which one probe is allowed. A probe that loses again
doubles the quiet spell (up to ``quiet_max``); a pass that pays resets it. On work where drafts
are not accepted (math, translation, open chat) drafting stops within a few passes and costs at
most one probe per spell; on a copy, passes pay and nothing changes.

A draft whose match is long (``strong``) is let through a quiet spell: a copy that starts in
the middle of a reply should not wait for the spell to end.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.speculative.controller import CostModel


@dataclass(frozen=True)
class PayoffParams:
    """* ``decay = 0.7``: the balance forgets a pass's gain within about three passes, so an
      early lucky copy does not keep a losing drafter going ("a few target passes").
    * ``quiet_min = 4`` / ``quiet_max = 64`` passes: the first spell costs little if the text
      turns into a copy; doubling keeps the probes' cost under 1/64 of the passes on text that
      never pays.
    * ``strong_match = 16`` tokens of agreement with the history: a copy in progress (the
      n-gram drafter's reliability rises steeply past about 8; twice that is a safe margin)."""

    decay: float = 0.7
    quiet_min: int = 4
    quiet_max: int = 64
    strong_match: int = 16


class PayoffLedger:
    """Per drafter: the decayed balance of time saved, and the quiet spell in force."""

    def __init__(self, cost: CostModel, params: PayoffParams = PayoffParams()) -> None:
        self.cost = cost
        self.params = params
        self.balance = 0.0
        self.spell = params.quiet_min
        self.quiet_left = 0
        self.saved_s = 0.0  # the undecayed total, for reports

    def allows(self, match_len: int = 0) -> bool:
        """Whether a draft may be verified on this pass (call once per pass that could draft)."""
        if self.quiet_left <= 0:
            return True
        self.quiet_left -= 1
        return match_len >= self.params.strong_match

    def record(self, n_drafted: int, n_accepted: int) -> float:
        """Book one verified draft; return its gain in seconds (negative: it lost time)."""
        c = self.cost
        gain = ((n_accepted + 1) * c.verify_cost(1) - c.verify_cost(n_drafted + 1)
                - n_drafted * c.draft_s_per_token)
        self.saved_s += gain
        self.balance = self.params.decay * self.balance + gain
        if gain > 0:
            self.spell = self.params.quiet_min
        if self.balance < 0:
            self.quiet_left = self.spell
            self.spell = min(2 * self.spell, self.params.quiet_max)
            self.balance = 0.0
        return gain
