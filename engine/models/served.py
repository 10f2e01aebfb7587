"""The models a server offers by name: every chat model in the models folders, what each is
called, the draft it pairs with, and the memory it will need, all read from GGUF headers
(nothing is loaded here).

Names: a model is listed under its file name without ``.gguf`` (the ``publisher/repo/file``
path under its folder when two files share a name), and answers as well to its file name, its
path, its catalogue key (``target``, ``draft``, ``test``, ``gemma``) and its display name.

Drafts, by the pairing rules (engine.models.hub.pairing.check_facts: llama.cpp's): the smallest
compatible model of the folders at most half the target's size (a draft that costs more than
half a step cannot pay on a CPU: the 0.5B drafting for the 1.5B, at 0.44 of its size, already
costs 0.65 of a step here, ../shared/models.md). None: the n-gram drafter alone.

Embedding models (engine.models.kind: an encoder architecture, a pooling type or non-causal
attention in the header) are not chat models and are not offered; the server's
``--embedding-model`` serves them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.models.catalog import CATALOG
from engine.models.folder import label, local_models
from engine.models.hub.errors import HubError
from engine.models.hub.fit import FitRequest, estimate
from engine.models.hub.gguf_header import GGUFError, GGUFHeader, model_facts
from engine.models.hub.pairing import Judged, ModelRef, check_facts
from engine.models.hub.remote_header import local_header
from engine.models.kind import embedding_only

log = logging.getLogger(__name__)

DRAFT_SHARE = 0.5  # of the target's size, at most (the module's docstring)
_KEYS = {m.filename: key for key, m in CATALOG.items()}
_DISPLAY = {m.filename: m.display_name for m in CATALOG.values()}


@dataclass(frozen=True)
class ModelOffer:
    """A model the server offers: ``name`` (what /v1/models lists), the other ``aliases`` a
    request may use, its file, its draft (None: the n-gram drafter), the memory it needs once
    generating (estimated), and its context."""

    name: str
    path: Path
    aliases: frozenset[str] = frozenset()
    draft: Path | None = None
    bytes_needed: int = 0
    n_ctx: int = 0

    def answers_to(self, name: str) -> bool:
        return name == self.name or name in self.aliases


@dataclass(frozen=True)
class Found:
    """A GGUF file and its header."""

    path: Path
    folder: Path | None  # the models folder it was found in (None: named on the command line)
    header: GGUFHeader
    judged: Judged

    @property
    def size(self) -> int:
        return self.judged.facts.tensor_bytes or self.path.stat().st_size


def read(path: Path, folder: Path | None = None) -> Found | None:
    """``path``'s header (None, logged, when it cannot be read)."""
    try:
        header = local_header(path)
    except (HubError, GGUFError, OSError) as e:
        log.warning("not offering %s: %s", path, e)
        return None
    tokens = header.get("tokenizer.ggml.tokens", ())
    judged = Judged(ModelRef(path=path), path.stat().st_size, model_facts(header),
                    tokens if isinstance(tokens, tuple) else ())
    return Found(path, folder, header, judged)


def is_chat_model(found: Found) -> bool:
    return not embedding_only(found.header.metadata)


def gather(first: Path, folders: Sequence[Path]) -> list[Found]:
    """``first`` (the server's default model) and the chat models in ``folders``, each file
    once (``first`` always, even if it is not a chat model by its header: it was asked for)."""
    seen: set[Path] = set()
    out: list[Found] = []
    candidates: list[tuple[Path, Path | None]] = [(first, None)]
    candidates += [(p, folder) for folder in folders if folder.is_dir()
                   for p in local_models(folder)]
    for path, folder in candidates:
        key = path.resolve()
        if key in seen:
            continue
        seen.add(key)
        found = read(path, folder)
        if found is not None and (folder is None or is_chat_model(found)):
            out.append(found)
    return out


def pick_draft(target: Found, others: Iterable[Found]) -> Path | None:
    """The smallest model of ``others`` that can draft for ``target`` (module docstring)."""
    fits = [d for d in others if d.path != target.path and d.size <= DRAFT_SHARE * target.size
            and check_facts(target.judged, d.judged) is None]
    return min(fits, key=lambda d: d.size).path if fits else None


def offers(found: Sequence[Found], *, fit: FitRequest, draft_for_first: Path | None = None,
           drafts: bool = True, first_aliases: Iterable[str] = ()) -> list[ModelOffer]:
    """An ModelOffer for each of ``found`` (the first: the default model, with ``draft_for_first``
    when given). ``drafts`` False: no draft models (the drafter is n-gram or none)."""
    by_path = {f.path: f for f in found}
    names: set[str] = set()
    out: list[ModelOffer] = []
    for i, f in enumerate(found):
        name = _name(f, names)
        names.add(name)
        draft = (draft_for_first if i == 0 and draft_for_first is not None else
                 pick_draft(f, found) if drafts else None)
        need = _need(f, fit)
        if draft is not None:
            d = by_path.get(draft) or read(draft)
            need += _need(d, fit) if d is not None else 0
        aliases = {f.path.name, str(f.path), *_catalog_names(f.path)}
        if f.folder is not None:
            aliases.add(label(f.path, f.folder))
        if i == 0:
            aliases.update(first_aliases)
        out.append(ModelOffer(name, f.path, frozenset(aliases - {name}), draft, need, fit.n_ctx))
    return out


def _name(f: Found, taken: set[str]) -> str:
    if f.path.stem not in taken or f.folder is None:
        return f.path.stem
    return label(f.path, f.folder).removesuffix(".gguf")


def _catalog_names(path: Path) -> tuple[str, ...]:
    key = _KEYS.get(path.name)
    return (key, _DISPLAY[path.name]) if key else ()


def _need(f: Found, fit: FitRequest) -> int:
    return estimate(f.header, fit, file_size=f.path.stat().st_size).ram_needed


def memory_needed(paths: Iterable[Path | None], fit: FitRequest) -> int:
    """The memory ``paths`` (a target and its draft, None skipped) are estimated to need once
    generating; a file whose header cannot be read counts its size."""
    total = 0
    for path in paths:
        if path is None:
            continue
        found = read(path)
        total += _need(found, fit) if found is not None else _size(path)
    return total


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
