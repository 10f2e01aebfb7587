"""The app's settings: one declarative schema, one ``changed(name)`` signal, one JSON file.

The sampling, speculation and context options are the rows of the engine's parameter table
(engine.params): their names, defaults, ranges and help come from there, so every value the
settings accept is one the engine accepts. The others (appearance, the server, files) are
declared here.

File: ``engine.paths.config_dir()/settings.json`` holding ``{"version": 2, "values": {...}}``,
written atomically (unique temporary file + ``os.replace``). Reading never fails: a missing or
damaged file gives the defaults (a damaged one is kept aside as ``settings.json.bad``), and an
unknown or invalid value (NaN included) is dropped for its default with a logged warning.
Version 1 files are read with their old names (``RENAMED``). Options marked ``applies="now"``
take effect at once (the next request; the local server restarts); ``"reload"`` ones when the
models are next loaded (they are baked into the ``Runtime``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from PySide6.QtCore import QObject, Signal

from engine import params, paths
from engine.cache.params import CacheParams
from engine.cli.serve import SERVE_PARALLEL
from engine.decode.sampling import SamplingParams
from engine.decode.speculative.params import SpeculativeParams
from engine.errors import DuetError
from engine.llama.context_params import ContextParams
from engine.llama.model import ModelSpec
from engine.llama.placement_params import GPU_LAYERS
from engine.localfile import read_json, write_json
from engine.runtime.pool import MAX_LOADED
from engine.runtime.runtime import RuntimeConfig, endpoints, tensor_split
from engine.tools import MAX_ROUNDS

log = logging.getLogger(__name__)

VERSION = 2
FILENAME = "settings.json"
Applies = Literal["now", "reload"]


@dataclass(frozen=True)
class Option:
    """One setting. ``minimum``/``maximum`` bound numbers, ``choices`` bound strings; options with
    ``visible=False`` are remembered state (the last models) rather than preferences. An option
    made from a row of the parameter table (``Option.of``) is checked by that row."""

    name: str
    type: type
    default: Any
    label: str
    description: str
    applies: Applies
    group: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    visible: bool = True
    param: params.Param | None = None
    step: float = 1

    @classmethod
    def of(cls, row: params.Param, group: str) -> Option:
        s = row.spec
        return cls(row.name, row.type, row.default, s.label, s.help,
                   "now" if s.applies == "request" else "reload", group, s.minimum, s.maximum,
                   s.choices, param=row, step=s.step)

    def validate(self, value: Any) -> Any:
        """``value`` converted to this option's type, or ValueError saying why it is refused."""
        if self.param is not None:
            return self.param.check(value)
        if type(value) is not self.type:  # bool is not an int here, on purpose
            raise ValueError(f"{self.name}: expected {self.type.__name__}, got {type(value).__name__}")
        number: Any = value  # of this option's type (the check above narrows it to object)
        if self.minimum is not None and number < self.minimum:
            raise ValueError(f"{self.name}: {value} is below {self.minimum}")
        if self.maximum is not None and number > self.maximum:
            raise ValueError(f"{self.name}: {value} is above {self.maximum}")
        if self.choices and value not in self.choices:
            raise ValueError(f"{self.name}: {value!r} is not one of {', '.join(self.choices)}")
        return value


def _rows(cls: type, group: str, skip: tuple[str, ...] = ()) -> tuple[Option, ...]:
    """The settings of a parameter class: its rows that a form can edit (not lists)."""
    return tuple(Option.of(r, group) for r in params.table(cls)
                 if r.type is not tuple and r.name not in skip)


SPEC, SAMPLING, LOADING, CONVERSATIONS, APPEARANCE, MODELS = (
    "Speculative decoding", "Sampling", "Model loading", "Conversations", "Appearance", "Models")
SERVER = "Local server"

SCHEMA: tuple[Option, ...] = (
    *_rows(SpeculativeParams, SPEC, skip=("adaptive",)),
    # not shown (drafting pays or not on this machine, measured): tests and measurements pin it
    *(replace(o, visible=False) for o in _rows(SpeculativeParams, SPEC) if o.name == "adaptive"),
    *_rows(SamplingParams, SAMPLING),
    Option("system_prompt", str, "", "System prompt", "Sent before every conversation (empty: none).",
           "now", SAMPLING),
    *_rows(ContextParams, LOADING, skip=("n_batch", "type_v")),
    *(replace(Option.of(GPU_LAYERS, LOADING), name=f"gpu_layers_{who}", label=f"GPU layers ({who})")
      for who in ("target", "draft")),
    Option("models_kept", int, MAX_LOADED, "Models kept loaded",
           "Models used before stay loaded (within the memory free) so that going back to a "
           "conversation's model is instant; 1 keeps only the one in use.", "now", LOADING, 1, 16),
    Option("rpc_target", str, "", "RPC workers (target)",
           "HOST:PORT,… of duet-cli workers that hold the target's layers (empty: this computer).",
           "reload", LOADING),
    Option("tensor_split", str, "", "Tensor split (target workers)",
           "Share of each target worker, e.g. 1,3 (empty: by the memory each reports).",
           "reload", LOADING),
    Option("rpc_draft", str, "", "RPC workers (draft)",
           "HOST:PORT,… of workers for the draft model's layers (empty: this computer).",
           "reload", LOADING),
    Option("save_kv", bool, True, "Save KV state with conversations",
           "Saved conversations reopen without recomputing the prompt (larger files).",
           "now", CONVERSATIONS),
    Option("autosave", bool, True, "Autosave", "Save the conversation after every reply.",
           "now", CONVERSATIONS),
    Option("max_tool_rounds", int, MAX_ROUNDS, "Tool rounds per reply",
           "How many replies in a row may call tools (MCP) before the model must answer "
           "(0: tools are shown but no call is run).", "now", CONVERSATIONS, 0, 64),
    *_rows(CacheParams, CONVERSATIONS),
    Option("thinking", bool, True, "Reasoning models think first",
           "A reasoning model thinks before it answers (its thinking shows folded). Each "
           "conversation can turn it off or on with the Think button by the message box.",
           "now", CONVERSATIONS),
    Option("read_ahead", bool, True, "Read while I type",
           "While you write, the model reads the conversation and what you have typed so far, "
           "so that the reply starts sooner after Enter (it gives way to everything else).",
           "now", CONVERSATIONS),
    Option("dictation_language", str, "", "Dictation language",
           "The language you speak to the Speak button, as a code such as en or fr (empty: "
           "detected each time, which takes about twice as long).", "now", CONVERSATIONS),
    Option("composer_draft", str, "", "Unsent message",
           "What the composer held when Duet last quit (it is there again at the next start).",
           "now", CONVERSATIONS, visible=False),
    Option("highlight_draft", bool, True, "Highlight drafted tokens",
           "Tint the text of tokens that came from the drafter.", "now", APPEARANCE),
    Option("theme", str, "system", "Theme", "system, light or dark.", "now", APPEARANCE,
           choices=("system", "light", "dark")),
    Option("server_enabled", bool, False, "Local server",
           "Serve the chosen model to other programs over an OpenAI-compatible HTTP API (starts, "
           "restarts or stops at once).",
           "now", SERVER),
    Option("server_host", str, "127.0.0.1", "Server address",
           "127.0.0.1 keeps it to this computer; any other address needs an API key.",
           "now", SERVER),
    Option("server_port", int, 8080, "Server port", "TCP port of the local server.",
           "now", SERVER, 1, 65535),
    Option("server_api_key", str, "", "Server API key",
           "Clients must send Authorization: Bearer KEY (empty: no key, loopback only).",
           "now", SERVER),
    Option("target_model", str, "", "Target model", "The last target GGUF file.", "reload", MODELS,
           visible=False),
    Option("draft_model", str, "", "Draft model", "The last draft GGUF file (empty: none).",
           "reload", MODELS, visible=False),
)
OPTIONS: Mapping[str, Option] = MappingProxyType({o.name: o for o in SCHEMA})
DEFAULTS: Mapping[str, Any] = MappingProxyType({o.name: o.default for o in SCHEMA})
SAMPLING_KEYS = tuple(o.name for o in _rows(SamplingParams, SAMPLING))
CHAT_KEYS = frozenset((*SAMPLING_KEYS, "system_prompt", "drafter", "thinking"))  # a conversation's own


def chat_settings(raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A conversation's own settings read from its file, through the same checks as the
    settings: what passes, and one line for each value left out (the default is used)."""
    kept: dict[str, Any] = {}
    refused: list[str] = []
    for name, value in raw.items():
        option = OPTIONS.get(name)
        if option is None or name not in CHAT_KEYS:
            refused.append(f"{name!r} is not a conversation setting")
            continue
        try:
            kept[name] = option.validate(value)
        except ValueError as e:
            refused.append(str(e))
    return kept, refused
# Names written by version 1 files: the parameter table's names replaced them.
RENAMED = {"context_size": "n_ctx", "threads": "n_threads"}


def settings_path() -> Path:
    return paths.config_dir() / FILENAME


def parse(data: Any) -> dict[str, Any]:
    """Values from a decoded settings file: defaults for whatever is missing, unknown or invalid."""
    values = dict(DEFAULTS)
    if not isinstance(data, dict) or not isinstance(data.get("values"), dict):
        log.warning("settings file has no values object; using the defaults")
        return values
    version = data.get("version")
    if version not in (1, VERSION):
        log.warning("settings file has version %r (this Duet writes %d); reading what it can",
                    version, VERSION)
    raw_values = dict(data["values"])
    if raw_values.pop("speculative", True) is False:  # version 1: speculation off
        raw_values["drafter"] = "none"
    for name, raw in raw_values.items():
        name = RENAMED.get(name, name)
        option = OPTIONS.get(name)
        if option is None:
            log.warning("unknown setting %r ignored", name)
            continue
        try:
            values[name] = option.validate(raw)
        except ValueError as e:
            log.warning("invalid setting %s ignored, using the default: %s", name, e)
    return values


def load(path: Path) -> dict[str, Any]:
    """The values in ``path``; the defaults when it is missing or damaged (a damaged file —
    not UTF-8, not JSON, nested too deeply, not an object — is kept aside as ``<name>.bad``)."""
    return parse(read_json(path, _check_shape) or {"version": VERSION, "values": {}})


def _check_shape(data: Any) -> None:
    if not isinstance(data, dict) or not isinstance(data.get("values"), dict):
        raise ValueError("it has no values object")


def save(path: Path, values: Mapping[str, Any]) -> None:
    """Write ``values`` atomically: a reader sees the old file or the new one, never half."""
    write_json(path, {"version": VERSION, "values": {o.name: values[o.name] for o in SCHEMA}},
               indent=2)


# -- settings → engine dataclasses (pure functions of a values mapping) -----------------------
def _instance(cls: type, values: Mapping[str, Any], **fixed: Any) -> Any:
    return cls(**{**{r.name: values[r.name] for r in params.table(cls) if r.name in values},
                  **fixed})


def sampling_params(values: Mapping[str, Any]) -> SamplingParams:
    return _instance(SamplingParams, values)


def speculative_params(values: Mapping[str, Any], *, has_draft: bool = True) -> SpeculativeParams:
    """A min above its max is lowered to the max rather than refused."""
    if values["drafter"] == "model" and not has_draft:
        raise DuetError("the drafter is set to 'model' but no draft model is chosen")
    return _instance(SpeculativeParams, values,
                     draft_min=min(values["draft_min"], values["draft_max"]),
                     ngram_min=min(values["ngram_min"], values["ngram_max"]))


def context_params(values: Mapping[str, Any]) -> ContextParams:
    """With the local server on and one sequence asked for, the app's conversation gets one and
    the server's clients as many as ``duet-cli serve`` gives them by default (they share the
    context's cells: the memory is that of one)."""
    parallel = values["n_parallel"]
    if values.get("server_enabled") and parallel == 1:
        parallel = 1 + SERVE_PARALLEL
    return _instance(ContextParams, values, type_v=values["type_k"], n_parallel=parallel)


def config_from_settings(values: Mapping[str, Any], target_path: Path | str,
                   draft_path: Path | str | None = None) -> RuntimeConfig:
    draft = (ModelSpec(Path(draft_path), n_gpu_layers=values["gpu_layers_draft"],
                       rpc=endpoints(values["rpc_draft"])) if draft_path else None)
    rpc, split = endpoints(values["rpc_target"]), tensor_split(values["tensor_split"])
    if split and not rpc:
        raise DuetError("a tensor split needs RPC workers for the target")
    return RuntimeConfig(
        target=ModelSpec(Path(target_path), n_gpu_layers=values["gpu_layers_target"], rpc=rpc,
                         tensor_split=split),
        draft=draft, context=context_params(values), sampling=sampling_params(values),
        speculative=speculative_params(values, has_draft=draft is not None),
        state_cache_bytes=values["state_cache_mb"] << 20, kv_store_bytes=values["kv_store_mb"] << 20)


class Settings(QObject):
    """The live settings. ``changed(name)`` fires once per option whose value changed."""

    changed = Signal(str)

    def __init__(self, path: Path | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.path = path or settings_path()
        self._values = load(self.path)

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def get(self, name: str) -> Any:
        return self._values[name]

    @property
    def values(self) -> Mapping[str, Any]:
        """A read-only snapshot (safe to hand to another thread)."""
        return MappingProxyType(dict(self._values))

    def set(self, name: str, value: Any) -> bool:
        return bool(self.update({name: value}))

    def update(self, new: Mapping[str, Any]) -> list[str]:
        """Validate all of ``new`` (ValueError: nothing changes), store, save once, signal.

        Returns the names whose value changed."""
        checked = {}
        for name, value in new.items():
            if name not in OPTIONS:
                raise ValueError(f"unknown setting {name!r}")
            checked[name] = OPTIONS[name].validate(value)
        changed = [n for n, v in checked.items() if self._values[n] != v]
        if not changed:
            return []
        self._values.update(checked)
        try:
            save(self.path, self._values)
        except OSError as e:
            log.warning("cannot save settings to %s: %s", self.path, e)
        for name in changed:
            self.changed.emit(name)
        return changed

    def reset(self) -> list[str]:
        return self.update({o.name: o.default for o in SCHEMA if o.visible})

    # -- the engine's parameters, from the current values ----------------------------------
    def sampling_params(self) -> SamplingParams:
        return sampling_params(self._values)

    def speculative_params(self, *, has_draft: bool = True) -> SpeculativeParams:
        return speculative_params(self._values, has_draft=has_draft)

    def context_params(self) -> ContextParams:
        return context_params(self._values)

    def runtime_config(self, target_path: Path | str,
                       draft_path: Path | str | None = None) -> RuntimeConfig:
        return config_from_settings(self._values, target_path, draft_path)
