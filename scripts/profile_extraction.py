"""The JSON-schema extraction of ``python -m bench structured`` in one process, without HTTP.

``.venv/bin/python scripts/profile_extraction.py [--modes none,auto] [--turns 3]`` loads the
target starter model once per run (a fresh runtime: nothing drafted from an earlier run), decodes
the extraction greedily under its schema, and prints each run's rate, target passes and which
drafters were used, the modes in turns. ``--only-forced`` drafts nothing after the tokens the
grammar forces (what Duet did before forced tokens and drafts shared a pass). Run it on a quiet
machine.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def one_run(mode: str, model: str = "target", gpu_layers: int = 0, temperature: float = 0.0) -> str:
    """``mode``: a drafter, with ``:step`` for forced tokens picked one a pass (no jump forward,
    as llama-server decodes under a grammar), or ``:free`` for the same prompt without the
    schema (what the grammar costs, where the model writes the same number of tokens)."""
    from bench.structured import SCHEMA, extraction_body
    from engine.chat.messages import Message
    from engine.decode.constraint import Grammar, Matcher
    from engine.decode.sampling import SamplingParams
    from engine.decode.speculative.params import SpeculativeParams
    from engine.llama.context_params import ContextParams
    from engine.llama.model import ModelSpec
    from engine.runtime.runtime import Runtime, RuntimeConfig, resolve_model

    drafter, _, how = mode.partition(":")
    original = Matcher.forced
    if how == "step":
        Matcher.forced = lambda self: []  # type: ignore[method-assign]
    text = extraction_body(400)["messages"][0]["content"]
    config = RuntimeConfig(target=ModelSpec(resolve_model(model), n_gpu_layers=gpu_layers),
                           context=ContextParams(n_ctx=4096),
                           speculative=SpeculativeParams(drafter=drafter))
    try:
        with Runtime(config) as rt:
            grammar = None if how == "free" else Grammar.compile(rt.target, "json_schema", SCHEMA).matcher()
            params = SamplingParams(temperature=temperature, max_tokens=400, seed=7)
            done = list(rt.generator.chat([Message("user", text)], params, grammar=grammar))[-1]
    finally:
        Matcher.forced = original  # type: ignore[method-assign]
    s = done.stats
    return (f"{mode}: {s.n_tokens} tokens, {s.n_tokens / s.gen_s:.2f} tok/s, "
            f"{s.target_passes} passes, drafted {s.proposed} accepted {s.accepted} {s.drafters_used}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--modes", default="none,auto",
                   help="comma-separated drafters; DRAFTER:step picks forced tokens one a pass")
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--model", default="target", help="GGUF path or starter key")
    p.add_argument("--gpu-layers", type=int, default=0, help="layers on the GPU (-1: all)")
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy; else seeded sampling")
    p.add_argument("--only-forced", action="store_true", help="no draft after forced tokens")
    args = p.parse_args(argv)
    sys.path.insert(0, str(REPO))
    if args.only_forced:
        from engine.decode.decoding import Decoding
        from engine.decode.speculative.draft import Draft

        both = Decoding._propose

        def forced_alone(self: Decoding, room: int, width: int = 0) -> tuple:
            forced, draft = both(self, room, width)
            return (forced, Draft()) if forced else (forced, draft)

        Decoding._propose = forced_alone  # type: ignore[method-assign]
    for _ in range(args.turns):
        for mode in args.modes.split(","):
            print(one_run(mode, args.model, args.gpu_layers, args.temperature), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
