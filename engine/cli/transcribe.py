"""``duet-cli transcribe FILE``: the words spoken in an audio file (WAV, FLAC, MP3, Ogg, WebM...),
by the catalogue's Whisper (engine.audio.transcribe). Prints the text, or with ``--json`` one
object: text, language, duration (seconds), segments (start, end, text)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine.errors import DuetError


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("transcribe", help="turn speech in an audio file into text (Whisper)")
    p.add_argument("file", metavar="FILE", help="the audio file, or - to read standard input")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--language", metavar="CODE", help="the spoken language, ISO 639-1 (default: detected)")
    p.add_argument("--prompt", help="text the speech follows (names, spelling)")
    p.add_argument("--speech-model", type=Path, metavar="FOLDER",
                   help="a faster-whisper model folder (default: the catalogue's whisper in the models folder)")
    p.add_argument("--threads", type=int, default=0, metavar="N", help="CPU threads (default: up to 8)")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from engine.audio.transcribe import Transcriber  # lazy: numpy, and faster-whisper at the first use

    if not 0 <= args.threads <= 256:
        raise DuetError("--threads must be between 0 (the default) and 256")
    source: Path | bytes = sys.stdin.buffer.read() if args.file == "-" else Path(args.file)
    got = Transcriber(args.speech_model, threads=args.threads).transcribe(
        source, language=args.language, prompt=args.prompt)
    if args.json:
        out = got.to_json()
        out["segments"] = [{"start": round(s.start, 2), "end": round(s.end, 2), "text": s.text}
                           for s in got.segments]
        print(json.dumps(out, ensure_ascii=False))
    else:
        print(got.text)
    return 0
