"""Named presets: a system prompt, sampling values and a drafter, chosen per conversation.

Kept in ``config_dir()/presets.json`` as ``{"version": 1, "presets": [...]}``. Reading checks
every field and skips a preset it cannot use (logged), so a hand-edited file never breaks the
app. No Qt.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Sequence

from engine import paths
from engine.localfile import write_json
from engine.sampling import SamplingParams
from engine.speculative.params import SpeculativeParams

log = logging.getLogger(__name__)

VERSION = 1
FILENAME = "presets.json"
DRAFTERS = ("auto", "ngram", "model", "none")  # engine.speculative.params.DRAFTERS, menu order
MAX_PRESETS = 200
_SAMPLING = SamplingParams()


@dataclass(frozen=True)
class Preset:
    name: str
    system_prompt: str = ""
    temperature: float = _SAMPLING.temperature  # the defaults are the engine's own
    top_p: float = _SAMPLING.top_p
    top_k: int = _SAMPLING.top_k
    min_p: float = _SAMPLING.min_p
    repeat_penalty: float = _SAMPLING.repeat_penalty
    max_tokens: int = _SAMPLING.max_tokens
    drafter: str = SpeculativeParams().drafter

    SAMPLING = ("temperature", "top_p", "top_k", "min_p", "repeat_penalty", "max_tokens")

    def chat_settings(self) -> dict[str, Any]:
        """What a conversation keeps of its preset (the drafter is a model-load setting)."""
        return {"system_prompt": self.system_prompt,
                **{k: getattr(self, k) for k in self.SAMPLING}}

    def checked(self) -> Preset:
        """This preset if every value is usable; ValueError (one line) otherwise."""
        if not self.name.strip() or len(self.name) > 80:
            raise ValueError("a preset needs a name of 1 to 80 characters")
        ranges = {"temperature": (0.0, 5.0), "top_p": (0.0, 1.0), "top_k": (0, 100_000),
                  "min_p": (0.0, 1.0), "repeat_penalty": (0.5, 2.0), "max_tokens": (1, 131_072)}
        for name, (lo, hi) in ranges.items():
            v = getattr(self, name)
            if type(v) not in (int, float) or isinstance(v, bool) or not math.isfinite(v) \
                    or not lo <= v <= hi or (type(lo) is int and type(v) is not int):
                raise ValueError(f"{name} of preset {self.name!r} must be in [{lo}, {hi}]")
        if self.drafter not in DRAFTERS:
            raise ValueError(f"drafter of preset {self.name!r} must be one of {DRAFTERS}")
        if not isinstance(self.system_prompt, str):
            raise ValueError("the system prompt must be text")
        return replace(self, name=self.name.strip())


DEFAULTS = (
    Preset("Assistant", "You are a helpful assistant."),
    Preset("Precise", "You are a careful assistant. Answer exactly and briefly.", temperature=0.0),
    Preset("Coder", "You are an expert programmer. Answer with working code and short "
           "explanations.", temperature=0.2, drafter="auto"),
)


def presets_path() -> Path:
    return paths.config_dir() / FILENAME


def load_presets(path: Path | None = None) -> list[Preset]:
    """The saved presets (the defaults when there is no file; unusable entries skipped)."""
    path = path or presets_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return list(DEFAULTS)
    except (OSError, ValueError) as e:
        log.warning("ignoring unreadable %s: %s", path, e)
        return list(DEFAULTS)
    if not isinstance(data, dict) or data.get("version") != VERSION or \
            not isinstance(data.get("presets"), list):
        log.warning("ignoring %s: not a version %d presets file", path, VERSION)
        return list(DEFAULTS)
    known = {f.name for f in fields(Preset)}
    out: list[Preset] = []
    for raw in data["presets"][:MAX_PRESETS]:
        try:
            if not isinstance(raw, dict):
                raise ValueError("not an object")
            p = Preset(**{k: v for k, v in raw.items() if k in known}).checked()
        except (TypeError, ValueError) as e:
            log.warning("skipping a preset in %s: %s", path, e)
            continue
        if all(q.name != p.name for q in out):
            out.append(p)
    return out


def save_presets(presets: Sequence[Preset], path: Path | None = None) -> None:
    """Write ``presets`` atomically. Raises ValueError for an unusable preset, OSError."""
    path = path or presets_path()
    checked = [p.checked() for p in presets]
    write_json(path, {"version": VERSION, "presets": [asdict(p) for p in checked]}, indent=2)


def find(presets: Sequence[Preset], name: str | None) -> Preset | None:
    return next((p for p in presets if p.name == name), None)
