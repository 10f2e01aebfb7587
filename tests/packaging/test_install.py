"""What ``pip install`` puts on a person's machine: the product's packages, not the benchmarks
(they run from a checkout, ``python -m bench``)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).parents[2]


def test_pip_install_leaves_out_the_benchmarks():
    rules = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    installed = find_packages(where=str(ROOT), include=rules["include"], exclude=rules.get("exclude", ()))
    assert "engine" in installed and "app" in installed and "engine.server" in installed
    assert (ROOT / "bench" / "__init__.py").is_file()  # the benchmarks are in the checkout...
    assert [p for p in installed if p.split(".")[0] not in ("engine", "app")] == []  # ...not installed


def test_the_product_imports_no_benchmark():
    offenders = [str(path.relative_to(ROOT)) for package in ("engine", "app")
                 for path in (ROOT / package).rglob("*.py")
                 if any(line.lstrip().startswith(("from bench", "import bench"))
                        for line in path.read_text(encoding="utf-8").splitlines())]
    assert offenders == []
