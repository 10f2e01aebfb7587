"""The benchmark prompt set shipped in resources/bench (prompts.json + the files it quotes)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

RESOURCES = Path(__file__).resolve().parents[1] / "resources" / "bench"


@dataclass(frozen=True)
class BenchPrompt:
    id: str
    kind: str
    text: str


def load_prompts(folder: Path = RESOURCES, ids: tuple[str, ...] = ()) -> list[BenchPrompt]:
    """Prompts with ``{file.ext}`` placeholders replaced by that file's text."""
    raw = json.loads((folder / "prompts.json").read_text(encoding="utf-8"))
    out = []
    for entry in raw:
        if ids and entry["id"] not in ids:
            continue
        text = re.sub(r"\{([\w.-]+\.\w+)\}", lambda m: (folder / m.group(1)).read_text(encoding="utf-8"),
                      entry["prompt"])
        out.append(BenchPrompt(entry["id"], entry["kind"], text))
    return out
