"""Every constant of speculative decoding, each with the measurement that set it.

"Replay": ``scripts/simulate_spec.py --half tuning [--set NAME=VALUE]``, plain greedy traces of the
1.5B on the suite's tuning half (docs/benchmarks/suite.md) with this CPU's verify-cost curve; the
geometric mean over categories of the speedup over plain decoding. Settings a person chooses
(draft lengths, n-gram sizes, ``p_min``) are ``SpeculativeParams``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tuning:
    # An edit replaces a few tokens: after a copy breaks off it is looked for again within this
    # many source tokens, for as many tokens of reply, and spans (and names) up to this long are
    # learned as edits. Replay: 8 -> 1.1258, 12 -> 1.1280, 16 -> 1.1270, 24 -> 1.1243.
    edit_span: int = 12
    # Rewound text kept matchable: several replies' worth; indexing 900 tokens takes 3 ms, so
    # rebuilding it at a reply's start costs about 13 ms. Replay of each prompt sent a second
    # time: 2.496 (1.128 with none kept).
    memory_tokens: int = 4096
    # Agreement is counted up to this many tokens: the copy odds' prior stops growing there (and
    # longer copies share one count), and a match only in remembered text is drafted once as
    # many of the reply's own tokens agree with it (with the prompt's end counted, a rename sent
    # after a bug fix of the same code drafted the old reply and ran 24.4 tok/s against 38.4,
    # docs/benchmarks/speculative.md). Replay: 4 -> 1.1290, 6 -> 1.1200, 8 -> 1.1340,
    # 12 -> 1.1340, 16 -> 1.1280 (a passage an answer quotes in part was drafted 15 at a time).
    agree_cap: int = 8
    # Pseudo-predictions at the copy odds' prior before the reply's own count. Replay: 2 ->
    # 1.1113, 4 -> 1.1280, 8 -> 1.1246.
    prior_weight: float = 4.0
    # The payoff ledger: after this many losing drafts in a row a drafter is quiet for as many
    # proposals, twice as long each time it loses again, up to ``quiet_max`` (about 2.4 s of
    # 38 ms steps, the longest a copy that starts late in a long reply waits). Replay:
    # 2 -> 1.1280, 3 -> 1.1228, 4 -> 1.1216, no ledger 1.1201; quiet_max 16, 64 or none alike.
    loss_streak: int = 2
    quiet_max: int = 64
    # The acceptance assumed for a draft model's tokens (its ``p_min`` stops it where it is
    # unsure): the 0.5B for the 1.5B had 0.64-1.00 of its tokens accepted, median 0.89, on the
    # shipped prompts (docs/benchmarks/speculative.md, "The whole prompt set").
    model_alpha: float = 0.9
    # Batch sizes of the verify-cost curve: per token, a batch's cost is far from smooth on a
    # CPU (16 tokens cost 269 ms, 12 cost 285 ms), so it is measured at each size drafted.
    calibration_sizes: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
    # Context before the batches are timed: a curve measured after 64 tokens drafted too long
    # where replies run (replay: 2.00x against 2.21x on a rename edit, 1.09x against 1.18x on
    # docstrings). Medians of this many rounds: one hiccup in 3 moves no point; a round of the
    # 1.5B's curve takes about 6 s. While replies run, a size's point follows its passes once as
    # many were timed (engine.decode.speculative.controller.CostTrack).
    calibration_depth: int = 512
    calibration_repeats: int = 3
    # A curve off by more than this factor (the median over as many passes) is measured again:
    # this VM's speed drifts by about 10% between runs, and a curve off by less than 2x changes
    # the chosen lengths little. The followed curve takes its medians over as many passes of a
    # size: the last few seconds of drafting, so it follows the machine's spells (replay of a
    # curve that drifted: 1.136x -> 1.154x, docs/benchmarks/speculative.md).
    cost_check_factor: float = 2.0
    cost_check_passes: int = 16


TUNING = Tuning()
