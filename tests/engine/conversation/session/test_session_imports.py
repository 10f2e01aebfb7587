"""engine.conversation.session's modules import one another without a circle (type-checking imports count:
a type checker follows them too)."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[4] / "engine" / "conversation" / "session"


def module_imports(path: Path) -> set[str]:
    """The engine.conversation.session modules that ``path`` imports at module level (``if`` blocks such as
    ``if TYPE_CHECKING:`` included; imports inside functions are not)."""
    found: set[str] = set()
    nodes = list(ast.parse(path.read_text(encoding="utf-8")).body)
    while nodes:
        node = nodes.pop()
        if isinstance(node, ast.If):
            nodes += node.body + node.orelse
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {f"{node.module}.{a.name}" for a in node.names} | {node.module}
    return {name.removeprefix("engine.conversation.session.") for name in found
            if name.startswith("engine.conversation.session.")}


def test_the_session_modules_import_without_a_circle() -> None:
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    graph = {m: module_imports(PACKAGE / f"{m}.py") & modules for m in modules}
    assert graph["meta"] == set()  # the file's data types need nothing else of the package
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as e:
        raise AssertionError(f"import circle: {' -> '.join(e.args[1])}") from None
