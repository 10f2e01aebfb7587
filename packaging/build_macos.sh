#!/usr/bin/env bash
# Build Duet.app for macOS (Apple Silicon or Intel; build on each for its architecture):
#   dist/Duet.app                              the app: drag it to /Applications
#   dist/duet-<version>-macos-<arch>.zip       the same, zipped with ditto (keeps symlinks)
#   dist/duet-<version>-macos-<arch>.dmg       a disk image, when hdiutil is there
# Usage: packaging/build_macos.sh [--dist DIR] [--work DIR] [--no-archive]
#
# Needs: Xcode command line tools (clang, for llama.cpp), CMake, Python 3.11+ (python.org or
# Homebrew). llama-cpp-python is compiled by scripts/bootstrap.sh with Metal on, which is
# llama.cpp's default on macOS: the same as CMAKE_ARGS="-DGGML_METAL=on". The Metal shaders are
# embedded in libggml-metal (GGML_METAL_EMBED_LIBRARY, the default), so nothing else is copied.
# Models then run on the GPU with n_gpu_layers = -1 (the settings' "GPU layers" set to -1).
#
# Signing: PyInstaller signs ad hoc (enough to run on the machine that built it, and on others
# after "Open" in Finder's context menu). For distribution set DUET_CODESIGN_IDENTITY to a
# "Developer ID Application: ..." identity, then notarize the .zip with `xcrun notarytool`.
#
# Not run in this project's CI (Linux machines); kept in step with build_linux.sh by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIST=$ROOT/dist
WORK=$ROOT/build/pyinstaller
ARCHIVE=1
while [ $# -gt 0 ]; do
  case "$1" in
    --dist) DIST=$(cd "$(dirname "$2")" && pwd)/$(basename "$2"); shift 2 ;;
    --work) WORK=$(cd "$(dirname "$2")" && pwd)/$(basename "$2"); shift 2 ;;
    --no-archive) ARCHIVE=0; shift ;;
    *) echo "build_macos.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
PY=$ROOT/.venv/bin/python
t0=$(date +%s)

if ! { [ -x "$PY" ] && "$PY" -c "import PyInstaller, llama_cpp, PySide6" 2>/dev/null; }; then
  # bootstrap.sh hashes with sha256sum, which older macOS lacks: lend it shasum's.
  if ! command -v sha256sum >/dev/null; then
    SHIM=$(mktemp -d)
    printf '#!/bin/sh\nexec shasum -a 256 "$@"\n' > "$SHIM/sha256sum"
    chmod +x "$SHIM/sha256sum"
    export PATH="$SHIM:$PATH"
  fi
  echo "build_macos.sh: setting up .venv (llama-cpp-python with Metal, PyInstaller)" >&2
  CMAKE_ARGS=${CMAKE_ARGS:-} scripts/bootstrap.sh test,package
fi

VERSION=$("$PY" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
ARCH=$(uname -m)
mkdir -p "$WORK" "$DIST"
"$PY" packaging/render_icons.py resources/icons/duet.svg "$WORK/duet.icns"

echo "build_macos.sh: PyInstaller -> $DIST/Duet.app" >&2
DUET_VERSION=$VERSION DUET_ICON=$WORK/duet.icns "$PY" -m PyInstaller --noconfirm --log-level WARN \
  --distpath "$DIST" --workpath "$WORK" packaging/duet.spec
APP=$DIST/Duet.app
rm -rf "$DIST/duet"  # the one-folder build that BUNDLE wrapped into Duet.app

# The document types must be in the bundle's Info.plist.
/usr/libexec/PlistBuddy -c "Print :CFBundleDocumentTypes:0:LSItemContentTypes:0" \
  "$APP/Contents/Info.plist" | grep -qx org.duet.session

"$APP/Contents/MacOS/duet" --self-check --only qt

if [ "$ARCHIVE" = 1 ]; then
  BASE=$DIST/duet-$VERSION-macos-$ARCH
  ditto -c -k --sequesterRsrc --keepParent "$APP" "$BASE.zip"
  if command -v hdiutil >/dev/null; then
    rm -f "$BASE.dmg"
    hdiutil create -quiet -volname Duet -srcfolder "$APP" -ov -format UDZO "$BASE.dmg"
  fi
  ls -lh "$BASE".* >&2
fi
echo "build_macos.sh: Duet.app $(du -sh "$APP" | cut -f1), done in $(( $(date +%s) - t0 )) s" >&2
