"""An RPC worker lost during a reply in the app: nothing is lost.

Mid-pass (ggml aborts the process): the engine worker's rescue hook saves the conversation with
the reply so far, marked as cut, and the process execs the relaunch command, which reopens it
with a one-line notice. Between passes (a WorkerLostError): the reply is kept, marked as cut,
saved as text, with one notice. Real ``duet-cli worker`` processes on loopback ports and the
SmolLM2 test model; the run that loses its worker is a subprocess, since the abort ends it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from engine.conversation.session.format import read_meta
from engine.conversation.session.store import from_saved
from engine.conversation.store import CUT, streaming_node, tree_from_json, tree_to_json
from engine.conversation.tree import Conversation
from engine.events import Token
from tests.conftest import REPLY_WAIT_S

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "Count from one to two hundred in words."

SCRIPT = textwrap.dedent("""
    import sys
    from pathlib import Path

    from PySide6.QtCore import QCoreApplication

    from engine.llama import rescue
    from engine.llama.context_params import ContextParams
    from engine.conversation.store import streaming_node, tree_to_json
    from engine.conversation.tree import Conversation
    from engine.llama.model import ModelSpec
    from engine.runtime.runtime import RuntimeConfig
    from engine.decode.sampling import SamplingParams
    from app.__main__ import parse_args, relaunch_argv
    from app.engine_link.messages import ChatRequest, LoadRequest, RescuePlan
    from app.engine_link.worker import EngineWorker

    model, endpoints, path = Path(sys.argv[1]), tuple(sys.argv[2].split(",")), Path(sys.argv[3])
    conv = Conversation()
    conv.add_user(sys.argv[4])
    conv.begin_reply()
    tree = tree_to_json(conv, streaming=True)
    plan = RescuePlan(path, {"title": "counting", "tree": tree}, streaming_node(conv, tree))
    qt = QCoreApplication([])
    worker = EngineWorker(token_interval=0.0)
    worker.finished.connect(lambda r: qt.quit())
    worker.failed.connect(lambda f: qt.quit())
    worker.failed.connect(lambda f: print("FAILED", f.worker_lost, f.message, flush=True))
    worker.tokens.connect(lambda b: print("TOKENS", flush=True))
    worker.load(LoadRequest(RuntimeConfig(target=ModelSpec(model, rpc=endpoints),
                                          context=ContextParams(n_ctx=1024, n_threads=1))))
    args = parse_args(["--no-autoload"])
    # The app's relaunch command, run by a stand-in that prints its arguments.
    shown = "import sys; print('RELAUNCHED', *sys.argv[1:], sep=chr(10), flush=True)"
    rescue.set_relaunch(lambda why: [sys.executable, "-c", shown,
                                     *relaunch_argv(args, worker.rescued, why)[3:]])
    worker.chat(ChatRequest(conv.id, tuple(conv.engine_messages()),
                            SamplingParams(temperature=0.0, max_tokens=400), rescue=plan))
    qt.exec()  # the reply runs on the engine's thread; its signals arrive here
    print("ENDED", flush=True)
""")


class Worker:
    """A real ``duet-cli worker`` subprocess on a free loopback port."""

    def __init__(self) -> None:
        from bench.process import free_port, start_worker

        self.endpoint = f"127.0.0.1:{free_port()}"
        self.process = start_worker(self.endpoint)  # once it listens
        self.proc = self.process.proc

    def kill(self) -> None:
        self.process.stop(timeout_s=0)


@contextlib.contextmanager
def start_workers(n: int):
    workers: list[Worker] = []
    try:
        for _ in range(n):
            workers.append(Worker())
        yield workers
    finally:
        for w in workers:
            w.kill()


def test_worker_killed_mid_reply_saves_and_relaunches(smol_path, tmp_path):
    from app.__main__ import parse_args

    path = tmp_path / "counting.duet"
    with start_workers(2) as workers:
        proc = subprocess.Popen(
            [sys.executable, "-c", SCRIPT, str(smol_path), ",".join(w.endpoint for w in workers),
             str(path), PROMPT], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            seen = b""
            while b"TOKENS" not in seen:  # the reply has begun streaming
                chunk = os.read(proc.stdout.fileno(), 4096)
                assert chunk, proc.communicate()[1][-2000:]
                seen += chunk
            workers[0].kill()
            out, err = proc.communicate(timeout=REPLY_WAIT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    lines = (seen + out).decode().splitlines()
    err = err.decode()
    assert "Traceback" not in err
    lost = workers[0].endpoint
    if "RELAUNCHED" in lines:  # lost mid-pass: saved, then the app's command ran
        assert proc.returncode == 0, err
        assert len([ln for ln in err.splitlines() if "went away" in ln]) == 1
        args = parse_args(lines[lines.index("RELAUNCHED") + 1:])
        assert args.reopen == path and lost in args.worker_lost and args.no_autoload
        meta = read_meta(path)
        messages = [from_saved(m) for m in meta.messages]
        assert [m.role for m in messages] == ["user", "assistant"]
        assert messages[0].content == PROMPT and messages[1].content
        assert meta.kv_target is None
        root = tree_from_json(meta.settings["tree"], messages)
        assert root is not None and root.current.current.turn.reason == CUT
    else:  # lost between passes: one clear failure, the process carries on
        failed = [ln for ln in lines if ln.startswith("FAILED")]
        assert failed == [f"FAILED True the RPC worker at {lost} went away; the reply stops "
                          "here (restart the worker and reload the model)"], lines
        assert "ENDED" in lines


LONG_MS = REPLY_WAIT_S * 1000  # model work: as long as a test may run (tests/conftest.py)


def _cut_file(smol_path: Path, folder: Path, text: str) -> Path:
    """A conversation saved the way the rescue hook saves it (a local model stands in)."""
    from app.engine_link.messages import RescuePlan
    from app.engine_link.relay import save_cut
    from engine.llama.context_params import ContextParams
    from engine.llama.model import ModelSpec
    from engine.runtime.runtime import Runtime, RuntimeConfig

    conv = Conversation()
    conv.add_user(PROMPT)
    conv.begin_reply()
    tree = tree_to_json(conv, streaming=True)
    plan = RescuePlan(folder / "counting.duet", {"title": "counting", "tree": tree},
                      streaming_node(conv, tree))
    with Runtime(RuntimeConfig(target=ModelSpec(smol_path),
                               context=ContextParams(n_ctx=512, n_threads=1))) as rt:
        return save_cut(plan, rt, conv.engine_messages(), text)


def test_relaunch_reopens_the_saved_conversation_with_one_notice(qtbot, home, smol_path,
                                                                tmp_path):
    from app.__main__ import create_window, parse_args

    path = _cut_file(smol_path, tmp_path, "One, two, three")
    why = "the RPC worker at 127.0.0.1:9 went away during a pass"
    window = create_window(parse_args(["--no-autoload", "--reopen", str(path),
                                       "--worker-lost", why]))
    qtbot.addWidget(window)
    conv = window.controller.current
    notices = window.state.conversation_notices
    qtbot.waitUntil(lambda: conv.loaded and conv.id in notices, timeout=LONG_MS)
    assert [t.text for t in conv.turns] == [PROMPT, "One, two, three"]
    assert conv.turns[-1].reason == CUT
    notice = notices[conv.id]
    assert notice.kind == "error" and why in notice.text and "\n" not in notice.text
    assert window.notice.text() == notice.text


def test_worker_lost_between_passes_keeps_and_saves_the_reply(qtbot, window, driver,
                                                              smol_path):
    """The engine worker's WorkerLostError (tests/engine/llama/test_rpc.py makes a real one) reaches
    the controller as a Failure marked worker_lost: the reply so far stays, marked as cut, the
    conversation is saved as text and one notice says what happened."""
    from app.engine_link.messages import Failure

    driver.load(smol_path)
    controller = window.controller
    conv = controller.current
    conv.add_user(PROMPT)
    conv.begin_reply()
    conv.append_tokens([Token(1, "One, "), Token(2, "two")])
    controller.library.generating = conv.id
    message = ("the RPC worker at 127.0.0.1:9 went away; the reply stops here (restart the "
               "worker and reload the model)")
    with qtbot.waitSignal(controller.conversation_saved, timeout=LONG_MS) as saved:
        controller.on_failed(Failure("chat", message, conv.id, worker_lost=True))
    assert controller.generating is None
    assert conv.turns[-1].text == "One, two" and conv.turns[-1].reason == CUT
    notice = window.state.conversation_notices[conv.id]
    assert message in notice.text and notice.kind == "error" and window.notice.text() == notice.text
    meta = read_meta(saved.args[0].path)
    assert [m.content for m in meta.messages] == [PROMPT, "One, two"]
    root = tree_from_json(meta.settings["tree"], [from_saved(m) for m in meta.messages])
    assert root.current.current.turn.reason == CUT


def test_models_panel_shows_the_workers_and_a_lost_one(qtbot, window, driver, settings,
                                                       smol_path):
    """Loaded through two workers (the endpoints from the settings): the panel lists each with
    its memory; one killed while idle shows as lost, found off the GUI thread."""
    with start_workers(2) as workers:
        settings.update({"rpc_target": ",".join(w.endpoint for w in workers),
                         "tensor_split": "1,1"})
        info = driver.load(smol_path)
        assert [w.endpoint for w in info.workers] == [w.endpoint for w in workers]
        label = window.models.workers
        qtbot.waitUntil(lambda: label.isVisible(), timeout=LONG_MS)
        lines = label.text().splitlines()
        assert len(lines) == 2 and all("GiB free" in ln and "connected" in ln for ln in lines)
        victim = workers[1]
        victim.kill()
        qtbot.waitUntil(lambda: "lost" in label.text(), timeout=LONG_MS)
        lines = label.text().splitlines()
        assert victim.endpoint in lines[1] and "lost" in lines[1] and "lost" not in lines[0]
