"""A real server on one context of two sequences, every layer on the device, and an OpenAI
client of it: what tests/gpu's server tests ask through."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from engine.llama.context_params import ContextParams


@contextmanager
def two_sequences(model: Path, context: ContextParams) -> Iterator[tuple[Any, str]]:
    """(client, model id) of a server of ``model`` with ``context`` (n_parallel 2), greedy
    replies of 8 tokens, no drafting."""
    import openai

    from engine.decode.sampling import SamplingParams
    from engine.decode.speculative.params import SpeculativeParams
    from engine.llama.model import ModelSpec
    from engine.runtime.runtime import Runtime, RuntimeConfig
    from engine.server.app import ApiConfig, model_names
    from engine.server.run import BackgroundServer, build

    config = RuntimeConfig(target=ModelSpec(model, n_gpu_layers=-1), context=context,
                           sampling=SamplingParams(temperature=0, max_tokens=8),
                           speculative=SpeculativeParams(drafter="none"))
    runtime = Runtime(config)
    model_id, aliases = model_names(runtime, "test")
    engine, app = build(runtime, ApiConfig(model_id, aliases, api_key=None))
    server = BackgroundServer(app)
    try:
        yield openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0,
                            timeout=600), model_id
    finally:
        server.close()
        engine.close()


def ask(client: Any, model_id: str, text: str) -> Any:
    return client.chat.completions.create(
        model=model_id, messages=[{"role": "user", "content": text}], max_tokens=8)


def at_once(client: Any, model_id: str, texts: list[str]) -> list[Any]:
    """Each text asked from its own thread, all at once; the replies in order."""
    replies: list[Any] = [None] * len(texts)

    def one(i: int) -> None:
        replies[i] = ask(client, model_id, texts[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return replies
