"""What the soak sends and how it judges what comes back (no I/O here).

A *script* is what one client does in one go: a single request, or the turns of a conversation
in order (each turn's history holds the replies the same turns got when sent alone, so that the
requests are fixed and the server can reuse the conversation's cached prefix). Every reply under
load is compared with the reply its request got alone; the server's RSS is judged flat when the
mean of the last samples is within a tolerance of the mean of the first samples after warm-up.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.client import HttpReply
from bench.timing import first_difference

CHAT, TEXT = "/v1/chat/completions", "/v1/completions"

SYSTEM_A = ("You are a careful reviewer of Python code for a small team. You answer briefly, you "
            "name the line you mean, you never invent functions that are not in the file, and "
            "when you are not sure you say so. The team writes tests with pytest, keeps modules "
            "small and prefers plain functions to classes when there is no state to keep.")
SYSTEM_B = ("You answer questions about the weather and the seasons for a garden club. Keep each "
            "answer to two or three sentences, give temperatures in degrees Celsius, and mention "
            "one thing a gardener could do about it this week. Do not use lists or headings.")
CODE = '''def total(prices, tax=0.2):
    """The sum of the prices with tax."""
    result = 0
    for p in prices:
        result += p
    return result * (1 + tax)


def cheapest(prices):
    return min(prices) if prices else None


if __name__ == "__main__":
    print(total([1.0, 2.5, 3.25]))
    print(cheapest([4, 2, 9]))
'''


@dataclass(frozen=True)
class SoakTurn:
    """One request. ``messages`` (chat) end with a user turn; for a turn with ``follows``, the
    reply the previous turn got alone is inserted as the assistant's turn before them."""

    id: str
    path: str = CHAT
    messages: tuple[tuple[str, str], ...] = ()
    prompt: str = ""
    max_tokens: int = 32
    stream: bool = True
    stop: tuple[str, ...] = ()
    follows: str | None = None


@dataclass(frozen=True)
class Script:
    id: str
    turns: tuple[SoakTurn, ...]


def _user(text: str, system: str | None = None) -> tuple[tuple[str, str], ...]:
    return ((("system", system),) if system else ()) + (("user", text),)


SCRIPTS: tuple[Script, ...] = (
    Script("hello", (SoakTurn("hello", messages=_user("Say hello in one line."), max_tokens=24),)),
    Script("haiku-whole", (SoakTurn("haiku-whole", messages=_user("Write a haiku about the sea."),
                                stream=False),)),
    Script("edit", (SoakTurn("edit", max_tokens=96, messages=_user(
        f"Rename the function `total` to `sum_prices` in this file and send the whole file "
        f"back:\n```python\n{CODE}```", system="You edit code and return whole files.")),)),
    Script("review", (
        SoakTurn("review-1", messages=_user("What is a unit test, in one sentence?", SYSTEM_A)),
        SoakTurn("review-2", messages=_user("Give one example with pytest."), max_tokens=48,
             follows="review-1"),
        SoakTurn("review-3", messages=_user("Thanks. What would you test first?"), stream=False,
             follows="review-2"))),
    Script("garden", (
        SoakTurn("garden-1", messages=_user("Is it too cold to plant tulips in November?", SYSTEM_B)),
        SoakTurn("garden-2", messages=_user("And what about garlic?"), follows="garden-1"))),
    Script("stop-line", (SoakTurn("stop-line", messages=_user("List three fruits, one per line."),
                              stop=("\n",), max_tokens=48),)),
    Script("text-stop", (SoakTurn("text-stop", path=TEXT, prompt="def fibonacci(n):\n", stop=("\n\n",),
                              max_tokens=64, stream=False),)),
    Script("text", (SoakTurn("text", path=TEXT, prompt="The three primary colours are", max_tokens=32),)),
)


def turns(scripts: tuple[Script, ...] = SCRIPTS) -> tuple[SoakTurn, ...]:
    return tuple(t for s in scripts for t in s.turns)


def body(turn: SoakTurn, replies: dict[str, str], stream: bool | None = None) -> dict:
    """The request body of ``turn`` (greedy); ``replies``: the solo reply of each turn so far."""
    stream = turn.stream if stream is None else stream
    out: dict = {"temperature": 0, "max_tokens": turn.max_tokens, "stream": stream}
    if turn.stop:
        out["stop"] = list(turn.stop)
    if turn.path == TEXT:
        return {**out, "prompt": turn.prompt}
    out["messages"] = history(turn, replies)
    return out


def history(turn: SoakTurn, replies: dict[str, str]) -> list[dict]:
    by_id = {t.id: t for t in turns()}
    chain = [turn]
    while chain[-1].follows:
        chain.append(by_id[chain[-1].follows])
    messages: list[dict] = []
    for t in reversed(chain):
        if t.follows:
            messages.append({"role": "assistant", "content": replies[t.follows]})
        messages += [{"role": r, "content": c} for r, c in t.messages]
    return messages


# -- judging ------------------------------------------------------------------------------
def mismatch(solo: HttpReply, got: HttpReply) -> str | None:
    """None when ``got`` is ``solo``; else where they part."""
    if got.text == solo.text and got.finish_reason == solo.finish_reason:
        return None
    if got.text == solo.text:
        return f"same text, finish_reason {got.finish_reason!r} (alone: {solo.finish_reason!r})"
    i = first_difference(solo.text, got.text)
    return (f"differs at character {i}: alone {solo.text[i:i + 40]!r}, "
            f"under load {got.text[i:i + 40]!r}")


@dataclass
class Tally:
    requests: int = 0  # completed and compared
    busy: int = 0  # 429 answers (each retried after Retry-After)
    errors: int = 0
    mismatches: int = 0  # replies that are not the first solo reply of their request
    known_variants: int = 0  # ... but the same as another solo reply of it (sent alone again)
    disconnects: int = 0  # streams dropped on purpose
    health_checks: int = 0
    by_turn: dict[str, int] = field(default_factory=dict)
    mismatched: dict[str, dict[str, int]] = field(default_factory=dict)  # turn -> text -> count
    notes: list[str] = field(default_factory=list)  # the first few errors

    def note(self, text: str, limit: int = 20) -> None:
        if len(self.notes) < limit:
            self.notes.append(text)

    def mismatch(self, turn: str, text: str, known: bool) -> None:
        self.mismatches += 1
        self.known_variants += known
        texts = self.mismatched.setdefault(turn, {})
        texts[text] = texts.get(text, 0) + 1

    def add(self, other: Tally) -> None:
        for k in ("requests", "busy", "errors", "mismatches", "known_variants", "disconnects",
                  "health_checks"):
            setattr(self, k, getattr(self, k) + getattr(other, k))
        for k, v in other.by_turn.items():
            self.by_turn[k] = self.by_turn.get(k, 0) + v
        for turn, texts in other.mismatched.items():
            mine = self.mismatched.setdefault(turn, {})
            for text, n in texts.items():
                mine[text] = mine.get(text, 0) + n
        for line in other.notes:
            self.note(line)


def rss_verdict(samples: list[tuple[float, int]], warmup_s: float, window: int = 3,
                tolerance: float = 0.05) -> dict:
    """``samples``: (seconds since the load began, RSS bytes). Compares the mean of the first
    ``window`` samples taken after ``warmup_s`` with the mean of the last ``window``."""
    after = [rss for t, rss in samples if t >= warmup_s]
    if len(after) < 2 * window:
        return {"flat": None, "reason": f"{len(after)} samples after warm-up (need {2 * window})"}
    start = sum(after[:window]) / window
    end = sum(after[-window:]) / window
    growth = end / start - 1
    return {"flat": abs(growth) <= tolerance, "after_warmup_bytes": int(start),
            "end_bytes": int(end), "growth": round(growth, 4), "max_bytes": max(after),
            "tolerance": tolerance, "samples": len(samples)}
