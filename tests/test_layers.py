"""The import graph keeps the layout true: each package of engine/ and app/ says in its
``__init__`` docstring what it may import (a line ``May import: ...``), and no module imports
against it (imports inside functions and under ``if TYPE_CHECKING:`` count: they run, or a type
checker follows them). The declared graph itself has no circle, so nothing imports upward."""

from __future__ import annotations

import ast
import re
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# engine's top-level modules: what every package may use; they import only one another
BASE = {"errors", "params", "paths", "localfile", "net", "logsetup", "events"}


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` names in an import, wherever the import stands."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return found


def unit(name: str) -> str | None:
    """The unit a dotted name belongs to: ``engine.<package>``, ``engine.<base module>``,
    ``app.<package>``, or None outside both (a class imported from a base module stays that module)."""
    parts = name.split(".")
    if parts[0] not in ("engine", "app") or len(parts) < 2:
        return None
    return ".".join(parts[:2])


def declared(package: Path) -> set[str] | str:
    """What a package's docstring says it may import: names of units, or 'everything'."""
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8"))) or ""
    match = re.search(r"^May import: (.+?)\.?(?:\n\n|\Z)", doc, re.M | re.S)  # (to a blank line)
    assert match, f"{package.relative_to(ROOT)}/__init__.py does not say what it may import"
    words = [w.strip() for w in match.group(1).split(",")]
    if words == ["everything"]:
        return "everything"
    if words == ["nothing"]:
        return set()
    top = package.relative_to(ROOT).parts[0]
    return {w if "." in w or w == "engine" else f"{top}.{w}" for w in words}


def packages() -> list[Path]:
    return sorted(p for top in ("engine", "app") for p in (ROOT / top).iterdir()
                  if p.is_dir() and (p / "__init__.py").exists())


def allowed(source: str, target: str, rules: dict[str, set[str] | str]) -> bool:
    if source == target or target.split(".")[1] in BASE and target.startswith("engine."):
        return True
    rule = rules.get(source)
    if rule == "everything" or source not in rules and (source.startswith("app.") or source == "engine.__main__"):
        return True  # the process-level modules at app/'s root and ``python -m engine``: the top
    if source.startswith("engine.") and source.split(".")[1] in BASE:
        return False  # base modules import only one another
    assert isinstance(rule, set), source
    return target in rule or (target.startswith("engine.") and "engine" in rule)


def test_every_package_says_what_it_may_import_and_nothing_imports_upward() -> None:
    rules = {f"{p.parent.name}.{p.name}": declared(p) for p in packages()}
    assert {"engine.llama", "engine.decode", "app.views", "app.control", "app.engine_link"} <= set(rules)
    broken = []
    for top in ("engine", "app"):
        for path in sorted((ROOT / top).rglob("*.py")):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            source = unit(module)
            if source is None:
                continue
            for name in imports_of(path):
                target = unit(name)
                if target is not None and not allowed(source, target, rules):
                    broken.append(f"{module} imports {name}")
    assert not broken, "imports against the declared layers:\n" + "\n".join(sorted(broken))
    graph = {u: (set() if r == "everything" else r) for u, r in rules.items()}
    graph.update({u: set(rules) - {u} for u, r in rules.items() if r == "everything"})
    try:
        TopologicalSorter({u: deps - {u} for u, deps in graph.items() if u.startswith("engine.")
                           and rules[u] != "everything"}).prepare()
        TopologicalSorter({u: {d for d in deps if d.startswith("app.")} for u, deps in graph.items()
                           if u.startswith("app.")}).prepare()
    except CycleError as e:
        raise AssertionError(f"the declared layers go round: {' -> '.join(e.args[1])}") from None


@pytest.mark.parametrize("package", ["app/control", "app/engine_link"])
def test_state_and_engine_link_build_no_widgets(package: str) -> None:
    """Only app/views (and the process-level modules) touch QtWidgets or QtGui."""
    for path in (ROOT / package).rglob("*.py"):
        widgets = {n for n in imports_of(path) if n.startswith(("PySide6.QtWidgets", "PySide6.QtGui"))}
        assert not widgets, f"{path.relative_to(ROOT)} imports {sorted(widgets)}"


def test_engine_has_few_top_level_modules() -> None:
    modules = {p.stem for p in (ROOT / "engine").glob("*.py")} - {"__init__", "__main__"}
    assert modules == BASE


def subpackages() -> list[Path]:
    """engine/'s and app/'s packages inside packages that say what they may import."""
    return sorted(p.parent for top in ("engine", "app") for p in (ROOT / top).glob("*/*/__init__.py")
                  if "May import:" in p.read_text(encoding="utf-8"))


def test_subpackages_import_only_what_they_say() -> None:
    """A package inside a package (engine/decode/speculative, ...) keeps its own ``May import``
    line: a name there is a unit (``models``) or a module (``decode.sampling``)."""
    assert subpackages()
    broken = []
    for package in subpackages():
        rule = declared(package)
        assert isinstance(rule, set)
        own = ".".join(package.relative_to(ROOT).parts)
        may = {w if w.startswith("engine.") else f"engine.{w}" for w in rule} | {own}
        for path in sorted(package.rglob("*.py")):
            for name in imports_of(path):
                target = unit(name)
                if target is None or target.split(".")[1] in BASE and target.startswith("engine.") \
                        or own.startswith(name + "."):  # (``from engine.models import folder``)
                    continue
                if not any(name == m or name.startswith(m + ".") for m in may):
                    broken.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not broken, "imports against the declared layers:\n" + "\n".join(sorted(broken))


def test_package_docstrings_name_only_modules_that_exist() -> None:
    """Each ``- ``name``: ...`` line of a package's docstring names one of its modules, and
    each dotted ``engine.`` name a module, package or something in one."""
    missing = []
    for init in sorted((ROOT / "engine").rglob("__init__.py")) + sorted((ROOT / "app").rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        for line in doc.splitlines():
            for name in re.findall(r"``(\w+)``", line) if line.startswith("- ``") else ():
                here = init.parent / name
                if not (here.with_suffix(".py").exists() or (here / "__init__.py").exists()):
                    missing.append(f"{init.relative_to(ROOT)} names {name}")
        for dotted in re.findall(r"\bengine(?:\.\w+)+", doc):
            parts = dotted.split(".")
            if not any((ROOT.joinpath(*parts[:n]).with_suffix(".py").exists()
                        or (ROOT.joinpath(*parts[:n]) / "__init__.py").exists())
                       for n in (len(parts), len(parts) - 1) if n > 1):
                missing.append(f"{init.relative_to(ROOT)} names {dotted}")
    assert not missing, "\n".join(missing)
