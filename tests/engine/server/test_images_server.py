"""Pictures over HTTP in every dialect, with the real clients (openai: image_url and the
Responses API's input_image; anthropic: image blocks; ollama: images), on SmolLM2 with the
seeded test projector; and hostile pictures: each a 4xx with one line, never a 5xx."""

from __future__ import annotations

import base64
import struct
import zlib

import anthropic
import ollama
import openai
import pytest

from tests.conftest import REPLY_WAIT_S
from tests.images import picture

KEY = "test-key-0123"
PHOTO = picture(11, (96, 64), "JPEG")
B64 = base64.b64encode(PHOTO).decode()
DATA_URL = f"data:image/jpeg;base64,{B64}"
QUESTION = "What is in this picture?"


@pytest.fixture(scope="module")
def vision(server_factory, smol_path, smol_projector):
    server, handle = server_factory(smol_path, drafter="none", max_body=32 << 20, mmproj=smol_projector)
    yield handle
    server.close()
    handle.engine.close()


def openai_chat(served, content, **kw):
    return served.client(KEY).chat.completions.create(
        model="test", messages=[{"role": "user", "content": content}], temperature=0, max_tokens=8, **kw)


def test_every_dialect_reads_the_same_picture_the_same_way(vision):
    """The same question about the same picture: the same prompt, the same first tokens, in
    each dialect; after the first, the picture is never encoded again."""
    first = openai_chat(vision, [{"type": "image_url", "image_url": {"url": DATA_URL}},
                                 {"type": "text", "text": QUESTION}])
    text = first.choices[0].message.content
    assert text and first.usage.prompt_tokens > 16  # the picture's 16 positions are in the prompt
    encoded = vision.model.projector.encoded

    responses = vision.client(KEY).responses.create(model="test", temperature=0, max_output_tokens=8, input=[
        {"role": "user", "content": [{"type": "input_image", "image_url": DATA_URL},
                                     {"type": "input_text", "text": QUESTION}]}])
    assert responses.output_text == text and responses.usage.input_tokens == first.usage.prompt_tokens

    message = anthropic.Anthropic(base_url=vision.url, api_key=KEY, max_retries=0, timeout=REPLY_WAIT_S
                                  ).messages.create(model="test", max_tokens=8, messages=[  # greedy: the server default
        {"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": B64}},
            {"type": "text", "text": QUESTION}]}])
    assert "".join(b.text for b in message.content if b.type == "text") == text

    c = ollama.Client(host=vision.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=REPLY_WAIT_S)
    chat = c.chat(model="test", messages=[{"role": "user", "content": QUESTION, "images": [PHOTO]}],
                  options={"temperature": 0, "num_predict": 8})
    assert chat.message.content == text
    generated = c.generate(model="test", prompt=QUESTION, images=[PHOTO],
                           options={"temperature": 0, "num_predict": 8})
    assert generated.response == text
    assert vision.model.projector.encoded == encoded
    assert "vision" in c.show("test").capabilities


def _png(w: int, h: int, idat: bytes = b"") -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", idat) + chunk(b"IEND", b""))


HOSTILE = {
    "huge": _png(20_000, 20_000),
    "bomb": _png(10_000, 10_000, zlib.compress(b"\0" * (10_000 * 30_001), 9)),
    "truncated": PHOTO[:len(PHOTO) // 2],
    "not an image": b"%PDF-1.7",
    "empty": b"",
    "garbage": b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4,
    "50 MB": b"\x89PNG\r\n\x1a\n" + b"\0" * (50 << 20),
}


def _bodies(data: bytes) -> list[tuple[str, dict]]:
    b64 = base64.b64encode(data).decode()
    return [
        ("/v1/chat/completions", {"model": "test", "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64}"}},
            {"type": "text", "text": "?"}]}]}),
        ("/v1/responses", {"model": "test", "input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": f"data:image/png;base64,{b64}"}]}]}),
        ("/v1/messages", {"model": "test", "max_tokens": 4, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}}]}]}),
        ("/api/chat", {"model": "test", "stream": False, "messages": [
            {"role": "user", "content": "?", "images": [b64]}]}),
        ("/api/generate", {"model": "test", "stream": False, "prompt": "?", "images": [b64]}),
    ]


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_picture_is_a_4xx_in_every_dialect(vision, name):
    for path, body in _bodies(HOSTILE[name]):
        status, _, answer = vision.raw("POST", path, body)
        assert 400 <= status < 500, (path, name, status, answer)
        assert "\n" not in str(answer)


def test_urls_are_not_fetched_and_a_model_without_projector_says_why(vision, served):
    status, _, answer = vision.raw("POST", "/v1/chat/completions", {"model": "test", "messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]})
    assert status == 400 and answer["error"]["code"] == "image_url_not_fetched"
    with pytest.raises(openai.BadRequestError, match="cannot read images"):
        openai_chat(served, [{"type": "image_url", "image_url": {"url": DATA_URL}}])
    status, _, shown = served.raw("POST", "/api/show", {"model": "test"})
    assert status == 200 and "vision" not in shown["capabilities"]
