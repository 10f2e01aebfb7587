"""The target across ``duet-cli worker`` processes (ggml RPC) on loopback ports, SmolLM2 model."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bench.process import free_port, start_worker
from engine.chat.fit import chat_tokens
from engine.chat.messages import Message
from engine.decode.sampling import SamplingParams
from engine.errors import ModelLoadError, WorkerLostError
from engine.events import Done, Token
from engine.llama.context import LlamaSequence
from engine.llama.context_params import ContextParams
from engine.llama.model import Model, ModelSpec
from engine.runtime.runtime import Runtime, RuntimeConfig
from tests.conftest import REPLY_WAIT_S

ROOT = Path(__file__).resolve().parents[3]
GREEDY = SamplingParams(temperature=0.0, max_tokens=24)
MESSAGES = [Message("user", "Write three short sentences about the sea.")]
CTX = ContextParams(n_ctx=512, n_threads=1)


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "engine", *args]


class Worker:
    """A real ``duet-cli worker`` subprocess on a free loopback port (always killed)."""

    def __init__(self, *extra: str) -> None:
        self.endpoint = f"127.0.0.1:{free_port()}"
        self.process = start_worker(self.endpoint, extra=extra)  # once it listens
        self.proc = self.process.proc

    def kill(self) -> None:
        self.process.stop(timeout_s=0)


@pytest.fixture
def workers():
    started: list[Worker] = []
    try:
        for _ in range(2):
            started.append(Worker())
        yield started
    finally:
        for w in started:
            w.kill()


def rpc_config(smol_path: Path, workers: list[Worker], **kw) -> RuntimeConfig:
    spec = ModelSpec(smol_path, rpc=tuple(w.endpoint for w in workers), **kw)
    return RuntimeConfig(target=spec, context=CTX, sampling=GREEDY)


def reply(rt: Runtime, messages=MESSAGES, params=GREEDY) -> Done:
    events = list(rt.generator.chat(messages, params))
    assert isinstance(events[-1], Done)
    return events[-1]


@pytest.fixture(scope="module")
def local_reply(smol_path) -> Done:
    with Runtime(RuntimeConfig(target=ModelSpec(smol_path), context=CTX, sampling=GREEDY)) as rt:
        return reply(rt)


PROMPT = "Count from one to two hundred in words."


def kill_mid_reply(smol_path: Path, workers: list[Worker], victim: Worker, *extra: str) -> tuple[str, str, int]:
    """Start a streamed CLI reply over ``workers``, kill ``victim`` once the reply has begun;
    (stdout, stderr, exit status)."""
    endpoints = ",".join(w.endpoint for w in workers)
    proc = subprocess.Popen(
        cli("generate", "--model", str(smol_path), "--rpc", endpoints, "--temperature", "0",
            "--max-tokens", "400", "--ctx", "1024", "--threads", "1", *extra, PROMPT),
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        # the reply has begun streaming (os.read: communicate() reads the descriptor, not a
        # file object's buffer, so nothing read here is lost to it)
        first = os.read(proc.stdout.fileno(), 4096)
        assert first
        victim.proc.kill()
        out, err = proc.communicate(timeout=REPLY_WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return (first + out).decode(), err.decode(), proc.returncode


def test_distributed_greedy_tokens_equal_local(smol_path, workers, local_reply, same_tokens):
    with Runtime(rpc_config(smol_path, workers, tensor_split=(1.0, 3.0))) as rt:
        assert [w.endpoint for w in rt.target.workers] == [w.endpoint for w in workers]
        assert all(w.total_bytes > 0 and w.devices for w in rt.target.workers)
        assert rt.target.connected_workers == tuple(w.endpoint for w in workers)  # layers there
        prompt = chat_tokens(rt.target, MESSAGES)
        done = reply(rt)
        same_tokens(rt.target, prompt, done.token_ids, local_reply.token_ids)
        assert done.stats.n_tokens == GREEDY.max_tokens
        # Rewind: the same turn again reuses the cached prompt and gives the same tokens (its
        # last token is read alone, not in the prompt's batch: decoding is exact); a
        # rewind into the middle of the reply and a re-decode of the rest matches too.
        again = reply(rt)
        same_tokens(rt.target, prompt, again.token_ids, local_reply.token_ids)
        assert again.stats.n_cached_tokens > 0
        ctx = rt.ctx
        tokens = list(ctx.tokens)
        ctx.rewind(len(tokens) - 10)
        ctx.decode(tokens[-10:])
        assert ctx.tokens == tokens
        assert int(ctx.logits().argmax()) == again.token_ids[-1]


def test_session_round_trip_across_the_rpc_layout(smol_path, workers, tmp_path, local_reply):
    from engine.conversation.session.store import open_contexts, save_contexts

    path = tmp_path / "chat.duet"
    with Runtime(rpc_config(smol_path, workers)) as rt:
        done = reply(rt)
        history = MESSAGES + [Message("assistant", done.text)]
        save_contexts(path, rt.ctx, None, history, settings={})
        saved_tokens = list(rt.ctx.tokens)
        rt.ctx.clear()
        opened = open_contexts(path, rt.ctx)
        assert opened.restored_kv and opened.note is None
        assert rt.ctx.tokens == saved_tokens
        follow = history + [Message("user", "And one about the moon.")]
        distributed_next = reply(rt, follow)
        assert distributed_next.stats.n_cached_tokens >= len(saved_tokens) - 1
    # The KV state is device-independent: the same file reopens with its KV in a local target.
    with Model(smol_path) as model, LlamaSequence(model, CTX) as ctx:
        opened = open_contexts(path, ctx)
        assert opened.restored_kv
        assert ctx.tokens == saved_tokens
        from engine.runtime.generate import Generator

        events = list(Generator.alone(ctx).chat(follow, GREEDY))
        assert events[-1].token_ids == distributed_next.token_ids


def test_worker_lost_between_passes_is_a_clear_error(smol_path, workers):
    rt = Runtime(rpc_config(smol_path, workers, ))
    stream = rt.generator.chat(MESSAGES, SamplingParams(temperature=0.0, max_tokens=200))
    first = next(ev for ev in stream if isinstance(ev, Token))
    assert first.text is not None
    victim = workers[1]
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait()
    # Wait (an event, not a sleep) until this process sees the worker's end of the connection.
    fds = list(rt.target._watch._fds)
    assert fds
    readable, _, _ = select.select(fds, [], [], REPLY_WAIT_S)  # (the bound: a safety net)
    assert readable
    with pytest.raises(WorkerLostError, match=victim.endpoint):
        for _ in stream:
            pass
    assert rt.target.worker_lost() == victim.endpoint
    rt.close()  # leaks the native handles instead of aborting on the dead socket


def test_worker_killed_mid_generation_cli_reports_one_line(smol_path, workers):
    """Killed while the CLI streams a reply: whether the loss is seen between passes (a
    WorkerLostError) or inside one (ggml's abort, routed to a clean exit), the process ends with
    one line naming the worker; never a SIGABRT or a traceback."""
    _, text, code = kill_mid_reply(smol_path, workers, workers[0])
    assert code in (1, 75), (code, text)
    assert "Traceback" not in text
    assert f"RPC worker at {workers[0].endpoint} went away" in text
    assert len([ln for ln in text.splitlines() if "went away" in ln]) == 1


def test_unreachable_worker_is_named_before_loading(smol_path):
    endpoint = f"127.0.0.1:{free_port()}"
    with pytest.raises(ModelLoadError, match=f"RPC worker {endpoint} is not reachable"):
        Model(ModelSpec(smol_path, rpc=(endpoint,)))


def test_worker_refuses_a_non_loopback_address(capsys):
    from engine.cli.main import main

    assert main(["worker", "--listen", "0.0.0.0:50999"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "no authentication" in err and "CVE-2026-34159" in err and "SSH tunnel" in err
    assert "--i-understand-this-is-unauthenticated" in err


def test_bad_endpoints_are_one_line_errors():
    from engine.errors import DuetError
    from engine.llama.rpc import parse_endpoints

    assert parse_endpoints("127.0.0.1:5000, localhost:6000") == ("127.0.0.1:5000", "localhost:6000")
    for bad in ("127.0.0.1", "host:0", "host:99999", ":80", "a:1,a:1", ""):
        with pytest.raises(DuetError):
            parse_endpoints(bad)


def test_verify_cost_cache_key_includes_the_rpc_layout(smol_path):
    from types import SimpleNamespace

    from engine.decode.speculative.calibration import _cache_key

    def key(spec: ModelSpec) -> str:
        model = SimpleNamespace(path=smol_path, spec=spec)
        return _cache_key(SimpleNamespace(model=model, params=CTX), (1, 2))

    local = key(ModelSpec(smol_path))
    one = key(ModelSpec(smol_path, rpc=("127.0.0.1:5000",)))
    two = key(ModelSpec(smol_path, rpc=("127.0.0.1:5000", "127.0.0.1:5001")))
    split = key(ModelSpec(smol_path, rpc=("127.0.0.1:5000", "127.0.0.1:5001"), tensor_split=(1, 3)))
    assert len({local, one, two, split}) == 4
    assert key(ModelSpec(smol_path)) == local


def test_worker_advertises_the_memory_it_is_given():
    from engine.llama.rpc import memory, probe

    worker = Worker("--mem", "0.5")
    try:
        assert probe(worker.endpoint)[0] == 7
        free, total = memory(worker.endpoint)
        assert total == 2**29 and 0 < free <= total
    finally:
        worker.kill()


def test_worker_killed_mid_session_reply_keeps_the_transcript(smol_path, workers, tmp_path):
    """``generate --session``: a worker killed while the reply streams ends the process with one
    line, and the conversation file holds the prompt and the reply as far as it got (text)."""
    from engine.conversation.session.format import read_meta

    path = tmp_path / "chat.duet"
    streamed, text, code = kill_mid_reply(smol_path, workers, workers[1], "--session", str(path))
    assert code in (1, 75), (code, text)
    assert "Traceback" not in text
    assert [ln for ln in text.splitlines() if ln.strip()] == [
        next(ln for ln in text.splitlines() if f"RPC worker at {workers[1].endpoint} went away" in ln)]
    meta = read_meta(path)
    assert [m.role for m in meta.messages] == ["user", "assistant"]
    assert meta.messages[0].content == PROMPT
    assert meta.messages[1].content and streamed.startswith(meta.messages[1].content)
    assert meta.kv_target is None  # the text alone: the KV state was on the lost worker
    from engine.conversation.session.store import from_saved
    from engine.conversation.store import CUT, tree_from_json

    root = tree_from_json(meta.settings.get("tree"), [from_saved(m) for m in meta.messages])
    assert root is not None and root.current.current.turn.reason == CUT  # the app shows it cut
