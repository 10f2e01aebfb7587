"""``python -m bench read_ahead``: the first token after Enter when the window reads while the
person types (issue 58), driving the real window (offscreen) with Qt key events.

Scenarios, each in a new conversation, the message typed at ``--cps`` characters a second:

- ``paste``: a standard-library module's source cut to ``--paste-tokens`` tokens is pasted into
  the composer, then a 15-word question about it is typed;
- ``plain``: a conversation already about ``--history-tokens`` tokens long (one exchange sent
  first, not timed), then a short plain message is typed;
- ``manual``: a real manual (``--manual``, one of bench.retrieval's, 397 pages for valgrind) is
  attached, then one of its questions is typed (``--questions`` of them, evenly spaced through
  it); the reply (``--answer-tokens``) is scored as bench.retrieval scores it. Beside it, a
  plain question typed in a new conversation (``question`` in the table), the figure the
  manual's is compared with;
- ``server``: the window's local server on (two sequences), the paste and the question typed as
  in ``paste`` (and not sent); halfway through the question a client's request goes to the
  local server: a short reply (8 tokens), or with ``--request tool`` a tool call (a function
  offered, a call required). Reported: that request's seconds, with reading ahead on
  (the paste being read while it arrives) and off, and with it on, the same request once the
  reading stopped (the cells it read still in the cache, which every sequence's attention
  passes over). Target: no longer with reading ahead.

It reports the time from the Enter key to the first token shown, with reading ahead on and off
(*Settings → Read while I type*), in turns, medians over ``--repeats``. Each run pastes another
module (cut to the same token count), and the memory and disk caches are off, so that no run
finds another's prompt cached. Targets (issue 58): paste ≤ 1.5 s, plain ≤ 0.3 s, manual ≤ 3×
the plain question's with as many right answers as read at send. Writes ``OUT/typing.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.runtime.runtime import resolve_model

log = logging.getLogger(__name__)

MODULES = ("argparse", "shlex", "textwrap", "calendar", "difflib", "ftplib", "gettext", "imaplib",
           "mailbox", "optparse", "pickletools", "poplib", "smtplib", "tarfile", "zipfile", "pprint")
QUESTION = "Which function in this module would you change first to add a timeout, and why exactly?"
PLAIN = "Thanks. Now name two rivers in Europe, please."
PLAIN_QUESTION = "Which river flows through Vienna, Bratislava and Budapest?"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("read_ahead", help="the first token after Enter, reading while typing or not")
    p.add_argument("--model", default="target", help="GGUF path or starter key (default: target)")
    p.add_argument("--scenarios", default="paste,plain")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--cps", type=float, default=6.0, help="characters typed a second")
    p.add_argument("--paste-tokens", type=int, default=2000)
    p.add_argument("--history-tokens", type=int, default=1000)
    p.add_argument("--manual", default="valgrind", help="a manual of bench/data/retrieval")
    p.add_argument("--questions", type=int, default=4, help="the manual's questions asked")
    p.add_argument("--answer-tokens", type=int, default=48, help="max_tokens of the manual's replies")
    p.add_argument("--request", choices=sorted(REQUESTS), default="chat",
                   help="server: the client's request, a short reply or a tool call")
    p.add_argument("--threads", type=int, default=0, help="0: llama.cpp's default")
    p.add_argument("--out", type=Path, default=Path("bench-out"))
    p.set_defaults(func=run)


class Window:
    """The real main window, offscreen, with its own settings and DUET_HOME."""

    def __init__(self, model: Path, threads: int, home: Path, server_port: int = 0) -> None:
        os.environ["DUET_HOME"] = str(home)
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        from PySide6.QtWidgets import QApplication

        from app.control.settings import Settings
        from app.views.main_window import MainWindow

        self.app = QApplication.instance() or QApplication([])
        self.settings = Settings(home / "settings.json")
        self.settings.update({"temperature": 0.0, "max_tokens": 8, "drafter": "none",
                              "autosave": False, "n_ctx": 4096, "n_threads": threads,
                              "state_cache_mb": 0, "kv_store_mb": 0})
        if server_port:  # the local server, its clients on the second sequence
            self.settings.update({"server_enabled": True, "server_port": server_port,
                                  "n_parallel": 2})
        self.w = MainWindow(self.settings, autoload=False)
        self.w.ask_to_quit = lambda why: True  # type: ignore[method-assign]  # quits unasked
        self.w.show()
        loaded: list[object] = []
        self.w.model_loaded.connect(loaded.append)
        self.w.load_models(model)
        self.pump(lambda: bool(loaded), 600)
        engine = self.w.client.worker.engine
        assert engine is not None
        self.model = engine.runtime.target  # tokenizing only (thread-safe)

    def pump(self, until: Callable[[], bool], timeout: float) -> None:
        from PySide6.QtCore import QEventLoop

        end = time.monotonic() + timeout
        while not until():
            if time.monotonic() > end:
                raise TimeoutError("the window did not get there in time")
            self.app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 5)
            time.sleep(0.002)

    def wait(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        self.pump(lambda: time.monotonic() >= end, seconds + 5)

    def type(self, text: str, cps: float) -> None:
        from PySide6.QtTest import QTest

        edit = self.w.composer.edit
        for ch in text:
            QTest.keyClicks(edit, ch)
            self.wait(1 / cps)

    def send_timed(self) -> float:
        """Enter, then the seconds until the reply's first text is shown; waits for its end."""
        from PySide6.QtCore import Qt
        from PySide6.QtTest import QTest

        c = self.w.controller
        finished: list[object] = []
        c.reply_finished.connect(finished.append)
        t0 = time.perf_counter()
        QTest.keyClick(self.w.composer.edit, Qt.Key.Key_Return)
        self.pump(lambda: c.current is not None and len(c.current.turns) >= 2 and
                  bool(c.current.turns[-1].text) or bool(finished), 600)
        first = time.perf_counter() - t0
        self.pump(lambda: bool(finished), 600)
        c.reply_finished.disconnect(finished.append)
        return first

    def close(self) -> None:
        self.w.close()


def paste_text(model: Any, module: str, n_tokens: int) -> str:
    """``module``'s source, cut at a line to about ``n_tokens`` tokens."""
    import importlib.util

    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    lines = Path(spec.origin).read_text(encoding="utf-8").splitlines()
    lo, hi = 1, len(lines)
    while lo < hi:  # the most lines that stay within n_tokens
        mid = (lo + hi + 1) // 2
        if len(model.tokenize("\n".join(lines[:mid]), add_special=False)) <= n_tokens:
            lo = mid
        else:
            hi = mid - 1
    return "\n".join(lines[:lo])


def one(win: Window, scenario: str, on: bool, module: str, args: argparse.Namespace) -> float:
    win.settings.set("read_ahead", on)
    win.w.controller.new()
    edit = win.w.composer.edit
    if scenario == "plain":  # an exchange first: the conversation is about history-tokens long
        win.w.controller.send(paste_text(win.model, module, args.history_tokens) +
                              "\n\nSay OK.")
        win.pump(lambda: win.w.controller.generating is None, 600)
        win.type(PLAIN, args.cps)
    else:
        edit.insertPlainText(paste_text(win.model, module, args.paste_tokens) + "\n\n")
        win.type(QUESTION, args.cps)
    return win.send_timed()


def ask(win: Window, on: bool, question: str, pdf: Path | None, args: argparse.Namespace
        ) -> tuple[float, str]:
    """``question`` typed in a new conversation (``pdf`` attached first, read before the
    typing starts): the first token's seconds after Enter, and the reply."""
    win.settings.update({"read_ahead": on, "max_tokens": args.answer_tokens})
    try:
        c = win.w.controller
        c.new()
        if pdf is not None:
            win.w.attach([pdf])
            win.pump(lambda: not win.w.attachments.pending, 600)
            assert win.w.attachments.current(), f"{pdf} was not read"
        win.type(question, args.cps)
        first = win.send_timed()
        assert c.current is not None
        return first, c.current.turns[-1].text
    finally:
        win.settings.set("max_tokens", 8)


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
REQUESTS = {  # --request: what the client asks the local server
    "chat": {"max_tokens": 8, "messages": [{"role": "user", "content": "Name one colour."}]},
    "tool": {"max_tokens": 48, "tools": [WEATHER], "tool_choice": "required",
             "messages": [{"role": "user", "content": "What is the weather in Paris now?"}]},
}


def server_request(port: int, kind: str, out: list[float]) -> None:
    """A client's short request (``REQUESTS[kind]``) to the window's local server; its seconds
    go to ``out``. A tool request must come back as a call."""
    import httpx

    base = f"http://127.0.0.1:{port}/v1"
    model = httpx.get(f"{base}/models", timeout=60).json()["data"][0]["id"]
    body = {"model": model, "temperature": 0, **REQUESTS[kind]}
    t0 = time.perf_counter()
    r = httpx.post(f"{base}/chat/completions", json=body, timeout=600)
    r.raise_for_status()
    took = time.perf_counter() - t0
    if kind == "tool":
        assert r.json()["choices"][0]["message"].get("tool_calls"), "the reply made no tool call"
    out.append(took)


def served(win: Window, on: bool, module: str, port: int, args: argparse.Namespace,
           after: list[float]) -> float:
    """The paste and the question typed (reading ahead ``on``), a client's request to the
    local server halfway through the question: its seconds. The message is not sent. With
    reading ahead on, the request is sent again once the reading stopped (``after``)."""
    import threading

    win.settings.set("read_ahead", on)
    win.w.controller.new()
    edit = win.w.composer.edit
    edit.insertPlainText(paste_text(win.model, module, args.paste_tokens) + "\n\n")
    half = len(QUESTION) // 2
    win.type(QUESTION[:half], args.cps)
    took: list[float] = []
    client = threading.Thread(target=server_request, args=(port, args.request, took))
    client.start()
    win.type(QUESTION[half:], args.cps)
    win.pump(lambda: not client.is_alive(), 600)
    edit.clear()  # nothing more to read
    win.pump(lambda: win.w.state.typed_ahead is None, 60)
    assert took, "the local server's request failed"
    if on:  # the same request again, the cache as full as it was (the paste read so far) but
        # nothing read any more: what the cells cost apart from the reading's steps
        client = threading.Thread(target=server_request, args=(port, args.request, took))
        client.start()
        win.pump(lambda: not client.is_alive(), 600)
        log.info("server: %.2f s while reading ahead, %.2f s after it stopped", *took)
        after.append(took[1])
    return took[0]


def wait_for_server(win: Window, port: int) -> None:
    import httpx

    def up() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    win.pump(up, 120)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args: argparse.Namespace) -> int:
    model = resolve_model(args.model)
    scenarios = [s for s in args.scenarios.split(",") if s]
    if "server" in scenarios and len(scenarios) > 1:
        print("run --scenarios server on its own: its window has two sequences (the local "
              "server's), which changes the other scenarios' figures")
        return 2
    manual = questions = pdf = None
    if "manual" in scenarios:
        from bench import retrieval

        manual = retrieval.load_manuals([args.manual])[0]
        pdf = retrieval.manual_pdf(manual)
        if pdf is None:
            return 1
        questions = retrieval.spread(manual.questions, args.questions)
    rows: dict[str, dict[str, list[float]]] = {s: {"on": [], "off": []} for s in scenarios}
    if manual is not None:
        rows["question"] = {"on": [], "off": []}
    right: dict[str, list[bool]] = {"on": [], "off": []}
    after: list[float] = []  # the server's request once reading ahead stopped, cells kept
    modules = iter(MODULES * 4)
    with tempfile.TemporaryDirectory(prefix="duet-bench-typing-") as home:
        port = free_port() if "server" in scenarios else 0
        win = Window(model, args.threads, Path(home), port)
        if port:
            wait_for_server(win, port)
        try:
            for r in range(args.repeats):
                for scenario in scenarios:
                    for mode in (("on", "off") if r % 2 == 0 else ("off", "on")):
                        if scenario == "server":
                            t = served(win, mode == "on", next(modules), port, args, after)
                            rows[scenario][mode].append(t)
                            log.info("repeat %d server %s: the request took %.2f s", r + 1, mode, t)
                            continue
                        if scenario != "manual":
                            t = one(win, scenario, mode == "on", next(modules), args)
                            rows[scenario][mode].append(t)
                            log.info("repeat %d %s %s: first token %.2f s", r + 1, scenario, mode, t)
                            continue
                        assert questions is not None
                        q = questions[r % len(questions)]
                        t, reply = ask(win, mode == "on", q.text, pdf, args)
                        rows["manual"][mode].append(t)
                        right[mode].append(retrieval.is_right(reply, q.words))
                        p, _ = ask(win, mode == "on", PLAIN_QUESTION, None, args)
                        rows["question"][mode].append(p)
                        log.info("repeat %d manual %s: first token %.2f s (plain question %.2f s), "
                                 "%s: %r", r + 1, mode, t, p, "right" if right[mode][-1] else
                                 "wrong", reply[:120])
        finally:
            win.close()
    out: dict[str, Any] = {"model": model.name, "cps": args.cps, "paste_tokens": args.paste_tokens,
                           "history_tokens": args.history_tokens, "runs": rows, "medians": {}}
    if manual is not None:
        out["manual"] = {"name": manual.name, "right": right}
    print(f"first token after Enter, {model.name}, typing at {args.cps:g} characters a second "
          f"(medians of {args.repeats}):")
    print("| scenario | read while typing | read at send | ratio |")
    print("|---|---|---|---|")
    for scenario, modes in rows.items():
        on, off = statistics.median(modes["on"]), statistics.median(modes["off"])
        out["medians"][scenario] = {"on_s": round(on, 3), "off_s": round(off, 3)}
        print(f"| {scenario} | {on:.2f} s | {off:.2f} s | {off / on:.1f}× |")
    if after:
        out["server_after_reading"] = after
        print(f"server request once reading ahead stopped (its cells kept): "
              f"{statistics.median(after):.2f} s")
    if manual is not None:
        q_on = statistics.median(rows["question"]["on"])
        m_on, m_off = (statistics.median(rows["manual"][m]) for m in ("on", "off"))
        print(f"manual ({manual.name}) ÷ plain question, read while typing: {m_on / q_on:.1f}× "
              f"(read at send: {m_off / statistics.median(rows['question']['off']):.1f}×); right "
              f"answers: {sum(right['on'])}/{len(right['on'])} read while typing, "
              f"{sum(right['off'])}/{len(right['off'])} at send")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "typing.json").write_text(json.dumps(out, indent=1))
    return 0
