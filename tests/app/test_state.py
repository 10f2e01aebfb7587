"""The app's state without Qt: what a window and a controller decide from it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from app.control.state import AppState, Notice
from app.engine_link.messages import LoadedModel
from engine.conversation.tree import Conversation

ROOT = Path(__file__).parents[2]


def _model() -> LoadedModel:
    return LoadedModel(Path("/m.gguf"), "m", None, None, "ngram", None, 4096, 0.1)


def test_it_imports_no_qt():
    code = "import sys, app.control.state; print(any(m.startswith('PySide6') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_a_reply_can_be_asked_for_while_a_model_loads_or_once_it_has():
    state, seen = AppState(), []
    state.subscribe(seen.append)
    assert not state.can_chat
    state.load_started(Path("/m.gguf"))
    assert state.can_chat and state.loading == Path("/m.gguf")
    state.loaded(_model())
    assert state.can_chat and state.loading is None and state.model == _model()
    state.load_failed("no memory", Notice("Could not load the model: no memory", "error"))
    assert not state.can_chat and state.model is None and state.load_error == "no memory"
    assert [w for w in seen if w in ("loading", "model")] == ["loading", "model", "model"]


def test_a_load_takes_the_notices_it_resolves_away():
    state = AppState()
    state.say(Notice("n_ctx: applies at the next model load.", until_load=True))
    state.load_started(Path("/m.gguf"))
    state.loaded(_model())
    assert state.notice is None
    state.say(Notice("A tool server failed.", "error"))
    state.loaded(_model())
    assert state.notice is not None and state.notice.kind == "error"  # not the load's to resolve


def test_a_setting_for_the_next_load_waits_only_while_a_model_is_there():
    state = AppState()
    assert not state.wait_for_reload("n_ctx")  # nothing loaded: the next load takes it
    assert state.pending_reload == frozenset()
    state.load_started(Path("/m.gguf"))
    assert state.wait_for_reload("n_ctx") and state.wait_for_reload("type_k")
    assert state.pending_reload == {"n_ctx", "type_k"}
    state.loaded(_model())
    assert state.pending_reload == frozenset()  # applied by that load


def test_recalling_a_models_settings_is_marked_only_inside():
    state = AppState()
    try:
        with state.recalling_settings():
            assert state.recalling
            raise KeyError
    except KeyError:
        pass
    assert not state.recalling


def test_notices_have_a_scope_and_an_error_or_the_later_said_shows():
    """A conversation's notice is shown with it and kept until replaced or taken away; of it and
    the app's, an error shows before an info, else the later said; the app's passing notice goes
    when another conversation is shown (one a load resolves stays)."""
    state = AppState()
    a, b = (state.library.add(Conversation(title)) for title in ("A", "B"))  # b shown
    state.say(Notice("The reply stopped at the length limit.", scope=a.id))
    assert state.notice_for(b.id) is None and state.notice_for(a.id).text.startswith("The reply")
    state.tell("Cannot save the projects", "error")  # later: shown over a's own
    assert state.notice_for(a.id).text == "Cannot save the projects"
    assert state.notice_for(b.id).kind == "error"
    state.library.show(a)  # another shown: the app's passing notice goes, a's own is back
    assert state.notice is None and state.notice_for(a.id).text.startswith("The reply")
    state.say(Notice("n_ctx: applies at the next model load.", until_load=True))
    state.library.show(b)
    assert state.notice_for(b.id).text.startswith("n_ctx")  # stays until a load
    state.say(Notice("The context is full.", "error", scope=a.id))
    state.say(Notice("This conversation was made with x.gguf.", action="Load it"))
    assert state.notice_for(a.id).text == "The context is full."  # the error, though earlier
    state.unsay(a.id)
    assert state.notice_for(a.id).action == "Load it" and a.id not in state.conversation_notices


def test_a_conversation_whose_model_is_gone_says_where_it_was():
    from app.control.models import gone_note

    assert gone_note(Path("/models/old.gguf"), None) == (
        "This conversation was made with old.gguf, which is no longer at /models: choose a "
        "model and press Load.")
    assert gone_note(Path("qwen3-4b"), None) == (  # an imported one: a name, no folder
        "This conversation was made with qwen3-4b, which is not a model file here: choose a "
        "model and press Load.")
