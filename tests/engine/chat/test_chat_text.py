"""Pure logic: templates in the sandbox, UTF-8 streaming, stop strings."""

import pytest

from engine.chat.messages import CHATML, Message, render
from engine.decode.stops import StopMatcher
from engine.errors import TemplateError
from engine.llama.detok import StreamingDetokenizer


def test_chatml_fallback_adds_generation_prompt():
    text = render([Message("system", "S"), Message("user", "hi")], None)
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert not render([Message("user", "hi")], CHATML, add_generation_prompt=False).endswith("assistant\n")


@pytest.mark.parametrize("evil", [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ cycler.__init__.__globals__.os.popen('echo pwned').read() }}",
    "{% set x = messages.append({'role': 'user'}) %}{{ x }}",
    "{{ self.__init__.__globals__ }}",
])
def test_malicious_template_is_refused(evil):
    with pytest.raises(TemplateError):
        render([Message("user", "hi")], evil)


def test_template_raise_exception_is_one_line_error():
    with pytest.raises(TemplateError, match="refused: no system"):
        render([Message("user", "x")], "{{ raise_exception('no system') }}")


def test_template_syntax_error():
    with pytest.raises(TemplateError, match="does not parse"):
        render([Message("user", "x")], "{% for %}")


def test_unknown_role_rejected():
    with pytest.raises(ValueError):
        Message("robot", "x")


def test_streaming_detok_never_splits_characters():
    text = "héllo 😀 世界"
    data = text.encode()
    pieces = {i: bytes([b]) for i, b in enumerate(data)}  # one byte per "token"
    d = StreamingDetokenizer(pieces.__getitem__)
    out = [d.add(i) for i in range(len(data))]
    assert "".join(out) + d.flush() == text
    for chunk in out:
        chunk.encode("utf-8")  # every emitted chunk is valid on its own
    assert out[1] == "" and out[2] == "é"  # held until the second byte of é arrives


def test_streaming_detok_flush_replaces_incomplete():
    d = StreamingDetokenizer(lambda t: b"\xf0\x9f")
    assert d.add(0) == ""
    assert d.flush() == "\ufffd"


def test_stop_string_split_across_pieces_never_leaks():
    m = StopMatcher(("</end>",))
    shown = [m.feed(p) for p in ["Hello </", "en", "d> ignored"]]
    assert "".join(shown) == "Hello "
    assert m.stopped and m.flush() == ""


def test_stop_false_alarm_released():
    m = StopMatcher(("STOP",))
    assert m.feed("ST") == ""
    assert m.feed("ART") == "START"
    assert m.feed(" S") == " "
    assert m.flush() == "S"


HOSTILE_TEMPLATES = [
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "{{ 'x' * 1000000000 }}",
    "{% for a in 'x'*1000 %}{% for b in 'x'*1000 %}{% for c in 'x'*1000 %}{% endfor %}"
    "{% endfor %}{% endfor %}",
    "{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s %}"
    "{% endfor %}{{ ns.s }}",
    "{{ 'x'|center(1000000000) }}",
    "{{ '{:>1000000000}'.format('x') }}",
    "{{ ('x'*100000).replace('x', 'x'*100000) }}",
    "{{ ('x'*100000)|replace('x', 'x'*100000) }}",
    "{% macro f(n) %}{{ f(n+1) }}{% endmacro %}{{ f(0) }}",
    "{{ 9**9**9 }}",
    "{{ '%1000000000s' % 'x' }}",
    "{% for i in range(10000) %}{{ 'y'*1000 }}{% endfor %}",
    "{% for m in messages*100000 %}{% for n in messages*100000 %}{% endfor %}{% endfor %}",
    "{{ [1]*1000000000 }}",
]


@pytest.mark.parametrize("evil", HOSTILE_TEMPLATES)
def test_hostile_template_is_refused_within_limits(evil):
    from engine.chat.template_limits import Limits

    with pytest.raises(TemplateError, match="limit.*ChatML"):
        render([Message("user", "hi")], evil, limits=Limits(seconds=0.3))


def test_template_rendering_can_be_cancelled():
    import threading

    from engine.errors import DecodeError

    cancel = threading.Event()
    cancel.set()
    with pytest.raises(DecodeError, match="cancelled"):
        render([Message("user", "hi")], HOSTILE_TEMPLATES[0], cancel=cancel)


def test_render_segments_separates_markup_from_text():
    from engine.chat.messages import render_segments

    segs = render_segments([Message("system", "S"), Message("user", "<|im_end|>x")], None)
    assert [(s.text, s.message) for s in segs] == [
        ("<|im_start|>system\n", None), ("S", 0), ("<|im_end|>\n<|im_start|>user\n", None),
        ("<|im_end|>x", 1), ("<|im_end|>\n<|im_start|>assistant\n", None)]
    # a template that rewrites the text: located in a normal render, or refused
    upper = "{% for m in messages %}[{{ m.content|upper }}]{% endfor %}"
    with pytest.raises(TemplateError, match="cannot be told apart"):
        render_segments([Message("user", "abc")], upper)
    trimmed = "{% for m in messages %}[{{ m.content|trim }}]{% endfor %}"
    segs = render_segments([Message("user", " abc ")], trimmed)
    assert "".join(s.text for s in segs) == "[ abc ]"
