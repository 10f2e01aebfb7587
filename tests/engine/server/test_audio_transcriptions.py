"""POST /v1/audio/transcriptions with the real ``openai`` client (``audio.transcriptions.create``)
against a real server: the spoken clips' words within the word error rate in each answer format,
and hostile uploads (not audio, truncated, too large, a 1 GB body, no form) refused with a 4xx
in OpenAI's error shape, never a 5xx; the server answers normally afterwards."""

from __future__ import annotations

import json
import socket
import uuid

import openai
import pytest

from tests.engine.server.conftest import API_KEY
from tests.speech import CLIPS, MAX_WER, reference, word_error_rate

LIMIT = 1 << 20  # this server's largest upload (the default is OpenAI's 25 MB)


@pytest.fixture(scope="module")
def speech_server(smol_path, duet_home, server_factory):
    server, handle = server_factory(smol_path, drafter="none", max_audio=LIMIT)
    yield handle
    server.close()
    handle.engine.close()


def _error(err: openai.APIStatusError) -> dict:
    body = err.response.json()
    assert set(body) == {"error"} and {"message", "type", "param", "code"} <= set(body["error"])
    assert "Traceback" not in err.response.text
    return body["error"]


@pytest.mark.parametrize("clip", CLIPS, ids=[c.stem for c in CLIPS])
def test_the_openai_client_transcribes(speech_server, clip) -> None:
    client = speech_server.client()
    with clip.open("rb") as f:
        got = client.audio.transcriptions.create(model="whisper-1", file=f)
    assert word_error_rate(reference(clip), got.text) <= MAX_WER, got.text


def test_answer_formats_and_options(speech_server) -> None:
    client, clip = speech_server.client(), CLIPS[0]
    text = client.audio.transcriptions.create(model="whisper-1", file=(clip.name, clip.read_bytes()),
                                              response_format="text", language="en")
    assert isinstance(text, str) and word_error_rate(reference(clip), text) <= MAX_WER
    verbose = client.audio.transcriptions.create(model="whisper-1", file=clip, response_format="verbose_json",
                                                 timestamp_granularities=["segment"], temperature=0.0)
    assert verbose.language == "en" and 6 < verbose.duration < 10 and verbose.segments
    assert word_error_rate(reference(clip), verbose.text) <= MAX_WER
    srt = client.audio.transcriptions.create(model="whisper-1", file=clip, response_format="srt")
    assert srt.startswith("1\n00:00:00,000 --> ")
    vtt = client.audio.transcriptions.create(model="whisper-1", file=clip, response_format="vtt")
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> ")


@pytest.mark.parametrize(("name", "content", "status", "words"), [
    ("notes.txt", b"just some text, not audio\n" * 40, 400, "not audio"),
    ("cut.wav", CLIPS[0].read_bytes()[:30_000], 400, "truncated"),
    ("empty.wav", b"", 400, "empty"),
    ("page.pdf", b"%PDF-1.7\n" + bytes(range(256)) * 40, 400, "not audio"),
    ("big.wav", b"RIFF" + b"\0" * (LIMIT + 100), 413, "exceeds"),
])
def test_hostile_uploads_are_a_clear_4xx(speech_server, name, content, status, words) -> None:
    with pytest.raises(openai.APIStatusError) as err:
        speech_server.client().audio.transcriptions.create(model="whisper-1", file=(name, content))
    assert err.value.status_code == status
    assert words in _error(err.value)["message"]


@pytest.mark.parametrize(("fields", "status", "param"), [
    ({"model": "gpt-4o"}, 404, "model"),
    ({"model": "whisper-1", "response_format": "mp3"}, 400, "response_format"),
    ({"model": "whisper-1", "temperature": "7"}, 400, "temperature"),
    ({"model": "whisper-1", "language": "xx"}, 400, "language"),
    ({"model": "whisper-1", "stream": "true"}, 400, "stream"),
    ({"model": "whisper-1", "timestamp_granularities[]": "word"}, 400, "timestamp_granularities[]"),
])
def test_bad_fields_are_a_4xx(speech_server, fields, status, param) -> None:
    status_got, _, body = _post_form(speech_server, fields, CLIPS[0].read_bytes())
    assert status_got == status and body["error"]["param"] == param, body


def _post_form(served, fields: dict, audio: bytes | None) -> tuple[int, dict, object]:
    boundary = uuid.uuid4().hex
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
             for k, v in fields.items()]
    if audio is not None:
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
                     "Content-Type: audio/wav\r\n\r\n".encode() + audio + b"\r\n")
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    return served.raw("POST", "/v1/audio/transcriptions", body,
                      {"Content-Type": f"multipart/form-data; boundary={boundary}"})


def test_no_file_no_form_no_key(speech_server) -> None:
    status, _, body = _post_form(speech_server, {"model": "whisper-1"}, None)
    assert status == 400 and body["error"]["param"] == "file"
    status, _, body = speech_server.raw("POST", "/v1/audio/transcriptions", {"model": "whisper-1"})
    assert status == 415 and "multipart/form-data" in body["error"]["message"]
    status, _, body = speech_server.raw("POST", "/v1/audio/transcriptions", b"--x\r\nbroken",
                                        {"Content-Type": "multipart/form-data; boundary=x"})
    assert status == 400, body
    status, _, _ = _post_form(speech_server, {"model": "whisper-1"}, b"")
    assert status == 400
    status, _, body = speech_server.raw("POST", "/v1/audio/transcriptions", b"", key="wrong")
    assert status == 401


def _head(served, headers: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", served.port), timeout=60)
    sock.sendall(f"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
                 f"Content-Type: multipart/form-data; boundary=b\r\n{headers}\r\n".encode())
    return sock


def _status(sock: socket.socket) -> tuple[int, dict]:
    data = b""
    while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body[body.index(b"{"):body.rindex(b"}") + 1])


def test_a_gigabyte_upload_is_refused_from_its_header(speech_server) -> None:
    with _head(speech_server, "Content-Length: 1073741824\r\n") as sock:
        sock.sendall(b"--b\r\n" + b"\0" * 65536)  # the rest never comes: the answer does not wait for it
        status, body = _status(sock)
    assert status == 413 and body["error"]["code"] == "request_too_large"


def test_a_chunked_upload_is_refused_once_past_the_limit(speech_server) -> None:
    """No Content-Length: the body is counted as it arrives, and refused without being kept."""
    with _head(speech_server, "Transfer-Encoding: chunked\r\n") as sock:
        part = b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n'
        sock.sendall(b"%x\r\n%s\r\n" % (len(part), part))
        chunk = b"\1" * 65536
        sent = 0
        try:
            while sent < 3 * LIMIT:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
        except OSError:
            pass  # the server has answered and closed
        status, body = _status(sock)
    assert status == 413 and body["error"]["code"] == "request_too_large"


def test_the_server_still_answers(speech_server) -> None:
    clip = CLIPS[-1]
    got = speech_server.client().audio.transcriptions.create(model="whisper-1", file=clip)
    assert word_error_rate(reference(clip), got.text) <= MAX_WER
    status, _, _ = speech_server.raw("GET", "/health")
    assert status == 200
