"""Seeded mutation fuzzing of what Duet reads from disk: ``.duet`` sessions and local JSON files.

Every mutated file must give a result or a one-line SessionError (sessions) or the defaults
(settings, verify-cost cache, recent files): never another exception. The mutations are raw
(flipped, cut, inserted, deleted, duplicated bytes; huge lengths) and structured (the metadata
JSON or a KV section changed and its checksum recomputed, so the damage reaches the parsers and
the KV check behind the checksums).

The test suite runs a short seeded pass (tests/engine/conversation/session/test_session_fuzz.py); for a longer
one, from the repository root::

    python scripts/fuzz_hostile.py --sessions 20000 --local 5000 --open 500 --seed 1

It prints the counts of each outcome, the slowest case and the peak RSS, and stops at the first
failure with a traceback (the offending file is kept as ./fuzz-failure*, for a bug report).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from blake3 import blake3  # noqa: E402

from engine import logsetup  # noqa: E402
from engine.errors import SessionError  # noqa: E402

HUGE = [2**64 - 1, 2**63, 2**60, 2**32 - 1, 2**31, 0]
HEADER_SIZE = 48


# ─── sessions ─────────────────────────────────────────────────────────────────


def _split(data: bytes) -> tuple[bytes, list[tuple[bytes, bytes]]] | None:
    """(metadata JSON, [(section name, payload)]) of a well-formed file, or None."""
    if len(data) < HEADER_SIZE:
        return None
    meta_len = struct.unpack_from("<I", data, 12)[0]
    pos = HEADER_SIZE + meta_len
    meta, sections = data[HEADER_SIZE:pos], []
    while pos < len(data):
        n = data[pos]
        size = struct.unpack_from("<Q", data, pos + 1 + n)[0]
        start = pos + 41 + n
        sections.append((data[pos + 1:pos + 1 + n], data[start:start + size]))
        pos = start + size
    return meta, sections


def _join(data: bytes, meta: bytes, sections: list[tuple[bytes, bytes]]) -> bytes:
    """A file with ``data``'s header fields, ``meta`` and ``sections``, checksums recomputed."""
    out = data[:12] + struct.pack("<I", len(meta)) + blake3(meta).digest() + meta
    for name, payload in sections:
        out += bytes([len(name)]) + name + struct.pack("<Q", len(payload))
        out += blake3(payload).digest() + payload
    return out


def _random_json(rng: random.Random, depth: int = 0) -> Any:
    makers: list[Callable[[], Any]] = [
        lambda: None, lambda: True, lambda: rng.randrange(-2**40, 2**64),
        lambda: rng.choice([0.5, -1e308, 1e308, -0.0]), lambda: "",
        lambda: "x" * rng.randrange(0, 300), lambda: [1] * rng.randrange(0, 50)]
    if depth < 3:
        makers += [lambda: [_random_json(rng, depth + 1)],
                   lambda: {"k": _random_json(rng, depth + 1)}]
    return rng.choice(makers)()


def _mutate_json_value(obj: Any, rng: random.Random) -> Any:
    """``obj`` with one random node replaced, removed or added."""
    if isinstance(obj, dict) and obj and rng.random() < 0.8:
        key = rng.choice(list(obj))
        choice = rng.random()
        if choice < 0.15:
            return {k: v for k, v in obj.items() if k != key}
        if choice < 0.25:
            return {**obj, "extra" + str(rng.randrange(9)): _random_json(rng)}
        return {**obj, key: _mutate_json_value(obj[key], rng)}
    if isinstance(obj, list) and obj and rng.random() < 0.8:
        i = rng.randrange(len(obj))
        choice = rng.random()
        if choice < 0.15:
            return obj[:i] + obj[i + 1:]
        if choice < 0.25:
            return obj + [obj[i]] * rng.randrange(1, 4)
        return obj[:i] + [_mutate_json_value(obj[i], rng)] + obj[i + 1:]
    if isinstance(obj, (int, float)) and not isinstance(obj, bool) and rng.random() < 0.5:
        return rng.choice([obj + 1, obj - 1, -obj, 2**31, 2**63, 10**30, 0])
    return _random_json(rng)


def _mutate_meta(meta: bytes, rng: random.Random) -> bytes:
    r = rng.random()
    if r < 0.1:
        return b"[" * rng.randrange(100, 200_000) + b"]" * rng.randrange(0, 10)
    if r < 0.15:
        return meta.replace(b"0.", b"NaN", 1) if b"0." in meta else meta + b"\xff"
    if r < 0.2:
        return meta[:rng.randrange(len(meta) + 1)]
    try:
        obj = json.loads(meta)
    except ValueError:
        return meta
    return json.dumps(_mutate_json_value(obj, rng)).encode()


def _mutate_payload(payload: bytes, rng: random.Random) -> bytes:
    data = bytearray(payload)
    r = rng.random()
    if r < 0.2 or not data:
        return bytes(data[:rng.randrange(len(data) + 1)])
    if r < 0.3:
        return bytes(data) + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
    start = rng.randrange(len(data))
    for i in range(start, min(len(data), start + rng.choice([1, 8, 64, 4096]))):
        data[i] = rng.randrange(256)
    return bytes(data)


def mutate_session(valid: bytes, rng: random.Random) -> bytes:
    """One mutated copy of the session file ``valid``."""
    r = rng.random()
    parts = _split(valid)
    if r < 0.3 and parts:
        meta, sections = parts
        return _join(valid, _mutate_meta(meta, rng), sections)
    if r < 0.5 and parts and parts[1]:
        meta, sections = parts
        i = rng.randrange(len(sections))
        sections = list(sections)
        if rng.random() < 0.1:
            sections.append(sections[i])
        else:
            sections[i] = (sections[i][0], _mutate_payload(sections[i][1], rng))
        return _join(valid, meta, sections)
    data = bytearray(valid)
    for _ in range(rng.randrange(1, 5)):
        at = rng.randrange(max(len(data), 1))
        kind = rng.randrange(6)
        if kind == 0 and data:
            data[at] ^= rng.randrange(1, 256)
        elif kind == 1:
            data[at:at + 8] = struct.pack("<Q", rng.choice(HUGE + [len(data) + 1]))
        elif kind == 2:
            del data[at:]
        elif kind == 3:
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 32)))
        elif kind == 4:
            del data[at:at + rng.randrange(1, 128)]
        else:
            data[at:at] = data[at:at + rng.randrange(1, 256)]
    return bytes(data)


def check_session(path: Path, data: bytes, ctx: Any = None) -> str:
    """Write ``data`` to ``path`` and read it every way; the outcome ("ok", "refused",
    "restored", "text"). Raises AssertionError on a failure of the rules."""
    from engine.conversation.session import inspect, read_meta, read_session, store

    path.write_bytes(data)
    outcome = "ok"
    for reader in (read_meta, read_session, inspect):
        try:
            reader(path)
        except SessionError as e:
            assert str(e) and "\n" not in str(e), f"{reader.__name__}: {e!r}"
            outcome = "refused"
    if ctx is not None and outcome == "ok":
        try:
            opened = store.open_contexts(path, ctx)
        except SessionError as e:
            assert "\n" not in str(e)
            return "refused"
        assert opened.note is None or "\n" not in opened.note
        assert ctx.kv_pos_max() == len(ctx.tokens) - 1  # the cache and its mirror agree
        if opened.restored_kv:
            assert tuple(ctx.tokens) == opened_tokens(path)
        outcome = "restored" if opened.restored_kv else "text"
    return outcome


def opened_tokens(path: Path) -> tuple[int, ...]:
    from engine.conversation.session import read_meta

    return read_meta(path).kv_target.tokens


# ─── local JSON files ─────────────────────────────────────────────────────────

SETTINGS = {"version": 1, "values": {"temperature": 0.7, "top_k": 40, "seed": -1, "theme": "dark",
                                     "threads": 0, "autosave": True, "system_prompt": "Be brief."}}
COST = {"[\"/m.gguf\", 1, 2]": [[1, 0.03], [8, 0.05]]}
RECENT = {"version": 1, "files": ["/a.duet", "/b.duet"]}


def mutate_local(valid: Any, rng: random.Random) -> bytes:
    """One mutated JSON file derived from ``valid``."""
    r = rng.random()
    if r < 0.1:
        return b"[" * rng.randrange(1, 300_000)
    if r < 0.15:
        return b"\xff\xfe" + json.dumps(valid).encode("utf-16-le")
    if r < 0.2:
        return json.dumps(valid).encode().replace(b"0.", b"NaN", 1).replace(b"40", b"Infinity")
    if r < 0.3:
        raw = bytearray(json.dumps(valid).encode())
        for _ in range(rng.randrange(1, 6)):
            if raw:
                raw[rng.randrange(len(raw))] = rng.randrange(256)
        return bytes(raw)
    if r < 0.35:  # nesting hidden inside a string value (the cost cache's entries are JSON)
        return json.dumps({"k": "[" * 100_000}).encode()
    return json.dumps(_mutate_json_value(valid, rng)).encode()


def local_checkers() -> list[tuple[str, Any, Callable[[Path], None]]]:
    """(file name, valid content, a function that must not raise on any file at that path)."""
    from app.control.conversation import RecentFiles
    from app.control.settings import DEFAULTS, load
    from engine.decode.speculative.calibration import _check_cost_cache, curve_from_points
    from engine.localfile import read_json

    def settings(path: Path) -> None:
        values = load(path)
        assert set(values) == set(DEFAULTS)

    def cost(path: Path) -> None:
        entries = read_json(path, _check_cost_cache) or {}
        for value in entries.values():
            try:
                curve_from_points(value)
            except ValueError:
                pass

    def recent(path: Path) -> None:
        assert all(isinstance(p, Path) for p in RecentFiles(path).items)

    return [("settings.json", SETTINGS, settings), ("verify-cost.json", COST, cost),
            ("recent.json", RECENT, recent)]


# ─── the long run ─────────────────────────────────────────────────────────────


def _valid_session(folder: Path, model_path: Path | None) -> tuple[bytes, Any]:
    """A real session file (with a KV state and probe when a model is given) and its context."""
    from engine.chat.messages import Message
    from engine.conversation.session import KVState, ModelInfo, SessionMeta, write_session
    from engine.conversation.session.meta import Probe

    path = folder / "valid.duet"
    if model_path is None:
        meta = SessionMeta(
            created="2025-01-01T00:00:00+00:00", saved="2025-01-01T00:00:00+00:00",
            messages=(),
            target=ModelInfo("/t.gguf", "T", 10, "v1:10:" + "0" * 64),
            kv_target=KVState((1, 2, 3), 512, "f16", "f16", Probe((((5, 1.0),),))))
        write_session(path, meta, {"kv.target": bytes(range(256)) * 64})
        return path.read_bytes(), None
    from engine.chat.fit import chat_tokens
    from engine.conversation.session import store
    from engine.llama.context import LlamaSequence
    from engine.llama.context_params import ContextParams
    from engine.llama.model import Model

    model = Model(model_path)
    ctx = LlamaSequence(model, ContextParams(n_ctx=512, n_threads=1))
    messages = [Message("user", "The secret colour is red."), Message("assistant", "Noted.")]
    ctx.decode(chat_tokens(model, messages, add_generation_prompt=False))
    store.save_contexts(path, ctx, None, messages, settings={"sampling": {"temperature": 0.7}})
    return path.read_bytes(), ctx


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sessions", type=int, default=5000)
    p.add_argument("--local", type=int, default=2000)
    p.add_argument("--open", type=int, default=0, help="of the sessions, how many to open into a "
                   "real context (needs --model)")
    p.add_argument("--model", type=Path, default=None, help="GGUF for real KV states (SmolLM2)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    logsetup.configure()
    rng = random.Random(args.seed)
    counts: dict[str, int] = {}
    slowest = (0.0, "")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        valid, ctx = _valid_session(folder, args.model)
        for i in range(args.sessions):
            data = mutate_session(valid, rng)
            t0 = time.perf_counter()
            try:
                out = check_session(folder / "case.duet", data, ctx if i < args.open else None)
            except BaseException:
                Path("fuzz-failure.duet").write_bytes(data)
                raise
            dt = time.perf_counter() - t0
            slowest = max(slowest, (dt, f"session #{i}"))
            counts[f"session {out}"] = counts.get(f"session {out}", 0) + 1
        for name, content, check in local_checkers():
            for i in range(args.local):
                data = mutate_local(content, rng)
                path = folder / name
                path.write_bytes(data)
                t0 = time.perf_counter()
                try:
                    check(path)
                except BaseException:
                    Path("fuzz-failure-" + name).write_bytes(data)
                    raise
                slowest = max(slowest, (time.perf_counter() - t0, f"{name} #{i}"))
                counts[name] = counts.get(name, 0) + 1
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"counts": counts, "slowest_s": round(slowest[0], 3),
                      "slowest_case": slowest[1], "peak_rss_mb": round(rss, 1)}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
