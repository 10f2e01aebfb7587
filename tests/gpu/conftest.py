"""CI's clock for the GPU tests: lavapipe runs a GPU's shaders on the CPU, a test in minutes, so
where CI is far enough in that another one might not end within its 90 minutes, the rest are
left out, each saying so (scripts/gpu_tests.sh does the same for starting them at all)."""

from __future__ import annotations

import os
import time

import pytest

LAST_START_MIN = 78  # (one started then has 12 minutes: several times what one takes on these 2 cores)


def pytest_runtest_setup(item: pytest.Item) -> None:
    started = os.environ.get("DUET_CI_STARTED")
    if started and started.isdigit():
        minutes = (time.time() - int(started)) / 60
        if minutes >= LAST_START_MIN:
            pytest.skip(f"CI is {minutes:.0f} minutes in: left out so that it ends within its 90")
