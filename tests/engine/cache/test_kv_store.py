"""The disk KV store on the real SmolLM2-135M: a long prompt read once is restored by a fresh
store (another process) instead of read again, with the same reply; an entry that was edited,
truncated, written for another model, or a disk that refuses writes, is never trusted and never
fails a reply."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engine.cache.kv_store import MIN_NEW_TOKENS, KVStore
from engine.cache.state_cache import StateCache
from engine.decode.sampling import SamplingParams
from engine.events import Done
from engine.llama.context import LlamaSequence
from engine.llama.context_params import ContextParams
from engine.models.identity import file_fingerprint
from engine.runtime.generate import Generator

GREEDY = SamplingParams(temperature=0, max_tokens=8)
DOC = " ".join(f"Line {i}: the valve number {i} is set to {i * 7 % 13} turns." for i in range(60))


def _prompt(model, question: str) -> list[int]:
    return model.tokenize(DOC + "\n\nQuestion: " + question + "\nAnswer:")


def _reply(model, folder: Path, prompt: list[int], fp: str | None = None) -> Done:
    """One reply in a fresh context with a fresh store over ``folder`` (as a new process)."""
    with LlamaSequence(model, ContextParams(n_ctx=2048)) as ctx:
        store = KVStore(folder, [ctx], [fp or "fp-of-" + model.display_name])
        gen = Generator.alone(ctx, cache=StateCache(0, disk=store))
        done = list(gen.complete(prompt, GREEDY))[-1]
        store.flush()
        return done


def test_a_long_prompt_is_read_once_then_restored_by_a_new_store(smol, tmp_path):
    first = _prompt(smol, "Which valve is set to 5 turns?")
    assert len(first) > MIN_NEW_TOKENS
    cold = _reply(smol, tmp_path, first)
    assert cold.stats.n_cached_tokens == 0
    assert len(list(tmp_path.glob("*.kv"))) == 1

    second = _prompt(smol, "How many turns is valve 3 set to?")
    warm = _reply(smol, tmp_path, second)
    shared = next(i for i, (a, b) in enumerate(zip(first, second)) if a != b)
    assert warm.stats.n_cached_tokens >= shared - 1  # the document was restored, not read
    with LlamaSequence(smol, ContextParams(n_ctx=2048)) as ctx:
        reference = list(Generator.alone(ctx).complete(second, GREEDY))[-1]
    assert warm.token_ids == reference.token_ids


def _damage(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "edited":
        data[-100] ^= 0xFF  # a byte of the state
    elif how == "truncated":
        del data[len(data) // 2:]
    elif how == "tokens":
        head = 12 + int.from_bytes(data[8:12], "little")  # magic, meta length, meta
        data[head + 8] ^= 0x01  # a byte of the third token
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["edited", "truncated", "tokens"])
def test_a_damaged_entry_is_read_again_and_deleted(smol, tmp_path, how):
    prompt = _prompt(smol, "Which valve is set to 5 turns?")
    cold = _reply(smol, tmp_path, prompt)
    (entry,) = tmp_path.glob("*.kv")
    _damage(entry, how)
    again = _reply(smol, tmp_path, prompt)
    assert again.stats.n_cached_tokens == 0
    assert again.token_ids == cold.token_ids
    # the damaged file went; the reply's own state took its place (same tokens, same name)
    (rewritten,) = tmp_path.glob("*.kv")
    assert _reply(smol, tmp_path, prompt).stats.n_cached_tokens == len(prompt) - 1


def test_an_entry_of_another_model_is_never_used(smol, tmp_path):
    prompt = _prompt(smol, "Which valve is set to 5 turns?")
    _reply(smol, tmp_path, prompt, fp="model A")
    (entry,) = tmp_path.glob("*.kv")
    # the same file under the name model B's entries have: its head still says model A
    with LlamaSequence(smol, ContextParams(n_ctx=64)) as ctx:
        other = KVStore(tmp_path, [ctx], ["model B"])
    swapped = tmp_path / f"{other.keys[0]}-{entry.name.split('-')[1]}"
    entry.rename(swapped)
    done = _reply(smol, tmp_path, prompt, fp="model B")
    assert done.stats.n_cached_tokens == 0
    assert swapped.exists() and swapped.read_bytes()[12:].find(b"model A") < 0  # B's own now


def test_the_real_fingerprint_keys_the_store(smol, smol_path, tmp_path):
    prompt = _prompt(smol, "Which valve is set to 5 turns?")
    fp = file_fingerprint(smol_path)
    _reply(smol, tmp_path, prompt, fp=fp)
    assert _reply(smol, tmp_path, prompt, fp=fp).stats.n_cached_tokens == len(prompt) - 1
    assert _reply(smol, tmp_path, prompt, fp=fp + "x").stats.n_cached_tokens == 0


def test_a_disk_that_refuses_writes_keeps_nothing_and_the_reply_is_whole(smol_path, tmp_path):
    """A real write failure (the file-size limit, EFBIG, as a full disk gives ENOSPC): the
    state is not kept, no partial file is left, the reply ends normally."""
    script = textwrap.dedent(f"""
        import resource, signal, sys
        from pathlib import Path
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
        from engine.llama.context import LlamaSequence
        from engine.llama.context_params import ContextParams
        from engine.runtime.generate import Generator
        from engine.cache.kv_store import KVStore
        from engine.llama.model import Model
        from engine.decode.sampling import SamplingParams
        from engine.cache.state_cache import StateCache
        folder = Path({str(tmp_path)!r})
        with Model(Path({str(smol_path)!r})) as m, LlamaSequence(m, ContextParams(n_ctx=2048)) as ctx:
            store = KVStore(folder, [ctx], ["fp"])
            prompt = m.tokenize({DOC!r} + " Question: which valve? Answer:")
            done = list(Generator.alone(ctx, cache=StateCache(0, disk=store)).complete(
                prompt, SamplingParams(temperature=0, max_tokens=8)))[-1]
            store.flush()
        print(done.reason, done.stats.n_tokens)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300, cwd=Path(__file__).parents[3])
    assert out.returncode == 0, out.stderr[-2000:]
    reason, n = out.stdout.split()
    assert reason in ("stop", "length") and int(n) > 0
    assert "could not be kept on disk" in out.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_entry_whose_oldest_turns_were_dropped_is_restored_and_shifted(smol, tmp_path):
    """Past the context's edge the next prompt keeps the head (the system prompt) and drops the
    oldest turns: an entry holding head + old + kept is worth head + kept to it (its common
    prefix alone is the head), and once restored the cache shift keeps the rest. Before, such a
    prompt (a server restarted mid-conversation) was read whole."""
    head = smol.tokenize("System: answer briefly.\n")
    old = smol.tokenize(" ".join(f"Old turn {i} about valves." for i in range(30)),
                        add_special=False)
    kept = smol.tokenize(" ".join(f"Kept turn {i} about pumps." for i in range(30)),
                         add_special=False)
    new = smol.tokenize(" Question: which pump?\nAnswer:", add_special=False)
    fp = ["fp-of-" + smol.display_name]
    prompt = head + kept + new
    with LlamaSequence(smol, ContextParams(n_ctx=2048)) as ctx:
        ctx.decode(head + old + kept, logits="none")
        store = KVStore(tmp_path, [ctx], fp)
        assert store.save([ctx])
        store.flush()
        n, entry = KVStore(tmp_path, [ctx], fp).best(prompt)
    assert entry is not None and n == len(head) + len(kept)
    done = _reply(smol, tmp_path, prompt)
    assert done.stats.n_cached_tokens >= len(head) + len(kept) - 1  # restored, then shifted
