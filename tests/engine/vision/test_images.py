"""Pictures are decoded and bounded by Pillow before libmtmd sees them: a hostile file is one
line (ImageError), never a native crash."""

from __future__ import annotations

import io
import struct
import zlib

import pytest
from PIL import Image

from engine.vision import images
from engine.vision.images import ImageError, load
from tests.images import picture


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP", "GIF"])
def test_each_format_gives_rgb_pixels(fmt):
    p = load(picture(1, (40, 24), fmt))
    assert (p.width, p.height) == (40, 24) and len(p.rgb) == 40 * 24 * 3
    assert p.digest == load(picture(1, (40, 24), fmt)).digest  # the same bytes, the same name


def test_a_gif_gives_its_first_frame():
    frames = [Image.new("RGB", (8, 8), c) for c in ((255, 0, 0), (0, 0, 255))]
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:])
    p = load(buf.getvalue())
    assert p.rgb[:3] == bytes((255, 0, 0))


def test_a_large_picture_is_scaled_down():
    p = load(picture(2, (4096, 1024)))
    assert (p.width, p.height) == (images.MAX_SIDE, images.MAX_SIDE // 4)


def _png_header_only(w: int, h: int, idat: bytes = b"") -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", idat) + chunk(b"IEND", b""))


def test_hostile_pictures_are_one_line_each():
    with pytest.raises(ImageError, match="megapixels"):  # 20,000 × 20,000, read from the header
        load(_png_header_only(20_000, 20_000))
    bomb = zlib.compress(b"\0" * (10_000 * (3 * 10_000 + 1)), 9)  # 300 MB of pixels in ~300 KB
    with pytest.raises(ImageError, match="megapixels"):
        load(_png_header_only(10_000, 10_000, bomb))
    whole = picture(3, (256, 256), "JPEG")
    with pytest.raises(ImageError, match="cannot be decoded"):
        load(whole[:len(whole) // 2])  # a truncated JPEG
    with pytest.raises(ImageError, match="MiB"):
        load(b"\x89PNG\r\n\x1a\n" + b"\0" * (images.MAX_BYTES + 1))
    with pytest.raises(ImageError, match="not a PNG"):
        load(b"%PDF-1.7 not a picture")
    with pytest.raises(ImageError):
        load(b"\x89PNG\r\n\x1a\n" + b"garbage" * 10)
