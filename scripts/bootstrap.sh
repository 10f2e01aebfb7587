#!/usr/bin/env bash
# Set up Duet in ./.venv on a fresh machine: Python 3.11+, gcc and cmake are all it needs.
# llama-cpp-python compiles from source (about 5 minutes on 2 cores); its wheel is built once and
# cached in ~/.cache/duet/wheels/<build flavour>/, so later set-ups install it in seconds.
# GPU builds: CMAKE_ARGS="-DGGML_CUDA=on" scripts/bootstrap.sh   (Metal is the default on macOS)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV="${DUET_VENV:-$ROOT/.venv}"  # (./test.sh sets up its other builds beside it)
LLAMA_VERSION=0.3.36
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for cand in python3.12 python3.11 python3; do
    if command -v "$cand" >/dev/null && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
      PY=$cand; break
    fi
  done
fi
[ -n "$PY" ] || { echo "bootstrap: Python 3.11 or newer is needed" >&2; exit 1; }

if [ ! -x "$VENV/bin/python" ]; then
  echo "bootstrap: creating $VENV with $PY" >&2
  "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)

# ggml's RPC backend is in every flavour (duet-cli worker, --rpc): it adds one small library and
# about 20 s of build time. DUET_NO_RPC=1 leaves it out.
USER_ARGS=${CMAKE_ARGS:-}
[ -n "${DUET_NO_RPC:-}" ] || export CMAKE_ARGS="$USER_ARGS -DGGML_RPC=on"

# A CPU that lists AMX where the machine does not run it (seen on a virtual machine here: the
# kernel grants the tile permission, the first tile instruction dies of SIGILL): llama.cpp's
# native build uses AMX for its matrix products and crashes at the first decode. There the
# build targets the CPU's other features by name (the same kernels, less AMX).
amx_runs() {
  local dir; dir=$(mktemp -d)
  printf '%s\n' '#include <immintrin.h>' '#include <string.h>' '#include <unistd.h>' \
    '#include <sys/syscall.h>' 'int main(void) { unsigned char c[64]; memset(c, 0, 64);' \
    'if (syscall(SYS_arch_prctl, 0x1023, 18)) return 1; c[0] = 1; c[16] = 64; c[48] = 16;' \
    '_tile_loadconfig(c); _tile_zero(0); _tile_release(); return 0; }' > "$dir/amx.c"
  local rc=0
  if cc -O1 -mamx-tile "$dir/amx.c" -o "$dir/amx" 2>/dev/null; then rc=$( ( "$dir/amx"; echo $? ) 2>/dev/null ); fi
  rm -rf "$dir"
  [ "$rc" = 0 ]
}
NO_AMX=
# (GPU flavours too: their CPU backend is built native unless CMAKE_ARGS says otherwise.)
if [[ "$USER_ARGS" != *GGML_NATIVE* ]] && [ "$(uname -m)" = x86_64 ] \
    && grep -qw amx_tile /proc/cpuinfo 2>/dev/null && ! amx_runs; then
  NO_AMX="-DGGML_NATIVE=OFF"
  for f in avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx512f:AVX512 avx512vbmi:AVX512_VBMI \
           avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16 avx_vnni:AVX_VNNI; do
    grep -qw "${f%%:*}" /proc/cpuinfo && NO_AMX="$NO_AMX -DGGML_${f##*:}=ON"
  done
  echo "bootstrap: this CPU lists AMX but cannot run it; building for its other features" >&2
  export CMAKE_ARGS="${CMAKE_ARGS:-} $NO_AMX"
fi
flavour=$(printf '%s' "${CMAKE_ARGS:-cpu}" | { sha256sum 2>/dev/null || shasum -a 256; } | cut -c1-12)
if [ -z "$USER_ARGS" ]; then
  flavour=cpu; [ -n "${DUET_NO_RPC:-}" ] || flavour=cpu-rpc
  [ -z "$NO_AMX" ] || flavour="$flavour-$(printf '%s' "$NO_AMX" | { sha256sum 2>/dev/null || shasum -a 256; } | cut -c1-8)"
fi
hash_of() { if command -v sha256sum >/dev/null; then sha256sum "$@"; else shasum -a 256 "$@"; fi; }

# Batch-invariant decoding (docs/benchmarks/exact.md): patches/ggml-exact.patch makes ggml's CPU
# kernels sum a token's products in one order whatever shares its batch, so drafting, caches and
# parallel sequences never change a reply; patches/abort-flag.patch lets a decode be stopped
# without a call into Python at every node (engine/llama/abort.py). Each patch has its switch:
# DUET_EXACT_KERNELS=0 leaves the kernels as released (the engine then reports exact: false),
# DUET_ABORT_FLAG=0 the abort callback (the engine then checks stops in Python); both, llama.cpp
# as released. The patches applied are part of the flavour's name. A patch that does not apply
# with --fuzz=0 (a llama.cpp it was not made for) is left out with one line, and the build goes on.
PATCHES=
for p in "$ROOT"/patches/*.patch; do
  case "$(basename "$p")" in
    ggml-exact.patch) [ "${DUET_EXACT_KERNELS:-1}" = 0 ] && continue ;;
    abort-flag.patch) [ "${DUET_ABORT_FLAG:-1}" = 0 ] && continue ;;
  esac
  PATCHES="$PATCHES $p"
done
PATCHES=${PATCHES# }
if [ -n "$PATCHES" ]; then
  label=patched; [[ "$PATCHES" == *ggml-exact.patch* ]] && label=exact
  # shellcheck disable=SC2086  # (one path per word: the repository's own names, no spaces)
  flavour="$flavour-$label-$(cat $PATCHES | hash_of - | cut -c1-8)"
fi
# A Vulkan build also takes patches/vulkan/ (building with older Vulkan headers, as Debian 12's).
if [[ "${USER_ARGS^^}" =~ GGML_VULKAN=(ON|1|TRUE|YES) ]]; then
  VK_PATCHES=$(ls "$ROOT"/patches/vulkan/*.patch)
  PATCHES="$PATCHES $VK_PATCHES"
  # shellcheck disable=SC2086
  flavour="$flavour-vk-$(cat $VK_PATCHES | hash_of - | cut -c1-8)"
fi
WHEELS="${DUET_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/duet/wheels}/$flavour"
mkdir -p "$WHEELS"
if ! ls "$WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl >/dev/null 2>&1; then
  # (scripts/gpu_tests.sh asks first whether a long build is needed: exit 3 says it is)
  [ "${DUET_NO_BUILD:-0}" = 1 ] && { echo "bootstrap: the $flavour build is not made yet" >&2; exit 3; }
  echo "bootstrap: building llama-cpp-python $LLAMA_VERSION (${USER_ARGS:-CPU build}${CMAKE_ARGS:+; $CMAKE_ARGS}${PATCHES:+; patched: $(for p in $PATCHES; do basename "$p" .patch; done | paste -sd, -)}); about 8 minutes, once" >&2
  src="llama-cpp-python==$LLAMA_VERSION"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  if [ -n "${PATCHES// /}" ]; then
    "${PIP[@]}" download -q --no-deps --no-binary :all: "$src" -d "$work"
    tar xzf "$work"/llama_cpp_python-"$LLAMA_VERSION".tar.gz -C "$work"
    src="$work/llama_cpp_python-$LLAMA_VERSION"
    # shellcheck disable=SC2086
    "$ROOT"/scripts/apply_patches.sh "$src" $PATCHES >/dev/null
  fi
  CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)} \
    "${PIP[@]}" wheel --no-cache-dir --no-deps --no-binary llama-cpp-python \
      "$src" -w "$work/wheel"  # (pip's own cache ignores CMAKE_ARGS)
  mv "$work"/wheel/llama_cpp_python-"$LLAMA_VERSION"-*.whl "$WHEELS"/
fi

stamp="$VENV/.duet-installed"
want="$(hash_of pyproject.toml | cut -c1-16)-$flavour-${1:-}"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "bootstrap: installing Duet and its dependencies into $VENV" >&2
  # The wheel of this flavour replaces whatever llama-cpp-python build was there (CPU <-> CUDA).
  "${PIP[@]}" install -q --no-deps --force-reinstall "$WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl
  "${PIP[@]}" install -q --find-links "$WHEELS" --only-binary llama-cpp-python -e ".[${1:-test},bench]"
  echo "$want" > "$stamp"
fi
