#!/usr/bin/env bash
# tests/gpu with llama.cpp's Vulkan backend (issue 75), where this machine has a Vulkan driver and
# the tools to build for it: Debian's mesa-vulkan-drivers (lavapipe, a Vulkan device on the CPU,
# where no GPU is installed), libvulkan-dev, glslc and spirv-headers (.ci/run installs them in
# CI). The Vulkan build lives in .venv-vk beside the CPU build's .venv (its wheel is cached like
# the CPU one). The first build takes 7 minutes on 2 cores of an AMD EPYC (Zen 5) and about 30
# on 2 cores of an older Xeon, so it is made when DUET_GPU_TESTS=1 asks (as CI does), and used
# whenever it is there. Elsewhere it says in one line why the tests did not run.
# DUET_GPU_TESTS=0 leaves them out.
#
# In CI (DUET_CI_STARTED, the time .ci/run began) they keep within its 90 minutes: the build
# starts only in the first 40 minutes (30 for the build on the slower machine, and the tests),
# the tests only in the first 70 (4 minutes here, about 10 on the slower machine); past that,
# one line says they were left out for time.
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
minutes() { [ -n "${DUET_CI_STARTED:-}" ] && echo $(( ($(date +%s) - DUET_CI_STARTED) / 60 )) || echo 0; }
rc=0
DUET_NO_BUILD=1 DUET_VENV=$VK CMAKE_ARGS="-DGGML_VULKAN=on" scripts/bootstrap.sh test || rc=$?
if [ $rc = 3 ]; then  # the Vulkan build is not made yet
  if [ "${DUET_GPU_TESTS:-}" != 1 ]; then
    echo "gpu tests: not run: the Vulkan build is not made yet (7-30 minutes on 2 cores); DUET_GPU_TESTS=1 ./test.sh makes it"
    exit 0
  fi
  if [ "$(minutes)" -ge 40 ]; then
    echo "gpu tests: not run: CI is $(minutes) minutes in, and the Vulkan build and its tests might not end within its 90"
    exit 0
  fi
  rc=0
  DUET_VENV=$VK CMAKE_ARGS="-DGGML_VULKAN=on" scripts/bootstrap.sh test || rc=$?
fi
[ $rc = 0 ] || exit $rc
if [ "$(minutes)" -ge 70 ]; then
  echo "gpu tests: not run: CI is $(minutes) minutes in, and they might not end within its 90"
  exit 0
fi
# llama.cpp skips a Vulkan device of the CPU type (lavapipe) unless it is named: where Vulkan
# finds no GPU of its own, the first device is named.
if [ -z "${GGML_VK_VISIBLE_DEVICES:-}" ] && \
   [ "$("$VK/bin/python" -c 'from engine.llama.devices import gpus; print(len(gpus()))')" = 0 ]; then
  export GGML_VK_VISIBLE_DEVICES=0
fi
exec "$VK/bin/python" -m pytest -q -p no:cacheprovider --durations=5 tests/gpu "$@"
