"""One timing harness for every engine in a comparison, so that ratios compare like with like,
and where two runs part.

A run is a stream of generated pieces; we note the start, the arrival of the first token and of
the last. Prefill rate = prompt tokens / (first − start); decode rate = (n − 1) / (last − first).
"""

from __future__ import annotations

import resource
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from engine.events import Done, Token

if TYPE_CHECKING:
    from llama_cpp import Llama

    from engine.decode.sampling import SamplingParams
    from engine.events import Done
    from engine.runtime.runtime import Runtime

T = TypeVar("T")


@dataclass(frozen=True)
class RunTiming:
    n_prompt: int
    n_tokens: int
    ttft_s: float
    decode_s: float

    @property
    def prefill_tps(self) -> float:
        return self.n_prompt / self.ttft_s if self.ttft_s > 0 else 0.0

    @property
    def decode_tps(self) -> float:
        return (self.n_tokens - 1) / self.decode_s if self.decode_s > 0 and self.n_tokens > 1 else 0.0


def time_stream(n_prompt: int, pieces: Iterable[T],
                count: Callable[[T], int] = lambda piece: 1) -> tuple[RunTiming, list[T]]:
    """Consume ``pieces`` (an iterator that does the work lazily), timing first and last arrival.
    ``count(piece)`` says how many generated tokens a piece carries (0 for non-token events)."""
    start = time.perf_counter()
    first = last = None
    n = 0
    items = []
    for piece in pieces:
        items.append(piece)
        k = count(piece)
        if k:
            now = time.perf_counter()
            if first is None:
                first = now
                k -= 1
                n += 1
            n += k
            last = now
    if first is None or last is None:
        first = last = time.perf_counter()
    return RunTiming(n_prompt, n, first - start, last - first), items


def first_difference(a: Sequence[object], b: Sequence[object]) -> int:
    """The first index where ``a`` and ``b`` (tokens, text) differ: the shorter one's length when
    one begins the other."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def median(values: Iterable[float]) -> float:
    values = list(values)
    return statistics.median(values) if values else 0.0


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def time_duet(rt: Runtime, prompt: list[int], params: SamplingParams) -> tuple[RunTiming, Done]:
    """A cold reply from Duet's runtime (cache and drafters reset): its timing and ``Done``."""

    rt.ctx.clear()
    if rt.speculation is not None:
        rt.speculation.reset()
    timing, events = time_stream(len(prompt), rt.generator.complete(prompt, params),
                                 count=lambda e: isinstance(e, Token))
    done = events[-1]
    assert isinstance(done, Done)
    return timing, done


def time_llama(llm: Llama, prompt: list[int], max_tokens: int) -> tuple[RunTiming, str]:
    """A cold greedy completion from llama-cpp-python's ``Llama``: its timing and text."""
    llm.reset()
    stream = llm.create_completion(prompt, max_tokens=max_tokens, temperature=0.0, top_k=1,
                                   repeat_penalty=1.0, stream=True)
    timing, chunks = time_stream(len(prompt), stream, count=lambda c: 1)
    return timing, "".join(c["choices"][0]["text"] for c in chunks)  # type: ignore[index]
