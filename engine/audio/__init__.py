"""Speech to text: an audio file or its bytes read into 16 kHz samples within bounds, and
transcribed by the catalogue's Whisper model with faster-whisper (transcribe). No Qt.

May import: models."""
