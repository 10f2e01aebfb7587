#!/usr/bin/env bash
# Duet's figures on a CUDA machine, where neither the models nor a package index can be reached
# (docs/benchmarks/gpu.md). Everything it needs comes in a folder (IN, default .gpu-in/):
#   llama.cpp-cuda.tar.xz  llama.cpp's shared libraries (and llama-server), built for the GPU
#                          (or llama.cpp.tar.xz, its source, built here with CUDA when absent)
#   llama_cpp_py.tar.xz    llama-cpp-python's Python files (its libraries are the ones above)
#   wheels/*.whl           Duet's dependencies the machine lacks, for its Python
#   *.hdr                  GGUF headers: scripts/shape_twin.py makes the same-shape twins here
#   NAME.gguf.sha256       a real model, assembled from the parts NAME.gguf.part* found in PARTS
#                          (default $GPU/parts: they come in over several calls) and checked
# It works in GPU (default /tmp/duet-gpu); stages already done there are skipped, so a second call on the
# same machine goes on where the first stopped.
# Results go to OUT (default /tmp/gpu-out): machine.txt, curve.md, parallel.md, spec.md, profile.txt,
# structured.md, grammar.txt, exact-*.txt.
#   scripts/gpu_bench.sh [curve] [parallel] [spec] [profile] [structured] [grammar] [exact]   (default: the first four)
# CPU_ONLY=1 runs it without a GPU (to try the script itself).
set -uo pipefail
cd "$(dirname "$0")/.."
IN=${IN:-$PWD/.gpu-in}
GPU=${GPU:-/tmp/duet-gpu}
OUT=${OUT:-/tmp/gpu-out}
PY=${PY:-python3}
mkdir -p "$OUT" "$GPU/site" "$GPU/models"
say() { echo "[$(date +%T)] $*" | tee -a "$OUT/log.txt"; }

build() {  # llama.cpp from source with CUDA, every core
  say "building llama.cpp with CUDA"
  rm -rf "$GPU/bin" "$GPU/build" "$GPU/site" && mkdir -p "$GPU/site" && tar -xJf "$IN/llama.cpp.tar.xz" -C "$GPU" &&
    cmake -S "$GPU/llama.cpp" -B "$GPU/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
      -DBUILD_SHARED_LIBS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_RPC=ON \
      -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=native >"$OUT/cmake.txt" 2>&1 &&
    cmake --build "$GPU/build" -j "$(nproc)" --target llama-server >>"$OUT/cmake.txt" 2>&1 &&
    mkdir -p "$GPU/bin" && cp -a "$GPU"/build/bin/llama-server "$GPU"/build/bin/*.so* "$GPU/bin/" ||
    { say "the build failed (cmake.txt)"; exit 1; }
}
uses_gpu() {  # llama.cpp's CUDA backend loads and finds a device
  PYTHONPATH="$GPU/site" $PY -c "import llama_cpp as L, sys; L.llama_backend_init(); sys.exit(not L.llama_supports_gpu_offload())" \
    >"$OUT/devices.txt" 2>&1
}
install() {
  say "installing the Python packages"
  rm -rf "$GPU/site" && mkdir -p "$GPU/site" &&
    $PY -m pip install -q --no-index --no-deps --no-compile --target "$GPU/site" "$IN"/wheels/*.whl &&
    tar -xJf "$IN/llama_cpp_py.tar.xz" -C "$GPU/site" &&
    mkdir -p "$GPU/site/llama_cpp/lib" && cp -a "$GPU"/bin/*.so* "$GPU/site/llama_cpp/lib/"
}

# cuBLAS and the CUDA runtime: wherever this machine keeps them
for lib in libcublas.so.13 libcudart.so.13; do
  dir=$(find /usr/local /opt /usr/lib -name "$lib" -print -quit 2>/dev/null | xargs -r dirname)
  [ -n "$dir" ] && export LD_LIBRARY_PATH="$dir:${LD_LIBRARY_PATH:-}"
done
export LD_LIBRARY_PATH="$GPU/bin:${LD_LIBRARY_PATH:-}"
# llama.cpp for CUDA: the carried build (built elsewhere for this GPU), else from source
if [ ! -d "$GPU/bin" ] && [ -f "$IN/llama.cpp-cuda.tar.xz" ]; then
  say "unpacking the carried CUDA build" && tar -xJf "$IN/llama.cpp-cuda.tar.xz" -C "$GPU"
fi
[ -d "$GPU/site/llama_cpp/lib" ] || install || exit 1
[ -n "${CPU_ONLY:-}" ] || uses_gpu || { say "no CUDA device through the carried build (devices.txt)"; build; install && uses_gpu || exit 1; }
export PYTHONPATH="$GPU/site:$PWD" PYTHONUNBUFFERED=1 DUET_HOME="$GPU/home"

for hdr in "$IN"/*.hdr; do
  twin="$GPU/models/$(basename "$hdr" .hdr).gguf"
  [ -f "$twin" ] || $PY scripts/shape_twin.py "$hdr" "$twin" | tee -a "$OUT/log.txt"
done
PARTS=${PARTS:-$GPU/parts}
for sum in "$IN"/*.gguf.sha256; do
  [ -f "$sum" ] || continue
  model="$GPU/models/$(basename "$sum" .sha256)"
  [ -f "$model" ] && continue
  say "assembling $(basename "$model")"
  cat "$PARTS/$(basename "$model")".part* >"$model.tmp" &&
    [ "$(sha256sum <"$model.tmp" | cut -c1-64)" = "$(cut -c1-64 "$sum")" ] && mv "$model.tmp" "$model" ||
    { say "$(basename "$model"): its parts are missing or its SHA-256 is wrong"; rm -f "$model.tmp"; exit 1; }
done
TARGET="$GPU/models/target.gguf"
DRAFT="$GPU/models/draft.gguf"

{ nvidia-smi -L; nvidia-smi --query-gpu=driver_version,memory.total --format=csv,noheader
  lscpu | grep -E "^Model name|^CPU\(s\)"; $PY -V; nvcc --version 2>&1 | tail -2
} >"$OUT/machine.txt" 2>&1

stages=${*:-curve spec profile parallel}
for stage in $stages; do
  [ -f "$GPU/done-$stage" ] && { say "$stage: done in an earlier call"; continue; }
  say "$stage"
  case $stage in
    curve)
      $PY scripts/verify_curve.py "$TARGET" "$DRAFT" --gpu-layers -1 >"$OUT/curve.md" 2>"$OUT/curve.err" ;;
    parallel)
      $PY -m engine -v bench parallel --model "$TARGET" --llama-server "$GPU/bin/llama-server" --gpu-layers -1 \
        --modes "${MODES:-}" --clients "${CLIENTS:-1,4}" --repeats "${REPEATS:-3}" --max-tokens "${MAX_TOKENS:-128}" --out "$OUT/parallel.md" \
        --note "twin of the 1.5B (random weights), all layers on the GPU" >"$OUT/parallel.txt" 2>&1 ;;
    spec)  # a draft model with nothing to offer (random weights): adaptive speculation must not cost
      for mode in none model none model; do
        $PY -m engine generate --model "$TARGET" --draft "$DRAFT" --gpu-layers -1 --drafter "$mode" \
          --max-tokens "${SPEC_TOKENS:-256}" --json "Write a long story." 2>>"$OUT/spec.err" | tee -a "$OUT/spec.jsonl" |
          $PY -c "import json,sys; r=json.load(sys.stdin); print('$mode', r['tokens_per_s'], r['stats'])" \
          | tee -a "$OUT/spec.md"
      done ;;
    profile)  # where a plain reply's time goes when a step is a few ms
      $PY -m cProfile -o "$GPU/profile.prof" -m engine generate --model "$TARGET" --gpu-layers -1 \
        --drafter none --temperature 0 --max-tokens 512 "Write a long story." >/dev/null 2>&1 &&
        $PY -c "import pstats; pstats.Stats('$GPU/profile.prof').sort_stats('tottime').print_stats(40)" \
        >"$OUT/profile.txt" ;;
    structured)  # the JSON-schema extraction, Duet against llama-server's grammar (the twin writes noise in its strings)
      $PY -m engine -v bench structured --model "$TARGET" --llama-server "$GPU/bin/llama-server" --gpu-layers -1 \
        --parts extraction --modes "${MODES:-duet-plain,duet-auto,server-plain,server-ngram-mod}" \
        --repeats "${REPEATS:-3}" --out "$OUT/structured.md" \
        --note "twin of the 1.5B (random weights), all layers on the GPU" >"$OUT/structured.txt" 2>&1 ;;
    grammar)  # what llguidance costs against a step of a few ms: per grammar step, then in the loop
      { $PY scripts/mask_cost.py --model "$TARGET" --gpu-layers -1
        $PY scripts/profile_extraction.py --model "$TARGET" --gpu-layers -1 --turns 3 \
          --modes none,none:free,none:step,auto
        echo "sampled (temperature 0.7, the default chain)"
        $PY scripts/profile_extraction.py --model "$TARGET" --gpu-layers -1 --turns 3 --temperature 0.7 \
          --modes none,none:free; } >"$OUT/grammar.txt" 2>"$OUT/grammar.err" ;;
    exact)  # the same request, the same reply (issue 56) on CUDA: the first op whose row depends on the
      # batch, then bench exact's battery; EXACT_MODELS are names in $GPU/models (real or twins)
      for m in ${EXACT_MODELS:-smol target}; do
        for fa in "" --flash-attn; do
          echo "== $m ${fa:-(flash attention off)}"; $PY scripts/batch_ops.py "$GPU/models/$m.gguf" --gpu-layers -1 $fa
        done >"$OUT/ops-$m.txt" 2>"$OUT/ops-$m.err"
        draft=; [ "$m" = target ] && [ -f "$DRAFT" ] && draft="--draft $DRAFT"
        timeout "${EXACT_TIMEOUT:-240}" $PY -m bench -v exact --model "$GPU/models/$m.gguf" $draft --gpu-layers -1 \
          --prompts "${EXACT_PROMPTS:-32}" --max-tokens "${EXACT_TOKENS:-48}" --out "$OUT" >"$OUT/exact-$m.txt" 2>"$OUT/exact-$m.err"
      done ;;
  esac && touch "$GPU/done-$stage"
done
say "finished"
