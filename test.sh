#!/usr/bin/env bash
# Set everything up (first time: builds llama.cpp, fetches the models the tests use), run the tests.
# With no arguments it then runs two other builds' tests: llama.cpp as released (the build a
# patch that stops applying falls back to), and the GPU tests with the Vulkan build where this
# machine can (scripts/gpu_tests.sh says in one line when it cannot).
set -euo pipefail
cd "$(dirname "$0")"
scripts/bootstrap.sh test,package
.venv/bin/duet-cli models fetch --group test
.venv/bin/ruff check engine app bench tests scripts packaging
.venv/bin/mypy
export QT_QPA_PLATFORM=offscreen
.venv/bin/python -m pytest -q "$@"
[ $# -gt 0 ] || { scripts/released_tests.sh && scripts/gpu_tests.sh; }
