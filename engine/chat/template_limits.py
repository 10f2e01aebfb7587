"""Limits for rendering chat templates: a Jinja sandbox that cannot run long or grow large.

The stock sandbox stops escapes but not work: ``{% for i in range(100000) %}`` twice, or
``{{ 'x' * 1000000000 }}``, ran for minutes and took gigabytes. ``BoundedEnvironment`` adds:

* every ``for`` loop iterates through a checkpoint (the deadline and the cancel event are
  looked at every few hundred items), and ``range`` is capped at ``max_items``;
* ``*``, ``+`` and ``%`` on strings and lists, and every call and filter, are refused before they
  would build more than ``max_output`` characters or items, or take a numeric argument above
  ``max_number``;
* the output is summed as it is produced and refused past ``max_output``.

Limits live in a context variable set by ``bounded()`` for the length of one render.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from engine.errors import DecodeError, TemplateError

_CHECK_EVERY = 256
_BIG_WIDTH = re.compile(r"\d{7,}")  # a width or precision of a million or more in a format


@dataclass(frozen=True)
class Limits:
    """``seconds``: wall-clock time for one render; ``max_output``: characters of output (and of
    any string or list built on the way); ``max_items``: length of a ``range``;
    ``max_number``: the largest number a call or filter may take (widths, counts)."""

    seconds: float = 1.5
    max_output: int = 1_000_000
    max_items: int = 100_000
    max_number: int = 1_000_000

    def with_output(self, n: int) -> Limits:
        return replace(self, max_output=n)


@dataclass
class _Budget:
    limits: Limits
    deadline: float
    cancel: threading.Event | None
    ticks: int = 0

    def check(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise DecodeError("cancelled")
        if time.monotonic() > self.deadline:
            raise TemplateError(
                f"the chat template ran past its time limit ({self.limits.seconds:g} s)")

    def tick(self) -> None:
        self.ticks += 1
        if self.ticks % _CHECK_EVERY == 0:
            self.check()

    def size(self, n: int, what: str) -> None:
        if n > self.limits.max_output:
            raise TemplateError(f"the chat template went past its size limit ({what} of {n:,}, "
                                f"limit {self.limits.max_output:,})")


_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("duet_template_budget",
                                                                        default=None)


def _budget() -> _Budget:
    b = _BUDGET.get()
    if b is None:  # rendered outside ``bounded``: the default limits from now
        b = _Budget(Limits(), time.monotonic() + Limits().seconds, None)
        _BUDGET.set(b)
    return b


@contextlib.contextmanager
def bounded(limits: Limits, cancel: threading.Event | None = None) -> Iterator[None]:
    """Apply ``limits`` (and ``cancel``) to the renders inside the block."""
    token = _BUDGET.set(_Budget(limits, time.monotonic() + limits.seconds, cancel))
    try:
        yield
    finally:
        _BUDGET.reset(token)


def _checked_iter(iterable: Iterable[Any]) -> Iterator[Any]:
    b = _budget()
    b.check()
    for item in iterable:
        b.tick()
        yield item


def _sized(x: Any) -> int:
    return len(x) if isinstance(x, (str, bytes, list, tuple)) else 0


def _check_args(b: _Budget, args: Iterable[Any]) -> None:
    for a in args:
        if isinstance(a, (int, float)) and not isinstance(a, bool) and abs(a) > b.limits.max_number:
            raise TemplateError(f"the chat template went past its limits (argument {a!r:.20})")


def _check_format(s: Any) -> None:
    if isinstance(s, str) and _BIG_WIDTH.search(s):
        raise TemplateError("the chat template went past its limits (a format width)")


def _check_replace(b: _Budget, s: Any, args: tuple[Any, ...]) -> None:
    if isinstance(s, str) and len(args) >= 2 and all(isinstance(a, str) for a in args[:2]):
        n = s.count(args[0]) if args[0] else len(s) + 1
        b.size(len(s) + n * len(args[1]), "a replacement")


def _range(*args: Any) -> Iterator[int]:
    b = _budget()
    r = range(*args)
    if len(r) > b.limits.max_items:
        raise TemplateError(f"the chat template went past its limits (a range of {len(r):,})")
    return _checked_iter(r)


def _wrap_filter(f: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(f)
    def checked(*args: Any, **kwargs: Any) -> Any:
        b = _budget()
        b.check()
        _check_args(b, list(args) + list(kwargs.values()))
        if f.__name__ == "do_format" and args:
            _check_format(args[0])
        if f.__name__ == "do_replace":
            _check_replace(b, args[-3] if len(args) >= 3 else None, args[-2:])
        out = f(*args, **kwargs)
        b.size(_sized(out), "a filter result")
        return out
    return checked


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """An immutable sandbox with a deadline, a cancel hook and size limits (see module doc)."""

    intercepted_binops = frozenset({"*", "+", "%", "**"})

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.globals["range"] = _range
        self.globals["duet_iter"] = _checked_iter
        self.filters = {name: _wrap_filter(f) for name, f in self.filters.items()}

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = super()._parse(source, name, filename)
        for loop in tree.find_all(nodes.For):
            loop.iter = nodes.Call(nodes.Name("duet_iter", "load"), [loop.iter], [], None, None,
                                   lineno=loop.lineno)
        return tree

    def wrap_str_format(self, value: Any) -> Any:
        if getattr(value, "__name__", "") in ("format", "format_map"):
            _check_format(getattr(value, "__self__", None))
        return super().wrap_str_format(value)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        b = _budget()
        b.tick()
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int):
                    b.size(len(seq) * max(n, 0), "a repetition")
        elif operator == "+":
            b.size(_sized(left) + _sized(right), "a concatenation")
        elif operator == "**":
            _check_args(b, (left, right))
            if isinstance(right, int) and right > 64:
                raise TemplateError("the chat template went past its limits (a power)")
        elif operator == "%" and isinstance(left, str):
            _check_format(left)
            _check_args(b, right if isinstance(right, tuple) else (right,))
        out = super().call_binop(context, operator, left, right)
        b.size(_sized(out), "a result")
        return out

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        b = _budget()
        b.check()
        _check_args(b, list(args) + list(kwargs.values()))
        if getattr(__obj, "__name__", "") == "replace":
            _check_replace(b, getattr(__obj, "__self__", None), args)
        out = super().call(__context, __obj, *args, **kwargs)
        b.size(_sized(out), "a call result")
        return out

    def checked_concat(self, chunks: Iterable[str]) -> str:
        """Join a template's output chunks, refusing past the size limit or the deadline."""
        b = _budget()
        out: list[str] = []
        total = 0
        for chunk in chunks:
            total += len(chunk)
            b.size(total, "output")
            b.tick()
            out.append(chunk)
        b.check()
        return "".join(out)
