"""A message's pictures in its prompt: the projector's tokens for each, in order, made once per
picture (decoded and preprocessed once; the encoder runs when the positions are decoded)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from engine.llama.model import Model
from engine.vision.images import ImageError, load


class ImageLike(Protocol):
    @property
    def data(self) -> bytes: ...

    @property
    def sha256(self) -> str: ...


def no_projector_line(model: Model) -> str:
    return (f"{model.display_name} cannot read images: no vision projector (mmproj-*.gguf) is "
            "loaded with it; put its projector beside the model file, or pass --mmproj")


def image_tokens(model: Model, images: Sequence[ImageLike]) -> list[int]:
    """The tokens of ``images`` for ``model``'s projector; ImageError (one line) when the model
    has none or a picture cannot be read."""
    projector = model.projector
    if projector is None:
        raise ImageError(no_projector_line(model))
    out: list[int] = []
    for image in images:
        known = projector.known(image.sha256)
        out += known if known is not None else projector.tokens(load(image.data))
    return out
