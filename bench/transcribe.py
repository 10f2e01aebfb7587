"""``python -m bench transcribe``: how fast Whisper base (engine.audio.transcribe) turns speech into
text on this CPU, as a real-time factor (seconds of audio per second of work; issue 74's target:
3 or more), on a clip of exactly ``--seconds``: the spoken test clips (tests/data/speech/) joined
and cut there.

Each run is what ``duet-cli transcribe`` and the server do with a file: decode the WAV's bytes,
then transcribe (language detected unless ``--language``). The model's load is timed apart, and
one warm-up run goes first. Prints a table and writes ``OUT/transcribe.json`` (with the text; the
word error rate is the tests', on whole clips).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import time
import wave
from pathlib import Path

import numpy as np

from engine.audio.transcribe import RATE, Transcriber, decode

SPEECH = Path(__file__).resolve().parents[1] / "tests" / "data" / "speech"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("transcribe", help="speech to text: real-time factor of Whisper base on a spoken clip")
    p.add_argument("--seconds", type=float, default=10.0, help="length of the clip (default 10)")
    p.add_argument("--runs", type=int, default=3, help="timed runs after one warm-up (default 3)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (default: the engine's, up to 8)")
    p.add_argument("--language", default=None, help="ISO 639-1 code (default: detected, as a request without one)")
    p.add_argument("--out", type=Path, default=Path("bench-out"))
    p.set_defaults(func=run)


def clip(seconds: float) -> bytes:
    """A WAV of ``seconds`` (16 kHz mono): the test clips in turn, cut at that length."""
    pieces: list[np.ndarray] = []
    n = 0
    clips = sorted(SPEECH.glob("*.wav"))
    while n < seconds * RATE:
        pieces.append(decode(clips[len(pieces) % len(clips)]))
        n += len(pieces[-1])
    joined = np.concatenate(pieces)[:int(seconds * RATE)]
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes((joined * 32768).clip(-32768, 32767).astype("<i2").tobytes())
    return out.getvalue()


def run(args: argparse.Namespace) -> int:
    data = clip(args.seconds)
    audio_s = (len(data) - 44) / (2 * RATE)
    t = Transcriber(threads=args.threads)
    t0 = time.perf_counter()
    t.languages()  # loads the model
    load_s = time.perf_counter() - t0
    t.transcribe(data, language=args.language)  # warm-up
    times, text = [], ""
    for _ in range(args.runs):
        t0 = time.perf_counter()
        text = t.transcribe(data, language=args.language).text
        times.append(time.perf_counter() - t0)
    median = statistics.median(times)
    result = {"audio_s": round(audio_s, 2), "threads": t.threads, "language": args.language or "detected",
              "load_s": round(load_s, 2), "runs_s": [round(x, 3) for x in times], "median_s": round(median, 3),
              "realtime_factor": round(audio_s / median, 2),
              "cpus": os.cpu_count(), "loadavg": [round(x, 2) for x in os.getloadavg()], "text": text}
    print(f"audio {audio_s:.2f} s, {t.threads} threads, language {result['language']}, model load {load_s:.2f} s")
    print("| runs | median s | min s | max s | real-time factor |")
    print("|---:|---:|---:|---:|---:|")
    print(f"| {len(times)} | {median:.2f} | {min(times):.2f} | {max(times):.2f} | {audio_s / median:.1f}x |")
    print(f"text: {text}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "transcribe.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0
