"""One engine thread: a disconnected stream cancels its generation, a full queue answers 429,
and the CLI refuses to listen beyond loopback without a key."""

from __future__ import annotations

import threading

import openai
import pytest

from tests.conftest import REPLY_WAIT_S


def test_a_closed_stream_cancels_its_generation_and_frees_the_engine(served):
    client = served.client()
    before = served.engine.stats()
    stream = client.chat.completions.create(
        model="test", temperature=0, max_tokens=900, stream=True,
        messages=[{"role": "user", "content": "Count from 1 to 1000, one number per line."}])
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            break
    stream.close()  # the client goes away in the middle of the reply
    # The engine is free again: the next request is served, and the first one ended cancelled.
    r = client.chat.completions.create(model="test", temperature=0, max_tokens=4,
                                       messages=[{"role": "user", "content": "Hi"}])
    assert r.choices[0].message.content is not None
    after = served.engine.stats()
    assert after["cancelled"] == before["cancelled"] + 1
    assert after["completed"] == before["completed"] + 1


def test_a_full_queue_answers_429_with_retry_after(smol_path, server_factory):
    gate = threading.Event()  # holds the engine thread before it takes a job
    server, served = server_factory(smol_path, max_queue=1, gate=gate)
    try:
        client = served.client()
        results = []
        first = threading.Thread(target=lambda: results.append(client.chat.completions.create(
            model="test", temperature=0, max_tokens=4, messages=[{"role": "user", "content": "Hi"}])))
        first.start()
        assert served.engine.wait_until(lambda e: e.queued == 1, timeout=REPLY_WAIT_S)
        with pytest.raises(openai.RateLimitError) as err:
            client.chat.completions.create(model="test", max_tokens=4,
                                           messages=[{"role": "user", "content": "Hi"}])
        assert err.value.response.headers["retry-after"] == "1"
        assert err.value.body["code"] == "queue_full"
        gate.set()
        first.join(timeout=REPLY_WAIT_S)
        assert results and results[0].choices[0].message.content is not None
        assert served.engine.stats()["rejected"] == 1
    finally:
        gate.set()
        server.close()
        served.engine.close()


def test_serve_refuses_a_public_host_without_a_key(capsys):
    from engine.cli.main import main

    assert main(["serve", "--model", "test", "--host", "0.0.0.0"]) == 1
    assert "--api-key" in capsys.readouterr().err


def test_serve_speculates_by_default_and_takes_its_cache_budget():
    from engine.cli.main import build_parser
    from engine.cli.serve import serve_config
    from engine.runtime.runtime import RuntimeConfig

    args = build_parser().parse_args(["serve", "--model", "test"])
    assert args.drafter == "auto" and args.host == "127.0.0.1"
    assert serve_config(args).speculative.drafter == "auto"
    assert serve_config(args).state_cache_bytes == RuntimeConfig.state_cache_bytes
    args = build_parser().parse_args(["serve", "--model", "test", "--cache-mb", "64"])
    assert serve_config(args).state_cache_bytes == 64 << 20


def test_concurrent_clients_get_the_replies_they_would_get_alone(server_factory, smol_path):
    """Greedy replies are bitwise identical only where every request is prefilled in the same
    batches: the questions share nothing after the chat template (so the order of requests
    does not change how much of a prompt the cache reuses), and decoding is plain (draft
    lengths follow measured times, so under load they change the batch shapes and, at a
    near-tie, the reply: docs/benchmarks/server.md, Soak). What is left to differ is what this
    test is about: requests queued for one engine must not touch each other."""
    from concurrent.futures import ThreadPoolExecutor

    server, served = server_factory(smol_path, drafter="none")
    client = served.client()
    questions = ["Describe rain.", "Name a fruit.", "Say something about the sea.", "Add 2 and 2."]

    def ask(question: str, stream: bool) -> str:
        kw = dict(model="test", temperature=0, max_tokens=10,
                  messages=[{"role": "user", "content": question}])
        if not stream:
            return client.chat.completions.create(**kw).choices[0].message.content
        chunks = client.chat.completions.create(stream=True, **kw)
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    try:
        alone = [ask(q, False) for q in questions]
        with ThreadPoolExecutor(len(questions) * 2) as pool:
            together = list(pool.map(ask, questions * 2, [False] * len(questions) + [True] * len(questions)))
    finally:
        server.close()
        served.engine.close()
    assert together == alone * 2


def test_a_retried_request_is_drafted_from_the_reply_it_got_before(server_factory, smol_path):
    """A client that sends a request again (a retry, a regenerate) has the reply it got drafted
    from its first token. The drafter drafts all it proposes (not adaptive), so what is drafted
    does not depend on the verify costs this machine measures."""
    server, served = server_factory(smol_path, drafter="ngram", adaptive=False)
    client = served.client()
    kw = dict(model="test", temperature=0, max_tokens=16,
              messages=[{"role": "user", "content": "Name three colours of the rainbow."}])
    try:
        first = client.chat.completions.create(**kw).model_extra["timings"]
        again = client.chat.completions.create(**kw).model_extra["timings"]
    finally:
        server.close()
        served.engine.close()
    assert first["predicted_n"] == 16  # long enough to draft
    assert again["draft_n"] >= 8 and again["draft_n_accepted"] >= 4, again
    assert again["draft_n_accepted"] > first["draft_n_accepted"], (first, again)


def test_the_grammar_vocabulary_is_built_while_the_server_waits(server_factory, smol_path):
    """The first request with a schema does not wait for llguidance's view of the vocabulary:
    the engine builds it while no request runs."""
    from engine.decode import constraint

    server, s = server_factory(smol_path, drafter="none")
    try:
        assert s.engine.wait_until(lambda _: constraint.is_prepared(s.model), REPLY_WAIT_S)
    finally:
        server.close()
        s.engine.close()
