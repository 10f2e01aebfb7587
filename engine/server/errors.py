"""Errors shaped as OpenAI returns them: ``{"error": {"message", "type", "param", "code"}}``.

Every refusal the server makes is an ``ApiError``; the app's exception handlers turn it (and
Starlette's own HTTP errors, and anything unexpected) into that shape, never a traceback.
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.responses import JSONResponse

INVALID = "invalid_request_error"


class Gone(Exception):
    """The client disconnected."""


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, type: str = INVALID, param: str | None = None,
                 code: str | None = None, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = dict(headers or {})

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)
