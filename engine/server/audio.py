"""Speech to text as OpenAI answers it: ``POST /v1/audio/transcriptions``, a multipart form
(``file``, ``model``, ``language``, ``prompt``, ``response_format`` json, text, verbose_json, srt
or vtt, ``temperature``), by the catalogue's Whisper (engine.audio.transcribe) on a thread of its
own, loaded at the first request.

Uploads are bounded as OpenAI bounds them (25 MB, ``ApiConfig.max_audio``): a ``Content-Length``
past it is refused before a byte of the body is read, and a body sent without one is counted as
it streams and refused once past it, so no upload is held whole (the form parser spools the file
part to a temporary file past 1 MB). Whatever the upload holds is decoded and checked before the
model sees it: not audio, empty, a truncated WAV are a 400 in the server's error shape.
"""

from __future__ import annotations

import asyncio
import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from engine.audio.transcribe import LanguageError, Transcriber, Transcript
from engine.errors import AudioError, ModelLoadError
from engine.server import schema
from engine.server.core import Front
from engine.server.errors import ApiError, bad_request

MODELS = ("whisper-1", "whisper", "whisper-base")  # the names a request may give the one speech model
FORMATS = ("json", "text", "verbose_json", "srt", "vtt")
FIELDS = frozenset({"file", "model", "language", "prompt", "response_format", "temperature",
                    "timestamp_granularities[]"})
FORM_SLACK = 64 << 10  # bytes of a form beyond its file: the other fields and the parts' headers


class TranscriptionForm(schema._Body):
    """The form's fields, as the OpenAPI document shows them (the route reads the form itself)."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    file: bytes = Field(json_schema_extra={"format": "binary"})
    model: str
    language: str = Field("", description="ISO 639-1 (en, de, ...); empty: detected")
    prompt: str = Field("", description="Text the speech follows (names, spelling)")
    response_format: Literal["json", "text", "verbose_json", "srt", "vtt"] = "json"
    temperature: float = Field(0.0, ge=0, le=1)
    timestamp_granularities: list[Literal["segment"]] = Field([], alias="timestamp_granularities[]")


class Speech:
    """The server's speech model: a ``Transcriber`` and the one thread that runs it."""

    def __init__(self, folder: Path | None) -> None:
        self.transcriber = Transcriber(folder)
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="duet-speech")

    async def transcribe(self, data: bytes, **options: Any) -> Transcript:
        future = self._worker.submit(self.transcriber.transcribe, data, **options)
        try:
            return await asyncio.wrap_future(future)
        except LanguageError as e:
            raise bad_request(str(e), "language") from None
        except AudioError as e:
            raise bad_request(str(e), "file", code="invalid_audio") from None
        except ModelLoadError as e:
            raise ApiError(503, str(e), type="server_error", code="model_unavailable") from None


def _too_large(limit: int) -> ApiError:
    return ApiError(413, f"the upload exceeds {limit >> 20} MB", code="request_too_large")


async def _form(request: Request, limit: int) -> Any:
    """The multipart form of ``request``, read within ``limit`` bytes of body."""
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != "multipart/form-data":
        raise ApiError(415, "send the audio as multipart/form-data (fields: file, model, ...)",
                       code="unsupported_media_type")
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > limit):
        raise _too_large(limit - FORM_SLACK)
    seen = 0
    receive = request.receive

    async def counted() -> Any:
        nonlocal seen
        message = await receive()
        seen += len(message.get("body", b""))
        if seen > limit:
            raise _too_large(limit - FORM_SLACK)
        return message

    try:
        return await Request(request.scope, counted).form(max_files=1, max_fields=len(FIELDS))
    except ApiError:
        raise
    except Exception as e:  # python-multipart's and Starlette's refusals of a malformed form
        raise bad_request(f"the form cannot be read: {getattr(e, 'detail', None) or e}") from None


def _text(form: Any, name: str) -> str | None:
    value = form.get(name)
    if value is not None and not isinstance(value, str):
        raise bad_request(f"{name} must be text, not a file", name)
    return value


def _options(form: Any) -> tuple[dict[str, Any], str]:
    """The transcription's options and the answer's format, checked."""
    unknown = sorted(set(form.keys()) - FIELDS)
    if unknown:
        raise bad_request(f"unsupported field(s): {', '.join(unknown)}", unknown[0], code="unsupported_parameter")
    model = _text(form, "model")
    if not model:
        raise bad_request("model is required (whisper-1)", "model")
    if model not in MODELS:
        raise ApiError(404, f"the model '{model}' is not a speech model here; use one of: {', '.join(MODELS)}",
                       param="model", code="model_not_found")
    fmt = _text(form, "response_format") or "json"
    if fmt not in FORMATS:
        raise bad_request(f"response_format must be one of: {', '.join(FORMATS)}", "response_format")
    if any(g != "segment" for g in form.getlist("timestamp_granularities[]")):
        raise bad_request("timestamp_granularities: only segment timestamps are given", "timestamp_granularities[]",
                          code="unsupported_parameter")
    temperature = 0.0
    raw = _text(form, "temperature")
    if raw:
        try:
            temperature = float(raw)
        except ValueError:
            temperature = math.nan
        if not 0 <= temperature <= 1:
            raise bad_request("temperature must be a number between 0 and 1", "temperature")
    return {"language": _text(form, "language") or None, "prompt": _text(form, "prompt"),
            "temperature": temperature}, fmt


async def transcriptions(request: Request) -> Response:
    front = Front.checked(request)
    limit = front.config.max_audio
    form = await _form(request, limit + FORM_SLACK)
    try:
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise bad_request("file is required: the audio, as a file part of the form", "file")
        options, fmt = _options(form)
        data = await upload.read(limit + 1)
        if len(data) > limit:
            raise _too_large(limit)
    finally:
        await form.close()
    speech: Speech = request.app.state.speech
    return answer(await speech.transcribe(data, **options), fmt)


def answer(got: Transcript, fmt: str) -> Response:
    if fmt == "text":
        return PlainTextResponse(got.text + "\n")
    if fmt in ("srt", "vtt"):
        return PlainTextResponse(captions(got, fmt), media_type="text/vtt" if fmt == "vtt" else "text/plain")
    if fmt == "json":
        return JSONResponse({"text": got.text})
    return JSONResponse({
        "task": "transcribe", "language": got.language, "duration": round(got.duration, 3), "text": got.text,
        "segments": [{"id": i, "start": round(s.start, 2), "end": round(s.end, 2), "text": s.text}
                     for i, s in enumerate(got.segments)]})


def captions(got: Transcript, fmt: str) -> str:
    """The segments as SubRip (srt) or WebVTT (vtt) cues."""
    sep = "," if fmt == "srt" else "."

    def stamp(t: float) -> str:
        ms = round(t * 1000)
        return f"{ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d}{sep}{ms % 1000:03d}"

    cues = [f"{stamp(s.start)} --> {stamp(s.end)}\n{s.text}\n" for s in got.segments]
    if fmt == "srt":
        return "\n".join(f"{i}\n{cue}" for i, cue in enumerate(cues, 1))
    return "WEBVTT\n\n" + "\n".join(cues)
