"""Named presets: a system prompt, sampling values and a drafter, chosen per conversation.

Kept in ``config_dir()/presets.json`` as ``{"version": 1, "presets": [...]}``. Reading checks
every field and skips a preset it cannot use (logged), so a hand-edited file never breaks the
app. No Qt.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine import params, paths
from engine.decode.sampling import SamplingParams
from engine.decode.speculative.params import SpeculativeParams
from engine.localfile import write_json

log = logging.getLogger(__name__)

VERSION = 1
FILENAME = "presets.json"
MAX_PRESETS = 200
SAMPLING_FIELDS = tuple(r.name for r in params.table(SamplingParams) if r.type is not tuple)
_DRAFTER = params.row(SpeculativeParams, "drafter")


@dataclass(frozen=True)
class Preset:
    """A system prompt, every sampling parameter (checked by ``SamplingParams`` itself, so a
    preset holds only values the engine accepts) and a drafter (a model-load setting)."""

    name: str
    system_prompt: str = ""
    sampling: SamplingParams = SamplingParams()
    drafter: str = _DRAFTER.default

    def chat_settings(self) -> dict[str, Any]:
        """What a conversation keeps of its preset (the drafter is a model-load setting)."""
        return {"system_prompt": self.system_prompt,
                **{k: getattr(self.sampling, k) for k in SAMPLING_FIELDS}}

    def checked(self) -> Preset:
        """This preset if every value is usable; ValueError (one line) otherwise."""
        if not isinstance(self.name, str) or not self.name.strip() or len(self.name) > 80:
            raise ValueError("a preset needs a name of 1 to 80 characters")
        if not isinstance(self.system_prompt, str):
            raise ValueError("the system prompt must be text")
        _DRAFTER.check(self.drafter)
        return replace(self, name=self.name.strip())

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "system_prompt": self.system_prompt, "drafter": self.drafter,
                **{k: getattr(self.sampling, k) for k in SAMPLING_FIELDS}}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Preset:
        """A preset from its JSON object; ValueError (ParamError) when a value is unusable."""
        sampling = SamplingParams(**{k: raw[k] for k in SAMPLING_FIELDS if k in raw})
        return cls(raw.get("name", ""), raw.get("system_prompt", ""), sampling,
                   raw.get("drafter", _DRAFTER.default)).checked()


def preset(name: str, system_prompt: str = "", drafter: str = _DRAFTER.default,
           **sampling: Any) -> Preset:
    """A preset with some sampling values set (the others the engine's defaults)."""
    return Preset(name, system_prompt, SamplingParams(**sampling), drafter)


DEFAULTS = (
    preset("Assistant", "You are a helpful assistant."),
    preset("Precise", "You are a careful assistant. Answer exactly and briefly.", temperature=0.0),
    preset("Coder", "You are an expert programmer. Answer with working code and short "
           "explanations.", temperature=0.2),
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
    out: list[Preset] = []
    for raw in data["presets"][:MAX_PRESETS]:
        try:
            if not isinstance(raw, dict):
                raise ValueError("not an object")
            p = Preset.from_json(raw)
        except ValueError as e:
            log.warning("skipping a preset in %s: %s", path, e)
            continue
        if all(q.name != p.name for q in out):
            out.append(p)
    return out


def save_presets(presets: Sequence[Preset], path: Path | None = None) -> None:
    """Write ``presets`` atomically. Raises ValueError for an unusable preset, OSError."""
    path = path or presets_path()
    checked = [p.checked() for p in presets]
    write_json(path, {"version": VERSION, "presets": [p.to_json() for p in checked]}, indent=2)


def find(presets: Sequence[Preset], name: str | None) -> Preset | None:
    return next((p for p in presets if p.name == name), None)
