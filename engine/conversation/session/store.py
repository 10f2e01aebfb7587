"""Saving and reopening conversations: the ``.duet`` file bound to live llama contexts.

``save_contexts`` writes the messages, settings and the KV state of the target context (and of
the draft context, when there is one) so that the state covers exactly ``ctx.tokens``.
``open_contexts`` reads a file back and restores each KV state whose model file, cache layout
and section are intact and whose probe (engine.conversation.session.probe) shows that it belongs to the
conversation's text; anything else falls back to the text with a one-line ``note`` (the next
reply then processes the history again). The ``*_conversation`` functions take a Runtime and
just pass its contexts.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.chat.messages import Attachment, Image, Message, ToolCall
from engine.conversation.session import probe
from engine.conversation.session.fingerprint import check_model, file_fingerprint, fingerprint_size, kv_layout
from engine.conversation.session.format import LoadedSession, read_meta, read_session, write_session
from engine.conversation.session.meta import (
    KVLayout,
    KVState,
    ModelInfo,
    SavedAttachment,
    SavedCall,
    SavedImage,
    SavedMessage,
    SessionMeta,
    image_section,
    utc_now_iso,
)
from engine.errors import DecodeError, ModelLoadError, RewindError, SessionError

if TYPE_CHECKING:
    from engine.llama.context import LlamaSequence
    from engine.runtime.runtime import Runtime

log = logging.getLogger(__name__)

REPROCESS = "its history will be processed again"
_FINGERPRINTS: dict[tuple[str, int, int], str] = {}


@dataclass(frozen=True)
class SaveReport:
    """``bytes``: the file's size; ``n_tokens``: tokens in the target context when saved;
    ``bytes_per_token`` = bytes / n_tokens (0.0 for an empty context)."""

    path: Path
    bytes: int
    n_tokens: int
    bytes_per_token: float
    seconds: float
    with_kv: bool


@dataclass(frozen=True)
class OpenResult:
    """``restored_kv``: the target context now holds the saved history (no prefill needed);
    ``note``: one line saying why something fell back to text, or None."""

    messages: list[Message]
    settings: dict[str, Any]
    restored_kv: bool
    note: str | None
    model_path: Path | None
    draft_path: Path | None
    draft_restored: bool = field(default=False)


# ─── model identity ───────────────────────────────────────────────────────────


def model_fingerprint(path: Path | str) -> str:
    """file_fingerprint, cached per (path, size, mtime_ns). Raises ModelLoadError."""
    path = Path(path)
    try:
        st = os.stat(path)
    except OSError as e:
        raise ModelLoadError(f"cannot read model file {path}: {e.strerror or e}") from None
    key = (str(path.absolute()), st.st_size, st.st_mtime_ns)
    fp = _FINGERPRINTS.get(key)
    if fp is None:
        fp = _FINGERPRINTS[key] = file_fingerprint(path)
    return fp


def clear_fingerprint_cache() -> None:
    """Forget cached fingerprints (benchmarks use it to time a reopen as in a new process)."""
    _FINGERPRINTS.clear()


def context_layout(ctx: LlamaSequence) -> KVLayout:
    """The KV layout of ``ctx`` as it actually is (llama.cpp may round n_ctx up)."""
    return kv_layout(ctx.model, ctx.n_ctx, ctx.params.type_k, ctx.params.type_v)


def model_info(ctx: LlamaSequence) -> tuple[ModelInfo, bool]:
    """(the description of ``ctx``'s model, whether its file could be fingerprinted). A model
    whose file is gone or unreadable gets the fingerprint "unknown": its KV state is not saved,
    as nothing could later vouch for it."""
    model = ctx.model
    path = Path(model.path).absolute()
    try:
        fingerprint, known = model_fingerprint(path), True
    except ModelLoadError as e:
        log.warning("%s; saving the conversation's text only", e)
        fingerprint, known = "unknown", False
    size = (fingerprint_size(fingerprint) if known else None) or model.size_bytes
    return ModelInfo(path=str(path), display_name=model.display_name, size=size,
                     fingerprint=fingerprint, layout=context_layout(ctx)), known


# ─── messages ─────────────────────────────────────────────────────────────────


def to_saved(m: Message) -> SavedMessage:
    """engine.chat.messages.Message (epoch seconds) → the file's message (ISO 8601 UTC), tool calls and
    the call a tool result answers included."""
    try:
        stamp = datetime.fromtimestamp(m.time, UTC).isoformat()
    except (OverflowError, OSError, ValueError):  # a time no calendar can hold
        stamp = datetime.fromtimestamp(0, UTC).isoformat()
    return SavedMessage(m.role, m.content, stamp,
                        tuple(SavedCall(c.id, c.name, c.arguments) for c in m.tool_calls),
                        m.tool_call_id, m.name,
                        tuple(SavedAttachment(a.name, a.kind, a.sha256, a.text, a.pages, a.mode)
                              for a in m.attachments),
                        tuple(SavedImage(i.name, i.sha256) for i in m.images))


def from_saved(m: SavedMessage, pictures: Mapping[str, bytes] | None = None) -> Message:
    """The file's message; its pictures' bytes from ``pictures`` (by SHA-256: a picture whose
    section was damaged or missing is left out)."""
    when = datetime.fromisoformat(m.time)
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    pictures = pictures or {}
    return Message(m.role, m.content, when.timestamp(),
                   tuple(ToolCall(c.id, c.name, c.arguments) for c in m.tool_calls),
                   m.tool_call_id, m.name,
                   tuple(Attachment(a.name, a.kind, a.sha256, a.text, a.pages, a.mode)
                         for a in m.attachments),
                   tuple(Image(pictures[i.sha256], i.name) for i in m.images if i.sha256 in pictures))


def image_sections(messages: Sequence[Message], more: Sequence[Image] = ()) -> dict[str, bytes]:
    """The sections that keep the messages' pictures and ``more`` (each picture once)."""
    return {image_section(i.sha256): i.data for i in [*(i for m in messages for i in m.images), *more]}


def read_pictures(loaded: LoadedSession) -> tuple[dict[str, bytes], str | None]:
    """The pictures among ``loaded``'s sections, each checked against its SHA-256: (by
    SHA-256, a line on those that were damaged or missing, or None)."""
    out: dict[str, bytes] = {}
    for name, sha in loaded.meta.image_sections().items():
        data = loaded.sections.get(name)
        if data is not None and hashlib.sha256(data).hexdigest() == sha:
            out[sha] = data
    lost = len(loaded.meta.image_sections()) - len(out)
    return out, (f"{lost} picture(s) of the conversation were damaged or missing and are left out"
                 if lost else None)


# ─── saving ───────────────────────────────────────────────────────────────────


def _lay_out(ctx: LlamaSequence) -> bool:
    """Lay ``ctx``'s cells out as a restore does, its last tokens at the end (see _capture);
    False, the state unsaved, when that fails."""
    try:
        ctx.load_state(ctx.state_bytes(), list(ctx.tokens))
        probe.redecode(ctx)
        ctx.load_state(ctx.state_bytes(), list(ctx.tokens))
    except (DecodeError, RewindError) as e:
        log.info("%s: its KV state could not be laid out (%s); saving text only",
                 ctx.model.display_name, e)
        return False
    return True


def _capture(ctx: LlamaSequence | None) -> tuple[KVState, memoryview] | None:
    """The KV state of ``ctx`` and its description, or None when there is nothing to save."""
    if ctx is None or not ctx.tokens:
        return None
    if ctx.kv_pos_max() != len(ctx.tokens) - 1:
        log.warning("%s: the cache and its token mirror disagree; saving text only",
                    ctx.model.display_name)
        return None
    # The check must see the cells as a restore lays them out: contiguous, in the order they
    # sat in. Attention sums a sequence's cells in that order (plain attention over holes too),
    # and the check decodes its last tokens again after the sequence's last cell. After a cache
    # shift a reply's tokens run to the cache's end and wrap into the hole the dropped turns
    # left, mid-sequence; decoded again, the checked tokens land in a hole in the live cache but
    # after every cell in the restored one, so the two disagree (logits 0.1-0.4 apart on
    # SmolLM2; issue 72). So lay the state out as a restore would, move the checked tokens to
    # the end, and lay it out again: the check then finds them where it will put them on
    # opening, and the live conversation goes on from the very cells a reopened one has. A
    # sequence alone in its cache that never shifted is laid out so already (the 1.5B with
    # 3,000 tokens saves about 0.3 s sooner without it); plain attention sums over holes too.
    if not ctx.flash_attn or ctx.shifted or ctx.params.n_parallel > 1:
        if not _lay_out(ctx):
            return None
    check = probe.take(ctx)  # decodes the last tokens again: the same cells, the same tokens
    if check is None:
        log.info("%s: its KV state cannot be checked; saving text only", ctx.model.display_name)
        return None
    data = ctx.state_bytes()
    return KVState(tuple(ctx.tokens), ctx.n_ctx, ctx.params.type_k, ctx.params.type_v,
                   check), data


def _created(path: Path) -> str | None:
    """The creation time recorded in an existing file at ``path``, if it is readable."""
    if not path.exists():
        return None
    try:
        return read_meta(path).created
    except SessionError:
        return None


def save_contexts(path: Path, ctx: LlamaSequence, draft_ctx: LlamaSequence | None,
                  messages: Sequence[Message], *, settings: Mapping[str, Any],
                  with_kv: bool = True, created: str | None = None,
                  pictures: Sequence[Image] = ()) -> SaveReport:
    """Atomically write ``messages`` and ``settings`` and (``with_kv``) the KV states of ``ctx``
    and ``draft_ctx``, each covering exactly its ``tokens``; the messages' pictures, and
    ``pictures`` (those of other versions in the settings' tree), as sections. The old file
    stays intact on any failure. Raises SessionError (unsaveable settings, disk errors)."""
    t0 = time.perf_counter()
    path = Path(path)
    now = utc_now_iso()
    target_info, target_known = model_info(ctx)
    draft_info, draft_known = model_info(draft_ctx) if draft_ctx is not None else (None, False)
    target = _capture(ctx) if with_kv and target_known else None
    draft = _capture(draft_ctx) if with_kv and draft_known else None
    meta = SessionMeta(
        created=created or _created(path) or now, saved=now,
        messages=tuple(to_saved(m) for m in messages), target=target_info, draft=draft_info,
        settings=dict(settings), kv_target=target[0] if target else None,
        kv_draft=draft[0] if draft else None)
    sections: dict[str, bytes | memoryview] = dict(image_sections(messages, pictures))
    if target:
        sections["kv.target"] = target[1]
    if draft:
        sections["kv.draft"] = draft[1]
    size = _write(path, meta, sections)
    n = len(ctx.tokens)
    report = SaveReport(path, size, n, size / n if n else 0.0, time.perf_counter() - t0,
                        target is not None)
    log.info("saved %s: %d bytes, %d tokens, %.3f s", path, size, n, report.seconds)
    return report


def save_before_load(path: Path, before: LoadedSession | None, messages: Sequence[Message], *,
                     settings: Mapping[str, Any], model: Path, pictures: Sequence[Image] = ()) -> None:
    """Atomically write ``messages`` and ``settings`` while no model is loaded yet. The file as
    it was (``before``, read with its KV sections) keeps its models and intact KV states, for
    the restore that follows the load; a new file names the ``model`` file (no layout: no KV
    state). Raises SessionError (unsaveable settings, disk errors)."""
    now = utc_now_iso()
    saved = tuple(to_saved(m) for m in messages)
    if before is None:
        try:
            fingerprint = model_fingerprint(model)
        except ModelLoadError:
            fingerprint = "unknown"  # the load that follows says what is wrong with the file
        info = ModelInfo(str(Path(model).absolute()), Path(model).stem,
                         fingerprint_size(fingerprint) or 0, fingerprint)
        meta = SessionMeta(now, now, saved, info, settings=dict(settings))
        sections: dict[str, bytes] = {}
    else:  # intact KV states only: a damaged state is dropped
        sections = {k: v for k, v in before.sections.items() if k.startswith("kv.")}
        old = before.meta
        meta = replace(old, saved=now, messages=saved, settings=dict(settings),
                       kv_target=old.kv_target if "kv.target" in sections else None,
                       kv_draft=old.kv_draft if "kv.draft" in sections else None)
    _write(path, meta, {**sections, **image_sections(messages, pictures)})


def _write(path: Path, meta: SessionMeta, sections: Mapping[str, bytes | memoryview]) -> int:
    """write_session, a disk error as SessionError; returns the file's size."""
    try:
        return write_session(path, meta, sections)
    except OSError as e:
        raise SessionError(f"cannot save the conversation to {path}: {e.strerror or e}") from None


def restore_file(path: Path, before: LoadedSession | None) -> None:
    """Put back the file ``save_before_load`` replaced (None: there was none, remove it)."""
    try:
        if before is None:
            Path(path).unlink(missing_ok=True)
        else:
            write_session(path, before.meta, dict(before.sections))
    except OSError as e:
        log.warning("could not put back %s: %s", path, e.strerror or e)


def save_conversation(path: Path, runtime: Runtime, messages: Sequence[Message], *,
                      settings: Mapping[str, Any], with_kv: bool = True,
                      pictures: Sequence[Image] = ()) -> SaveReport:
    """save_contexts with the runtime's target and draft contexts (text only once an RPC worker
    holding part of a model went away: its KV state can no longer be read)."""
    if with_kv and runtime.worker_lost() is not None:
        log.info("an RPC worker is gone: saving %s without its KV state", path)
        with_kv = False
    return save_contexts(path, runtime.ctx, runtime.draft_ctx, messages, settings=settings,
                         with_kv=with_kv, pictures=pictures)


# ─── opening ──────────────────────────────────────────────────────────────────


def _why_not(role: str, info: ModelInfo | None, kv: KVState | None, ctx: LlamaSequence) -> str | None:
    """None when the saved ``kv`` of ``role`` can be restored into ``ctx``; else a reason."""
    if info is None:
        return f"the conversation names no {role} model"
    try:
        fp_now = model_fingerprint(ctx.model.path)
    except ModelLoadError:
        fp_now = None  # check_model reports the missing or unreadable file
    reason = check_model(info, ctx.model.path, context_layout(ctx), role=role,
                         fingerprint_now=fp_now)
    if reason is None and kv is not None and (kv.n_ctx, kv.type_k, kv.type_v) != (
            ctx.n_ctx, ctx.params.type_k, ctx.params.type_v):
        reason = (f"the {role} model's KV cache was saved as n_ctx {kv.n_ctx} "
                  f"{kv.type_k}/{kv.type_v}; now n_ctx {ctx.n_ctx} "
                  f"{ctx.params.type_k}/{ctx.params.type_v}")
    return reason


def _restore(ctx: LlamaSequence, kv: KVState, payload: bytes | None, problem: str | None,
             role: str) -> str | None:
    """Load ``payload`` into ``ctx``; None on success, else a reason (ctx may be cleared)."""
    if payload is None:
        return problem or f"the saved {role} KV state is missing"
    if kv.probe is None:
        return (f"the saved {role} KV state comes from an older Duet and cannot be checked "
                "against the conversation's text")
    try:
        ctx.load_state(payload, kv.tokens)
    except DecodeError as e:
        return f"the saved {role} KV state could not be loaded ({e})"
    reason = probe.mismatch(ctx, kv.probe)
    if reason is not None:
        ctx.clear()
        return f"the saved {role} KV state was not used: {reason}"
    return None


def open_contexts(path: Path, ctx: LlamaSequence | None, draft_ctx: LlamaSequence | None = None, *,
                  use_kv: bool = True) -> OpenResult:
    """Read the conversation at ``path``; restore its KV states into ``ctx`` / ``draft_ctx``
    where the models, layouts and sections all match and the state proves to belong to the text
    (``use_kv=False``: never; the history is processed again). Raises SessionError only when the
    header or metadata is unusable; every other problem falls back to text with a ``note``."""
    path = Path(path)
    meta = read_meta(path)
    notes: list[str] = []
    plan: dict[str, LlamaSequence] = {}
    if ctx is None or not use_kv:
        if not Path(meta.target.path).exists():
            notes.append(f"the model this conversation used is missing: {meta.target.path}")
    else:
        for role, info, kv, c in (("target", meta.target, meta.kv_target, ctx),
                                  ("draft", meta.draft, meta.kv_draft, draft_ctx)):
            if kv is None or c is None:
                continue
            reason = _why_not(role, info, kv, c)
            if reason is None:
                plan[role] = c
            elif role == "target":
                notes.append(f"{reason}; {REPROCESS}")
            else:
                notes.append(f"{reason}; the draft model will catch up by itself")
    restored: dict[str, bool] = {}
    pictures: dict[str, bytes] = {}
    if plan or meta.image_sections():
        loaded = read_session(path, want=[f"kv.{role}" for role in plan] + list(meta.image_sections()))
        pictures, lost = read_pictures(loaded)
        if lost:
            notes.append(lost)
        if (loaded.meta.target, loaded.meta.draft, loaded.meta.kv_target, loaded.meta.kv_draft) != (
                meta.target, meta.draft, meta.kv_target, meta.kv_draft):
            notes.append(f"the file changed while it was being opened; {REPROCESS}")
            plan.clear()
        meta = loaded.meta
        for role, c in plan.items():
            name = f"kv.{role}"
            kv = meta.kv(role)
            reason = _restore(c, kv, loaded.sections.pop(name, None), loaded.problem(name), role) \
                if kv is not None else f"the saved {role} KV state is missing"
            restored[role] = reason is None
            if reason is not None:
                tail = REPROCESS if role == "target" else "the draft model will catch up by itself"
                notes.append(f"{reason}; {tail}")
    note = ". ".join(notes) or None
    if note:
        log.warning("%s: %s", path, note)
    return OpenResult(
        messages=[from_saved(m, pictures) for m in meta.messages], settings=dict(meta.settings),
        restored_kv=restored.get("target", False), note=note,
        model_path=Path(meta.target.path),
        draft_path=None if meta.draft is None else Path(meta.draft.path),
        draft_restored=restored.get("draft", False))


def open_conversation(path: Path, runtime: Runtime | None, *, use_kv: bool = True) -> OpenResult:
    """open_contexts with the runtime's target and draft contexts (text only without one)."""
    if runtime is None:
        return open_contexts(path, None, None, use_kv=use_kv)
    return open_contexts(path, runtime.ctx, runtime.draft_ctx, use_kv=use_kv)
