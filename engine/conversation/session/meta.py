"""The metadata of a ``.duet`` session: frozen dataclasses and their strict JSON mapping.

``from_json`` checks every type and shape and raises SessionError on anything else, so a reader
never hands the app a half-valid conversation; ``to_json`` gives plain JSON (lists, dicts, str,
int, finite float, bool, None).

Size limits (checked on reading and on saving): at most ``MAX_MESSAGES`` messages of at most
``MAX_MESSAGE_CHARS`` characters each, and ``MAX_TEXT_CHARS`` in all (tool calls' arguments
included; a message has at most ``MAX_TOOL_CALLS``); with the metadata itself
under ``format.MAX_META_BYTES``. They keep the text a reply re-reads each turn to a few seconds
of tokenizing at most, far beyond what any context holds.

Tool turns: an assistant's message may carry ``tool_calls`` and a ``tool`` message names the call
it answers (``tool_call_id``, ``name``); those keys are written only when present, so a file
without tool turns is the same as before and the format stays 2.

Format 2 adds ``kv.<role>.probe``: the top logits of the last few tokens, recomputed from the
restored KV state when the file is opened (engine.conversation.session.probe). Format 1 files are read with
``probe: null``, and their KV state is not trusted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

from engine.errors import SessionError

FORMAT_VERSION = 2
MAX_MESSAGES = 100_000
MAX_MESSAGE_CHARS = 4_000_000
MAX_TEXT_CHARS = 16_000_000
MAX_PROBE_ROWS = 8
MAX_PROBE_TOP = 64
MAX_TOOL_CALLS = 64  # per message
MAX_TOOL_ID_CHARS = 256  # a call's id and its function's name
MAX_ARGUMENTS_CHARS = 1_000_000
ROLES = frozenset({"system", "user", "assistant", "tool"})
KV_ROLES = ("target", "draft")
MAX_TOKEN_ID = 2**31
MAX_POSITION_ID = 2**32  # a KV state's positions: token ids, or an image's ids (engine.llama.media)
_MAX_DEPTH = 32


def utc_now_iso() -> str:
    """Now, as an ISO 8601 UTC timestamp to the second."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def _fail(what: str) -> SessionError:
    return SessionError(f"the session metadata is invalid: {what}"[:300])


def _dict(obj: Any, keys: set[str], where: str, optional: frozenset[str] = frozenset()
          ) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise _fail(f"{where} is not an object")
    if not keys <= set(obj) <= keys | optional:
        extra, missing = sorted(set(obj) - keys - optional), sorted(keys - set(obj))
        raise _fail(f"{where} has unexpected keys {extra} / lacks {missing}")
    return obj


def _str(obj: Any, where: str, *, nonempty: bool = False) -> str:
    if not isinstance(obj, str) or (nonempty and not obj):
        raise _fail(f"{where} is not a{' non-empty' if nonempty else ''} string")
    return obj


def _int(obj: Any, where: str, *, lo: int = 0, hi: int = 2**63) -> int:
    if type(obj) is not int or not lo <= obj < hi:
        raise _fail(f"{where} is not an integer in [{lo}, {hi})")
    return obj


def _iso(obj: Any, where: str) -> str:
    try:
        datetime.fromisoformat(_str(obj, where))
    except ValueError:
        raise _fail(f"{where} is not an ISO 8601 time") from None
    return obj


def check_plain_json(obj: Any, where: str = "settings", depth: int = 0) -> None:
    """Raise SessionError unless ``obj`` is plain JSON (str keys, finite floats, no tuples)."""
    if depth > _MAX_DEPTH:
        raise _fail(f"{where} is nested too deeply")
    if obj is None or isinstance(obj, (str, bool, int)):
        return
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise _fail(f"{where} holds a non-finite number")
        return
    if isinstance(obj, list):
        for i, item in enumerate(obj):
            check_plain_json(item, f"{where}[{i}]", depth + 1)
        return
    if isinstance(obj, dict):
        for key, value in obj.items():
            if not isinstance(key, str):
                raise _fail(f"{where} has a non-string key")
            check_plain_json(value, f"{where}.{key}", depth + 1)
        return
    raise _fail(f"{where} holds a {type(obj).__name__}, not plain JSON")


@dataclass(frozen=True)
class SavedCall:
    """A function call an assistant made; ``arguments``: the JSON text of its arguments."""

    id: str
    name: str
    arguments: str

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_json(cls, obj: Any, where: str = "tool call") -> SavedCall:
        d = _dict(obj, {"id", "name", "arguments"}, where)
        if isinstance(d["arguments"], str) and len(d["arguments"]) > MAX_ARGUMENTS_CHARS:
            raise _fail(f"{where}.arguments is longer than {MAX_ARGUMENTS_CHARS:,} characters")
        return cls(_tool_id(d["id"], f"{where}.id"), _tool_id(d["name"], f"{where}.name"),
                   _str(d["arguments"], f"{where}.arguments"))


def _tool_id(obj: Any, where: str) -> str:
    if isinstance(obj, str) and len(obj) > MAX_TOOL_ID_CHARS:
        raise _fail(f"{where} is longer than {MAX_TOOL_ID_CHARS} characters")
    return _str(obj, where)


_TOOL_KEYS = frozenset({"tool_calls", "tool_call_id", "name", "attachments", "images"})
MAX_IMAGES = 16  # pictures on one message
MAX_ATTACHMENTS = 64  # files on one message
ATTACHMENT_MODES = ("auto", "whole", "retrieved")


@dataclass(frozen=True)
class SavedAttachment:
    """A file attached to a message: its text as read, the SHA-256 of its bytes, where its
    pages start (PDF), and how it goes into the prompt (engine.chat.messages.Attachment)."""

    name: str
    kind: str
    sha256: str
    text: str
    pages: tuple[int, ...] = ()
    mode: str = "auto"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "sha256": self.sha256, "text": self.text,
                "pages": list(self.pages), "mode": self.mode}

    @classmethod
    def from_json(cls, obj: Any, where: str = "attachment") -> SavedAttachment:
        d = _dict(obj, {"name", "kind", "sha256", "text", "pages", "mode"}, where)
        text = _str(d["text"], f"{where}.text")
        if len(text) > MAX_MESSAGE_CHARS:
            raise _fail(f"{where}.text is longer than {MAX_MESSAGE_CHARS:,} characters")
        sha = _str(d["sha256"], f"{where}.sha256")
        if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
            raise _fail(f"{where}.sha256 is not a SHA-256 in hex")
        pages = d["pages"]
        if not isinstance(pages, list) or len(pages) > len(text) + 1 or not all(
                type(p) is int and 0 <= p <= len(text) for p in pages) or pages != sorted(pages):
            raise _fail(f"{where}.pages are not offsets into its text, in order")
        if d["mode"] not in ATTACHMENT_MODES:
            raise _fail(f"{where}.mode is not one of {', '.join(ATTACHMENT_MODES)}")
        return cls(_tool_id(d["name"], f"{where}.name"), _tool_id(d["kind"], f"{where}.kind"),
                   sha, text, tuple(pages), d["mode"])


@dataclass(frozen=True)
class SavedImage:
    """A picture a message carries: its bytes are the section ``section_name`` (content
    addressed: one section however many messages show it), checked against ``sha256``."""

    name: str
    sha256: str

    @property
    def section(self) -> str:
        return image_section(self.sha256)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "sha256": self.sha256}

    @classmethod
    def from_json(cls, obj: Any, where: str = "image") -> SavedImage:
        d = _dict(obj, {"name", "sha256"}, where)
        sha = _str(d["sha256"], f"{where}.sha256")
        if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
            raise _fail(f"{where}.sha256 is not a SHA-256 in hex")
        return cls(_tool_id(d["name"], f"{where}.name"), sha)


def image_section(sha256: str) -> str:
    """The section that holds the picture of this SHA-256 (a section name is at most 64)."""
    return f"image.{sha256[:56]}"


@dataclass(frozen=True)
class SavedMessage:
    """A saved message; an assistant's may carry ``tool_calls``, a ``tool`` message is the
    result of call ``tool_call_id`` (function ``name``)."""

    role: str  # one of ROLES
    content: str
    time: str  # ISO 8601
    tool_calls: tuple[SavedCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    attachments: tuple[SavedAttachment, ...] = ()
    images: tuple[SavedImage, ...] = ()

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"role": self.role, "content": self.content, "time": self.time}
        if self.attachments:
            d["attachments"] = [a.to_json() for a in self.attachments]
        if self.images:
            d["images"] = [i.to_json() for i in self.images]
        if self.tool_calls:
            d["tool_calls"] = [c.to_json() for c in self.tool_calls]
        if self.tool_call_id is not None:
            d["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            d["name"] = self.name
        return d

    @classmethod
    def from_json(cls, obj: Any, where: str = "message") -> SavedMessage:
        d = _dict(obj, {"role", "content", "time"}, where, _TOOL_KEYS)
        if not isinstance(d["role"], str) or d["role"] not in ROLES:
            raise _fail(f"{where} has an unknown role")
        if isinstance(d["content"], str) and len(d["content"]) > MAX_MESSAGE_CHARS:
            raise _fail(f"{where} is longer than {MAX_MESSAGE_CHARS:,} characters")
        calls = d.get("tool_calls", [])
        if not isinstance(calls, list) or len(calls) > MAX_TOOL_CALLS:
            raise _fail(f"{where}.tool_calls is not a list of at most {MAX_TOOL_CALLS} calls")
        opt = {key: _tool_id(d[key], f"{where}.{key}") if key in d else None
               for key in ("tool_call_id", "name")}
        files = d.get("attachments", [])
        if not isinstance(files, list) or len(files) > MAX_ATTACHMENTS:
            raise _fail(f"{where}.attachments is not a list of at most {MAX_ATTACHMENTS} files")
        pictures = d.get("images", [])
        if not isinstance(pictures, list) or len(pictures) > MAX_IMAGES:
            raise _fail(f"{where}.images is not a list of at most {MAX_IMAGES} pictures")
        return cls(d["role"], _str(d["content"], f"{where}.content"),
                   _iso(d["time"], f"{where}.time"),
                   tuple(SavedCall.from_json(c, f"{where}.tool_calls[{i}]")
                         for i, c in enumerate(calls)), opt["tool_call_id"], opt["name"],
                   tuple(SavedAttachment.from_json(a, f"{where}.attachments[{i}]")
                         for i, a in enumerate(files)),
                   tuple(SavedImage.from_json(a, f"{where}.images[{i}]") for i, a in enumerate(pictures)))

    @property
    def n_chars(self) -> int:
        """Its text and its calls' arguments, in characters (counted against MAX_TEXT_CHARS)."""
        return len(self.content) + sum(len(c.arguments) for c in self.tool_calls) + \
            sum(len(a.text) for a in self.attachments)


@dataclass(frozen=True)
class KVLayout:
    """Shape of a KV cache: a saved state can be restored only into the same layout.

    ``n_embd_k_gqa = n_head_kv * head_dim_k`` (and likewise for V) is the width of one token's
    keys (values) in one layer; type_k/type_v are the cache element types ("f16", "q8_0", ...).
    """

    n_ctx: int
    type_k: str
    type_v: str
    n_layer: int
    n_embd_k_gqa: int
    n_embd_v_gqa: int

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, obj: Any) -> KVLayout:
        if not isinstance(obj, dict) or set(obj) != {f.name for f in fields(cls)}:
            raise SessionError("the session's KV layout has the wrong shape")
        for f in fields(cls):
            value = obj[f.name]
            ok = (isinstance(value, str) and 0 < len(value) <= 32) if f.type == "str" else (
                type(value) is int and 0 < value < 2**31)
            if not ok:
                raise SessionError(f"the session's KV layout has a bad {f.name}: {value!r}"[:200])
        return cls(**obj)


@dataclass(frozen=True)
class ModelInfo:
    """A model as it was when the session was saved; ``layout`` is its KV cache layout then."""

    path: str
    display_name: str
    size: int
    fingerprint: str  # engine.models.identity.file_fingerprint
    layout: KVLayout | None = None

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "display_name": self.display_name, "size": self.size,
                "fingerprint": self.fingerprint,
                "layout": None if self.layout is None else self.layout.to_json()}

    @classmethod
    def from_json(cls, obj: Any, where: str = "model") -> ModelInfo:
        d = _dict(obj, {"path", "display_name", "size", "fingerprint", "layout"}, where)
        layout = None if d["layout"] is None else KVLayout.from_json(d["layout"])
        return cls(_str(d["path"], f"{where}.path", nonempty=True),
                   _str(d["display_name"], f"{where}.display_name"),
                   _int(d["size"], f"{where}.size"),
                   _str(d["fingerprint"], f"{where}.fingerprint", nonempty=True), layout)


@dataclass(frozen=True)
class Probe:
    """What the model predicted after the last ``len(rows)`` tokens of a KV state, recomputed
    from that state when it was saved: for each, the top (token id, logit) pairs."""

    rows: tuple[tuple[tuple[int, float], ...], ...]

    def to_json(self) -> list[list[list[Any]]]:
        return [[[t, v] for t, v in row] for row in self.rows]

    @classmethod
    def from_json(cls, obj: Any, where: str = "probe") -> Probe:
        if not isinstance(obj, list) or not 1 <= len(obj) <= MAX_PROBE_ROWS:
            raise _fail(f"{where} is not a list of 1 to {MAX_PROBE_ROWS} rows")
        rows = []
        for row in obj:
            if not isinstance(row, list) or not 1 <= len(row) <= MAX_PROBE_TOP:
                raise _fail(f"{where} has a row that is not 1 to {MAX_PROBE_TOP} pairs")
            pairs = []
            for pair in row:
                if (not isinstance(pair, list) or len(pair) != 2 or type(pair[0]) is not int
                        or not 0 <= pair[0] < MAX_TOKEN_ID or type(pair[1]) not in (int, float)
                        or not math.isfinite(pair[1])):
                    raise _fail(f"{where} has a bad (token, logit) pair")
                pairs.append((pair[0], float(pair[1])))
            rows.append(tuple(pairs))
        return cls(tuple(rows))


@dataclass(frozen=True)
class KVState:
    """What one saved KV section covers: exactly ``tokens``, in order, from position 0.
    ``probe`` (None in files of format 1) lets the reader check the section against them."""

    tokens: tuple[int, ...]
    n_ctx: int
    type_k: str
    type_v: str
    probe: Probe | None = None

    def to_json(self) -> dict[str, Any]:
        return {"tokens": list(self.tokens), "n_ctx": self.n_ctx,
                "type_k": self.type_k, "type_v": self.type_v,
                "probe": None if self.probe is None else self.probe.to_json()}

    @classmethod
    def from_json(cls, obj: Any, where: str = "kv") -> KVState:
        d = _dict(obj, {"tokens", "n_ctx", "type_k", "type_v", "probe"}, where)
        n_ctx = _int(d["n_ctx"], f"{where}.n_ctx", lo=1, hi=2**31)
        tokens = d["tokens"]
        if not isinstance(tokens, list) or len(tokens) > n_ctx:
            raise _fail(f"{where}.tokens is not a list of at most n_ctx tokens")
        if not all(type(t) is int and 0 <= t < MAX_POSITION_ID for t in tokens):
            raise _fail(f"{where}.tokens holds something other than token ids")
        probe = None if d["probe"] is None else Probe.from_json(d["probe"], f"{where}.probe")
        return cls(tuple(tokens), n_ctx, _str(d["type_k"], f"{where}.type_k", nonempty=True),
                   _str(d["type_v"], f"{where}.type_v", nonempty=True), probe)


@dataclass(frozen=True)
class SessionMeta:
    """One saved conversation. ``kv_<role>`` describes the section ``kv.<role>`` when present.
    ``settings`` is plain JSON (generation and speculative settings); treat it as read-only."""

    created: str
    saved: str
    messages: tuple[SavedMessage, ...]
    target: ModelInfo
    draft: ModelInfo | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    kv_target: KVState | None = None
    kv_draft: KVState | None = None

    def kv(self, role: str) -> KVState | None:
        return self.kv_target if role == "target" else self.kv_draft if role == "draft" else None

    def image_sections(self) -> dict[str, str]:
        """The sections of the messages' pictures: name -> the SHA-256 its bytes must have."""
        return {i.section: i.sha256 for m in self.messages for i in m.images}

    def expected_sections(self) -> frozenset[str]:
        """Names of the KV sections this metadata says the file carries."""
        return frozenset(f"kv.{role}" for role in KV_ROLES if self.kv(role) is not None)

    def to_json(self) -> dict[str, Any]:
        def opt(x: Any) -> Any:
            return None if x is None else x.to_json()
        return {"app": "duet", "format": FORMAT_VERSION, "created": self.created,
                "saved": self.saved, "messages": [m.to_json() for m in self.messages],
                "settings": dict(self.settings),
                "models": {"target": self.target.to_json(), "draft": opt(self.draft)},
                "kv": {"target": opt(self.kv_target), "draft": opt(self.kv_draft)}}

    @classmethod
    def from_json(cls, obj: Any) -> SessionMeta:
        d = _dict(obj, {"app", "format", "created", "saved", "messages", "settings", "models",
                        "kv"}, "the metadata")
        if d["app"] != "duet" or d["format"] != FORMAT_VERSION or type(d["format"]) is not int:
            raise _fail(f"it does not name app 'duet', format {FORMAT_VERSION}")
        if not isinstance(d["messages"], list):
            raise _fail("messages is not a list")
        if len(d["messages"]) > MAX_MESSAGES:
            raise _fail(f"it holds more than {MAX_MESSAGES:,} messages")
        messages = tuple(SavedMessage.from_json(m, f"messages[{i}]")
                         for i, m in enumerate(d["messages"]))
        if sum(m.n_chars for m in messages) > MAX_TEXT_CHARS:
            raise _fail(f"its messages hold more than {MAX_TEXT_CHARS:,} characters")
        if not isinstance(d["settings"], dict):
            raise _fail("settings is not an object")
        check_plain_json(d["settings"])
        models = _dict(d["models"], set(KV_ROLES), "models")
        kv = _dict(d["kv"], set(KV_ROLES), "kv")
        draft = (None if models["draft"] is None
                 else ModelInfo.from_json(models["draft"], "models.draft"))
        kvs = {r: None if kv[r] is None else KVState.from_json(kv[r], f"kv.{r}") for r in KV_ROLES}
        if kvs["draft"] is not None and draft is None:
            raise _fail("it has a draft KV state but no draft model")
        return cls(created=_iso(d["created"], "created"), saved=_iso(d["saved"], "saved"),
                   messages=messages, target=ModelInfo.from_json(models["target"], "models.target"),
                   draft=draft, settings=d["settings"], kv_target=kvs["target"],
                   kv_draft=kvs["draft"])


def migrate_v1(obj: Any) -> Any:
    """Format 1 → 2: KV states gain ``probe`` (null: saved before probes, not trusted)."""
    if isinstance(obj, dict):
        obj = {**obj, "format": 2}
        kv = obj.get("kv")
        if isinstance(kv, dict):
            obj["kv"] = {role: ({**state, "probe": None} if isinstance(state, dict) else state)
                         for role, state in kv.items()}
    return obj
