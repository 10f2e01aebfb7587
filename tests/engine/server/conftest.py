"""A real Duet server on a loopback port over the SmolLM2 test model, and small HTTP helpers."""

from __future__ import annotations

import http.client
import json
import shutil
import threading
from dataclasses import dataclass

import pytest

from tests.conftest import REPLY_WAIT_S

API_KEY = "test-key-0123"
N_CTX = 1024


@dataclass
class Served:
    url: str
    port: int
    engine: object  # engine.runtime.service.Engine
    model_id: str
    model: object  # engine.llama.model.Model
    n_ctx: int = N_CTX

    def client(self, api_key: str | None = API_KEY):
        import openai

        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=api_key or "none", max_retries=0,
                             timeout=REPLY_WAIT_S)

    def raw(self, method: str, path: str, body: bytes | str | dict | None = None,
            headers: dict | None = None, key: str | None = API_KEY) -> tuple[int, dict, object]:
        """(status, headers, decoded JSON or text) of one request made with http.client."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=REPLY_WAIT_S)
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        if key:
            hdrs["Authorization"] = f"Bearer {key}"
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        data = data.encode() if isinstance(data, str) else data  # bytes, or an iterable: chunked
        try:
            conn.request(method, path, body=data, headers=hdrs)
            r = conn.getresponse()
            text = r.read().decode("utf-8", "replace")
            try:
                payload = json.loads(text)
            except ValueError:
                payload = text
            return r.status, {k.lower(): v for k, v in r.getheaders()}, payload
        finally:
            conn.close()


@pytest.fixture(scope="session")
def duet_home(tmp_path_factory):
    """Caches go to a temporary folder, not the user's. The speculator's verify-cost
    calibration (a per-machine measurement, not state) is copied in when the machine has one,
    as tests/app does, so that it is not measured again."""
    from engine import paths

    calibration = paths.cache_dir() / "verify-cost.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DUET_HOME", str(tmp_path_factory.mktemp("duet-home")))
        if calibration.exists():
            paths.cache_dir().mkdir(parents=True, exist_ok=True)
            shutil.copy(calibration, paths.cache_dir() / calibration.name)
        yield


def start_server(smol_path, *, api_key: str | None = API_KEY, max_queue: int = 8,
                 gate: threading.Event | None = None, max_body: int = 1 << 20,
                 cache_bytes: int = 256 << 20, cors: tuple[str, ...] = (), drafter: str = "auto",
                 adaptive: bool = True, n_ctx: int = N_CTX, max_tokens: int = 16,
                 threads: int = 1, alias: str = "test", embedding_model=None,
                 reasoning_budget: int | None = None, max_audio: int = 25 << 20, mmproj=None):
    from engine.decode.sampling import SamplingParams
    from engine.decode.speculative.params import SpeculativeParams
    from engine.llama.context_params import ContextParams
    from engine.llama.model import ModelSpec
    from engine.runtime.runtime import Runtime, RuntimeConfig
    from engine.server.app import ApiConfig, model_names
    from engine.server.run import BackgroundServer, build

    config = RuntimeConfig(target=ModelSpec(smol_path, mmproj=mmproj),
                           context=ContextParams(n_ctx=n_ctx, n_threads=threads),
                           sampling=SamplingParams(temperature=0, max_tokens=max_tokens),
                           speculative=SpeculativeParams(drafter=drafter, adaptive=adaptive),
                           state_cache_bytes=cache_bytes)
    runtime = Runtime(config)
    model_id, aliases = model_names(runtime, alias)
    engine, app = build(runtime, ApiConfig(model_id, aliases, api_key=api_key, max_body=max_body,
                                           cors_origins=cors, embedding_model=embedding_model,
                                           reasoning_budget=reasoning_budget, max_audio=max_audio),
                        max_queue=max_queue, gate=gate)
    server = BackgroundServer(app)
    return server, Served(server.url, server.port, engine, model_id, runtime.target, n_ctx)


@pytest.fixture(scope="session")
def server_factory(duet_home):
    """``start_server`` itself, for tests that need a server of their own."""
    return start_server


@pytest.fixture(scope="module")
def served(smol_path, duet_home):
    """A server that decodes plainly: its tests compare two replies to one request, and with a
    drafter the second is drafted from the remembered first and verified in batches of other
    shapes, whose numerics can pick the other side of a near-tie (docs/benchmarks/server.md).
    Speculation over HTTP has its own test (test_server_engine.py)."""
    server, handle = start_server(smol_path, drafter="none")
    yield handle
    server.close()
    handle.engine.close()


@pytest.fixture(scope="session")
def served_target(duet_home):
    """A server on the starter 1.5B (Qwen2.5-Coder, whose template has tool calling), plain
    decoding, for the tests of tools and schemas with the client libraries."""
    from engine.runtime.runtime import resolve_model

    server, handle = start_server(resolve_model("target"), drafter="none", n_ctx=4096,
                                  max_tokens=256, threads=0, alias="qwen")
    yield handle
    server.close()
    handle.engine.close()
