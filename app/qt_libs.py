"""Before the window opens on Linux: are the system libraries of Qt's X11 platform plugin here?

Without one of them Qt aborts with a message that names the plugin (and, since Qt 6.5, one
library that may well be installed). Duet asks the dynamic linker (``ldd``) which libraries of
the plugin it cannot find, and names them with the Debian/Ubuntu and Fedora packages that
install them. Nothing is said when it cannot tell (no ``ldd``, another platform, a bundle).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

log = logging.getLogger(__name__)

# library: (Debian/Ubuntu package, Fedora package)
PACKAGES = {
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb"),
    "libEGL.so.1": ("libegl1", "libglvnd-egl"),
    "libGL.so.1": ("libgl1", "libglvnd-glx"),
    "libOpenGL.so.0": ("libopengl0", "libglvnd-opengl"),
    "libfontconfig.so.1": ("libfontconfig1", "fontconfig"),
    "libdbus-1.so.3": ("libdbus-1-3", "dbus-libs"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb"),
}
XCB_PLUGIN = ("Qt/lib/libQt6XcbQpa.so.6", "Qt/plugins/platforms/libqxcb.so")


def uses_xcb() -> bool:
    """Whether Qt will use its X11 (xcb) platform plugin here."""
    if not sys.platform.startswith("linux") or getattr(sys, "frozen", False):
        return False
    platform = os.environ.get("QT_QPA_PLATFORM", "")
    if platform:
        return platform.startswith("xcb")
    return not os.environ.get("WAYLAND_DISPLAY")


def unresolved(library: Path) -> list[str]:
    """The libraries ``library`` needs that the dynamic linker cannot find (``ldd``)."""
    ldd = shutil.which("ldd")
    if ldd is None or not library.is_file():
        return []
    try:
        out = subprocess.run([ldd, str(library)], capture_output=True, text=True, timeout=30,
                             check=False).stdout
    except (OSError, subprocess.SubprocessError) as e:
        log.debug("ldd %s: %s", library, e)
        return []
    return [line.split("=>")[0].strip() for line in out.splitlines()
            if "=> not found" in line]


def missing() -> list[str]:
    """The missing libraries of PySide6's xcb plugin, each once, in ldd's order."""
    spec = importlib.util.find_spec("PySide6")
    if spec is None or not spec.submodule_search_locations:
        return []
    root = Path(list(spec.submodule_search_locations)[0])
    found: dict[str, None] = {}
    for part in XCB_PLUGIN:
        found.update(dict.fromkeys(unresolved(root / part)))
    return list(found)


def advice(libraries: list[str]) -> str:
    """What to tell a person whose system lacks ``libraries``: them, and the packages."""
    debian = dict.fromkeys(PACKAGES[lib][0] for lib in libraries if lib in PACKAGES)
    fedora = dict.fromkeys(PACKAGES[lib][1] for lib in libraries if lib in PACKAGES)
    lines = ["Duet's window needs system libraries that are not installed: " +
             ", ".join(libraries)]
    if debian:
        lines.append(f"  Debian/Ubuntu: sudo apt-get install {' '.join(debian)}")
        lines.append(f"  Fedora:        sudo dnf install {' '.join(fedora)}")
    return "\n".join(lines)


def problem() -> str | None:
    """The advice when Qt's X11 plugin would fail to load here; None when it would not (or
    when this cannot be told)."""
    if not uses_xcb():
        return None
    libraries = missing()
    return advice(libraries) if libraries else None


if __name__ == "__main__":
    text = problem()
    if text:
        print(text, file=sys.stderr)
    sys.exit(1 if text else 0)
