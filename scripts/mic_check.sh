#!/usr/bin/env bash
# The manual check of dictation with a real microphone path (issue 74), which CI machines cannot
# run: PulseAudio with a virtual microphone (a pipe source) fed one of the espeak-ng clips in real
# time, the window under Xvfb, Speak clicked, then clicked again; the transcript must land in the
# composer and nothing be sent. Screenshots go to $OUT (default /tmp/duet-mic-check).
# Needs: apt-get install -y xvfb pulseaudio pulseaudio-utils libxcb-cursor0, and
# scripts/bootstrap.sh test,voice (Qt Multimedia). Run from the repository root.
set -euo pipefail
OUT=${OUT:-/tmp/duet-mic-check}
CLIP=${CLIP:-tests/data/speech/weather.wav}
mkdir -p "$OUT"
pulseaudio --check 2>/dev/null || pulseaudio -D --exit-idle-time=-1 2>/dev/null
FIFO="$OUT/virtmic"
rm -f "$FIFO"
pactl load-module module-pipe-source source_name=duet_virtmic file="$FIFO" format=s16le rate=16000 channels=1 >/dev/null
pactl set-default-source duet_virtmic
export DUET_HOME="$OUT/home" DUET_MODELS_DIR="${DUET_MODELS_DIR:-$HOME/.local/share/duet/models}"
OUT="$OUT" CLIP="$CLIP" FIFO="$FIFO" timeout 300 xvfb-run -a -s "-screen 0 1280x900x24" .venv/bin/python - <<'PY'
import os, threading, time, wave
from pathlib import Path
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QToolButton
from app.control.settings import Settings
from app.views.main_window import MainWindow

out, clip, fifo = Path(os.environ["OUT"]), os.environ["CLIP"], os.environ["FIFO"]

def feed() -> None:  # the clip into the virtual microphone in real time, 50 ms at a time
    with wave.open(clip) as w:
        pcm = bytes(16000) + w.readframes(w.getnframes()) + bytes(16000)
    start = time.monotonic()
    with open(fifo, "wb", buffering=0) as f:
        for n, i in enumerate(range(0, len(pcm), 1600)):
            f.write(pcm[i:i + 1600])
            time.sleep(max(0.0, start + (n + 1) * 0.05 - time.monotonic() - 0.02))

app = QApplication([])
w = MainWindow(Settings(out / "settings.json"), autoload=False)
w.ask_before_closing = False
w.show()
mic = w.findChild(QToolButton, "mic")
w.composer.edit.setPlainText("Dictated: ")
w.composer.edit.moveCursor(w.composer.edit.textCursor().MoveOperation.End)

def start() -> None:
    mic.click()
    threading.Thread(target=feed, daemon=True).start()

def stop() -> None:
    w.grab().save(str(out / "listening.png"))
    mic.click()

def end(what: str) -> None:
    print(what, flush=True)
    print("composer:", w.composer.edit.toPlainText(), flush=True)
    print("messages sent:", len(w.controller.current.turns), flush=True)
    QTimer.singleShot(300, lambda: (w.grab().save(str(out / "transcribed.png")), app.quit()))

w.dictation.transcript.connect(lambda text: end(f"transcript: {text}"))
w.dictation.failed.connect(lambda line: end(f"failed: {line}"))
QTimer.singleShot(1500, start)
QTimer.singleShot(12000, stop)
QTimer.singleShot(120000, app.quit)
app.exec()
w.close()
PY
echo "screenshots: $OUT/listening.png $OUT/transcribed.png"
