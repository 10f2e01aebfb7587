"""Duet's desktop GUI (PySide6). The engine (``engine``) knows nothing of Qt; this package
drives it from one worker thread and shows what it streams."""
