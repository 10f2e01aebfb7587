"""Text nobody on the project wrote, read from the running interpreter: source excerpts of
standard-library modules and sections of ``pydoc_data.topics`` (the language reference's topics).

Nothing here is copied into the repository: every excerpt is cut at run time, deterministically
for one interpreter version (the same source files give the same cuts).
"""

from __future__ import annotations

import ast
import importlib.util
import io
import random
import tokenize
from dataclasses import dataclass
from pathlib import Path

# The bounds that keep a code prompt well under ~1,500 tokens with an instruction around it.
MIN_LINES, MAX_LINES, MAX_CODE_CHARS = 40, 80, 3600


@dataclass(frozen=True)
class Excerpt:
    module: str
    names: tuple[str, ...]  # the top-level functions/classes it holds, in source order
    code: str


@dataclass(frozen=True)
class Passage:
    key: str  # the pydoc topic
    title: str
    text: str


def module_source(module: str) -> str | None:
    """The module's source from its file, or None when it has none (frozen, built in, missing)."""
    spec = importlib.util.find_spec(module)
    origin = spec.origin if spec is not None else None
    if not origin or not origin.endswith(".py") or not Path(origin).is_file():
        return None
    return Path(origin).read_text(encoding="utf-8")


def _top_level(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]:
    return [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]


def _first_line(node: ast.stmt) -> int:
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno] + [d.lineno for d in decorators])


def excerpt(module: str, start: str) -> Excerpt | None:
    """The top-level definition ``start`` of ``module`` and the definitions right after it, as
    long as the cut stays within MAX_LINES and MAX_CODE_CHARS (stopping once it reaches MIN_LINES).
    None when the module has no source, no such definition, or no cut within the bounds."""
    source = module_source(module)
    if source is None:
        return None
    lines = source.splitlines()
    defs = _top_level(ast.parse(source))
    idx = next((i for i, n in enumerate(defs) if n.name == start), None)
    if idx is None:
        return None
    first = _first_line(defs[idx])
    best = None
    for node in defs[idx:]:
        code = "\n".join(lines[first - 1:node.end_lineno]).rstrip() + "\n"
        n_lines = code.count("\n")
        if n_lines > MAX_LINES or len(code) > MAX_CODE_CHARS:
            break
        names = (best.names if best else ()) + (node.name,)
        best = Excerpt(module, names, code)
        if n_lines >= MIN_LINES:
            return best
    return None


def function_spec(module: str, name: str) -> tuple[str, str] | None:
    """(``def name(args)`` signature line, cleaned docstring) of a top-level function."""
    source = module_source(module)
    if source is None:
        return None
    node = next((n for n in _top_level(ast.parse(source)) if n.name == name), None)
    if not isinstance(node, ast.FunctionDef):
        return None
    doc = ast.get_docstring(node, clean=True)
    if not doc:
        return None
    return f"def {name}({ast.unparse(node.args)})", doc


def parameters(code: str) -> list[str]:
    """Parameter names used in ``code``, most frequent first (ties by name); self/cls left out."""
    counts: dict[str, int] = {}
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.arg) and node.arg not in ("self", "cls"):
            counts[node.arg] = counts.get(node.arg, 0) + 1
    return sorted(counts, key=lambda a: (-counts[a], a))


_FLIPS = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "==", "+": "-", "-": "+"}


def inject_bug(code: str, rng: random.Random) -> str:
    """``code`` with one comparison or arithmetic operator flipped (chosen by ``rng``); unchanged
    when it has none. Operators inside strings and comments are never touched."""
    toks = [t for t in tokenize.generate_tokens(io.StringIO(code).readline)
            if t.type == tokenize.OP and t.string in _FLIPS]
    if not toks:
        return code
    tok = rng.choice(toks)
    lines = code.splitlines(keepends=True)
    row, col = tok.start
    line = lines[row - 1]
    lines[row - 1] = line[:col] + _FLIPS[tok.string] + line[col + len(tok.string):]
    return "".join(lines)


def topics() -> dict[str, str]:
    from pydoc_data.topics import topics as all_topics  # lazy: a megabyte of text, for one prompt set

    return all_topics


def passage(key: str, max_chars: int) -> Passage:
    """The topic's title and its first paragraphs, whole, up to ``max_chars`` (at least one)."""
    text = topics()[key]
    head, _, body = text.partition("\n")
    body = body.lstrip("*\n")
    out: list[str] = []
    for para in body.split("\n\n"):
        if out and len("\n\n".join(out + [para])) > max_chars:
            break
        out.append(para)
    return Passage(key, head.strip(), "\n\n".join(out).strip()[:max_chars])


def topic_keys(min_chars: int, max_chars: int | None = None) -> list[str]:
    """Sorted topic keys whose text length lies in [min_chars, max_chars]."""
    return sorted(k for k, v in topics().items()
                  if len(v) >= min_chars and (max_chars is None or len(v) <= max_chars))
