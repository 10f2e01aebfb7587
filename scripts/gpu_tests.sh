#!/usr/bin/env bash
# tests/gpu with llama.cpp's Vulkan backend (issue 75), where this machine has a Vulkan driver and
# the tools to build for it: Debian's mesa-vulkan-drivers (lavapipe, a Vulkan device on the CPU,
# where no GPU is installed), libvulkan-dev, glslc and spirv-headers. The Vulkan build lives in
# .venv-vk beside the CPU build's .venv (its wheel is cached like the CPU one; the first build
# takes about half an hour on 2 cores, so it is made when DUET_GPU_TESTS=1 asks, and used
# whenever it is there). Elsewhere it says in one line why the tests did not run.
# DUET_GPU_TESTS=0 leaves them out.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${DUET_GPU_TESTS:-1}" = 0 ] && { echo "gpu tests: left out (DUET_GPU_TESTS=0)"; exit 0; }
missing=()
compgen -G "/usr/share/vulkan/icd.d/*.json" >/dev/null || compgen -G "/etc/vulkan/icd.d/*.json" >/dev/null \
  || missing+=("a Vulkan driver (mesa-vulkan-drivers)")
command -v glslc >/dev/null || missing+=("glslc")
[ -f /usr/include/vulkan/vulkan.h ] || missing+=("libvulkan-dev")
[ -d /usr/include/spirv ] || missing+=("spirv-headers")
if [ ${#missing[@]} -gt 0 ]; then
  (IFS=","; echo "gpu tests: not run: this machine lacks ${missing[*]}" | sed 's/,/, /g')
  exit 0
fi
VK=$PWD/.venv-vk
# The Vulkan build takes about half an hour on 2 cores (its shaders): made when asked for
# (DUET_GPU_TESTS=1), used whenever it is made.
rc=0
DUET_NO_BUILD=$([ "${DUET_GPU_TESTS:-}" = 1 ] && echo 0 || echo 1) DUET_VENV=$VK \
  CMAKE_ARGS="-DGGML_VULKAN=on" scripts/bootstrap.sh test || rc=$?
if [ $rc = 3 ]; then
  echo "gpu tests: not run: the Vulkan build is not made yet (about 30 minutes on 2 cores); DUET_GPU_TESTS=1 ./test.sh makes it"
  exit 0
fi
[ $rc = 0 ] || exit $rc
# llama.cpp skips a Vulkan device of the CPU type (lavapipe) unless it is named: where Vulkan
# finds no GPU of its own, the first device is named.
if [ -z "${GGML_VK_VISIBLE_DEVICES:-}" ] && \
   [ "$("$VK/bin/python" -c 'from engine.llama.devices import gpus; print(len(gpus()))')" = 0 ]; then
  export GGML_VK_VISIBLE_DEVICES=0
fi
exec "$VK/bin/python" -m pytest -q -p no:cacheprovider tests/gpu "$@"
