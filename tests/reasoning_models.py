"""Copies of a real model with a reasoning model's real chat template (tests/data/templates):
no reasoning model can be downloaded where the tests run, so the starter 0.5B (Qwen2.5-Coder,
the tokenizer family of Qwen3 and DeepSeek-R1-Distill-Qwen) is written again with its
``tokenizer.chat_template`` replaced.

The ``gguf`` package's copier (gguf.scripts.gguf_new_metadata) parses the whole vocabulary, half
a minute for one copy on the test machine; here the template's key-value pair is swapped in the
header's bytes instead, and the template is followed by a Jinja comment (it renders nothing)
that keeps the header's length a multiple of the alignment, so the tensor data stays aligned
and is copied as it is. ``read_template`` reads it back with the ``gguf`` package's reader."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

TEMPLATES = Path(__file__).parent / "data" / "templates"
R1 = "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"
QWEN3 = "Qwen-Qwen3-0.6B.jinja"
KEY = b"tokenizer.chat_template"
STRING = 8  # GGUFValueType.STRING
ALIGNMENT = 32  # GGUF's default (the starter models set no other)
HEAD = 64 << 20  # the header is within the file's first bytes


def template(name: str) -> str:
    return (TEMPLATES / name).read_text(encoding="utf-8")


def _pair(value: bytes) -> bytes:
    return struct.pack("<Q", len(KEY)) + KEY + struct.pack("<IQ", STRING, len(value)) + value


def with_template(source: Path, text: str, dest: Path) -> Path:
    """``source`` written to ``dest`` with ``text`` as its chat template."""
    with open(source, "rb") as f:
        head = f.read(HEAD)
    assert b"general.alignment" not in head, "a model with its own alignment"
    start = head.find(struct.pack("<Q", len(KEY)) + KEY + struct.pack("<I", STRING))
    assert start > 0, f"{source} has no chat template to replace"
    at = start + 8 + len(KEY) + 4
    (n,) = struct.unpack_from("<Q", head, at)
    end = at + 8 + n
    base = len(_pair(text.encode("utf-8") + b"{##}")) - (end - start)
    value = text.encode("utf-8") + b"{#" + b" " * (-base % ALIGNMENT) + b"#}"
    tmp = dest.with_suffix(".part")
    with open(source, "rb") as src, open(tmp, "wb") as out:
        out.write(head[:start] + _pair(value))
        src.seek(end)
        shutil.copyfileobj(src, out, 16 << 20)
    tmp.replace(dest)
    return dest
