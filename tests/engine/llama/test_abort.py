"""engine.llama.abort on the real SmolLM2-135M: a pass stops on a Cancel through the library's
own flag check (patches/abort-flag.patch), with no call into Python at its nodes; a plain Event
still stops it, through the Python callback. Why it matters: the module's docstring."""

from __future__ import annotations

import ctypes
import logging
import threading

import pytest

from engine.errors import DecodeError
from engine.llama import abort, context
from engine.llama.abort import Cancel
from engine.llama.context import LlamaSequence
from engine.llama.context_params import ContextParams

PROMPT = [1] + [200 + i % 300 for i in range(600)]


def test_the_library_reads_the_flag_as_the_cancel_changes() -> None:
    assert abort.NATIVE is not None, "llama.cpp was built without patches/abort-flag.patch"
    cancel = Cancel()
    flag = ctypes.addressof(cancel.flag)
    assert abort.NATIVE(flag) is False
    cancel.set()
    assert abort.NATIVE(flag) is True and cancel.is_set()
    cancel.clear()
    assert abort.NATIVE(flag) is False and not cancel.is_set()


@pytest.fixture
def counted(smol, monkeypatch):
    """A context whose Python abort callback counts its calls."""
    calls: list[int] = []
    real = context._Llama._should_abort

    def counting(self, data):
        calls.append(1)
        return real(self, data)

    monkeypatch.setattr(context._Llama, "_should_abort", counting)
    with LlamaSequence(smol, ContextParams(n_ctx=1024)) as ctx:
        yield ctx, calls


def test_a_cancel_stops_the_pass_with_no_call_into_python(counted, caplog) -> None:
    ctx, calls = counted
    ctx.decode(PROMPT[:8], logits="none", cancel=Cancel())  # not set: the pass runs through
    assert ctx.n_past == 8 and not calls
    stop = Cancel()
    stop.set()
    with caplog.at_level(logging.DEBUG, logger="engine.llama.backend"):
        with pytest.raises(DecodeError, match="cancelled"):
            ctx.decode(PROMPT[8:], logits="none", cancel=stop)
    assert not calls
    assert ctx.n_past == 8 and ctx.kv_pos_max() == 7  # as it was before the call
    # llama.cpp's lines about the aborted computation are expected: none is a warning
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    ctx.decode(PROMPT[8:16], logits="none")  # and it goes on
    assert ctx.n_past == 16


def test_a_plain_event_stops_the_pass_through_the_python_callback(counted) -> None:
    ctx, calls = counted
    stop = threading.Event()
    stop.set()
    with pytest.raises(DecodeError, match="cancelled"):
        ctx.decode(PROMPT, logits="none", cancel=stop)
    assert calls and ctx.n_past == 0


def test_the_engine_stops_are_cancels() -> None:
    """A job's stop is made a Cancel, so that its passes take the flag's way."""
    from engine.decode.sampling import SamplingParams
    from engine.decode.scheduler import Job

    assert isinstance(Job([1], SamplingParams(), lambda _: None).cancel, Cancel)
