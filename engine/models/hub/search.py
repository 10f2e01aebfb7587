"""Search the Hub for GGUF repositories, and list one repository's GGUF files by quantization."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from itertools import islice
from typing import Any

from engine.models.hub import client
from engine.models.hub.errors import HubError, describe
from engine.models.hub.files import GGUFEntry, RemoteFile, group_gguf

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RepoHit:
    repo: str
    downloads: int
    likes: int
    gated: bool | str  # False, or the gating mode ("auto", "manual")
    last_modified: str

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class RepoFiles:
    repo: str
    revision: str  # the commit the listing describes
    licence: str
    gated: bool | str
    entries: tuple[GGUFEntry, ...]

    def entry(self, name: str) -> GGUFEntry:
        """The entry called ``name`` (a file, or any part of a split set). Raises HubError."""
        for e in self.entries:
            if name == e.name or name in (f.path for f in e.files):
                return e
        base = [e for e in self.entries if name in (f.path.rsplit("/", 1)[-1] for f in e.files)]
        if len(base) == 1:
            return base[0]
        raise HubError(f"{self.repo} has no GGUF file {name!r}")

    def to_json(self) -> dict[str, Any]:
        return {"repo": self.repo, "revision": self.revision, "licence": self.licence, "gated": self.gated,
                "entries": [e.to_json() for e in self.entries]}


def search(query: str, limit: int = 20) -> list[RepoHit]:
    """Repositories with GGUF files matching ``query``, most downloaded first. Raises HubError."""
    client.check_reachable(f"search {query!r}")
    try:
        models = client.api().list_models(search=query or None, filter="gguf", sort="downloads", limit=limit)
        hits = [RepoHit(m.id, m.downloads or 0, m.likes or 0, _gated(m.gated), str(m.last_modified or ""))
                for m in islice(models, limit)]
    except Exception as e:  # huggingface_hub raises HTTP and network errors of several kinds
        raise HubError(describe(e, f"search {query!r}")) from e
    hits.sort(key=lambda h: -h.downloads)  # the Hub sorts already; keep the promise whatever it did
    return hits


def repo_files(repo: str, revision: str = client.DEFAULT_REVISION) -> RepoFiles:
    """The GGUF files of ``repo`` with sizes and SHA-256, its licence and gating. Raises HubError."""
    try:
        info = client.api().model_info(repo, revision=revision, files_metadata=True)
    except Exception as e:
        raise HubError(describe(e, repo)) from e
    files = [RemoteFile(s.rfilename, s.size if s.lfs is None else s.lfs.size,
                        s.lfs.sha256 if s.lfs is not None else None)
             for s in info.siblings or ()]
    return RepoFiles(repo=info.id, revision=info.sha or revision, licence=_licence(info),
                     gated=_gated(info.gated), entries=tuple(group_gguf(files)))


def _gated(value: object) -> bool | str:
    return value if isinstance(value, str) else bool(value)


def _licence(info: Any) -> str:
    card = getattr(info, "card_data", None) or getattr(info, "cardData", None)
    licence = None
    if card is not None:
        licence = card.get("license") if hasattr(card, "get") else getattr(card, "license", None)
    if not licence:
        licence = next((t.split(":", 1)[1] for t in info.tags or () if t.startswith("license:")), None)
    return str(licence or "unknown")
