"""Every tunable parameter, declared once.

A parameter is a field of one of the frozen parameter dataclasses (``SamplingParams``,
``SpeculativeParams``, ``ContextParams``), declared with ``param(...)``: its default, its range
or choices, a label and a line of help, when it applies (to the next request, or at the next
model load), and the names it has in each HTTP dialect and on the command line. Everything else
is derived from that one declaration, as qutebrowser derives its settings from
``configdata.yml``:

- the dataclass's validation (``Params.__post_init__``): one-line ``ParamError`` naming the field;
- the HTTP servers' request fields, read in one function (``read``, as llama.cpp's
  ``params_from_json_cmpl`` reads every field against one defaults struct), and their
  JSON-schema description in the OpenAPI document (``json_schema``);
- the command-line flags (``add_arguments``/``from_args``);
- the app's settings schema and dialog, and the presets' check and editor (``app.control.settings``).

Adding a sampling parameter touches ``SamplingParams`` (one ``param`` line) and the code that
uses the value.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from engine.errors import DuetError

Applies = Literal["request", "load"]
DIALECTS = ("openai", "ollama", "anthropic", "responses")  # "responses": OpenAI's Responses API


class ParamError(DuetError, ValueError):
    """A parameter value out of its type or range. ``name``: the field; ``api_name``: the name
    the request used, when it came from one."""

    def __init__(self, message: str, name: str, api_name: str | None = None) -> None:
        super().__init__(message)
        self.name = name
        self.api_name = api_name


@dataclass(frozen=True)
class Spec:
    """How one parameter is bounded, described and named (a field's ``metadata["param"]``)."""

    label: str
    help: str
    applies: Applies
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    choices: tuple[str, ...] = ()
    max_items: int = 0  # for tuples of strings (stop strings)
    api: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # dialect -> body names
    cli: str | None = None  # the flag ("--top-p"); None: not on the command line
    coerce: Callable[[Any], Any] | None = None  # maps a request's value first (seed: -5 -> -1)
    step: float = 0.05  # the editor's step for a float


def param(default: Any, label: str, help: str, *, applies: Applies = "request",
          minimum: float | None = None, maximum: float | None = None,
          exclusive_minimum: bool = False, choices: tuple[str, ...] = (), max_items: int = 0,
          api: Mapping[str, tuple[str, ...]] | tuple[str, ...] | None = None,
          cli: str | None | bool = True, coerce: Callable[[Any], Any] | None = None,
          step: float = 0.05) -> Any:
    """A dataclass field with its ``Spec``. ``api``: body names per dialect, or one tuple of
    names used by every dialect; ``cli``: True derives ``--name-with-dashes``."""
    if isinstance(api, tuple):
        api = {d: api for d in DIALECTS}
    spec = Spec(label, help, applies, minimum, maximum, exclusive_minimum, choices, max_items,
                MappingProxyType(dict(api or {})), None, coerce, step)
    return field(default=default, metadata={"param": spec, "cli": cli})


@dataclass(frozen=True)
class Param:
    """One row of the table: a field of a parameter class with its type and ``Spec``."""

    name: str
    type: type  # float, int, bool, str or tuple (of strings)
    default: Any
    spec: Spec
    cli: str | None

    @property
    def flag_name(self) -> str:
        return self.name.replace("_", "-")

    def describe_range(self) -> str:
        s = self.spec
        if s.choices:
            return "one of " + ", ".join(s.choices)
        if s.minimum is not None and s.maximum is not None:
            lo = "above" if s.exclusive_minimum else "between"
            return (f"above {_num(s.minimum)} and at most {_num(s.maximum)}" if lo == "above"
                    else f"between {_num(s.minimum)} and {_num(s.maximum)}")
        if s.minimum is not None:
            return f"{'above' if s.exclusive_minimum else 'at least'} {_num(s.minimum)}"
        return ""

    def check(self, value: Any, api_name: str | None = None) -> Any:
        """``value`` converted to this parameter's type (an int is a float), or ParamError."""
        shown = api_name or self.flag_name
        if self.type is float and type(value) is int:
            value = float(value)
        if self.type is tuple:
            if not isinstance(value, (tuple, list)) or any(type(v) is not str for v in value):
                raise ParamError(f"{shown} must be a list of strings", self.name, api_name)
            if self.spec.max_items and len(value) > self.spec.max_items:
                raise ParamError(f"{shown}: at most {self.spec.max_items} items", self.name,
                                 api_name)
            return tuple(value)
        if type(value) is not self.type:  # bool is not an int here, on purpose
            what = {float: "a number", int: "an integer", bool: "true or false",
                    str: "a string"}[self.type]
            raise ParamError(f"{shown} must be {what}, not {value!r}"[:200], self.name, api_name)
        if self.type is float and not math.isfinite(typing.cast(float, value)):
            raise ParamError(f"{shown} must be a finite number, not {value!r}", self.name, api_name)
        s, num = self.spec, typing.cast(float, value)
        low = s.minimum is not None and (num <= s.minimum if s.exclusive_minimum
                                         else num < s.minimum)
        high = s.maximum is not None and num > s.maximum
        if low or high or (s.choices and value not in s.choices):
            raise ParamError(f"{shown} must be {self.describe_range()}, not {value!r}"[:200],
                             self.name, api_name)
        return value

    def json_schema(self) -> dict[str, Any]:
        """This parameter as a JSON-schema property (the OpenAPI document's)."""
        kind = {float: "number", int: "integer", bool: "boolean", str: "string",
                tuple: "array"}[self.type]
        out: dict[str, Any] = {"type": kind, "description": self.spec.help, "title": self.spec.label}
        s = self.spec
        if s.minimum is not None:
            out["exclusiveMinimum" if s.exclusive_minimum else "minimum"] = s.minimum
        if s.maximum is not None:
            out["maximum"] = s.maximum
        if s.choices:
            out["enum"] = list(s.choices)
        if self.type is tuple:
            out["items"] = {"type": "string"}
            if s.max_items:
                out["maxItems"] = s.max_items
        if s.coerce is not None and self.type is int:  # any integer is read (seed)
            out.pop("minimum", None)
            out.pop("maximum", None)
        return out


def _num(x: float) -> str:
    return f"{x:g}"


_SCALARS = {"float": float, "int": int, "bool": bool, "str": str}


@functools.cache
def table(cls: type) -> tuple[Param, ...]:
    """The parameters declared on ``cls``, in order."""
    hints = typing.get_type_hints(cls)
    rows = []
    for f in dataclasses.fields(cls):
        spec = f.metadata.get("param")
        if spec is None:
            continue
        hint = hints[f.name]
        kind = tuple if typing.get_origin(hint) is tuple else hint
        if kind not in (float, int, bool, str, tuple):
            raise TypeError(f"{cls.__name__}.{f.name}: unsupported parameter type {hint}")
        cli = f.metadata.get("cli")
        flag = f"--{f.name.replace('_', '-')}" if cli is True else (cli or None)
        rows.append(Param(f.name, kind, f.default, spec, flag))
    return tuple(rows)


def row(cls: type, name: str) -> Param:
    for p in table(cls):
        if p.name == name:
            return p
    raise KeyError(f"{cls.__name__} has no parameter {name!r}")


class Params:
    """Base of the parameter dataclasses: each field is checked against its ``Spec`` when an
    instance is made (ints given for floats become floats); ``_check`` adds rules that tie
    several fields together."""

    def __post_init__(self) -> None:
        for p in table(type(self)):  # type: ignore[arg-type]  # a class is hashable; mypy reads eq=True
            value = getattr(self, p.name)
            if p.spec.coerce is not None and type(value) is int:
                value = p.spec.coerce(value)
            value = p.check(value)
            if value is not getattr(self, p.name):
                object.__setattr__(self, p.name, value)
        self._check()

    def _check(self) -> None:
        """Rules across fields; raise ParamError."""


# -- requests ---------------------------------------------------------------------------------
def read(cls: type, body: Mapping[str, Any], dialect: str, base: Any) -> Any:
    """``base`` with every parameter of ``cls`` that ``body`` sets (under its names in
    ``dialect``) replaced; ParamError names the body's field. ``null`` means "not set"."""
    changes: dict[str, Any] = {}
    for p in table(cls):
        for api_name in p.spec.api.get(dialect, ()):
            if api_name in body and body[api_name] is not None:
                raw = body[api_name]
                if p.type is tuple and isinstance(raw, str):
                    raw = [raw]  # "stop": "x" means ["x"]
                if p.spec.coerce is not None and type(raw) is int:
                    raw = p.spec.coerce(raw)
                value = p.check(raw, api_name)  # every name given must be valid...
                changes.setdefault(p.name, value)  # ...and the first listed wins (max_completion_tokens)
    if not changes:
        return base
    try:
        return dataclasses.replace(base, **changes)
    except ParamError as e:  # a rule across fields
        names = p_names(cls, e.name, dialect)
        raise ParamError(str(e), e.name, names[0] if names else None) from None


def p_names(cls: type, name: str, dialect: str) -> tuple[str, ...]:
    """The body names of parameter ``name`` in ``dialect``."""
    try:
        return row(cls, name).spec.api.get(dialect, ())
    except KeyError:
        return ()


def api_properties(cls: type, dialect: str) -> dict[str, dict[str, Any]]:
    """JSON-schema properties of the body fields ``dialect`` reads from ``cls``."""
    out = {}
    for p in table(cls):
        for api_name in p.spec.api.get(dialect, ()):
            schema = p.json_schema()
            if p.type is tuple:
                schema = {"anyOf": [{"type": "string"}, schema], "description": p.spec.help}
            out[api_name] = {**schema, "default": _json_default(p)}
    return out


def _json_default(p: Param) -> Any:
    return list(p.default) if isinstance(p.default, tuple) else p.default


# -- the command line ---------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser, cls: type,
                  defaults: Mapping[str, Any] | None = None) -> None:
    """One flag per parameter of ``cls`` that has one; the default is the dataclass's own (or
    ``defaults``), the help says the range."""
    for p in table(cls):
        if p.cli is None:
            continue
        default = (defaults or {}).get(p.name, p.default)
        extra = p.describe_range()
        help_text = f"{p.spec.help} ({extra}; default {_json_default(p)})" if extra else \
            f"{p.spec.help} (default {_json_default(p)})"
        help_text = help_text.replace("%", "%%")
        if p.type is bool:
            parser.add_argument(p.cli, dest=p.name, action=argparse.BooleanOptionalAction,
                                default=default, help=help_text)
        elif p.type is tuple:
            parser.add_argument(p.cli, dest=p.name, action="append", default=None, help=help_text)
        elif p.spec.choices:
            parser.add_argument(p.cli, dest=p.name, choices=p.spec.choices, default=default,
                                help=help_text)
        else:
            parser.add_argument(p.cli, dest=p.name, type=p.type, default=default, help=help_text)


def from_args(cls: type, args: argparse.Namespace, **fixed: Any) -> Any:
    """An instance of ``cls`` from parsed flags (``fixed`` wins); DuetError with one line."""
    values: dict[str, Any] = {}
    for p in table(cls):
        if p.cli is None or not hasattr(args, p.name):
            continue
        value = getattr(args, p.name)
        if p.type is tuple:
            value = tuple(value or ())
        if p.spec.coerce is not None and type(value) is int:
            value = p.spec.coerce(value)
        values[p.name] = p.check(value, p.cli)  # the error names the flag
    values.update(fixed)
    return cls(**values)
