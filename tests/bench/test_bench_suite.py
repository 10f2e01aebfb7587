"""The suite builds from the running interpreter's own files, deterministically and within bounds."""

import ast
import random
from collections import Counter
from pathlib import Path

import pytest

from bench import stdlib_text as st
from bench.suite import (
    CATEGORIES,
    MAX_PROMPT_CHARS,
    MAX_PROMPT_TOKENS,
    PER_CATEGORY,
    build_suite,
    select,
    suite_hash,
)
from engine.chat.fit import chat_tokens
from engine.chat.messages import Message

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def suite():
    return build_suite()


def test_two_builds_are_equal_and_hash_alike(suite):
    again = build_suite()
    assert again == suite and suite_hash(again) == suite_hash(suite)
    assert suite_hash(build_suite(seed=14)) != suite_hash(suite)  # the seed matters
    assert len({p.id for p in suite}) == len(suite)


def test_every_category_has_enough_prompts(suite):
    counts = Counter(p.category for p in suite)
    assert set(counts) == set(CATEGORIES)
    assert all(n >= PER_CATEGORY for n in counts.values()), counts


def test_code_editing_covers_twelve_modules_and_eight_kinds(suite):
    edits = [p for p in suite if p.category == "code_edit"]
    assert len({p.source.split(":")[0] for p in edits}) >= 12
    assert len({p.kind for p in edits}) >= 8
    for p in edits:  # the code in the prompt is real Python of 40-80 lines
        code = p.text.split("```python\n")[1].split("\n```")[0]
        ast.parse(code)
        assert st.MIN_LINES <= code.count("\n") + 1 <= st.MAX_LINES


def test_multi_turn_prompts_have_a_second_turn(suite):
    assert all(len(p.turns) == 2 for p in suite if p.category == "multi_turn")
    assert all(len(p.turns) == 1 for p in suite if p.category != "multi_turn")


def test_no_prompt_exceeds_the_bounds(suite, smol):
    for p in suite:
        for turn in p.turns:
            assert len(turn) <= MAX_PROMPT_CHARS, p.id
            assert len(chat_tokens(smol, [Message("user", turn)])) <= MAX_PROMPT_TOKENS, p.id


def test_the_material_is_not_in_the_repository(suite):
    """The suite is read from the interpreter: its code and passages are not copied here."""
    lines = {p.text.splitlines()[3] for p in suite if p.category in ("code_edit", "summarization")}
    lines = {line for line in lines if len(line.strip()) > 30}
    assert len(lines) >= 6
    files = [f for f in REPO.rglob("*") if f.is_file() and f.suffix in (".py", ".md", ".json", ".txt")
             and ".venv" not in f.parts and ".git" not in f.parts]
    for f in files:
        text = f.read_text(encoding="utf-8", errors="replace")
        assert not any(line in text for line in lines), f


def test_select_filters_and_limits(suite):
    picked = select(suite, ("math", "rag"), per_category=2)
    first_two = [p for c in ("math", "rag") for p in [q for q in suite if q.category == c][:2]]
    assert picked == first_two
    assert select(suite) == list(suite)
    with pytest.raises(ValueError, match="unknown categories: poetry"):
        select(suite, ("poetry",))


def test_inject_bug_flips_one_operator_outside_strings():
    code = 'def f(a, b):\n    """a < b + 1"""\n    return a < b + 1  # a < b\n'
    seen = set()
    for seed in range(20):
        out = st.inject_bug(code, random.Random(seed))
        assert out != code and out.splitlines()[:2] == code.splitlines()[:2]
        assert out.endswith("  # a < b\n")
        seen.add(out.splitlines()[2])
        ast.parse(out)
    assert seen == {"    return a <= b + 1  # a < b", "    return a < b - 1  # a < b"}
    assert st.inject_bug("x = f(y)\n", random.Random(0)) == "x = f(y)\n"


def test_excerpt_keeps_whole_definitions_within_bounds():
    ex = st.excerpt("textwrap", "dedent")
    assert ex is not None and ex.names[0] == "dedent"
    tree = ast.parse(ex.code)
    assert [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))] == list(ex.names)
    assert st.excerpt("textwrap", "no_such_function") is None
    assert st.excerpt("textwrap", "TextWrapper") is None  # over MAX_LINES alone


def test_passage_keeps_whole_paragraphs_under_the_bound():
    p = st.passage("while", 300)
    assert p.title == 'The "while" statement' and 0 < len(p.text) <= 300
    assert "*****" not in p.text and p.text in st.topics()["while"]
