"""The engine worker on its QThread, driven through EngineClient with the real SmolLM2."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine_link.client import EngineClient
from engine.chat.messages import Message
from engine.decode.sampling import SamplingParams
from engine.decode.speculative.params import SpeculativeParams
from engine.llama.context_params import ContextParams
from engine.llama.model import ModelSpec
from engine.runtime.runtime import RuntimeConfig
from tests.conftest import REPLY_WAIT_S

LONG_MS = REPLY_WAIT_S * 1000  # model work: as long as a test may run (tests/conftest.py)
GREEDY = SamplingParams(temperature=0.0, max_tokens=24)


def _config(path: Path) -> RuntimeConfig:
    return RuntimeConfig(target=ModelSpec(path), context=ContextParams(n_ctx=1024),
                         speculative=SpeculativeParams(drafter="none"))


@pytest.fixture
def client(qtbot, relay_for):
    c = EngineClient()
    c.relay = relay_for(c.worker)
    yield c
    c.shutdown()
    assert c.worker.runtime is None  # the models were freed


@pytest.fixture
def loaded(qtbot, client, smol_path):
    with qtbot.waitSignal(client.relay.loaded, timeout=LONG_MS) as blocker:
        client.load(_config(smol_path))
    info = blocker.args[0]
    assert info.target_path == smol_path and info.n_ctx >= 1024 and info.drafter == "none"
    client.relay.events.clear()
    return client


def test_chat_streams_coalesced_batches_then_finishes(qtbot, loaded) -> None:
    events = loaded.relay.events
    with qtbot.waitSignal(loaded.relay.finished, timeout=LONG_MS):
        loaded.chat("c1", [Message("user", "Name three colours.")], GREEDY)
    kinds = [e[0] for e in events]
    assert kinds[-1] == "finished" and "tokens" in kinds and "failed" not in kinds
    reply = events[-1][1]
    batches = [e[1] for e in events if e[0] == "tokens"]
    assert all(b.conversation_id == "c1" for b in batches)
    streamed = "".join(b.text for b in batches)
    assert reply.done.text == streamed + reply.done.tail
    assert sum(len(b.tokens) for b in batches) <= reply.done.stats.n_tokens
    assert len(batches) >= 1 and all(b.tokens for b in batches)  # no empty batch is emitted
    assert 0 < reply.n_past <= reply.n_ctx
    # How often batches come is the Coalescer's job (fake-clock tests in tests/app/test_text.py).


def test_cancel_ends_the_reply_and_the_worker_goes_on(qtbot, loaded, held_replies) -> None:
    """A cancel sent while tokens stream ends the reply as cancelled, long before its limit
    (how soon, in tokens, is asserted without threads in tests/engine/runtime/test_generate.py)."""
    events = loaded.relay.events
    long = SamplingParams(temperature=0.0, max_tokens=900)
    loaded.chat("c2", [Message("user", "Write a long story about a lighthouse keeper.")], long)
    qtbot.waitUntil(lambda: any(e[0] == "tokens" for e in events), timeout=LONG_MS)
    with qtbot.waitSignal(loaded.relay.finished, timeout=LONG_MS) as blocker:
        loaded.cancel("chat")
    done = blocker.args[0].done
    assert done.reason == "cancelled" and done.stats.n_tokens < long.max_tokens
    with qtbot.waitSignal(loaded.relay.finished, timeout=LONG_MS) as blocker:
        loaded.chat("c2", [Message("user", "Say yes.")], GREEDY)
    assert blocker.args[0].done.reason in ("stop", "length")


def test_errors_are_reported_and_the_thread_survives(qtbot, client, smol_path, tmp_path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"this is not a model" * 10)
    relay = client.relay
    with qtbot.waitSignal(relay.failed, timeout=LONG_MS):
        client.chat("c0", [Message("user", "hi")], GREEDY)
    failures = relay.of("failed")
    assert failures[-1].op == "chat" and "no model is loaded" in failures[-1].message
    with qtbot.waitSignal(relay.failed, timeout=LONG_MS):
        client.load(_config(bad))
    failures = relay.of("failed")
    assert failures[-1].op == "load" and "not a GGUF" in failures[-1].message
    assert "\n" not in failures[-1].message
    with qtbot.waitSignal(relay.failed, timeout=LONG_MS):
        client.open("c9", tmp_path / "missing.duet")
    failures = relay.of("failed")
    assert failures[-1].op == "open" and failures[-1].conversation_id == "c9"
    # still alive: a good model loads and answers
    with qtbot.waitSignal(relay.loaded, timeout=LONG_MS):
        client.load(_config(smol_path))
    with qtbot.waitSignal(relay.finished, timeout=LONG_MS) as blocker:
        client.chat("c1", [Message("user", "Say yes.")], GREEDY)
    assert blocker.args[0].done.stats.n_tokens > 0


def test_switching_conversations_restores_the_saved_state(qtbot, loaded, smol) -> None:
    """The app's path keeps recent conversations' KV states: back in A, only the new message is
    prefilled (reply versions: tests/engine/cache/test_switch_cache.py). A new load starts empty."""
    from engine.chat.fit import chat_tokens

    def ask(cid: str, messages: list[Message]):
        with qtbot.waitSignal(loaded.relay.finished, timeout=LONG_MS) as blocker:
            loaded.chat(cid, messages, GREEDY)
        return blocker.args[0].done

    system = Message("system", "You are a helpful travel guide. Answer in one sentence.")
    a = [system, Message("user", "Tell me about the sea: when to go, what to bring, where to "
                                 "swim, which bays are calm, how the tides change from one bay "
                                 "to the next, and what the fishermen say about the currents.")]
    first = ask("a", a)
    ask("b", [system, Message("user", "Tell me about mountains.")])  # A is saved
    a += [Message("assistant", first.text), Message("user", "And where should I stay?")]
    done = ask("a", a)  # B is saved, A restored
    cache = loaded.worker.runtime.cache
    assert cache.stats.restores == 1
    assert done.stats.n_cached_tokens >= len(chat_tokens(smol, a[:2]))
    with qtbot.waitSignal(loaded.relay.loaded, timeout=LONG_MS):
        loaded.load(_config(Path(smol.path)), fresh=True)  # (not a switch to the kept one)
    assert len(cache) == 0 and cache.used_bytes == 0  # the old model's states are freed
    assert len(loaded.worker.runtime.cache) == 0
