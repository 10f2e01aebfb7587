"""Rendering a message into a QTextDocument: code blocks, copy links, drafted-token tint."""

from __future__ import annotations

from PySide6.QtGui import QColor, QTextCursor, QTextDocument

from app.control.conversation import Conversation
from app.views.markdown import MARK_CLOSE, MARK_OPEN
from app.views.message_widget import MessageWidget
from app.views.render import monospace_font, render
from app.views.theme import DARK_COLORS, LIGHT_COLORS
from engine.events import Token

REPLY = "Use **this**:\n\n```python\ndef add(a, b):\n    return a + b  # sum\n```\n\nDone."


def _formats(doc: QTextDocument):
    """(character, QTextCharFormat) for every character of ``doc``."""
    out = []
    block = doc.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            frag = it.fragment()
            for ch in frag.text():
                out.append((ch, frag.charFormat()))
            it += 1
        block = block.next()
    return out


def _tinted(doc: QTextDocument, color: QColor) -> str:
    return "".join(ch for ch, f in _formats(doc)
                   if f.hasProperty(f.Property.BackgroundBrush) and f.background().color() == color)


def test_code_block_is_monospace_highlighted_with_copy_link(qapp) -> None:
    doc = QTextDocument()
    codes = render(doc, REPLY, LIGHT_COLORS)
    assert codes == ["def add(a, b):\n    return a + b  # sum"]
    text = doc.toPlainText()
    assert "this" in text and "**" not in text and "```" not in text
    assert "Copy" in text and "python" in text
    fmts = _formats(doc)
    anchors = {f.anchorHref() for ch, f in fmts if f.isAnchor()}
    assert anchors == {"copy:0"}
    mono = monospace_font().family()
    code_chars = "".join(ch for ch, f in fmts if f.font().family() == mono)
    assert code_chars == codes[0].replace("\n", "")
    colors = {f.foreground().color().name() for ch, f in fmts if ch in "def"}
    assert LIGHT_COLORS.keyword.name() in colors
    comment = [f for ch, f in fmts if ch == "#"]
    assert comment and comment[0].foreground().color() == LIGHT_COLORS.comment


def test_drafted_spans_are_tinted_in_prose_and_code(qapp) -> None:
    doc = QTextDocument()
    start_prose = REPLY.index("this")
    start_code = REPLY.index("return")
    spans = [(start_prose, start_prose + 4), (start_code, start_code + 6)]
    render(doc, REPLY, DARK_COLORS, spans=spans)
    assert _tinted(doc, DARK_COLORS.draft_bg) == "thisreturn"
    assert MARK_OPEN not in doc.toPlainText() and MARK_CLOSE not in doc.toPlainText()
    render(doc, REPLY, DARK_COLORS)  # highlighting off: no tint at all
    assert _tinted(doc, DARK_COLORS.draft_bg) == ""


def test_user_text_is_shown_as_typed(qapp) -> None:
    doc = QTextDocument()
    assert render(doc, "a *b* `c`\n# d", LIGHT_COLORS, markdown=False) == []
    assert doc.toPlainText() == "a *b* `c`\n# d"


def test_streaming_message_renders_token_spans(qtbot) -> None:
    """Synthetic tokens, as the worker would send them with speculation on."""
    conv = Conversation()
    conv.add_user("count")
    turn = conv.begin_reply()
    conv.append_tokens([Token(1, "one"), Token(2, " two", True, "ngram"),
                        Token(3, " three", True, "ngram"), Token(4, " four")])
    w = MessageWidget(turn)
    qtbot.addWidget(w)
    w.refresh(highlight_draft=True)
    doc = w.body.document()
    assert doc.toPlainText() == "one two three four"
    cur = QTextCursor(doc)
    cur.setPosition(5)  # inside "two"
    tint = cur.charFormat().background().color()
    from app.views import theme

    assert tint == theme.colors().draft_bg
    assert _tinted(doc, theme.colors().draft_bg) == " two three"
    assert "generating" in w.meta_label.text()
    w.refresh(highlight_draft=False)
    assert _tinted(doc, theme.colors().draft_bg) == ""


def test_incremental_rendering_matches_a_full_render(qapp) -> None:
    """Streaming re-renders only the changed tail; the result must equal a render from scratch."""
    from app.views.render import Renderer

    text = ("Intro with **bold** and `x`.\n\n```python\ndef f(a):\n    return a  # c\n```\n"
            "Then prose,\n- a list\n- of two\n\n```\nplain code\n```\n# Heading\n\n> quoted\n\n"
            "1. one\n2. two\n~~~js\nlet x = 1\n~~~\n\nEnd.")
    spans: list[tuple[int, int]] = []
    streaming = Renderer(QTextDocument())
    for n in range(1, len(text) + 1):
        if n % 2:
            spans.append((n - 1, n))
        prefix = text[:n]
        live = [(a, min(b, n)) for a, b in spans if a < n]
        codes = streaming.render(prefix, LIGHT_COLORS, spans=live)
        full = QTextDocument()
        assert codes == render(full, prefix, LIGHT_COLORS, spans=live)
        assert streaming.doc.toHtml() == full.toHtml(), prefix
