"""The server says whether its replies are exact (issue 75): /v1/models, each reply's
system_fingerprint and Ollama's /api/show, true on the patched build and false, with the reason,
on one as released."""

from __future__ import annotations

import httpx
import pytest


@pytest.mark.parametrize("build", ["patched", "released"])
def test_the_server_reports_it(smol_path, server_factory, request, build):
    if build == "released":
        request.getfixturevalue("released")
    server, handle = server_factory(smol_path, api_key=None, drafter="none")
    try:
        listed = httpx.get(f"{handle.url}/v1/models").json()["data"][0]["meta"]
        reply = httpx.post(f"{handle.url}/v1/chat/completions", timeout=600, json={
            "messages": [{"role": "user", "content": "Hi."}], "max_tokens": 2}).json()
        show = httpx.post(f"{handle.url}/api/show", json={"model": handle.model_id}).json()
    finally:
        server.close()
        handle.engine.close()
    exact = build == "patched"
    assert listed["exact"] is exact and show["exact"] is exact
    assert reply["system_fingerprint"].startswith(f"duet-{'exact' if exact else 'inexact'}-{build}-")
    if not exact:
        assert "lacks" in listed["exact_reason"] and listed["exact_reason"] == show["exact_reason"]
