"""``bench structured``'s tool turn sends every server the same second request, whether or not
the server read the model's first reply as a call, so the turn times the same work on both."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from bench.structured import CALL, RESULT, _ratios, tool_turn

FENCED = '```json\n{"name": "get_weather", "arguments": {"city": "Lisbon"}}\n```'


def _reply(message: dict[str, Any]) -> dict[str, Any]:
    return {"choices": [{"message": message}], "usage": {"completion_tokens": 7}}


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """A loopback server that answers each request with the next of ``request.param``."""
    replies, bodies = list(request.param), []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            data = json.dumps(_reply(replies.pop(0))).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1], bodies
    finally:
        httpd.shutdown()
        httpd.server_close()


PARSED = {"content": None, "tool_calls": [{"id": "call_x", "type": "function", "function": {
    "name": "get_weather", "arguments": '{"city": "Lisbon"}'}}]}


@pytest.mark.parametrize(("server", "called"), [
    ([{"content": FENCED}, {"content": "Clear, 19 °C."}], False),  # the call left as text
    ([PARSED, {"content": "Clear, 19 °C."}], True),
], indirect=["server"])
def test_the_second_request_is_the_same_whatever_the_first_reply(
        server: tuple[int, list[dict[str, Any]]], called: bool) -> None:
    port, bodies = server
    turn = tool_turn(port, 50)
    assert turn["called"] is called
    assert turn["answer"] == "Clear, 19 °C." and turn["tokens"] == [7, 7]
    second = bodies[1]["messages"]
    assert second[1:] == [{"role": "assistant", "content": "", "tool_calls": [CALL]},
                          {"role": "tool", "tool_call_id": CALL["id"], "content": RESULT}]


def test_the_ratios_set_each_sides_best_mode_against_the_others() -> None:
    rows = {"duet-plain": {"tps": 20.0, "gen_s": 5.0, "tool_s": 6.0},
            "duet-auto": {"tps": 22.0, "gen_s": 4.0, "tool_s": 6.6},
            "server-plain": {"tps": 16.0, "gen_s": 9.0, "tool_s": 6.3},
            "server-ngram-mod": {"tps": 11.0, "gen_s": 8.0, "tool_s": 7.0}}
    assert _ratios(rows) == ["Extraction: duet-auto 1.38× server-plain (tok/s).",
                             "Extraction: duet-auto 2.00× server-ngram-mod (inverse of the time to the object).",
                             "Tool turn: duet-plain 1.05× server-plain (inverse of wall time)."]
