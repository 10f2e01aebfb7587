"""GUI test setup: offscreen Qt, an isolated DUET_HOME per session, Qt warnings fail tests, and
so do an exception in a slot (pytest-qt's capture, on unless a test is marked
``qt_no_exception_capture``) and an ERROR logged by Duet (unless marked ``logs_errors``).

The real models folder is resolved by tests/conftest.py (DUET_MODELS_DIR) before DUET_HOME is
pointed at a temporary folder here, so settings, conversations and caches are isolated while
the tests still run the real SmolLM2. The speculator's one-off verify-cost calibration is
copied from the machine's cache when there is one (it is a per-machine measurement, not state).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import logging  # noqa: E402

import pytest  # noqa: E402
from PySide6.QtCore import QObject, Signal  # noqa: E402

from engine import paths  # noqa: E402
from tests.conftest import REPLY_WAIT_S

if TYPE_CHECKING:
    from app.engine_link.messages import ChatReply, LoadedModel

REAL_CACHE = paths.cache_dir()
# The offscreen platform plugin warns about this on every top-level window; it is not ours.
IGNORED_QT_MESSAGES = ("This plugin does not support propagateSizeHints",)


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "logs_errors: the test provokes an ERROR log record of "
                            "Duet on purpose (it does not fail the test)")


@pytest.fixture(autouse=True)
def no_error_logged(request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture):
    """A test during which Duet logged an ERROR (an unexpected failure it survived: a worker
    request, an engine step, a slot) fails, with the records."""
    yield
    if request.node.get_closest_marker("logs_errors"):
        return
    errors = [r for when in ("setup", "call") for r in caplog.get_records(when)
              if r.levelno >= logging.ERROR and r.name.split(".")[0] in ("app", "engine")]
    if errors:
        pytest.fail("Duet logged errors:\n" + "\n".join(
            f"{r.levelname} {r.name}: {r.getMessage()}" for r in errors), pytrace=False)


def pytest_collection_modifyitems(config, items) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.qt_log_level_fail("WARNING"))
            item.add_marker(pytest.mark.qt_log_ignore(*IGNORED_QT_MESSAGES))


@pytest.fixture(scope="session", autouse=True)
def duet_home(tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp("duet-home")
    calibration = REAL_CACHE / "verify-cost.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DUET_HOME", str(home))
        if calibration.exists():
            paths.cache_dir().mkdir(parents=True, exist_ok=True)
            shutil.copy(calibration, paths.cache_dir() / calibration.name)
        yield home


@pytest.fixture
def settings(tmp_path: Path):
    """Settings in a per-test file, tuned for short, deterministic replies."""
    from app.control.settings import Settings

    s = Settings(tmp_path / "settings.json")
    s.update({"temperature": 0.0, "max_tokens": 24, "drafter": "none", "autosave": False,
              "n_ctx": 2048, "theme": "light"})
    return s


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, duet_home: Path) -> Path:
    """A per-test DUET_HOME (conversations, recent files), with the session's calibration."""
    h = tmp_path / "home"
    if (duet_home / "cache").exists():
        shutil.copytree(duet_home / "cache", h / "cache")
    monkeypatch.setenv("DUET_HOME", str(h))
    return h


class _Hop(QObject):
    """Lives on the GUI thread; ``take`` is queued there and re-emits ``out`` from there."""

    out = Signal(object)

    def take(self, obj: object) -> None:
        self.out.emit(obj)


class Relay:
    """The worker's signals, re-emitted on the GUI thread, with a record of what came.

    A lambda connected straight to a signal of the worker thread would run on that thread
    (PySide only queues calls to QObject methods), and pytest-qt's waitSignal would stop its
    timer from there; so tests listen to these instead.
    """

    NAMES = ("loaded", "progress", "tokens", "finished", "saved", "opened", "fetched", "failed")

    def __init__(self, worker) -> None:
        self.events: list[tuple[str, object]] = []
        self._hops = {}
        for name in self.NAMES:
            hop = _Hop()
            getattr(worker, name).connect(hop.take)
            hop.out.connect(lambda obj, name=name: self.events.append((name, obj)))
            self._hops[name] = hop
            setattr(self, name, hop.out)

    def of(self, name: str) -> list:
        return [obj for n, obj in self.events if n == name]


LONG_MS = REPLY_WAIT_S * 1000  # model work: as long as a test may run (tests/conftest.py)


class Driver:
    """Drives a MainWindow the way a user would, waiting on the signals that end each step."""

    def __init__(self, qtbot, window) -> None:
        self.qtbot, self.window = qtbot, window
        self.relay = Relay(window.client.worker)

    def load(self, target: Path, draft: Path | None = None) -> LoadedModel:
        with self.qtbot.waitSignal(self.window.model_loaded, timeout=LONG_MS) as blocker:
            self.window.load_models(target, draft)
        return blocker.args[0]

    def send(self, text: str, *, keys: bool = False) -> ChatReply:
        with self.qtbot.waitSignal(self.window.controller.reply_finished,
                                   timeout=LONG_MS) as blocker:
            if keys:
                from PySide6.QtCore import Qt

                edit = self.window.composer.edit
                self.qtbot.keyClicks(edit, text)
                self.qtbot.keyClick(edit, Qt.Key.Key_Return)
            else:
                self.window.controller.send(text)
        return blocker.args[0]

    def finish(self, action) -> object:  # run action, wait for the reply
        with self.qtbot.waitSignal(self.window.controller.reply_finished,
                                   timeout=LONG_MS) as blocker:
            action()
        return blocker.args[0]


@pytest.fixture
def relay_for():
    return Relay


HELD_CHARS = 10  # a held reply has more than this many characters (what the tests wait for)


@pytest.fixture
def held_replies(monkeypatch) -> list[str]:
    """The first reply submitted to an engine, once more than HELD_CHARS characters of it have
    been handed to the window, waits on the engine's thread until it is cancelled (Stop, a quit,
    the window's end): "while a reply is being written" is a state the test is in, not a race
    between the test's clicks and the reply's length (the model may end a reply at any token).
    Later replies run freely. The list returned gets the held reply's text so far, once held."""
    from engine.events import Token
    from engine.runtime.service import Engine

    real = Engine.submit
    held: list[str] = []
    armed = [True]

    def submit(self, job) -> None:
        relay = getattr(job.emit, "__self__", None)
        if armed[0] and relay is not None and hasattr(relay, "batches") and hasattr(relay, "parts"):
            armed[0] = False  # the first reply only
            inner = job.emit

            def emit(item: object) -> None:
                inner(item)
                text = "".join(relay.parts)
                if not held and isinstance(item, Token) and not len(relay.batches) and \
                        len(text.strip()) > HELD_CHARS:  # (none of it kept back from the window)
                    held.append(text)
                    job.cancel.wait(REPLY_WAIT_S)  # (the bound: a safety net)

            job.emit = emit
        real(self, job)

    monkeypatch.setattr(Engine, "submit", submit)
    return held


def quit_without_asking(w) -> None:
    """At the end of a test the window closes whatever it was doing (no question to answer)."""
    w.ask_to_quit = lambda why: True


@pytest.fixture
def window(qtbot, settings, home):
    from app.views.main_window import MainWindow

    w = MainWindow(settings, autoload=False)
    qtbot.addWidget(w, before_close_func=quit_without_asking)
    w.show()
    qtbot.waitExposed(w, timeout=LONG_MS)
    yield w
    w.close()


@pytest.fixture
def driver(qtbot, window) -> Driver:
    return Driver(qtbot, window)
