"""The spoken test clips (tests/data/speech/: WAV files espeak-ng read from the .txt beside
each, made by scripts/make_speech.sh) and the word error rate their transcripts are held to."""

from __future__ import annotations

import re
from pathlib import Path

SPEECH = Path(__file__).parent / "data" / "speech"
CLIPS = sorted(SPEECH.glob("*.wav"))
MAX_WER = 0.15


def words(text: str) -> list[str]:
    """Lowercase words without punctuation ("It's" stays one word: its)."""
    return re.sub(r"[^\w\s]", "", text.lower()).split()


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Word-level edit distance (substitutions, deletions, insertions) over the reference's length."""
    ref, hyp = words(reference), words(hypothesis)
    row = list(range(len(hyp) + 1))  # distances from the empty reference prefix
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1] / max(len(ref), 1)


def reference(clip: Path) -> str:
    return clip.with_suffix(".txt").read_text(encoding="utf-8")
