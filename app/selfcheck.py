"""Headless self-check of an installed Duet: ``duet --self-check [--fetch] [--model PATH]``.

Proves, without a display and without opening a window, that a (packaged) Duet works end to
end on this machine:

1. model    — the fast test model (SmolLM2, catalogue key "test") is in the models folder, or
              is fetched there with ``--fetch``; ``--model PATH`` checks another GGUF instead;
2. generate — a Runtime with the n-gram drafter, then (unless ``--no-draft``) one with the
              model as its own draft (the draft-model path), reply greedily to a prompt that
              repeats text; tokens must come out and each drafter must have proposed;
3. session  — the last conversation is saved with its KV states (target and draft) to a
              temporary ``.duet`` file and reopened into a fresh Runtime; the KV states must be
              restored and one more reply must reuse them;
4. qt       — the GUI modules import and a QApplication starts on the offscreen platform with
              the SVG image plugin (the app icon) available.

``--only STEP,...`` runs some steps (with those they need: session needs generate needs model),
e.g. ``duet --self-check --fetch --only model`` just installs the test model.

Output: one line per step with its time, then ``self-check passed``; exit status 0. On any
failure: ``self-check failed: <step>: <reason>`` (one line on stderr), exit status 1. Tracebacks
go to the debug log only (``--log-level DEBUG``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import app
from engine import logsetup
from engine.errors import DuetError
from engine.events import Done, collect

if TYPE_CHECKING:  # imported when used: the self-check reports a failed import as a step
    from engine.chat.messages import Message
    from engine.runtime.runtime import Runtime, RuntimeConfig

log = logging.getLogger(__name__)

# A reply that copies its prompt, so that the n-gram drafter has matches to propose.
PROMPT = ("Count from 1 to 20, separated by commas: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, "
          "14, 15, 16, 17, 18, 19, 20. Now write that same list again.")
FOLLOW_UP = "Write the same list once more."
_qt_app = None  # the QApplication this module created, kept alive for the process


STEPS = ("model", "generate", "session", "qt")
_NEEDS = {"session": "generate", "generate": "model"}


def expand_steps(names: Sequence[str]) -> frozenset[str]:
    """The steps to run for ``names``, with what they need (session needs generate needs
    model). Raises CheckFailed for an unknown name."""
    todo = set()
    for name in names:
        if name not in STEPS:
            raise CheckFailed(f"unknown step {name!r}; steps: {', '.join(STEPS)}")
        step: str | None = name
        while step is not None and step not in todo:
            todo.add(step)
            step = _NEEDS.get(step)
    return frozenset(todo)


class CheckFailed(Exception):
    """A step found something wrong; the message is the one line shown to the user."""


@dataclass(frozen=True)
class CheckOptions:
    """``model``: a GGUF to check instead of the test model; ``fetch``: download the test
    model if it is missing; ``draft``: also run the model as its own draft."""

    model: Path | None = None
    fetch: bool = False
    draft: bool = True
    max_tokens: int = 24
    n_ctx: int = 1024
    steps: frozenset[str] = frozenset(STEPS)


def parse_args(argv: Sequence[str]) -> tuple[CheckOptions, str]:
    """Options and log level from ``argv``; unknown arguments (``--self-check``) are ignored."""
    p = argparse.ArgumentParser(prog="duet --self-check", add_help=False)
    p.add_argument("--model", type=Path, default=None)
    p.add_argument("--fetch", action="store_true")
    p.add_argument("--no-draft", action="store_true")
    p.add_argument("--max-tokens", type=int, default=24)
    p.add_argument("--only", default=",".join(STEPS),
                   help="comma-separated steps to run (default: all)")
    p.add_argument("--log-level", default="WARNING",
                   choices=logsetup.LEVELS)
    args, _unknown = p.parse_known_args(list(argv))
    steps = expand_steps([name.strip() for name in args.only.split(",") if name.strip()])
    return (CheckOptions(model=args.model, fetch=args.fetch, draft=not args.no_draft,
                         max_tokens=max(4, args.max_tokens), steps=steps), args.log_level)


# ─── steps ────────────────────────────────────────────────────────────────────


def find_model(opts: CheckOptions) -> tuple[Path, str]:
    """The GGUF to check, fetched if asked; raises CheckFailed when it is missing."""
    # lazy: platformdirs, pip's runner and llama.cpp load in the step that checks them (a broken
    # install fails it with one line, not a traceback at the start)
    from engine import paths
    from engine.llama.model import check_gguf_file
    from engine.models import catalog, fetch

    if opts.model is not None:
        path = opts.model.expanduser()
        check_gguf_file(path)
        return path, f"{path.name} ({path.stat().st_size / 1e6:.0f} MB)"
    model = catalog.get("test")
    folder = paths.models_dir()
    path = folder / model.filename
    if opts.fetch:
        fetch.fetch(model, folder)
        how = "fetched or found"
    else:
        state = fetch.status(model, folder)
        if state == "missing":
            raise CheckFailed(f"the test model {model.filename} is not in {folder}; run "
                              f"'duet --self-check --fetch' to download it ({model.size // 10**6} MB)")
        if state == "mismatch":
            raise CheckFailed(f"{path} is damaged (size or SHA-256); "
                              "'duet --self-check --fetch' replaces it")
        how = "verified"
    return path, f"{model.display_name}, {how} in {folder}"


def check_config(path: Path, opts: CheckOptions, drafter: str) -> RuntimeConfig:
    """Greedy replies with ``drafter`` (ngram, or model: ``path`` as its own draft) forced on:
    adaptive off, so drafts are always tried."""
    # lazy: llama.cpp and numpy, in the step that checks them (as find_model)
    from engine.decode.sampling import SamplingParams
    from engine.decode.speculative.params import SpeculativeParams
    from engine.llama.context_params import ContextParams
    from engine.llama.model import ModelSpec
    from engine.runtime.runtime import RuntimeConfig

    spec = SpeculativeParams(drafter=drafter, draft_max=8, adaptive=False)
    return RuntimeConfig(target=ModelSpec(path),
                         draft=ModelSpec(path) if drafter == "model" else None,
                         context=ContextParams(n_ctx=opts.n_ctx),
                         sampling=SamplingParams(temperature=0.0, max_tokens=opts.max_tokens),
                         speculative=spec)


def reply(runtime: Runtime, messages: list[Message]) -> Done:
    """Run one reply to the end and return its Done event."""
    try:
        done = collect(runtime.generator.chat(messages, runtime.config.sampling))
    except DuetError as e:
        raise CheckFailed(str(e)) from None
    if not done.token_ids:
        raise CheckFailed("the model produced no tokens")
    return done


def check_generate(runtime: Runtime) -> tuple[list[Message], str]:
    """Reply to PROMPT; the configured drafter must have proposed tokens."""
    from engine.chat.messages import Message  # lazy: jinja2, in the step that checks it (as find_model)

    drafter = runtime.config.speculative.drafter
    if runtime.config.draft is not None and runtime.draft_ctx is None:
        raise CheckFailed(f"the draft model was not loaded: {runtime.draft_problem}")
    messages = [Message("user", PROMPT, time.time())]
    done = reply(runtime, messages)
    st = done.stats
    if st.drafters_used.get(drafter, 0) == 0 or st.proposed == 0:
        raise CheckFailed(f"the {drafter} drafter proposed nothing in {st.n_tokens} tokens")
    line = (f"{drafter}: {st.n_tokens} tokens at {st.tokens_per_s:.0f} tok/s, drafts "
            f"{st.proposed} proposed / {st.accepted} accepted")
    return messages + [Message("assistant", done.text, time.time())], line


def check_session(runtime: Runtime, config: RuntimeConfig, messages: list[Message],
                  folder: Path) -> str:
    """Save ``runtime``'s conversation with KV, close it, reopen into a fresh Runtime, reply."""
    # lazy: the engine, in the step that checks it (as find_model)
    from engine.chat.messages import Message
    from engine.conversation.session.store import open_conversation, save_conversation
    from engine.runtime.runtime import Runtime

    path = folder / "self-check.duet"
    saved = save_conversation(path, runtime, messages, settings={"self_check": True})
    if not saved.with_kv:
        raise CheckFailed("the KV state was not saved")
    runtime.close()
    with Runtime(config) as fresh:
        opened = open_conversation(path, fresh)
        if not opened.restored_kv:
            raise CheckFailed(f"the saved KV state was not restored: "
                              f"{opened.note or 'the file holds none'}")
        if [(m.role, m.content) for m in opened.messages] != [(m.role, m.content) for m in messages]:
            raise CheckFailed("the reopened conversation's messages differ from the saved ones")
        if config.draft is not None and not opened.draft_restored:
            raise CheckFailed(f"the draft model's KV state was not restored: "
                              f"{opened.note or 'the file holds none'}")
        done = reply(fresh, opened.messages + [Message("user", FOLLOW_UP, time.time())])
    if done.stats.n_cached_tokens < saved.n_tokens // 2:
        raise CheckFailed(f"the reopened conversation was processed again "
                          f"({done.stats.n_cached_tokens} of {saved.n_tokens} tokens reused)")
    kv = "target and draft KV" if config.draft is not None else "target KV"
    return (f"saved {saved.bytes / 1e6:.1f} MB ({saved.n_tokens} tokens), reopened with {kv} "
            f"restored; next reply {done.stats.n_tokens} tokens after "
            f"{done.stats.n_cached_tokens} cached")


def check_qt() -> str:
    """Import the GUI and start Qt offscreen (no window); the SVG plugin must load the icon."""
    global _qt_app
    # lazy: Qt and the GUI modules in the step that checks them (offscreen, after the engine's)
    from PySide6.QtGui import QGuiApplication, QIcon, QImageReader
    from PySide6.QtWidgets import QApplication

    import app.views.main_window  # noqa: F401  (the GUI modules, with all their imports)

    if QApplication.instance() is None:
        _qt_app = QApplication(["duet"])
    platform = QGuiApplication.platformName()
    formats = {bytes(f.data()).decode() for f in QImageReader.supportedImageFormats()}
    if "svg" not in formats:
        raise CheckFailed("Qt's SVG image plugin is missing")
    icon_path = icon_file()
    if QIcon(str(icon_path)).pixmap(64, 64).isNull():
        raise CheckFailed(f"the app icon could not be drawn from {icon_path}")
    return f"platform {platform}, GUI modules imported, SVG icon drawn"


def icon_file() -> Path:
    """resources/icons/duet.svg beside the ``app`` package (also in the packaged app)."""
    return Path(app.__file__).resolve().parent.parent / "resources" / "icons" / "duet.svg"


# ─── driver ───────────────────────────────────────────────────────────────────


@contextmanager
def _offscreen() -> Iterator[None]:
    """Force Qt's offscreen platform for the duration (no display is needed or touched)."""
    old = os.environ.get("QT_QPA_PLATFORM")
    os.environ["QT_QPA_PLATFORM"] = "offscreen"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("QT_QPA_PLATFORM", None)
        else:
            os.environ["QT_QPA_PLATFORM"] = old


class _Steps:
    """Runs named steps, printing ``name  ok  seconds  detail`` for each."""

    def __init__(self) -> None:
        self.current = "start"
        self.t0 = time.perf_counter()

    @contextmanager
    def step(self, name: str) -> Iterator[list[str]]:
        self.current = name
        t = time.perf_counter()
        detail: list[str] = []
        yield detail
        print(f"{name:<9} ok {time.perf_counter() - t:6.2f} s  {'; '.join(detail)}", flush=True)


def _reason(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if isinstance(exc, (CheckFailed, DuetError)) and lines:
        return lines[0]
    # Foreign errors: the last line of a long message is the cause (numpy's import error ends
    # with "Original error was: ...").
    return f"{type(exc).__name__}: {lines[-1]}" if lines else type(exc).__name__


def run_selfcheck(argv: Sequence[str] | None = None) -> int:
    """Run the self-check (see the module docstring); 0 if every step passed, else 1."""
    steps = _Steps()
    try:
        opts, level = parse_args(sys.argv[1:] if argv is None else argv)
    except CheckFailed as exc:
        print(f"self-check failed: {exc}", file=sys.stderr, flush=True)
        return 1
    logsetup.configure(level)
    try:
        with _offscreen(), tempfile.TemporaryDirectory(prefix="duet-self-check-") as tmp:
            _run(opts, steps, Path(tmp))
    except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - reported as one line
        log.debug("self-check failed in step %s", steps.current, exc_info=True)
        print(f"self-check failed: {steps.current}: {_reason(exc)}", file=sys.stderr, flush=True)
        return 1
    print(f"self-check passed in {time.perf_counter() - steps.t0:.1f} s", flush=True)
    return 0


def _run(opts: CheckOptions, steps: _Steps, tmp: Path) -> None:
    if "model" in opts.steps:
        with steps.step("model") as detail:
            path, line = find_model(opts)
            detail.append(line)
    if "generate" in opts.steps:
        _run_engine(opts, steps, path, tmp)
    if "qt" in opts.steps:
        with steps.step("qt") as detail:
            detail.append(check_qt())


def _run_engine(opts: CheckOptions, steps: _Steps, path: Path, tmp: Path) -> None:
    from engine.runtime.runtime import Runtime  # lazy: the engine, in the step that checks it (as find_model)

    drafters = ("ngram", "model") if opts.draft else ("ngram",)
    with steps.step("generate") as detail:
        for drafter in drafters:  # the last runtime stays open for the session step
            config = check_config(path, opts, drafter)
            runtime = Runtime(config)
            try:
                messages, line = check_generate(runtime)
                detail.append(line)
            except BaseException:
                runtime.close()
                raise
            if drafter != drafters[-1]:
                runtime.close()
    if "session" not in opts.steps:
        runtime.close()
        return
    with steps.step("session") as detail:
        try:
            detail.append(check_session(runtime, config, messages, tmp))
        finally:
            runtime.close()
