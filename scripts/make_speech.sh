#!/usr/bin/env bash
# Make the spoken test clips of tests/data/speech/ (run once; the WAV files are committed):
# each NAME.txt is read by espeak-ng (Debian 12's 1.51, voice en-us, 150 words a minute) and
# resampled by sox to what Whisper reads, 16 kHz mono 16-bit PCM. Needs: apt-get install espeak-ng sox
set -euo pipefail
cd "$(dirname "$0")/../tests/data/speech"
for text in *.txt; do
  name=${text%.txt}
  espeak-ng -v en-us -s 150 -w "/tmp/$name.22k.wav" -f "$text"
  sox "/tmp/$name.22k.wav" -r 16000 -c 1 -b 16 "$name.wav"
  rm -f "/tmp/$name.22k.wav"
  echo "$name.wav: $(soxi -D "$name.wav") s"
done
