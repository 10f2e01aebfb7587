"""The models folder: where a file from Hugging Face goes, which models the folder holds, and
what to call each one.

The starter models (engine.models.fetch) sit at the top of the folder under their catalogue names.
A file from the Hub goes to ``<publisher>/<repo>/<its path in the repository>``, as LM Studio
and the Hub's own cache keep them, so that two repositories' files of the same name never meet.
GGUF files the person put anywhere in the folder are listed as well.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from engine.models.catalog import CATALOG
from engine.models.projector import is_projector_name

MAX_DEPTH = 6  # folders below the models folder that are searched (publisher/repo/ and more)
_LATER_PART = re.compile(r"-(?!00001)\d{5}-of-\d{5}\.gguf$", re.IGNORECASE)
_STARTER_NAMES = {m.filename: m.display_name for m in CATALOG.values()}


def hub_path(models: Path, repo: str, file: str) -> Path:
    """Where ``file`` (its path in the repository) of the Hub repository ``repo`` goes.
    ValueError for a name that could lead out of its folder."""
    owner_and_name, in_repo = repo.split("/"), file.split("/")
    for part in (*owner_and_name, *in_repo):
        if part in ("", ".", "..") or "\\" in part or "\0" in part:
            raise ValueError(f"unusable name on the Hub: {repo}/{file}")
    if len(owner_and_name) > 2:
        raise ValueError(f"not a repository name: {repo}")
    return models.joinpath(*owner_and_name, *in_repo)


def local_models(folder: Path) -> list[Path]:
    """The GGUF files under ``folder``, sorted by path: at most :data:`MAX_DEPTH` folders down,
    without following links to folders, skipping hidden folders and partial downloads, and of
    a split model only its first part (the one that is loaded). A vision projector
    (``mmproj-*.gguf``) is no model: it is loaded beside one (engine.models.projector)."""
    found: list[Path] = []
    for root, dirs, files in os.walk(folder):  # unreadable folders are skipped
        depth = len(Path(root).relative_to(folder).parts)
        dirs[:] = [d for d in dirs if not d.startswith(".")] if depth < MAX_DEPTH else []
        for name in files:
            path = Path(root) / name
            if name.lower().endswith(".gguf") and not name.startswith(".") and \
                    not _LATER_PART.search(name) and not is_projector_name(name) and path.is_file():
                found.append(path)
    return sorted(found)


def starter_name(path: Path, folder: Path) -> str | None:
    """The catalogue's name of the starter model at ``path`` (at the top of ``folder``)."""
    return _STARTER_NAMES.get(path.name) if path.parent == folder else None


def label(path: Path, folder: Path) -> str:
    """A readable name for a model file: a starter's catalogue name, ``publisher/repo/file`` for
    a file in a subfolder of ``folder``, else the file name."""
    if path.parent == folder:
        return _STARTER_NAMES.get(path.name, path.name)
    if path.is_relative_to(folder):
        return path.relative_to(folder).as_posix()
    return path.name
