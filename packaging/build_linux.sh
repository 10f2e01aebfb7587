#!/usr/bin/env bash
# Build the Linux desktop bundle from the project's .venv with PyInstaller (one folder):
#   <dist>/duet/                                the app: `duet`, its _internal/ folder, install.sh,
#                                               duet.desktop, duet-mime.xml, icons
#   <dist>/duet-<version>-linux-<arch>.tar.gz   the same folder, packed
# Usage: packaging/build_linux.sh [--dist DIR] [--work DIR] [--no-tar]
#   defaults: dist/ and build/pyinstaller/ in the repository.
# The venv is set up by scripts/bootstrap.sh (llama-cpp-python from its cached wheel; a GPU
# build comes from CMAKE_ARGS, e.g. CMAKE_ARGS="-DGGML_CUDA=on", see packaging/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIST=$ROOT/dist
WORK=$ROOT/build/pyinstaller
TAR=1
while [ $# -gt 0 ]; do
  case "$1" in
    --dist) DIST=$(realpath -m "$2"); shift 2 ;;
    --work) WORK=$(realpath -m "$2"); shift 2 ;;
    --no-tar) TAR=0; shift ;;
    *) echo "build_linux.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
PY=$ROOT/.venv/bin/python
t0=$(date +%s)

if ! { [ -x "$PY" ] && "$PY" -c "import PyInstaller, llama_cpp, PySide6" 2>/dev/null; }; then
  echo "build_linux.sh: setting up .venv with the package extra (PyInstaller)" >&2
  scripts/bootstrap.sh test,package
fi

VERSION=$("$PY" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
ARCH=$(uname -m)
APP=$DIST/duet
mkdir -p "$WORK" "$DIST"

echo "build_linux.sh: PyInstaller (one folder) -> $APP" >&2
DUET_VERSION=$VERSION "$PY" -m PyInstaller --noconfirm --log-level WARN \
  --distpath "$DIST" --workpath "$WORK" packaging/duet.spec

# Debug info off the interpreter (libpython: 23 MB -> 6 MB); only files of the Python build:
# stripping auditwheel-patched libraries (numpy's OpenBLAS) would break them.
if command -v strip >/dev/null; then
  find "$APP/_internal" -maxdepth 1 -name 'libpython3*.so*' -type f -exec strip --strip-debug {} +
  find "$APP/_internal" -path '*/lib-dynload/*.so' -type f -exec strip --strip-debug {} +
fi

# Desktop integration files beside the executable.
QT_QPA_PLATFORM=offscreen "$PY" packaging/render_icons.py resources/icons/duet.svg \
  "$APP/duet.png" "$APP/duet-48.png"
cp resources/icons/duet.svg "$APP/duet.svg"
cp packaging/linux/duet.desktop packaging/linux/duet-mime.xml "$APP/"
install -m 755 packaging/linux/install.sh "$APP/install.sh"
cp packaging/linux/README.txt "$APP/README.txt"
echo "$VERSION" > "$APP/VERSION"

echo "build_linux.sh: folder $(du -sh "$APP" | cut -f1)" >&2
if [ "$TAR" = 1 ]; then
  TARBALL=$DIST/duet-$VERSION-linux-$ARCH.tar.gz
  GZ=gzip
  command -v pigz >/dev/null && GZ=pigz
  tar -C "$DIST" -cf - duet | "$GZ" -6 > "$TARBALL.tmp"
  mv "$TARBALL.tmp" "$TARBALL"
  echo "build_linux.sh: $TARBALL $(du -h "$TARBALL" | cut -f1)" >&2
fi
echo "build_linux.sh: done in $(( $(date +%s) - t0 )) s" >&2
