"""A reply's thinking told from its answer, piece by piece as it streams.

The reply's text comes in pieces (a token's text each); a ``<think>`` section is its reasoning,
the rest its answer. Markers may be split across pieces: text that could still be the start of
one is held back until the next piece says. A reply may start inside a section when the prompt
opened it (DeepSeek-R1's template ends with ``<think>\\n``). Only the first section is
reasoning (as llama-server's deepseek format): a marker later in the answer is the answer's
text. The white space that follows the closing marker, and that before the first text of the
answer, is left out, as is the white space right after the opening marker.
"""

from __future__ import annotations

from engine.chat.reasoning import CLOSE, OPEN


class ThinkSplitter:
    """``feed`` a piece, get (reasoning, answer) text to show now; ``flush`` at the end."""

    def __init__(self, inside: bool = False) -> None:
        self.state = "thinking" if inside else "start"  # start, thinking, answer
        self.held = ""
        self.fresh = inside  # white space right after the opening marker is dropped
        self.after = False  # white space right after the closing marker is dropped
        self.thought = ""  # all of the reasoning so far

    @property
    def thinking(self) -> bool:
        return self.state == "thinking"

    def feed(self, text: str) -> tuple[str, str]:
        buf, self.held = self.held + text, ""
        reasoning, answer = [], []
        while buf:
            if self.state == "start":
                stripped = buf.lstrip()
                if stripped.startswith(OPEN):
                    buf = stripped[len(OPEN):]
                    self.state, self.fresh = "thinking", True
                    continue
                if OPEN.startswith(stripped):  # white space, or part of the marker: wait
                    self.held = buf
                    break
                self.state = "answer"
            if self.state == "thinking":
                if self.fresh:
                    buf = buf.lstrip()
                    if not buf:
                        break
                    self.fresh = False
                at = buf.find(CLOSE)
                if at >= 0:
                    reasoning.append(buf[:at])
                    buf = buf[at + len(CLOSE):]
                    self.state, self.after = "answer", True
                    continue
                keep = _partial(buf, CLOSE)
                reasoning.append(buf[:len(buf) - keep])
                self.held = buf[len(buf) - keep:]
                break
            if self.after:
                buf = buf.lstrip()
                if not buf:
                    break
                self.after = False
            answer.append(buf)
            break
        out = "".join(reasoning)
        self.thought += out
        return out, "".join(answer)

    def flush(self) -> tuple[str, str]:
        """What is held back, at the end of the reply."""
        held, self.held = self.held, ""
        if self.state == "thinking":
            self.thought += held
            return held, ""
        return "", held if self.state == "answer" or held.strip() else ""


def _partial(buf: str, marker: str) -> int:
    """The length of the longest end of ``buf`` that starts ``marker``."""
    for n in range(min(len(marker) - 1, len(buf)), 0, -1):
        if buf.endswith(marker[:n]):
            return n
    return 0


def split(text: str, inside: bool = False) -> tuple[str, str]:
    """A whole reply's (reasoning, answer)."""
    s = ThinkSplitter(inside)
    r1, a1 = s.feed(text)
    r2, a2 = s.flush()
    return r1 + r2, a1 + a2
