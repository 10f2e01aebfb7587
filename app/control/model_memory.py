"""Per-model settings in the app: what a model was last used with comes back when it is chosen.

The engine keeps the records (``engine.runtime.model_settings``, keyed by the file's identity); this
maps them to the app's settings. A record is written whenever one of these settings changes
while the model is the chosen target, so a reload never brings back an older value.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from engine.runtime import model_settings
from engine.runtime.model_settings import ModelSettings

log = logging.getLogger(__name__)

# ModelSettings field -> app setting
FIELDS = {"n_ctx": "n_ctx", "n_gpu_layers": "gpu_layers_target", "draft": "draft_model",
          "temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p",
          "repeat_penalty": "repeat_penalty", "rpc": "rpc_target", "rpc_draft": "rpc_draft",
          "tensor_split": "tensor_split"}
REMEMBERED = frozenset(FIELDS.values())


def recall(target: Path) -> dict[str, Any]:
    """The app settings remembered for ``target`` (empty: none, or unreadable)."""
    try:
        record = model_settings.load(target)
    except OSError as e:
        log.warning("cannot read the settings remembered for %s: %s", target, e)
        return {}
    if record is None:
        return {}
    values = {FIELDS[k]: v for k, v in asdict(record).items() if v is not None}
    draft = values.get("draft_model")
    if draft and not Path(draft).exists():
        del values["draft_model"]  # the draft it was used with is gone: keep the current choice
    return values


def remember(target: Path, values: Mapping[str, Any]) -> None:
    """Record the remembered settings of ``values`` (an app settings snapshot) for ``target``."""
    record = ModelSettings(**{k: values[name] for k, name in FIELDS.items()})
    try:
        model_settings.save(target, record)
    except (OSError, ValueError) as e:
        log.warning("cannot remember the settings of %s: %s", target, e)
