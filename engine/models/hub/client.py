"""The configured ``huggingface_hub`` pieces: endpoint and token read at call time, the API, URLs.

``huggingface_hub`` reads ``HF_ENDPOINT`` once, at import; Duet reads it on every call so a test
(or a user changing settings) can point it elsewhere without a restart. ``HF_TOKEN`` likewise.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote

import huggingface_hub
from huggingface_hub import constants
from huggingface_hub.utils import build_hf_headers, get_session

from engine.models.hub.errors import HubError, describe, is_network_error

DEFAULT_REVISION = "main"
TIMEOUT = 10.0  # seconds to connect or between bytes


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def token() -> str | None:
    """HF_TOKEN if set; None lets huggingface_hub use its stored login, if any."""
    return os.environ.get("HF_TOKEN") or None


def api() -> huggingface_hub.HfApi:
    return huggingface_hub.HfApi(endpoint=endpoint(), token=token())


def file_url(repo: str, filename: str, revision: str = DEFAULT_REVISION) -> str:
    """The file's ``resolve`` URL, as ``hf_hub_url`` builds it (which swaps in another endpoint only
    when its import-time one is a prefix of the URL, so we build it from ours)."""
    return f"{endpoint()}/{repo}/resolve/{quote(revision, safe='')}/{quote(filename)}"


def headers() -> dict[str, str]:
    """The Hub's request headers (user agent, Authorization when a token is known)."""
    out = build_hf_headers(token=token(), library_name="duet")
    out["Accept-Encoding"] = "identity"  # byte ranges and sizes must be of the file itself
    return out


def session() -> Any:  # huggingface_hub's configured HTTP client (httpx-like)
    return get_session()


def check_reachable(what: str) -> None:
    """Raise HubError at once when the Hub cannot be reached (one request, no retries).

    ``HfApi.list_models`` retries connection errors with back-off for ~20 s; a search box must
    say "offline" at once instead."""
    try:
        session().request("HEAD", endpoint() + "/", headers=headers(), timeout=TIMEOUT)
    except Exception as e:  # any HTTP answer means reachable; only transport errors count
        if is_network_error(e):
            raise HubError(describe(e, what)) from e
