"""Per-model settings remembered between runs: context size, GPU layers, draft, sampling defaults.

Keyed by the model file's identity (``engine.models.identity.file_fingerprint``: size and a
hash of its ends), so a renamed or moved file keeps its settings and a replaced one does not.
One JSON file in the config dir, versioned; a corrupt or foreign file reads as empty (and is
replaced on the next save) rather than stopping the app.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from engine import params, paths
from engine.decode.sampling import SamplingParams
from engine.llama.context_params import ContextParams
from engine.llama.placement_params import GPU_LAYERS
from engine.localfile import write_json
from engine.models.identity import file_fingerprint

log = logging.getLogger(__name__)

VERSION = 1
FILENAME = "model_settings.json"
MAX_ENTRIES = 500


@dataclass(frozen=True)
class ModelSettings:
    n_ctx: int | None = None
    n_gpu_layers: int | None = None
    draft: str | None = None  # path of the draft model, or "" for none
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    repeat_penalty: float | None = None
    rpc: str | None = None  # HOST:PORT,... of the target's RPC workers ("" for none)
    rpc_draft: str | None = None
    tensor_split: str | None = None

    @classmethod
    def from_json(cls, obj: Any) -> ModelSettings | None:
        """The settings in ``obj``, or None when it is not a valid record (unknown keys are dropped)."""
        if not isinstance(obj, dict):
            return None
        kept: dict[str, Any] = {}
        for f in fields(cls):
            v = obj.get(f.name)
            if v is None:
                continue
            if f.name in _PARAMS:  # checked by the parameter table's row
                try:
                    v = _PARAMS[f.name].check(v)
                except ValueError:
                    return None
            elif f.name == "n_gpu_layers":
                try:
                    v = GPU_LAYERS.check(v)
                except ValueError:
                    return None
            elif not isinstance(v, str) or len(v) >= 4096:
                return None
            kept[f.name] = v
        return cls(**kept)


_PARAMS = {r.name: r for cls in (SamplingParams, ContextParams) for r in params.table(cls)
           if r.name in {f.name for f in fields(ModelSettings)}}


def _store_path() -> Path:
    return paths.config_dir() / FILENAME


def _read_all(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        log.warning("ignoring unreadable %s: %s", path, e)
        return {}
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("models"), dict):
        log.warning("ignoring %s: not a version %d model settings file", path, VERSION)
        return {}
    return data["models"]


def load(model_path: Path | str) -> ModelSettings | None:
    """The settings remembered for the model at ``model_path``, or None."""
    record = _read_all(_store_path()).get(file_fingerprint(model_path))
    return ModelSettings.from_json(record.get("settings")) if isinstance(record, dict) else None


def save(model_path: Path | str, settings: ModelSettings) -> None:
    """Remember ``settings`` for the model at ``model_path`` (atomic replace of the store)."""
    path = _store_path()
    models = _read_all(path)
    key = file_fingerprint(model_path)
    models.pop(key, None)  # re-inserted last: the most recently saved
    models[key] = {"name": Path(model_path).name,
                                            "settings": {k: v for k, v in asdict(settings).items() if v is not None}}
    while len(models) > MAX_ENTRIES:  # oldest first (dicts keep insertion order)
        models.pop(next(iter(models)))
    write_json(path, {"version": VERSION, "models": models}, indent=1)
