"""Separating a reply into text and tool calls as it streams.

Text is released as soon as it cannot be the start of a call: the family's opener
(``<tool_call>``), a fenced block at the start of a line, or a bare JSON object or list that
opens the reply. From an opener on, the text is held until the call closes (or the reply
ends); then it is read (engine.tools.formats.read_block): calls come out as ``ToolCall``s, and
a block that does not read as calls comes out as the text it was. Whitespace alone is held until
text follows it, and dropped at the end of a reply that made calls.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.chat.messages import ToolCall
from engine.tools.formats import FENCE, Format, read_block

Item = str | ToolCall


class Scanner:
    def __init__(self, fmt: Format, names: Sequence[str]) -> None:
        self.fmt = fmt
        self.names = list(names)
        self._buf = ""
        self._spaces = ""  # whitespace released but held back
        self._started = False  # text other than whitespace was released
        self._line_start = True  # the released text ends a line (or nothing was released)
        self.made_calls = False

    def feed(self, text: str) -> list[Item]:
        self._buf += text
        return self._drain(final=False)

    def close(self) -> list[Item]:
        out = self._drain(final=True)
        if self._spaces and not self.made_calls:
            out.append(self._spaces)
        self._spaces = ""
        return out

    # -- internals ------------------------------------------------------------------------
    def _drain(self, final: bool) -> list[Item]:
        out: list[Item] = []
        while self._buf:
            hit = self._opener()
            if hit is None:
                keep = 0 if final else self._partial()
                self._release(self._buf[:len(self._buf) - keep], out)
                self._buf = self._buf[len(self._buf) - keep:]
                return out
            at, opener, closer = hit
            if at > 0:
                self._release(self._buf[:at], out)
                self._buf = self._buf[at:]
                continue
            end = self._buf.find(closer, len(opener)) if closer else -1
            if end < 0 and not final:
                return out  # the call is still being written
            block = self._buf if end < 0 else self._buf[:end + len(closer)]
            self._buf = self._buf[len(block):]
            calls = read_block(self.fmt, block, opener, closer, self.names)
            if calls:
                out.extend(calls)
                self.made_calls = True
                self._spaces = ""
            else:
                self._release(block, out)
        return out

    def _opener(self) -> tuple[int, str, str] | None:
        """The first place a call may start: (index, opener, closer)."""
        best: tuple[int, str, str] | None = None
        for opener, closer in self.fmt.openers():
            at = self._find(opener)
            if at >= 0 and (best is None or at < best[0]):
                best = (at, opener, closer)
        if not self._started:  # a bare JSON object or list opening the reply
            stripped = self._buf.lstrip()
            if stripped[:1] in ("{", "["):
                at = len(self._buf) - len(stripped)
                if best is None or at < best[0]:
                    best = (at, stripped[0], "")
        return best

    def _find(self, opener: str) -> int:
        at = self._buf.find(opener)
        if opener != FENCE:
            return at
        while at >= 0:  # a fence counts at the start of a line only
            if (at == 0 and self._line_start) or (at > 0 and self._buf[at - 1] == "\n"):
                return at
            at = self._buf.find(opener, at + 1)
        return -1

    def _partial(self) -> int:
        """How much of the end of the buffer could be the start of an opener (held back)."""
        if not self._started and not self._buf.strip():
            return len(self._buf)
        keep = 0
        for opener, _ in self.fmt.openers():
            for k in range(min(len(opener) - 1, len(self._buf)), 0, -1):
                if self._buf.endswith(opener[:k]):
                    keep = max(keep, k)
                    break
        return keep

    def _release(self, text: str, out: list[Item]) -> None:
        """Release ``text``, holding its trailing whitespace (released with what follows it;
        dropped before a call), so the result does not depend on where the chunks fall."""
        body = text.rstrip()
        if body:
            out.append(self._spaces + body)
            self._spaces = ""
            self._started = True
        self._spaces += text[len(body):]
        self._line_start = (self._spaces or body).endswith("\n") if (self._spaces or body) \
            else self._line_start


def parse(fmt: Format, text: str, names: Sequence[str]) -> tuple[str, list[ToolCall]]:
    """(content, calls) of a whole reply; a reply whose calls do not all read is all content."""
    scanner = Scanner(fmt, names)
    items = scanner.feed(text) + scanner.close()
    content = "".join(i for i in items if isinstance(i, str))
    calls = [i for i in items if isinstance(i, ToolCall)]
    return (content.strip() if calls else content), calls
