"""The soak's client against a real server (no API key, the test model): streamed and whole
replies, a 429 surfaced with its Retry-After, a stream dropped on purpose that the server
notices, and one client turn compared with its solo reply."""

from __future__ import annotations

import threading

import pytest

from bench.client import Busy, HttpReply, health, post, post_dropping
from bench.soak import plan
from bench.soak.command import Client
from tests.conftest import REPLY_WAIT_S

HELLO = {t.id: t for t in plan.turns()}["hello"]


@pytest.fixture(scope="module")
def open_server(smol_path, server_factory):
    server, served = server_factory(smol_path, api_key=None)
    yield served
    server.close()
    served.engine.close()


def test_streamed_and_whole_replies_agree(open_server):
    port = open_server.port
    streamed = post(port, HELLO.path, plan.body(HELLO, {}, stream=True))
    whole = post(port, HELLO.path, plan.body(HELLO, {}, stream=False))
    assert streamed == whole and streamed.text and streamed.finish_reason in ("stop", "length")
    assert streamed.timings["predicted_n"] == whole.timings["predicted_n"] > 0
    assert 0 < streamed.ttft_s <= streamed.elapsed_s


def test_a_dropped_stream_is_cancelled_and_the_server_stays_healthy(open_server):
    engine = open_server.engine
    before = engine.stats()["cancelled"]
    body = {"messages": [{"role": "user", "content": "Count from 1 to 500, one per line."}],
            "max_tokens": 800, "temperature": 0, "stream": True}
    assert post_dropping(open_server.port, plan.CHAT, body, 1) is None
    assert engine.wait_until(lambda e: e.counters.cancelled == before + 1, timeout=REPLY_WAIT_S)
    health(open_server.port)


def test_one_client_turn_is_compared_with_its_solo_reply(open_server):
    port = open_server.port
    solo = post(port, HELLO.path, plan.body(HELLO, {}))
    client = Client(0, port, {"hello": solo}, {"hello": {solo.text}}, deadline=0, drop_rate=0)
    assert client._turn(HELLO)
    assert (client.tally.requests, client.tally.mismatches) == (1, 0)
    wrong = HttpReply(solo.text + " (not this)", solo.finish_reason)
    client = Client(0, port, {"hello": wrong}, {"hello": {wrong.text}}, deadline=0, drop_rate=0)
    assert client._turn(HELLO)
    assert (client.tally.mismatches, client.tally.known_variants) == (1, 0)
    assert client.tally.mismatched == {"hello": {solo.text: 1}}
    client = Client(0, port, {"hello": wrong}, {"hello": {wrong.text, solo.text}}, deadline=0,
                    drop_rate=0)
    client._turn(HELLO)
    assert (client.tally.mismatches, client.tally.known_variants) == (1, 1)
    count = plan.SoakTurn("count", messages=(("user", "Count from 1 to 100, one per line."),),
                      max_tokens=300)  # long enough to be dropped after its first few chunks
    dropper = Client(0, port, {"count": solo}, {"count": {solo.text}}, deadline=0, drop_rate=1)
    assert not dropper._turn(count)  # dropped mid-stream: the script stops there
    assert (dropper.tally.disconnects, dropper.tally.health_checks, dropper.tally.errors) == (1, 1, 0)


def test_a_full_queue_is_busy_with_its_retry_after(smol_path, server_factory):
    gate = threading.Event()
    server, served = server_factory(smol_path, api_key=None, max_queue=1, gate=gate)
    try:
        first = threading.Thread(target=post, args=(served.port, HELLO.path, plan.body(HELLO, {})))
        first.start()
        assert served.engine.wait_until(lambda e: e.queued == 1, timeout=REPLY_WAIT_S)
        with pytest.raises(Busy) as err:
            post(served.port, HELLO.path, plan.body(HELLO, {}))
        assert err.value.retry_after == 1.0
        gate.set()
        first.join(timeout=REPLY_WAIT_S)
    finally:
        gate.set()
        server.close()
        served.engine.close()
