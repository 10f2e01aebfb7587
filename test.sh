#!/usr/bin/env bash
# Set everything up (first time: builds llama.cpp, fetches the models the tests use), run the tests.
set -euo pipefail
cd "$(dirname "$0")"
scripts/bootstrap.sh test,package
.venv/bin/duet-cli models fetch --group test
.venv/bin/ruff check engine app bench tests scripts packaging
.venv/bin/mypy
export QT_QPA_PLATFORM=offscreen
exec .venv/bin/python -m pytest -q "$@"
