"""Test pictures and projectors: images drawn from a seed (PNG, JPEG, WebP, GIF bytes) and the
tiny seeded projector of scripts/make_test_projector.py, written where a test asks."""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("make_test_projector", ROOT / "scripts" / "make_test_projector.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_projector(path: Path, n_embd: int, seed: int = 0) -> Path:
    return _script().write(path, n_embd, seed)


def picture(seed: int = 0, size: tuple[int, int] = (64, 48), fmt: str = "PNG") -> bytes:
    """An image of random colour blocks (``size``: width, height) in ``fmt``."""
    rng = np.random.default_rng(seed)
    w, h = size
    blocks = rng.integers(0, 256, (max(h // 8, 1), max(w // 8, 1), 3), dtype=np.uint8)
    pixels = np.kron(blocks, np.ones((8, 8, 1), np.uint8))[:h, :w]
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(pixels)).save(buf, fmt)
    return buf.getvalue()
