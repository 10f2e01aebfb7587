"""One-line messages for what can go wrong talking to the Hub: auth, gating, missing things, no network."""

from __future__ import annotations

from engine.errors import DuetError


class HubError(DuetError):
    """A Hub request failed; the message is one line fit to show a user."""


class DownloadCancelled(HubError):
    """The user cancelled a download; the partial file is kept for a later resume."""


_NETWORK_NAMES = {"ConnectError", "ConnectTimeout", "ReadTimeout", "TimeoutException", "NetworkError",
                  "ReadError", "RemoteProtocolError", "TransportError", "ProxyError", "WriteError",
                  "ConnectionError", "OfflineModeIsEnabled"}


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def is_network_error(exc: BaseException) -> bool:
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & _NETWORK_NAMES) or isinstance(exc, (ConnectionError, TimeoutError))


def describe(exc: BaseException, what: str) -> str:
    """A one-line message for ``exc`` raised while doing ``what`` (e.g. "bartowski/X: file.gguf")."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    status = _status(exc)
    if "OfflineModeIsEnabled" in names:
        return f"{what}: offline mode is on (HF_HUB_OFFLINE): Hugging Face is not contacted"
    if "GatedRepoError" in names or (status in (401, 403) and "RepositoryNotFoundError" not in names):
        if status == 401:
            return (f"{what}: this repository is gated or private: accept its licence on the Hugging Face "
                    "website, then set HF_TOKEN to an access token")
        return (f"{what}: access refused (HTTP {status or 403}): accept the licence on the repository's "
                "Hugging Face page with the account whose token is in HF_TOKEN")
    if "RepositoryNotFoundError" in names:
        return f"{what}: no such repository (or it is private: set HF_TOKEN)"
    if "EntryNotFoundError" in names or "RevisionNotFoundError" in names or status == 404:
        return f"{what}: not found on the Hub (HTTP 404)"
    if status == 429:
        return f"{what}: the Hub is rate-limiting requests (HTTP 429): try again in a minute"
    if status is not None:
        return f"{what}: the Hub answered HTTP {status}"
    if is_network_error(exc):
        return f"{what}: cannot reach Hugging Face (no network?): {_first_line(exc)}"
    return f"{what}: {_first_line(exc)}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line if len(line) <= 160 else line[:157] + "..."
