"""Pure text logic of the view: throttle, Markdown blocks, drafted spans, highlighting."""

from __future__ import annotations

from app.engine_link.throttle import Coalescer
from app.views.highlight import family, highlight
from app.views.markdown import MARK_CLOSE, MARK_OPEN, clip, mark, split_blocks
from engine.conversation.tree import add_span


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_coalescer_hands_out_at_most_one_batch_per_interval() -> None:
    clock = Clock()
    c: Coalescer[int] = Coalescer(0.033, clock)
    assert c.add(1) == [1]  # the first item after a quiet period goes at once
    assert c.add(2) is None and c.add(3) is None
    clock.t += 0.02
    assert c.add(4) is None
    clock.t += 0.02
    assert c.add(5) == [2, 3, 4, 5]
    assert c.flush() is None
    assert c.add(6) is None
    assert c.flush() == [6] and len(c) == 0


def test_coalescer_rate_bound() -> None:
    clock = Clock()
    c: Coalescer[int] = Coalescer(1 / 30, clock)
    batches = []
    for i in range(3000):  # 3000 tokens over 1 s
        clock.t += 1 / 3000
        b = c.add(i)
        if b:
            batches.append(b)
    rest = c.flush()
    batches.append(rest or [])
    assert len(batches) <= 32
    assert [x for b in batches for x in b] == list(range(3000))


def test_split_blocks_prose_and_code_with_offsets() -> None:
    text = "Intro **b**\n\n```python\ndef f():\n    return 1\n```\nAfter\n~~~\nraw\n~~~"
    blocks = split_blocks(text)
    assert [(b.kind, b.lang, b.closed) for b in blocks] == [
        ("prose", "", True), ("code", "python", True), ("prose", "", True), ("code", "", True)]
    for b in blocks:
        assert text[b.start:b.start + len(b.text)] == b.text
    assert blocks[1].text == "def f():\n    return 1"
    assert blocks[3].text == "raw"


def test_split_blocks_streaming_open_fence() -> None:
    blocks = split_blocks("See:\n```js\nlet a = 1")
    assert blocks[-1].kind == "code" and not blocks[-1].closed and blocks[-1].text == "let a = 1"
    # a shorter or different fence does not close it
    blocks = split_blocks("````\n```\nstill code\n~~~~\n")
    assert len(blocks) == 1 and not blocks[0].closed


def test_add_span_merges_touching_spans() -> None:
    spans: list[tuple[int, int]] = []
    add_span(spans, 0, 3)
    add_span(spans, 3, 5)
    add_span(spans, 7, 7)  # empty: ignored
    add_span(spans, 8, 9)
    assert spans == [(0, 5), (8, 9)]
    assert clip(spans, 4, 9) == [(0, 1), (4, 5)]


def test_mark_wraps_spans_without_breaking_markdown() -> None:
    assert mark("hello world", [(6, 11)]) == f"hello {MARK_OPEN}world{MARK_CLOSE}"
    # a span made only of Markdown punctuation is dropped rather than splitting "**"
    assert mark("a **b**", [(2, 4)]) == "a **b**"
    # a span starting on a list bullet starts after the bullet
    marked = mark("- item", [(0, 6)])
    assert marked.startswith("- ") and MARK_OPEN + "item" in marked


def test_highlight_python() -> None:
    code = 'def f(x):  # note\n    return "if" + 42'
    found = {code[a:b]: kind for a, b, kind in highlight(code, "python")}
    assert found["def"] == "keyword" and found["return"] == "keyword"
    assert found["# note"] == "comment"
    assert found['"if"'] == "string"  # a keyword inside a string stays a string
    assert found["42"] == "number"


def test_highlight_families_and_fallback() -> None:
    assert family("TypeScript") == "js" and family("c++") == "c" and family("zzz") == "generic"
    js = "const a = `t`; // c"
    kinds = [kind for _, _, kind in highlight(js, "js")]
    assert kinds == ["keyword", "string", "comment"]
    sql = "SELECT 1 -- x"
    assert [k for _, _, k in highlight(sql, "sql")] == ["keyword", "number", "comment"]
    spans = highlight("while x: pass", "")
    assert spans and all(a < b for a, b, _ in spans)
