"""Pictures in a request, in every dialect's shape: OpenAI's ``image_url`` (a data URL),
Responses' ``input_image``, Anthropic's ``image`` block (``base64``), Ollama's ``images``
(base64 strings). Each becomes a ``chat.messages.Image`` whose bytes are checked (Pillow,
engine.vision.images) before the request goes on: a picture that will not do is a 400 with
one line, whatever the bytes. The server fetches nothing: an http(s) URL is refused."""

from __future__ import annotations

import base64
import binascii

from engine.chat.messages import Image
from engine.server.errors import bad_request
from engine.vision.images import MAX_BYTES, ImageError, load

MAX_IMAGES = 16  # pictures in one request


def from_base64(text: object, where: str) -> Image:
    """A picture from base64 text (what Anthropic's and Ollama's bodies carry)."""
    if not isinstance(text, str) or not text:
        raise bad_request(f"{where}: an image is base64 text", where)
    if len(text) > MAX_BYTES * 4 // 3 + 4:
        raise bad_request(f"{where}: the image is over {MAX_BYTES >> 20} MiB", where, "invalid_image")
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise bad_request(f"{where}: the image is not valid base64", where, "invalid_image") from None
    try:
        load(data)
    except ImageError as e:
        raise bad_request(f"{where}: {e}", where, "invalid_image") from None
    return Image(data)


def from_url(url: object, where: str) -> Image:
    """A picture from OpenAI's ``image_url``: ``data:image/...;base64,...`` only."""
    if not isinstance(url, str):
        raise bad_request(f"{where}: image_url needs a url", where)
    if url.startswith(("http://", "https://")):
        raise bad_request(f"{where}: this server fetches no image URLs; send the picture as a "
                          "data URL (data:image/png;base64,...)", where, "image_url_not_fetched")
    head, comma, payload = url.partition(",")
    if not head.startswith("data:image/") or not head.endswith(";base64") or not comma:
        raise bad_request(f"{where}: an image URL is data:image/<type>;base64,<data>", where)
    return from_base64(payload, where)


def check_count(images: list[Image], where: str) -> None:
    if len(images) > MAX_IMAGES:
        raise bad_request(f"{where}: at most {MAX_IMAGES} images in a request", where)
