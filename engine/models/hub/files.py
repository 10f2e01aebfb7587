"""Group a repository's GGUF files by quantization; split files (``-00001-of-00003``) count as one."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

SPLIT = re.compile(r"^(?P<stem>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
# Quantization labels as llama.cpp's quantize tool and the usual uploaders name them.
QUANT = re.compile(
    r"(?<![A-Za-z0-9])(I?Q\d(?:_[A-Z0-9]+)*|TQ\d_\d|MXFP4(?:_MOE)?|BF16|FP16|FP32|F16|F32)(?=$|[-.])",
    re.IGNORECASE)


@dataclass(frozen=True)
class RemoteFile:
    path: str  # path in the repository
    size: int | None
    sha256: str | None  # from the Hub's LFS metadata


@dataclass(frozen=True)
class GGUFEntry:
    """One downloadable model: a single GGUF file, or every part of a split one (in order)."""

    name: str  # the file name, or the first part's name for a split model
    quant: str
    files: tuple[RemoteFile, ...]
    projector: RemoteFile | None = None  # a vision model's projector, fetched beside it

    @property
    def all_files(self) -> tuple[RemoteFile, ...]:
        """What a download fetches: the model's files, then its projector."""
        return self.files + ((self.projector,) if self.projector is not None else ())

    @property
    def size(self) -> int | None:
        sizes = [f.size for f in self.all_files]
        known = [s for s in sizes if s is not None]
        return None if len(known) < len(sizes) else sum(known)

    @property
    def is_split(self) -> bool:
        return len(self.files) > 1

    @property
    def first(self) -> RemoteFile:
        return self.files[0]

    def to_json(self) -> dict:
        return {"name": self.name, "quant": self.quant, "size": self.size,
                "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in self.files],
                "projector": self.projector.path if self.projector is not None else None}


def quant_of(filename: str) -> str:
    """The quantization label in a file name (upper case), or "?" when it names none."""
    base = filename.rsplit("/", 1)[-1]
    m = SPLIT.match(base)
    stem = m.group("stem") if m else base.removesuffix(".gguf").removesuffix(".GGUF")
    found = QUANT.findall(stem)
    return found[-1].upper() if found else "?"


def group_gguf(files: list[RemoteFile]) -> list[GGUFEntry]:
    """The GGUF entries among ``files``: splits joined (only when every part is present), sorted
    by size (unknown sizes last). Incomplete split sets are dropped: they cannot be loaded. A
    vision repository's projectors (``mmproj-*.gguf``) are no entries: each model gets the one
    that pairs with it (engine.models.projector), fetched beside it."""
    from engine.models.projector import is_projector_name, pair  # (it uses quant_of, below)

    projectors = {f.path: f for f in files if f.path.lower().endswith(".gguf") and is_projector_name(f.path)}
    singles: list[GGUFEntry] = []
    splits: dict[tuple[str, int], dict[int, RemoteFile]] = {}
    for f in files:
        if not f.path.lower().endswith(".gguf") or f.path in projectors:
            continue
        m = SPLIT.match(f.path.rsplit("/", 1)[-1])
        if m is None:
            singles.append(GGUFEntry(f.path, quant_of(f.path), (f,)))
            continue
        prefix = f.path[: len(f.path) - len(m.group(0))] + m.group("stem")
        splits.setdefault((prefix, int(m.group("count"))), {})[int(m.group("index"))] = f
    for (_, count), parts in splits.items():
        if count > 0 and sorted(parts) == list(range(1, count + 1)):
            ordered = tuple(parts[i] for i in range(1, count + 1))
            singles.append(GGUFEntry(ordered[0].path, quant_of(ordered[0].path), ordered))
    if projectors:
        alone = len({e.name.rsplit("/", 1)[0] for e in singles}) <= 1
        singles = [replace(e, projector=projectors.get(pair(e.name, list(projectors), alone=alone) or ""))
                   for e in singles]
    return sorted(singles, key=lambda e: (e.size is None, e.size or 0, e.name))
