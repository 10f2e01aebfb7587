"""Which drafts can pair with a target, judged from GGUF headers alone (no download).

The rules are those of ``engine/decode/speculative/compat.check_pair`` (llama.cpp's), applied to header
facts: tokenizer type, BOS handling, EOS, end-of-generation ids, vocabulary size within 128, and
the token texts from id 5 on, compared by a SHA-256 of the texts (the header carries the token
list; the weights are never fetched). End-of-generation sets are compared through the ids the
header names (eos, eot): llama.cpp derives the rest from token texts, which the hash compares.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.models import pair_reasons as why
from engine.models.folder import local_models
from engine.models.hub import client
from engine.models.hub.errors import HubError
from engine.models.hub.gguf_header import FIRST_CHECKED_TOKEN, GGUFHeader, ModelFacts, model_facts, tokens_digest
from engine.models.hub.pair_catalog import drafts_for
from engine.models.hub.remote_header import local_header, remote_header
from engine.models.hub.search import repo_files

log = logging.getLogger(__name__)

VOCAB_SIZE_SLACK = 128  # llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE
PREFERRED_QUANTS = ("Q4_K_M", "Q4_K_S", "Q4_0", "Q5_K_M", "Q8_0")


@dataclass(frozen=True)
class ModelRef:
    """A model on the Hub (``repo`` and ``file``) or on disk (``path``)."""

    repo: str | None = None
    file: str | None = None
    path: Path | None = None

    @property
    def label(self) -> str:
        return str(self.path) if self.path else f"{self.repo}/{self.file}" if self.file else str(self.repo)

    @classmethod
    def parse(cls, text: str) -> ModelRef:
        """``owner/name``, ``owner/name/file.gguf`` or a path to a local GGUF file."""
        p = Path(text).expanduser()
        if p.suffix.lower() == ".gguf" and p.is_file():
            return cls(path=p)
        parts = text.strip("/").split("/")
        if len(parts) < 2 or not all(parts):
            raise HubError(f"{text!r} is neither a GGUF file on disk nor a Hub repository (owner/name[/file.gguf])")
        return cls(repo="/".join(parts[:2]), file="/".join(parts[2:]) or None)


@dataclass(frozen=True)
class Judged:
    """A model's header facts (and token texts, kept for the comparison)."""

    ref: ModelRef
    size: int | None
    facts: ModelFacts
    tokens: tuple[bytes, ...]


@dataclass(frozen=True)
class PairVerdict:
    candidate: ModelRef
    size: int | None
    ok: bool
    reason: str  # why refused, or "compatible"
    checked: bool | None = None  # from the catalog: verified on real files (None: not in the catalog)

    def to_json(self) -> dict:
        return {"candidate": self.candidate.label, "size": self.size, "ok": self.ok, "reason": self.reason,
                "checked": self.checked}


def judge_ref(ref: ModelRef, revision: str = client.DEFAULT_REVISION) -> Judged:
    """Read ``ref``'s header (remote by range requests, or local). Raises HubError."""
    if ref.path is not None:
        header = local_header(ref.path)
        return _judged(ref, ref.path.stat().st_size, header)
    assert ref.repo is not None
    files = repo_files(ref.repo, revision)
    if ref.file:
        entry = files.entry(ref.file)
    else:
        if not files.entries:
            raise HubError(f"{ref.repo} has no GGUF files")
        entry = next((e for q in PREFERRED_QUANTS for e in files.entries if e.quant == q), files.entries[0])
    resolved = ModelRef(repo=ref.repo, file=entry.name)
    return _judged(resolved, entry.size, remote_header(ref.repo, entry.first.path, revision))


def _judged(ref: ModelRef, size: int | None, header: GGUFHeader) -> Judged:
    tokens = header.get("tokenizer.ggml.tokens", ())
    return Judged(ref, size, model_facts(header), tokens if isinstance(tokens, tuple) else ())


def check_facts(t: Judged, d: Judged) -> str | None:
    """None when ``d`` can draft for ``t``; else the first reason it cannot (compat.check_pair's
    order and words)."""
    tf, df = t.facts, d.facts
    if abs(tf.n_vocab - df.n_vocab) > VOCAB_SIZE_SLACK:
        return why.vocabulary_size(tf.n_vocab, df.n_vocab)
    if tf.vocab_model != df.vocab_model:
        return why.tokenizer(tf.vocab_model, df.vocab_model)
    if tf.add_bos != df.add_bos or (tf.add_bos and tf.bos != df.bos):
        return why.start_of_text((tf.add_bos, tf.bos), (df.add_bos, df.bos))
    if tf.eos != df.eos:
        return why.end_of_text(tf.eos, df.eos)
    if {tf.eos, tf.eot} - {None} != {df.eos, df.eot} - {None}:
        return why.end_of_generation()
    n = min(tf.n_vocab, df.n_vocab)
    same = (tf.tokens_digest == df.tokens_digest if tf.n_vocab == df.n_vocab
            else tokens_digest(t.tokens, n) == tokens_digest(d.tokens, n))
    if not same:
        tok = next((i for i in range(FIRST_CHECKED_TOKEN, n) if t.tokens[i] != d.tokens[i]), n)
        a, b = (t.tokens[tok] if tok < n else b""), (d.tokens[tok] if tok < n else b"")
        return why.token_text(tok, a, b)
    return None


def pair_drafts(target: ModelRef, candidates: Sequence[ModelRef] = (), *, use_catalog: bool = True,
                local_dir: Path | None = None, revision: str = client.DEFAULT_REVISION
                ) -> tuple[Judged, list[PairVerdict]]:
    """The target's facts, and a verdict for every candidate (catalog proposals, ``candidates``, and
    the GGUF files in ``local_dir``), compatible ones first, each group smallest first.

    A candidate whose header cannot be read is refused with that reason; the target's failure
    raises HubError."""
    t = judge_ref(target, revision)
    proposals: list[tuple[ModelRef, bool | None]] = []
    if use_catalog:
        proposals += [(ModelRef(repo=d.repo, file=d.file), fam.checked) for fam, d in drafts_for(t.ref.label)]
    proposals += [(c, None) for c in candidates]
    if local_dir is not None and local_dir.is_dir():
        proposals += [(ModelRef(path=p), None) for p in local_models(local_dir)]
    verdicts: list[PairVerdict] = []
    seen = {t.ref.label, str(target.path) if target.path else ""}
    for ref, checked in proposals:
        if ref.label in seen:
            continue
        seen.add(ref.label)
        try:
            d = judge_ref(ref, revision)
        except HubError as e:
            verdicts.append(PairVerdict(ref, None, False, str(e), checked))
            continue
        if d.ref.label in seen and d.ref.label != ref.label:
            continue
        seen.add(d.ref.label)
        reason = check_facts(t, d)
        if reason is None and t.size is not None and d.size is not None and d.size >= t.size:
            reason = "not smaller than the target: it would slow generation down"
        verdicts.append(PairVerdict(d.ref, d.size, reason is None, reason or "compatible", checked))
        log.debug("pairing %s with %s: %s", t.ref.label, d.ref.label, reason or "compatible")
    verdicts.sort(key=lambda v: (not v.ok, v.size is None, v.size or 0))
    return t, verdicts
