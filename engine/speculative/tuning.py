"""Every constant of speculative decoding, each with the measurement that set it.

Replays are ``scripts/simulate_spec.py`` on plain greedy traces of the 1.5B target over the
benchmark suite (engine/bench/suite.py) with this CPU's verify-cost curve; constants are set on
the suite's tuning half (an even index within each category) and checked on the held-out half
(docs/benchmarks/suite.md, docs/benchmarks/speculative.md). ``--set NAME=VALUE`` replays with one
changed. Settings a person chooses (draft length bounds, n-gram sizes, ``p_min``) are
``SpeculativeParams``, not constants.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tuning:
    # The n-gram drafter. An edit replaces a short span: after a copy breaks off, it is looked
    # for again within this many tokens of its source (an anchor no longer sought after as many
    # tokens of reply), and spans up to this long are learned as edits (identifiers renamed up
    # to this many tokens). Replay, tuning half: 8 / 16 / 24 / 32 -> TODO.
    edit_span: int = 16
    # Rewound text (a regenerated reply, an edited turn) kept matchable: several replies' worth;
    # rebuilding it at a reply's start costs about 13 ms (indexing 900 tokens takes 3 ms).
    memory_tokens: int = 4096
    # Agreement is counted up to this many tokens, and a match only in remembered text is
    # drafted once this many of the reply's tokens agree with it: with the prompt's end counted,
    # a rename sent after a bug fix of the same code drafted the old reply and ran 24.4 tok/s
    # against 38.4 (1.5B, 200 tokens; docs/benchmarks/speculative.md).
    agree_cap: int = 16
    # The copy odds: pseudo-predictions at the prior before a reply's own count. Replay, tuning
    # half: TODO.
    prior_weight: float = 4.0
    # The payoff ledger: after this many losing drafts in a row a drafter is quiet for as many
    # proposals, twice as long each time it loses again, up to ``quiet_max``. Replay, tuning half:
    # TODO.
    loss_streak: int = 2
    quiet_max: int = 64
    # The acceptance a draft model's tokens are assumed to have (its own ``p_min`` stops it where
    # it is unsure): the 0.5B for the 1.5B accepted 0.64-1.00 of its tokens, median 0.89, on the
    # shipped prompts (docs/benchmarks/speculative.md, "The whole prompt set").
    model_alpha: float = 0.9
    # Batch sizes of the verify-cost curve: the cost per token of a batch is far from smooth on a
    # CPU (16 tokens cost 269 ms, 12 cost 285 ms), so the curve is measured at each size drafted.
    calibration_sizes: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
    # Context before the batches are timed: a curve measured after 64 tokens drafted too long
    # where replies run (replay: 2.00x against 2.21x on a rename edit, 1.09x against 1.18x on
    # docstrings).
    calibration_depth: int = 512
    # A curve off by more than this factor from what passes cost is measured again: this VM's
    # speed drifts by about 10% between runs, and a curve off by less than 2x changes the
    # chosen lengths little. Judged on the median ratio of this many passes.
    cost_check_factor: float = 2.0
    cost_check_passes: int = 16


TUNING = Tuning()
