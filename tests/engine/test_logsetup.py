"""The one logging set-up: what reaches standard error at each level, set up once per process."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engine import logsetup

ROOT = Path(__file__).resolve().parents[2]

EMIT = """
import logging, sys
from engine import logsetup
for level in sys.argv[1:]:
    logsetup.configure(level)
logging.getLogger("engine.thing").info("info line")
logging.getLogger("engine.thing").warning("warning line")
logging.getLogger("engine.llama.backend").warning("llama.cpp line")
logging.getLogger("engine.llama.backend").debug("llama.cpp debug line")
"""


def stderr_lines(*levels: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", EMIT, *levels], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=True)
    assert done.stdout == ""
    return done.stderr.splitlines()


def test_each_level_shows_what_it_should_on_stderr() -> None:
    assert stderr_lines("WARNING") == ["WARNING engine.thing: warning line"]
    assert stderr_lines("INFO") == ["INFO engine.thing: info line",
                                    "WARNING engine.thing: warning line"]
    assert stderr_lines("DEBUG") == ["INFO engine.thing: info line",
                                     "WARNING engine.thing: warning line",
                                     "WARNING engine.llama.backend: llama.cpp line",
                                     "DEBUG engine.llama.backend: llama.cpp debug line"]


def test_configuring_again_changes_the_level_without_a_second_handler() -> None:
    assert stderr_lines("DEBUG", "WARNING") == ["WARNING engine.thing: warning line"]


def test_verbose_flags_map_to_levels() -> None:
    assert [logsetup.level_for(n) for n in range(4)] == [logging.WARNING, logging.INFO,
                                                         logging.DEBUG, logging.DEBUG]


def test_an_unknown_level_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown log level"):
        logsetup.configure("LOUD")


def test_a_host_that_already_logs_keeps_its_handlers_and_level() -> None:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    assert handlers  # pytest's capture handlers
    logsetup.configure(logging.DEBUG)
    assert root.handlers == handlers and root.level == level
    logsetup.configure(logging.WARNING)
    assert logging.getLogger(logsetup.NATIVE).level == logging.ERROR


def test_modules_name_their_loggers_and_leave_the_configuration_to_logsetup() -> None:
    offenders = []
    for folder in ("engine", "app", "scripts"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.name == "logsetup.py":
                continue
            text = path.read_text(encoding="utf-8")
            if "basicConfig" in text or re.search(r"getLogger\((?!__name__\))", text):
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
