"""A model load stops when its cancel event is set (llama.cpp's progress callback says so)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from engine.errors import LoadCancelled
from engine.llama.model import Model, ModelSpec
from engine.runtime.runtime import Runtime, RuntimeConfig


class SetOnSecondLook(threading.Event):
    """Not set when the load starts; set when llama.cpp first reports progress."""

    def __init__(self) -> None:
        super().__init__()
        self.looks = 0

    def is_set(self) -> bool:
        self.looks += 1
        return self.looks > 1


def test_a_model_load_stops_when_cancelled(smol_path: Path) -> None:
    cancel = SetOnSecondLook()
    with pytest.raises(LoadCancelled, match="cancelled"):
        Model(ModelSpec(smol_path), cancel)
    assert cancel.looks == 3  # before the load, in llama.cpp's first progress call (which stopped it), after
    with pytest.raises(LoadCancelled):
        Runtime(RuntimeConfig(target=ModelSpec(smol_path)), cancel=SetOnSecondLook())
    with Model(ModelSpec(smol_path), threading.Event()) as model:  # never set: loads as usual
        assert model.n_vocab > 0
