"""engine.llama.backend loads llama.cpp with GNU OpenMP's spin count set for this process alone.

libgomp reads GOMP_SPINCOUNT once, when the library loads, and keeps no way to ask it later; so
a stand-in ``llama_cpp`` package, first on the path of a fresh interpreter, records what the
environment held while it was imported. (Why the count: docs/benchmarks/busy.md.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PROBE = """
import json, os
import engine.llama.backend, llama_cpp
print(json.dumps({"at_load": llama_cpp.SEEN, "after": os.environ.get("GOMP_SPINCOUNT"),
                  "lib": engine.llama.backend.lib.__name__}))
"""


def _load(tmp_path: Path, **env: str) -> dict:
    stub = tmp_path / "llama_cpp"
    stub.mkdir(exist_ok=True)
    (stub / "__init__.py").write_text("import os\nSEEN = os.environ.get('GOMP_SPINCOUNT')\n")
    (stub / "llama_cpp.py").write_text("def llama_log_callback(f):\n    return f\n")  # as used on import
    base = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=REPO,
                         env={**base, **env, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"},
                         timeout=120, check=True)
    return json.loads(out.stdout)


def test_the_library_loads_with_a_short_spin_that_programs_started_later_do_not_inherit(
        tmp_path) -> None:
    seen = _load(tmp_path)
    assert seen == {"at_load": "1000", "after": None, "lib": "llama_cpp.llama_cpp"}


def test_a_spin_count_of_the_users_own_is_kept(tmp_path) -> None:
    seen = _load(tmp_path, GOMP_SPINCOUNT="30000000")
    assert seen == {"at_load": "30000000", "after": "30000000", "lib": "llama_cpp.llama_cpp"}


def test_the_build_id_is_that_of_the_libraries_loaded(tmp_path, monkeypatch) -> None:
    """Another build loaded through LLAMA_CPP_LIB_PATH (the bindings' ``_base_path``) is another
    build: a curve measured on one is not the other's."""
    from engine.llama import backend

    build_id = backend.build_id.__wrapped__  # (cached: the libraries do not change in a process)
    installed = build_id()
    other = tmp_path / "lib"
    other.mkdir()
    (other / "libllama.so").write_bytes(b"another build")
    monkeypatch.setattr(backend.lib, "_base_path", other)
    assert build_id() != installed
    first = build_id()
    (other / "libllama.so").write_bytes(b"yet another")
    assert build_id() != first
