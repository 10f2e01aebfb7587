"""A picture from its file's bytes: PNG, JPEG, WebP or GIF (its first frame), decoded by Pillow
and bounded before anything else reads it.

Hostile files end here with one line (ImageError), never in a native decoder: the bytes are
bounded (MAX_BYTES), the pixel count is read from the header and bounded before decoding
(MAX_PIXELS: a 20,000 × 20,000 PNG, a PNG bomb), a truncated file fails to decode. A picture
larger than MAX_SIDE on a side is scaled down (every projector resizes to a few hundred pixels;
this keeps the pixels handed to libmtmd small). The same bytes give the same pixels.
"""

from __future__ import annotations

import hashlib
import io
import warnings

from PIL import Image, UnidentifiedImageError

from engine.errors import DuetError
from engine.llama.projector import Picture

FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp", "GIF": "image/gif"}
MAX_BYTES = 20 << 20  # 20 MiB: a phone's photo is 2 to 8
MAX_PIXELS = 50_000_000  # 50 megapixels: a 200 MP camera's photo is refused, an 8K frame is not
MAX_SIDE = 2048


class ImageError(DuetError):
    """A picture Duet will not read (one line: why)."""


def mime_of(data: bytes) -> str | None:
    """The picture's type by its first bytes (None: not one Duet reads)."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    return None


def load(data: bytes) -> Picture:
    """Decode ``data`` into RGB pixels, checked; ImageError with one line otherwise."""
    if len(data) > MAX_BYTES:
        raise ImageError(f"the image is {len(data) / 2**20:.0f} MiB; at most {MAX_BYTES >> 20} MiB")
    if mime_of(data) is None:
        raise ImageError("not a PNG, JPEG, WebP or GIF image")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # bounded below
            im = Image.open(io.BytesIO(data), formats=list(FORMATS))
        with im:
            w, h = im.size  # from the header: checked before a pixel is decoded
            if w < 1 or h < 1 or w * h > MAX_PIXELS:
                raise ImageError(f"the image is {w} × {h} pixels; at most {MAX_PIXELS // 1_000_000} "
                                 "megapixels")
            im.seek(0)  # a GIF's (or animated WebP's) first frame
            im.draft("RGB", (MAX_SIDE, MAX_SIDE))  # a JPEG decodes at a smaller scale where it can
            rgb = im.convert("RGB")
    except ImageError:
        raise
    except Image.DecompressionBombError:  # (Pillow's own bound, past twice its 89 megapixels)
        raise ImageError(f"the image has too many pixels; at most {MAX_PIXELS // 1_000_000} "
                         "megapixels") from None
    except UnidentifiedImageError:
        raise ImageError("not a readable image") from None
    except (OSError, ValueError, SyntaxError, EOFError) as e:  # truncated, damaged
        raise ImageError(f"the image cannot be decoded: {' '.join(str(e).split())[:120]}") from None
    if max(rgb.size) > MAX_SIDE:
        rgb.thumbnail((MAX_SIDE, MAX_SIDE), Image.Resampling.LANCZOS)
    return Picture(hashlib.sha256(data).hexdigest(), rgb.width, rgb.height, rgb.tobytes())
