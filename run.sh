#!/usr/bin/env bash
# Set everything up (first time: builds llama.cpp, fetches the starter models), then start Duet.
set -euo pipefail
cd "$(dirname "$0")"
scripts/bootstrap.sh test,package
.venv/bin/duet-cli models fetch --group starter
if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ] || [ "$(uname)" = Darwin ]; then
  exec .venv/bin/duet "$@"
fi
echo "run.sh: no display found; a short chat through the command line instead" >&2
exec .venv/bin/duet-cli generate --model target --draft draft --temperature 0 --max-tokens 200 \
  "Write a Python function that checks whether a string is a palindrome."
