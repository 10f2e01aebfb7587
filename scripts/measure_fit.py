"""Compare engine/models/hub/fit.py's memory estimate with the resident memory measured after loading.

Each measurement runs in a fresh process: RSS (VmRSS) before, after ``Model`` + ``LlamaSequence`` (the way
Duet loads: mmap, f16 KV cache, default batch) and after decoding one full micro-batch (the compute
buffer is allocated at load but only touched by decoding). The estimate's ``ram_loaded`` is compared
with the first; its ``ram_needed`` adds llama.cpp's whole compute reservation, a worst case that a
first batch at an empty context does not reach (shown for information).
The page cache may already hold the file: mmap'ed pages count in RSS once touched, and llama.cpp
populates the mapping while loading, so the weights count whether or not they were cached.

    python scripts/measure_fit.py                    # test model (SmolLM2 135M) at 512 and 4096
    python scripts/measure_fit.py --model target --ctx 1024 4096
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from engine import logsetup
from engine.models.hub import fit
from engine.models.hub.remote_header import local_header
from engine.runtime.runtime import resolve_model


def rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def child(path: str, n_ctx: int) -> None:
    from engine.llama import backend
    from engine.llama.context import LlamaSequence
    from engine.llama.context_params import ContextParams
    from engine.llama.model import Model

    backend.init()
    before = rss()
    with Model(path) as model, LlamaSequence(model, ContextParams(n_ctx=n_ctx)) as ctx:
        loaded = rss()
        ctx.decode([model.bos if model.bos >= 0 else 0] * min(512, n_ctx // 2))  # one full micro-batch
        peak = rss()
    print(json.dumps({"loaded": loaded - before, "peak": peak - before}))


def measure(path: str, n_ctx: int) -> dict[str, int]:
    out = subprocess.run([sys.executable, __file__, "--child", path, str(n_ctx)], capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", action="append", help="starter key or GGUF path (repeatable; default: test)")
    ap.add_argument("--ctx", type=int, nargs="+", default=[512, 4096])
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    logsetup.configure()
    if args.child:
        child(args.child[0], int(args.child[1]))
        return 0
    print(f"{'model':34} {'n_ctx':>6} {'loaded MB':>10} {'estimate':>9} {'error':>7}"
          f" {'1st batch MB':>12} {'worst case est.':>15}")
    for name in args.model or ["test"]:
        path = resolve_model(name)
        header = local_header(path)
        for n_ctx in args.ctx:
            est = fit.estimate(header, fit.FitRequest(n_ctx=n_ctx), file_size=path.stat().st_size)
            got = measure(str(path), n_ctx)
            loaded, peak = got["loaded"], got["peak"]
            print(f"{path.name[:34]:34} {n_ctx:>6} {loaded / 1e6:>10.1f} {est.ram_loaded / 1e6:>9.1f} "
                  f"{(est.ram_loaded - loaded) / loaded:>+7.1%} {peak / 1e6:>12.1f} {est.ram_needed / 1e6:>15.1f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
