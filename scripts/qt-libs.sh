#!/usr/bin/env bash
# Check that the system libraries Qt 6.5+ needs on Linux (X11/xcb) are installed; name the
# packages to install when they are not. Exit 0 when all are there (or not on Linux), 1 if not.
# DUET_LDCONFIG overrides the command that lists the libraries (tests).
set -uo pipefail
[ "$(uname)" = Linux ] || exit 0
case "${QT_QPA_PLATFORM:-}" in offscreen*|minimal*|wayland*|vnc*) exit 0 ;; esac

# library | Debian/Ubuntu package | Fedora package
LIBS="libxcb-cursor.so.0|libxcb-cursor0|xcb-util-cursor
libxkbcommon-x11.so.0|libxkbcommon-x11-0|libxkbcommon-x11
libxcb-icccm.so.4|libxcb-icccm4|xcb-util-wm
libxcb-image.so.0|libxcb-image0|xcb-util-image
libxcb-keysyms.so.1|libxcb-keysyms1|xcb-util-keysyms
libxcb-render-util.so.0|libxcb-render-util0|xcb-util-renderutil
libxcb-shape.so.0|libxcb-shape0|libxcb
libxcb-xkb.so.1|libxcb-xkb1|libxcb
libEGL.so.1|libegl1|libglvnd-egl
libfontconfig.so.1|libfontconfig1|fontconfig
libdbus-1.so.3|libdbus-1-3|dbus-libs"

listing=$(${DUET_LDCONFIG:-ldconfig -p} 2>/dev/null || /sbin/ldconfig -p 2>/dev/null || true)
[ -n "$listing" ] || exit 0  # cannot tell: let Qt speak for itself
missing=() debian=() fedora=()
while IFS='|' read -r lib deb fed; do
  if ! grep -qF "$lib" <<<"$listing"; then
    missing+=("$lib"); debian+=("$deb")
    [[ " ${fedora[*]-} " == *" $fed "* ]] || fedora+=("$fed")
  fi
done <<<"$LIBS"
[ ${#missing[@]} -eq 0 ] && exit 0
echo "Duet's window needs system libraries that are not installed: ${missing[*]}" >&2
echo "  Debian/Ubuntu: sudo apt-get install ${debian[*]}" >&2
echo "  Fedora:        sudo dnf install ${fedora[*]}" >&2
exit 1
