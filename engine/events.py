"""The engine's output: a stream of small frozen events that the GUI, the CLI and the benchmarks
all consume the same way."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field

from engine.errors import DuetError


@dataclass(frozen=True)
class PromptProgress:
    """Prompt processing advanced: ``done`` of ``total`` new prompt tokens are in the cache."""

    done: int
    total: int


@dataclass(frozen=True)
class Logprob:
    """A token's log-probability under the target's own distribution — the log-softmax of its
    logits, before the penalties, the sampling chain and any grammar (llama-server's default,
    ``post_sampling_probs`` off) — and the ``top`` most likely tokens there, (id, logprob),
    best first. The same whether the token was drafted or decoded alone."""

    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class Token:
    """One generated token. ``text`` is what it adds to the reply (may be empty while a UTF-8
    character or a possible stop string is held back). ``step_end``: the last token of a
    decoding step (one target pass); the next one comes only after another pass. ``drafter``:
    what proposed it (ngram, model; grammar when a grammar forced it); ``logprob``: when the
    request asked for log-probabilities."""

    id: int
    text: str
    from_draft: bool = False
    drafter: str | None = None
    step_end: bool = False
    logprob: Logprob | None = None


@dataclass(frozen=True)
class Stats:
    n_prompt_tokens: int = 0
    n_cached_tokens: int = 0  # prompt tokens reused from the KV cache (not decoded again)
    prompt_s: float = 0.0
    n_tokens: int = 0
    gen_s: float = 0.0
    elapsed_s: float = 0.0
    proposed: int = 0
    accepted: int = 0
    target_passes: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0
    drafter: str = "none"
    drafters_used: dict[str, int] = field(default_factory=dict)
    n_eog: int = 0  # 1 when the last token was an end-of-generation token (no text, no Token)

    @property
    def n_completion(self) -> int:
        """The reply's tokens as a client counts them (usage): each had a Token event (and a
        log-probability entry); the end-of-generation token that stopped it is not one."""
        return self.n_tokens - self.n_eog

    @property
    def tokens_per_s(self) -> float:
        return self.n_tokens / self.gen_s if self.gen_s > 0 else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def tokens_per_pass(self) -> float:
        return self.n_tokens / self.target_passes if self.target_passes else 0.0

    def to_json(self) -> dict:
        d = asdict(self)
        d.update(tokens_per_s=self.tokens_per_s, acceptance_rate=self.acceptance_rate,
                 tokens_per_pass=self.tokens_per_pass)
        return d


@dataclass(frozen=True)
class Done:
    """The reply ended. ``reason``: stop (EOG or stop string), length (max_tokens),
    context_full, cancelled."""

    reason: str
    text: str
    token_ids: tuple[int, ...]
    stats: Stats
    tail: str = ""  # text held back until the end (already included in ``text``)
    note: str | None = None  # why the kept turns were recomputed rather than shifted


Event = PromptProgress | Token | Done


def collect(events: Iterable[Event], on_token: Callable[[Token], None] | None = None) -> Done:
    """Run a stream to its end and return its ``Done`` (calling ``on_token`` for each token)."""
    done = None
    for ev in events:
        if isinstance(ev, Token) and on_token is not None:
            on_token(ev)
        elif isinstance(ev, Done):
            done = ev
    if done is None:
        raise DuetError("the generation ended without a result")
    return done


def done_json(done: Done) -> dict:
    """A reply's result as plain JSON (``duet-cli generate --json``, sessions)."""
    s = done.stats
    return {
        "text": done.text,
        "token_ids": list(done.token_ids),
        "n_prompt_tokens": s.n_prompt_tokens,
        "n_cached_tokens": s.n_cached_tokens,
        "n_tokens": s.n_tokens,
        "finish_reason": done.reason,
        "prompt_s": round(s.prompt_s, 4),
        "elapsed_s": round(s.elapsed_s, 4),
        "tokens_per_s": round(s.tokens_per_s, 2),
        "stats": {
            "proposed": s.proposed,
            "accepted": s.accepted,
            "acceptance_rate": round(s.acceptance_rate, 4),
            "target_passes": s.target_passes,
            "tokens_per_pass": round(s.tokens_per_pass, 3),
            "drafter": s.drafter,
            "drafters_used": s.drafters_used,
            "draft_s": round(s.draft_s, 4),
            "verify_s": round(s.verify_s, 4),
        },
    }
