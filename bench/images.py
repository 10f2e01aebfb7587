"""``python -m bench images``: a conversation about a picture reopened from its ``.duet`` file.

Two conversations of the same length in tokens: one whose first message carries a picture (its
positions read by the projector), one of text only (the picture's place taken by text). Each
is answered and saved; then, in turns A, B, A, B ... in one run (the machine is shared: ratios
of medians, never one timing), each is reopened into an empty context of a fresh runtime and
asked the next question: the time to the first token, and how often the image encoder ran (the
target: never, the picture's positions come back with the KV state). Target: the picture's
conversation at most 1.2x the text one. The first reopening of a picture's conversation also
decodes the picture (Pillow) and preprocesses it (libmtmd) to rebuild the prompt, once a process.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.exact import picture
from bench.session import conversation, reply
from engine.cache.prefix import common_prefix
from engine.chat.fit import chat_tokens
from engine.chat.messages import Message
from engine.conversation.session import store
from engine.decode.speculative.params import SpeculativeParams
from engine.llama.context_params import ContextParams
from engine.llama.media import is_media
from engine.llama.model import ModelSpec
from engine.runtime.runtime import Runtime, RuntimeConfig, resolve_model

log = logging.getLogger(__name__)

NEXT = "And what does the picture say about the totals?"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("images", help="a conversation about a picture, reopened from its .duet")
    p.add_argument("--model", default="target")
    p.add_argument("--mmproj", type=Path, required=True, help="the model's vision projector")
    p.add_argument("--tokens", type=int, default=1500, help="the conversations' length")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", type=Path, default=Path("bench-out"))
    p.set_defaults(func=run)


def _config(path: Path, mmproj: Path) -> RuntimeConfig:
    return RuntimeConfig(target=ModelSpec(path, mmproj=mmproj), context=ContextParams(n_ctx=4096),
                         speculative=SpeculativeParams(drafter="none"), kv_store_bytes=0)


def _pair(model: Any, n_tokens: int) -> tuple[list[Message], list[Message]]:
    """(with a picture, text only) conversations of the same prompt length before NEXT."""
    photo = picture(0)
    text = conversation(model, n_tokens, NEXT)[:-1]
    with_picture = [Message("user", text[0].content, images=(photo,)), *text[1:]]
    n_image = sum(is_media(t) for t in chat_tokens(model, with_picture + [Message("user", NEXT)]))
    filler = "A receipt: bread 2.40, milk 1.10, eggs 3.20, total 6.70. " * n_image
    plain = [Message("user", filler[:n_image * 3] + "\n" + text[0].content), *text[1:]]  # about as long
    return with_picture, plain


def run(args: argparse.Namespace) -> int:
    path = resolve_model(args.model)
    config = _config(path, args.mmproj)
    with tempfile.TemporaryDirectory(prefix="duet-bench-images-") as work:
        report = _measure(args, path, config, Path(work))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"images-{path.stem}.json").write_text(json.dumps(report, indent=1))
    med, lengths = report["median_ttft_s"], report["prompt_tokens"]
    print(f"{path.name}: reopened, first token {med['picture']:.3f} s with a picture vs "
          f"{med['text']:.3f} s text only ({report['ratio']}x; prompts {lengths}); "
          f"encoder runs after reopening: {report['encoder_runs_after_reopen']}")
    return 0


def _measure(args: argparse.Namespace, path: Path, config: RuntimeConfig, work: Path) -> dict[str, Any]:
    files: dict[str, Path] = {}
    with Runtime(config) as rt:
        lengths = {}
        for name, history in zip(("picture", "text"), _pair(rt.target, args.tokens)):
            asked = history + [Message("user", NEXT)]
            prompt = chat_tokens(rt.target, asked)
            lengths[name] = len(prompt)
            reply(rt.generator, asked, 1)  # the history read (as the conversation's last reply left it)
            rt.ctx.rewind(common_prefix(chat_tokens(rt.target, history, add_generation_prompt=False), prompt))
            files[name] = work / f"{name}.duet"
            store.save_conversation(files[name], rt, history, settings={"bench": True})
            rt.ctx.clear()
    ttft: dict[str, list[float]] = {"picture": [], "text": []}
    with Runtime(config) as rt:
        for i in range(args.repeats):
            for name in ("picture", "text")[::1 if i % 2 else -1]:  # A B, B A, ...: neither always first
                rt.ctx.clear()
                store.clear_fingerprint_cache()
                t0 = time.perf_counter()
                opened = store.open_conversation(files[name], rt)
                if not opened.restored_kv:
                    raise RuntimeError(f"{name}: not restored: {opened.note}")
                r = reply(rt.generator, opened.messages + [Message("user", NEXT)], 1, t0)
                ttft[name].append(r.ttft)
                log.info("%s: reopened, first token in %.3f s (%d of %d cached)", name, r.ttft,
                         r.n_cached, r.n_prompt)
        encoded = rt.target.projector.encoded if rt.target.projector else None
    med = {k: statistics.median(v) for k, v in ttft.items()}
    return {"model": path.name, "projector": args.mmproj.name, "prompt_tokens": lengths,
            "repeats": args.repeats, "ttft_s": ttft, "median_ttft_s": med,
            "ratio": round(med["picture"] / med["text"], 3), "encoder_runs_after_reopen": encoded}
