"""Started directly (not through run.sh), a missing library of Qt's X11 plugin is named with the
packages that install it, before Qt can abort with its own misleading message."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app import qt_libs


def test_the_advice_names_the_libraries_and_their_packages() -> None:
    text = qt_libs.advice(["libxcb-icccm.so.4", "libxcb-keysyms.so.1"])
    assert "not installed: libxcb-icccm.so.4, libxcb-keysyms.so.1" in text
    assert "apt-get install libxcb-icccm4 libxcb-keysyms1" in text
    assert "dnf install xcb-util-wm xcb-util-keysyms" in text


def test_only_the_x11_plugin_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")
    assert not qt_libs.uses_xcb() and qt_libs.problem() is None
    monkeypatch.setenv("QT_QPA_PLATFORM", "xcb")
    assert qt_libs.uses_xcb() == sys.platform.startswith("linux")


def test_duet_started_on_x11_names_what_ldd_cannot_find(tmp_path: Path) -> None:
    """On a display that does not exist: with libraries missing, Duet names them and exits 1
    (it never reaches Qt); with none missing, nothing of the kind is said."""
    env = {**os.environ, "QT_QPA_PLATFORM": "xcb", "DISPLAY": ":97", "DUET_HOME": str(tmp_path)}
    env.pop("WAYLAND_DISPLAY", None)
    proc = subprocess.run([sys.executable, "-m", "app", "--no-autoload", "--exit-after-show"],
                          env=env, capture_output=True, text=True, timeout=300)
    missing = qt_libs.missing()
    if missing:
        assert proc.returncode == 1
        assert proc.stderr.strip() == qt_libs.advice(missing)
    else:
        assert "not installed" not in proc.stderr
