"""Where a model's layers run: one declaration (a row of the parameter table, engine.params)
with one range, read by the command line (the target's and the draft's flags, the Hub's fit
estimate), the settings (the target's and the draft's) and the per-model memory."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from engine import params
from engine.params import Params, param

MAX_GPU_LAYERS = 999  # llama.cpp's own "every layer" (-ngl 999): more than any model has


@dataclass(frozen=True)
class PlacementParams(Params):
    gpu_layers: int = param(
        0, "GPU layers", "Layers offloaded to the GPU (-1 or more than the model has: all; 0: none; "
        "CPU-only builds ignore it).", applies="load", minimum=-1, maximum=MAX_GPU_LAYERS,
        cli="--gpu-layers", step=1)


GPU_LAYERS = next(r for r in params.table(PlacementParams) if r.name == "gpu_layers")


def gpu_layers_arg(text: str) -> int:
    """argparse's ``type`` for another model's count (``--draft-gpu-layers``): the same range."""
    try:
        return int(GPU_LAYERS.check(int(text)))
    except ValueError as e:  # int()'s, and the row's ParamError (a ValueError)
        raise argparse.ArgumentTypeError(str(e)) from None
