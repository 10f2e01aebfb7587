"""Vision projectors (``mmproj-*.gguf``): told from models by name, paired with the model they
serve by name, and checked by their header (a projector, of a vision type, whose output width is
the model's embedding width) before libmtmd loads one. Nothing here loads a model.

A repository or folder holds the model's quantizations and one or more projectors (LLaVA's
``mmproj-model-f16.gguf``, ggml-org's ``mmproj-SmolVLM-500M-Instruct-Q8_0.gguf`` beside
``SmolVLM-500M-Instruct-Q8_0.gguf``): the projector whose name, less ``mmproj`` and the
quantization, is the model's is preferred, then one of the same quantization, then F16.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.models.hub.files import quant_of
from engine.models.hub.gguf_header import GGUFError, NeedMoreBytes, parse_header

log = logging.getLogger(__name__)

MAX_HEADER = 16 << 20  # a projector's header is a few hundred tensors' names: far less
_NAME = re.compile(r"mmproj", re.IGNORECASE)


def is_projector_name(name: str) -> bool:
    """Whether a GGUF file's name says it is a projector (``mmproj`` in it)."""
    return bool(_NAME.search(name.rsplit("/", 1)[-1]))


def _key(name: str) -> str:
    """A file name less folders, ``mmproj``, its quantization, case and punctuation."""
    base = name.rsplit("/", 1)[-1].lower().removesuffix(".gguf")
    quant = quant_of(name).lower()
    if quant != "?":
        base = base.replace(quant, "")
    return re.sub(r"[^a-z0-9]", "", _NAME.sub("", base))


def pair(model: str, projectors: Sequence[str], *, alone: bool = True) -> str | None:
    """The projector among ``projectors`` (names) for the model file ``model`` (module
    docstring); None when there is none. ``alone``: the model is the only one beside them (a
    repository's folder), so a projector of another name is its own too (LLaVA's
    ``mmproj-model-f16.gguf``)."""
    same_name = [p for p in projectors if _key(p) == _key(model)] or (list(projectors) if alone else [])
    if not same_name:
        return None
    quant = quant_of(model)

    def rank(p: str) -> tuple[int, str]:
        q = quant_of(p)
        return (0 if q == quant else 1 if q == "F16" else 2 if q == "BF16" else 3, p)

    return min(same_name, key=rank)


@dataclass(frozen=True)
class ProjectorFacts:
    projector_type: str
    vision: bool
    widths: frozenset[int]  # the dimensions of its projection (``mm.*``) tensors


def read_facts(path: Path) -> ProjectorFacts:
    """A projector's facts from its header; GGUFError (one line) when it is not one."""
    try:
        with open(path, "rb") as f:
            buf = f.read(MAX_HEADER)
    except OSError as e:
        raise GGUFError(f"cannot read {path.name}: {e.strerror}") from None
    try:
        h = parse_header(buf, kept=frozenset())
    except NeedMoreBytes:
        raise GGUFError(f"{path.name}: the header is truncated or too large") from None
    if h.get("general.architecture") != "clip":
        raise GGUFError(f"{path.name} is not a projector (its architecture is "
                        f"{h.get('general.architecture')!r}, not clip)")
    kind = h.get("clip.projector_type") or h.get("clip.vision.projector_type") or "?"
    widths = frozenset(d for t in h.tensors if t.name.startswith("mm.") for d in t.shape)
    return ProjectorFacts(str(kind), bool(h.get("clip.has_vision_encoder")), widths)


def problem(path: Path, n_embd: int) -> str | None:
    """Why ``path`` is not a vision projector for a model of embedding width ``n_embd``; None
    when it is."""
    try:
        facts = read_facts(path)
    except GGUFError as e:
        return str(e)
    if not facts.vision:
        return f"{path.name} has no vision encoder (projector type {facts.projector_type})"
    if n_embd and n_embd not in facts.widths:
        return (f"{path.name} ({facts.projector_type}) projects to another width than the model's "
                f"{n_embd}: it belongs to another model")
    return None


def find_projector(model: Path, n_embd: int) -> Path | None:
    """The projector beside the model file ``model`` that fits it (by name, then header), or
    None. A projector that does not fit is passed over with an info line."""
    if is_projector_name(model.name):
        return None
    try:
        ggufs = [p.name for p in model.parent.iterdir() if p.suffix.lower() == ".gguf" and p.is_file()]
    except OSError:
        return None
    found = [n for n in ggufs if is_projector_name(n)]
    models = {_key(n) for n in ggufs if not is_projector_name(n)}  # (quantizations of one model: one key)
    while found:
        name = pair(model.name, found, alone=len(models) == 1)
        if name is None:
            return None
        why = problem(model.parent / name, n_embd)
        if why is None:
            return model.parent / name
        log.info("not using %s for %s: %s", name, model.name, why)
        found.remove(name)
    return None
