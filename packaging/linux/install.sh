#!/bin/sh
# Install Duet for the current user (no root needed):
#   the app            -> ~/.local/opt/duet/            (DUET_PREFIX overrides)
#   the `duet` command -> ~/.local/bin/duet             (a symlink)
#   menu entry         -> $XDG_DATA_HOME/applications/duet.desktop (opens .duet files)
#   .duet file type    -> $XDG_DATA_HOME/mime/packages/duet.xml (application/x-duet-session)
#   icons              -> $XDG_DATA_HOME/icons/hicolor/...
# then refreshes the desktop's caches with update-mime-database, update-desktop-database and
# gtk-update-icon-cache when they are installed.
#
# Usage: ./install.sh              install (or update) from this unpacked folder
#        ./install.sh --uninstall  remove all of the above (models and conversations stay)
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
DATA=${XDG_DATA_HOME:-$HOME/.local/share}
PREFIX=${DUET_PREFIX:-$HOME/.local/opt/duet}
BIN=${DUET_BIN_DIR:-$HOME/.local/bin}
MIME_NAME=application-x-duet-session

refresh() {
  if command -v update-mime-database >/dev/null 2>&1; then
    update-mime-database "$DATA/mime" >/dev/null 2>&1 || true
  fi
  if command -v update-desktop-database >/dev/null 2>&1; then
    update-desktop-database "$DATA/applications" >/dev/null 2>&1 || true
  fi
  if command -v gtk-update-icon-cache >/dev/null 2>&1 && [ -f "$DATA/icons/hicolor/index.theme" ]; then
    gtk-update-icon-cache -q -t "$DATA/icons/hicolor" >/dev/null 2>&1 || true
  fi
}

if [ "${1:-}" = "--uninstall" ]; then
  rm -f "$DATA/applications/duet.desktop" "$DATA/mime/packages/duet.xml" \
        "$DATA/icons/hicolor/256x256/apps/duet.png" "$DATA/icons/hicolor/48x48/apps/duet.png" \
        "$DATA/icons/hicolor/scalable/apps/duet.svg" \
        "$DATA/icons/hicolor/256x256/mimetypes/$MIME_NAME.png" \
        "$DATA/icons/hicolor/scalable/mimetypes/$MIME_NAME.svg"
  if [ -L "$BIN/duet" ]; then rm -f "$BIN/duet"; fi
  if [ -x "$PREFIX/duet" ] && [ -f "$PREFIX/duet.desktop" ]; then
    rm -rf "$PREFIX"
  elif [ -e "$PREFIX" ]; then
    echo "install.sh: not removing $PREFIX (it does not look like a Duet install)" >&2
  fi
  refresh
  echo "Duet removed. Your models and conversations are still in ${XDG_DATA_HOME:-$HOME/.local/share}/duet."
  exit 0
fi

[ -x "$HERE/duet" ] || { echo "install.sh: run me from the unpacked duet/ folder" >&2; exit 1; }

# 1. the app folder (replaced whole; refuse to replace a folder that is not a Duet install)
if [ -d "$PREFIX" ] && [ -n "$(ls -A "$PREFIX")" ] && [ ! -x "$PREFIX/duet" ]; then
  echo "install.sh: $PREFIX exists and is not a Duet install; set DUET_PREFIX elsewhere" >&2
  exit 1
fi
if [ "$HERE" != "$(mkdir -p "$PREFIX" && cd "$PREFIX" && pwd)" ]; then
  rm -rf "$PREFIX.new"
  cp -a "$HERE" "$PREFIX.new"
  rm -rf "$PREFIX"
  mv "$PREFIX.new" "$PREFIX"
fi

# 2. the command
mkdir -p "$BIN"
ln -sfn "$PREFIX/duet" "$BIN/duet"

# 3. the menu entry, pointing at the installed executable (quoted: the path may hold spaces)
mkdir -p "$DATA/applications"
sed -e "s|^Exec=.*|Exec=\"$PREFIX/duet\" %f|" -e "s|^TryExec=.*|TryExec=$PREFIX/duet|" \
  "$HERE/duet.desktop" > "$DATA/applications/duet.desktop"

# 4. the .duet file type and the icons
install -D -m 644 "$HERE/duet-mime.xml" "$DATA/mime/packages/duet.xml"
install -D -m 644 "$HERE/duet.png" "$DATA/icons/hicolor/256x256/apps/duet.png"
install -D -m 644 "$HERE/duet-48.png" "$DATA/icons/hicolor/48x48/apps/duet.png"
install -D -m 644 "$HERE/duet.svg" "$DATA/icons/hicolor/scalable/apps/duet.svg"
install -D -m 644 "$HERE/duet.png" "$DATA/icons/hicolor/256x256/mimetypes/$MIME_NAME.png"
install -D -m 644 "$HERE/duet.svg" "$DATA/icons/hicolor/scalable/mimetypes/$MIME_NAME.svg"

refresh
if command -v xdg-mime >/dev/null 2>&1; then
  xdg-mime default duet.desktop application/x-duet-session >/dev/null 2>&1 || true
fi

echo "Duet installed in $PREFIX"
case ":$PATH:" in
  *":$BIN:"*) echo "Start it from the menu or with: duet" ;;
  *) echo "Start it from the menu or with: $BIN/duet  ($BIN is not on your PATH)" ;;
esac
