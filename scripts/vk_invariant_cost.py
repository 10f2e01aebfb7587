"""What the Vulkan backend's batch-invariant mode (patches/vulkan/batch-invariant.patch) costs:
a prompt read in one pass, a decoding step and a verify pass of several rows, every layer on the
device, with the mode off and on in turns in one process (each mode warmed up first: lavapipe
compiles a pipeline at its first use). Medians of the rounds, in milliseconds.

    GGML_VK_VISIBLE_DEVICES=0 .venv-vk/bin/python scripts/vk_invariant_cost.py test --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TEXT = ("Rivers carry water, sediment and nutrients from the mountains to the sea. "
        "People have settled beside them for as long as there have been towns. ") * 40


def main() -> int:
    from engine.llama import exactness as ex
    from engine.llama.context import LlamaSequence
    from engine.llama.context_params import ContextParams
    from engine.llama.model import Model, ModelSpec
    from engine.runtime.runtime import resolve_model

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("model", help="a starter model (test, draft, target) or a path")
    p.add_argument("--prompt", type=int, default=256, help="prompt tokens read in one pass")
    p.add_argument("--verify", type=int, default=8, help="rows of the verify pass")
    p.add_argument("--steps", type=int, default=8, help="decoding steps timed")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    if not ex.vulkan_invariant():
        print("this llama.cpp build has no Vulkan batch-invariant mode (.venv-vk has)")
        return 2
    times: dict[tuple[bool, str], list[float]] = {}
    with Model(ModelSpec(resolve_model(args.model), n_gpu_layers=-1)) as model:
        tokens = model.tokenize_text(TEXT)[:args.prompt + args.steps + args.verify]
        params = ContextParams(n_ctx=2048, n_batch=512, exact=False, flash_attn=True)

        def once(on: bool) -> dict[str, float]:
            ex.set_gpu_mode(on)
            got = {}
            with LlamaSequence(model, params) as ctx:
                t = time.perf_counter()
                ctx.decode(tokens[:args.prompt])
                ctx.logits()  # (a GPU pass runs on after llama_decode returns: wait for it)
                got["prompt"] = time.perf_counter() - t
                t = time.perf_counter()
                for tok in tokens[args.prompt:args.prompt + args.steps]:
                    ctx.decode([tok])
                    ctx.logits()
                got["step"] = (time.perf_counter() - t) / args.steps
                t = time.perf_counter()
                ctx.decode(tokens[-args.verify:], logits="all")
                ctx.logits_rows()
                got["verify"] = time.perf_counter() - t
            return got

        for on in (False, True):
            once(on)  # (compiles its pipelines)
        for _ in range(args.rounds):
            for on in (False, True):
                for k, v in once(on).items():
                    times.setdefault((on, k), []).append(v * 1000)
    print(f"{Path(resolve_model(args.model)).name}, every layer on "
          f"{ex.gpus()[0].description}: medians of {args.rounds} rounds, ms")
    print(f"{'':28s}{'released':>10s}{'invariant':>11s}{'ratio':>8s}")
    for k, label in (("prompt", f"prompt of {args.prompt} tokens"), ("step", "one step"),
                     ("verify", f"verify of {args.verify} rows")):
        before, after = (statistics.median(times[(m, k)]) for m in (False, True))
        print(f"{label:28s}{before:10.1f}{after:11.1f}{after / before:7.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
