"""Known draft/target families: which small model drafts for which large ones.

``checked`` says whether the pair was verified here with ``engine/decode/speculative/compat.check_pair``
on the real files (True), or is listed from the families' shared tokenizers and not yet verified
(False). Pairing still judges every candidate from its header; the catalog only proposes them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class DraftRef:
    repo: str
    file: str | None  # None: the repository's preferred quantization


@dataclass(frozen=True)
class Family:
    name: str
    targets: str  # regex (case-insensitive) matched against "repo/file" of the target
    drafts: tuple[DraftRef, ...]
    checked: bool
    note: str = ""

    def matches(self, ref: str) -> bool:
        return re.search(self.targets, ref, re.IGNORECASE) is not None


FAMILIES: tuple[Family, ...] = (
    Family("Qwen2.5-Coder", r"qwen2\.5-coder-(1\.5|3|7|14|32)b",
           (DraftRef("Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),),
           checked=True, note="1.5B with 0.5B (Q4_K_M) passes check_pair on the starter models"),
    Family("Qwen2.5", r"qwen2\.5-(1\.5|3|7|14|32|72)b",
           (DraftRef("Qwen/Qwen2.5-0.5B-Instruct-GGUF", "qwen2.5-0.5b-instruct-q4_k_m.gguf"),),
           checked=False, note="same tokenizer as Qwen2.5-Coder; 7B+ have 128 padding tokens more"),
    Family("Qwen3", r"qwen3-(1\.7|4|8|14|32)b",
           (DraftRef("Qwen/Qwen3-0.6B-GGUF", "Qwen3-0.6B-Q8_0.gguf"),),
           checked=False),
    Family("Llama 3.x", r"llama-3\.[0-3]-(3|8|70)b",
           (DraftRef("bartowski/Llama-3.2-1B-Instruct-GGUF", "Llama-3.2-1B-Instruct-Q4_K_M.gguf"),),
           checked=False, note="Llama 3.1/3.2/3.3 share the 128k tokenizer"),
    Family("Gemma 3", r"gemma-3-(1|4|12|27)b",
           (DraftRef("ggml-org/gemma-3-270m-it-GGUF", None),),
           checked=False, note="Gemma 3 270M shares the 262k tokenizer"),
)


def drafts_for(target_ref: str) -> list[tuple[Family, DraftRef]]:
    """The catalog's draft proposals for a target named ``repo/file`` (or just ``repo``)."""
    return [(fam, d) for fam in FAMILIES if fam.matches(target_ref) for d in fam.drafts]
