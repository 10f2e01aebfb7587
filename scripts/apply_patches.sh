#!/usr/bin/env bash
# Apply each patch to the source tree SRC (-p1), exactly (--fuzz=0), after a dry run: a patch
# that does not apply (made for another llama.cpp) is left out with one line on stderr, and the
# others still apply. Prints the names of the patches applied, one a line.
# Usage: scripts/apply_patches.sh SRC PATCH...
set -euo pipefail
src=$1; shift
for p in "$@"; do
  if patch --dry-run --fuzz=0 -s -p1 -d "$src" < "$p" >/dev/null 2>&1; then
    patch --fuzz=0 -s -p1 -d "$src" < "$p"
    basename "$p"
  else
    echo "bootstrap: $(basename "$p") does not apply to this llama.cpp; building without it" >&2
  fi
done
