"""``scripts/qt-libs.sh``: names the Debian/Ubuntu and Fedora packages of missing Qt libraries."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "qt-libs.sh"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


def _run(tmp_path: Path, listing: str) -> subprocess.CompletedProcess:
    fake = tmp_path / "ldconfig.txt"
    fake.write_text(listing)
    env = {**os.environ, "DUET_LDCONFIG": f"cat {fake}"}
    env.pop("QT_QPA_PLATFORM", None)
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                          timeout=30)


def test_missing_libraries_are_named_with_their_packages(tmp_path: Path) -> None:
    res = _run(tmp_path, "\tlibEGL.so.1 (libc6,x86-64) => /usr/lib/libEGL.so.1\n")
    assert res.returncode == 1
    assert "libxcb-cursor.so.0" in res.stderr
    assert "apt-get install libxcb-cursor0" in res.stderr
    assert "dnf install xcb-util-cursor" in res.stderr
    assert "libegl1" not in res.stderr


def test_all_present_passes(tmp_path: Path) -> None:
    libs = ["libxcb-cursor.so.0", "libxkbcommon-x11.so.0", "libxcb-icccm.so.4",
            "libxcb-image.so.0", "libxcb-keysyms.so.1", "libxcb-render-util.so.0",
            "libxcb-shape.so.0", "libxcb-xkb.so.1", "libEGL.so.1", "libfontconfig.so.1",
            "libdbus-1.so.3"]
    res = _run(tmp_path, "".join(f"\t{lib} (libc6) => /usr/lib/{lib}\n" for lib in libs))
    assert res.returncode == 0 and res.stderr == ""
