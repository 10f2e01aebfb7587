"""The window keeps the models it used loaded (engine.runtime.pool): going back to one is a
switch, not a load; a conversation brings back the model it was made with; the local server
serves every kept model by name. Real SmolLM2 and Gemma 270M."""

from __future__ import annotations

import http.client
import json
import socket

from tests.conftest import REPLY_WAIT_S, model_path

LONG_MS = REPLY_WAIT_S * 1000


def _loaded(qtbot, window, action):
    with qtbot.waitSignal(window.model_loaded, timeout=LONG_MS) as got:
        action()
    return got.args[0]


def test_going_back_to_a_kept_model_is_a_switch_not_a_load(qtbot, window, driver, settings,
                                                           smol_path) -> None:
    gemma = model_path("gemma")
    worker = window.client.worker
    first = driver.load(smol_path)
    smol_engine = worker.engine
    assert not first.switched
    second = driver.load(gemma)
    assert not second.switched and worker.engine is not smol_engine
    assert len(worker.pool.loaded()) == 2 and not smol_engine.runtime.closed
    back = driver.load(smol_path)
    assert back.switched and back.load_s == 0.0 and worker.engine is smol_engine
    assert window.flow.state.model.target_path == smol_path
    assert driver.send("Say hi.").done.stats.n_tokens > 0  # it answers from the kept engine
    settings.set("models_kept", 1)
    again = driver.load(gemma)  # one kept at most: smol's engine goes
    assert again.switched and len(worker.pool.loaded()) == 1 and smol_engine.runtime.closed
    assert not driver.load(smol_path).switched and [e.value for e in worker.pool.loaded()] == [worker.held]


def test_a_conversation_brings_back_its_model(qtbot, window, driver, settings, smol_path,
                                              tmp_path) -> None:
    settings.update({"autosave": True, "save_kv": True})
    gemma = model_path("gemma")
    c = window.controller
    driver.load(smol_path)
    driver.send("Name a colour.")
    owls = c.current
    assert owls.model == smol_path
    c.new()
    driver.load(gemma)
    driver.send("Name a fruit.")
    fruit = c.current
    assert fruit.model == gemma
    back = _loaded(qtbot, window, lambda: c.select(owls.id))
    assert back.switched and back.target_path == smol_path
    assert settings["target_model"] == str(smol_path)
    assert _loaded(qtbot, window, lambda: c.select(fruit.id)).target_path == gemma
    gone = tmp_path / "moved-away.gguf"
    owls.model = gone
    c.select(owls.id)  # its file is gone: the model in use stays, and the window says so
    qtbot.waitUntil(lambda: "no longer" in window.notice.text(), timeout=LONG_MS)
    assert window.flow.state.model.target_path == gemma and gone.name in window.notice.text()


def test_a_reopened_file_restores_its_kv_state_on_its_kept_model(qtbot, window, driver, settings,
                                                                smol_path) -> None:
    settings.update({"autosave": True, "save_kv": True, "state_cache_mb": 0})
    c = window.controller
    driver.load(smol_path)
    with qtbot.waitSignal(c.conversation_saved, timeout=LONG_MS) as saved:
        driver.send("Tell me one fact about owls.")
    path = saved.args[0].path
    c.new()
    driver.load(model_path("gemma"))
    c.library.remove(c.library.by_id(next(v.id for v in c.conversations if v.path == path)))
    with qtbot.waitSignal(c.conversation_opened, timeout=LONG_MS) as opened:
        c.files.open_path(path)
    res = opened.args[0]
    assert res.restored_kv and res.note is None  # restored on smol, switched to first
    assert window.flow.state.model.target_path == smol_path
    assert window.client.worker.engine.runtime.target.path == smol_path


def test_the_local_server_serves_every_kept_model_by_name(qtbot, window, driver, settings,
                                                          smol_path) -> None:
    gemma = model_path("gemma")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings.update({"server_port": port, "server_api_key": "k"})
    driver.load(gemma)
    driver.load(smol_path)
    settings.set("server_enabled", True)
    qtbot.waitUntil(lambda: window.local_server.address is not None, timeout=LONG_MS)

    def ask(method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REPLY_WAIT_S)
        try:
            conn.request(method, path, json.dumps(body) if body else None,
                         {"Authorization": "Bearer k", "Content-Type": "application/json"})
            r = conn.getresponse()
            return r.status, json.loads(r.read())
        finally:
            conn.close()

    ids = [m["id"] for m in ask("GET", "/v1/models")[1]["data"]]
    assert ids == [smol_path.stem, gemma.stem]  # the model in use is the default, first
    status, reply = ask("POST", "/v1/completions", {  # (a base model: no chat template)
        "model": gemma.stem, "prompt": "Hi", "max_tokens": 3})
    assert status == 200 and reply["model"] == gemma.stem
    assert window.client.worker.engine.runtime.target.path == smol_path  # the window's stays


def test_a_conversation_whose_model_was_unloaded_loads_it_with_its_kv_state(
        qtbot, window, driver, settings, smol_path) -> None:
    settings.update({"autosave": True, "save_kv": True, "state_cache_mb": 0, "models_kept": 1})
    c = window.controller
    driver.load(smol_path)
    with qtbot.waitSignal(c.conversation_saved, timeout=LONG_MS):
        first = driver.send("Tell me one fact about owls.").done.stats
    owls = c.current
    c.new()
    driver.load(model_path("gemma"))  # smol is unloaded (one model kept)
    with qtbot.waitSignal(c.conversation_opened, timeout=LONG_MS) as opened:
        back = _loaded(qtbot, window, lambda: c.select(owls.id))
    assert not back.switched and back.target_path == smol_path
    assert opened.args[0].restored_kv  # reopened on the model loaded again
    follow = driver.send("And another one?").done.stats
    # the history (prompt and reply) came back from the file, not from a prefill
    assert follow.n_cached_tokens >= first.n_prompt_tokens + first.n_tokens - 2


def test_the_local_server_follows_the_kept_models_without_a_restart(
        qtbot, window, driver, settings, smol_path) -> None:
    """A switch between served models changes nothing; a model unloaded or loaded changes what
    the running server serves (the same server: its clients' connections go on)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # (the server on first: with it, the models load with its parallel sequences)
    settings.update({"server_port": port, "server_api_key": "k", "server_enabled": True})
    driver.load(model_path("gemma"))
    driver.load(smol_path)
    server, worker, applied = window.local_server, window.client.worker, []
    qtbot.waitUntil(lambda: server.serves(worker.engines()), timeout=LONG_MS)  # both
    running = server._running
    apply = server.apply
    server.apply = lambda *a, **k: (applied.append(a), apply(*a, **k))  # type: ignore[method-assign]
    assert driver.load(model_path("gemma")).switched
    assert applied == [] and server._running is running  # not restarted
    served = {lo.value.model_id: lo.value for lo in server._app.state.duet.pool.loaded()}
    settings.set("models_kept", 1)
    driver.load(smol_path)  # smol comes back, gemma is closed: the server follows
    qtbot.waitUntil(lambda: server.serves(worker.engines()), timeout=LONG_MS)
    assert server._running is running and len(worker.engines()) == 1  # not restarted
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REPLY_WAIT_S)
    try:
        conn.request("GET", "/v1/models", headers={"Authorization": "Bearer k"})
        ids = [m["id"] for m in json.loads(conn.getresponse().read())["data"]]
    finally:
        conn.close()
    assert ids == [smol_path.stem]
    # smol's ServedModel (its embeddings, once made) is the one it had
    assert [lo.value for lo in server._app.state.duet.pool.loaded()] == [served[smol_path.stem]]
