"""The app's Local server: started from the settings over the app's own engine (one model in
memory for the chat and the clients), stopped again."""

from __future__ import annotations

import http.client
import json
import socket

from app.engine_link.local_server import LocalServer
from tests.conftest import REPLY_WAIT_S

LONG_MS = REPLY_WAIT_S * 1000  # a safety net: as long as a test may run (tests/conftest.py)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(port: int, path: str, key: str | None = None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REPLY_WAIT_S)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {key}"} if key else {})
        r = conn.getresponse()
        return r.status, json.loads(r.read())
    finally:
        conn.close()


def _engine(settings, smol_path):  # a loaded model's engine, as the app's worker makes it
    from app.control.settings import config_from_settings
    from engine.runtime.runtime import Runtime
    from engine.runtime.service import Engine

    return Engine(Runtime(config_from_settings(settings.values, smol_path)))


def test_the_local_server_follows_its_settings(qtbot, settings, smol_path) -> None:
    port = _free_port()
    settings.update({"target_model": str(smol_path), "server_enabled": True,
                     "server_port": port, "server_api_key": "k", "state_cache_mb": 32})
    engine = _engine(settings, smol_path)
    server = LocalServer()
    try:
        with qtbot.waitSignal(server.started, timeout=LONG_MS) as started:
            server.apply(settings.values, engine)
        assert started.args == [f"http://127.0.0.1:{port}/v1"]
        assert _get(port, "/health")[0] == 200
        assert _get(port, "/v1/models")[0] == 401
        assert _get(port, "/v1/models", key="k")[1]["data"][0]["id"] == smol_path.stem
        assert _get(port, "/v1/duet/stats", key="k")[1]["cache"]["max_bytes"] == 32 << 20
        other = _free_port()  # another address: a restart there
        settings.set("server_port", other)
        with qtbot.waitSignal(server.started, timeout=LONG_MS) as moved:
            server.apply(settings.values, engine)
        assert moved.args == [f"http://127.0.0.1:{other}/v1"] and _get(other, "/health")[0] == 200
        port = other
        settings.set("server_enabled", False)
        with qtbot.waitSignal(server.stopped, timeout=LONG_MS):
            server.apply(settings.values, engine)
        assert server.address is None
        assert engine.runtime.target is not None  # stopping the server leaves the app's engine
    finally:
        server.stop()
        engine.close()


def test_no_model_or_a_public_address_without_a_key_is_refused(qtbot, settings, smol_path) -> None:
    settings.update({"server_enabled": True})
    server = LocalServer()
    with qtbot.waitSignal(server.failed, timeout=LONG_MS) as failed:
        server.apply(settings.values, None)
    assert "load a model first" in failed.args[0]
    settings.update({"target_model": str(smol_path), "server_host": "0.0.0.0",
                     "server_api_key": ""})
    with qtbot.waitSignal(server.failed, timeout=LONG_MS) as failed:
        server.apply(settings.values, None)
    assert "API key" in failed.args[0]
    assert server.address is None


def test_the_window_starts_the_server_shows_its_address_and_stops_it(qtbot, window, driver,
                                                                     settings, smol_path) -> None:
    port = _free_port()
    label = window.status.labels["server"]
    assert not label.isVisibleTo(window)
    driver.load(smol_path)
    settings.update({"server_port": port, "server_api_key": "k"})
    settings.set("server_enabled", True)
    qtbot.waitUntil(lambda: label.text() == f"server http://127.0.0.1:{port}/v1", timeout=LONG_MS)
    assert label.isVisibleTo(window) and _get(port, "/health")[0] == 200
    settings.set("server_enabled", False)
    qtbot.waitUntil(lambda: not label.isVisibleTo(window), timeout=LONG_MS)
    assert window.local_server.address is None
    settings.update({"server_enabled": True, "server_host": "0.0.0.0", "server_api_key": ""})
    qtbot.waitUntil(lambda: "API key" in window.notice.text(), timeout=LONG_MS)
    assert not label.isVisibleTo(window)


def test_the_chat_and_the_servers_clients_share_one_engine(qtbot, window, driver, settings,
                                                           smol_path) -> None:
    """One model in memory: the server answers from the engine the window chats with."""
    port = _free_port()
    settings.update({"server_port": port, "server_api_key": "k", "n_parallel": 2})
    info = driver.load(smol_path)
    settings.set("server_enabled", True)
    qtbot.waitUntil(lambda: window.local_server.address is not None, timeout=LONG_MS)
    engine = window.client.worker.engine
    assert info.target_path == smol_path and len(engine.scheduler.slots) == 2
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REPLY_WAIT_S)
    conn.request("POST", "/v1/chat/completions", json.dumps({
        "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}),
        {"Authorization": "Bearer k", "Content-Type": "application/json"})
    assert conn.getresponse().status == 200
    assert driver.send("Say hi.").done.stats.n_tokens > 0
    assert engine.stats()["completed"] == 2  # the client's reply and the window's, one engine
    assert engine.scheduler.slots[1].ctx.n_past > 0  # the client ran beside slot 0
