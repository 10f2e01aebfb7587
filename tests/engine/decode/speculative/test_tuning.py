"""The constants table: every constant of the n-gram path and the policy is in it, at most twelve,
each with the measurement that set it written above it."""

import ast
import inspect
from dataclasses import fields
from pathlib import Path

from engine.decode.speculative import tuning
from engine.decode.speculative.tuning import Tuning

PACKAGE = Path(tuning.__file__).parent
# The n-gram path and the policy (draft.py, accept.py, draft_model.py, compat.py and params.py are
# the generator's side, the draft model's and the settings).
MODULES = ("ngram.py", "edits.py", "controller.py", "payoff.py", "speculator.py", "calibration.py")


def test_at_most_twelve_constants_each_with_its_measurement() -> None:
    assert len(fields(Tuning)) <= 12
    lines = [line.strip() for line in inspect.getsource(Tuning).splitlines()]
    for f in fields(Tuning):
        i = next(i for i, line in enumerate(lines) if line.startswith(f"{f.name}:")) - 1
        while not lines[i].startswith("#") and ":" in lines[i] and "=" in lines[i]:
            i -= 1  # a constant set with the ones above it shares their comment
        comment = []
        while lines[i].startswith("#"):
            comment.append(lines[i])
            i -= 1
        assert comment and any(c.isdigit() for c in "".join(comment)), f"{f.name}: no measurement above it"


def test_no_other_module_defines_a_numeric_constant() -> None:
    """A number bound to a name at module or class level, outside the table, is a constant
    the table does not list (0 and 1 are counts, not constants; the cost cache's format version
    is excepted)."""
    for name in MODULES:
        tree = ast.parse((PACKAGE / name).read_text())
        scopes = [tree] + [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
        for scope in scopes:
            for node in scope.body:
                if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
                    continue
                numbers = [n for n in ast.walk(node.value) if isinstance(n, ast.Constant)
                           and type(n.value) in (int, float) and n.value not in (0, 1)]
                target = ast.unparse(node.targets[0] if isinstance(node, ast.Assign) else node.target)
                assert not numbers or target == "_JSON_VERSION", f"{name}: {target} = {numbers[0].value}"
