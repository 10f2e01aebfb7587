"""A property-based fuzz of the HTTP API: schemathesis generates requests from the server's own
OpenAPI document (bodies that follow it and bodies that break it) and sends them to a real
server on the test model. No answer may be a 5xx or carry a traceback, a body the document
forbids is refused with a 4xx, and the server still answers a normal request afterwards.

Bounded: a few examples per operation, replies cut to a few tokens (the length fields are
clamped before sending, so generation stays short on a 2-core machine)."""

from __future__ import annotations

import json

import jsonschema
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import negative_data_rejection

from engine.decode.sampling import SamplingParams
from engine.params import row
from engine.server.openapi import OPERATIONS
from tests.conftest import REPLY_WAIT_S

API_KEY = "test-key-0123"  # the key conftest.start_server sets
EXAMPLES = 40  # per operation and mode
MAX_REPLY = 4  # tokens: what a fuzzed request may generate at most
LONGEST = row(SamplingParams, "max_tokens").spec.maximum
LENGTH_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens", "num_predict")


@pytest.fixture(scope="module")
def fuzzed(smol_path, duet_home, server_factory):
    server, handle = server_factory(smol_path, drafter="none", n_ctx=256, max_tokens=MAX_REPLY)
    yield handle
    server.close()
    handle.engine.close()


@pytest.fixture(scope="module")
def api_doc(fuzzed):
    return requests.get(f"{fuzzed.url}/openapi.json", timeout=30).json()


@pytest.fixture(scope="module")
def api_schema(fuzzed, api_doc):
    schema = schemathesis.openapi.from_dict(api_doc)
    schema.config.update(base_url=fuzzed.url)
    schema.config.generation.update(with_security_parameters=False)  # the key is sent as is
    return schema


def _clamp(body: object) -> None:
    """Cut the reply-length fields of a body (and of its Ollama options) to MAX_REPLY. A value
    past the field's range stays: it is what a negative case sends, to be refused."""
    if not isinstance(body, dict):
        return
    for key in LENGTH_FIELDS:
        value = body.get(key)
        if type(value) is int and MAX_REPLY < value <= LONGEST:
            body[key] = MAX_REPLY
    _clamp(body.get("options"))


def _integers(value: object) -> object:
    """Whole numbers as JSON integers. JSON Schema counts 12.0 as an integer and the generator
    writes some so; clients write 12, and the server's strict types refuse 12.0 with a 400, which
    would end most generated bodies before they reach the engine."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    if isinstance(value, dict):
        return {k: _integers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integers(v) for v in value]
    return value


CASES = [pytest.param(op, mode, id=f"{op.method.upper()} {op.path} {mode.value}")
         for op in OPERATIONS for mode in GenerationMode
         if op.body is not None or mode is GenerationMode.POSITIVE]  # nothing to break in a GET


def _body_validator(doc: dict, path: str, method: str) -> jsonschema.Draft202012Validator | None:
    """The document's JSON Schema of an operation's body (its components inlined as $defs)."""
    body = doc["paths"][path][method].get("requestBody")
    if body is None:
        return None
    (media,) = body["content"].values()  # JSON, or the audio route's multipart form
    schema = {"$defs": doc.get("components", {}).get("schemas", {}), **media["schema"]}
    schema = json.loads(json.dumps(schema).replace("#/components/schemas/", "#/$defs/"))
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize(("op", "mode"), CASES)
def test_no_request_breaks_the_server(api_schema, api_doc, op, mode):
    operation = api_schema[op.path][op.method.upper()]
    valid = _body_validator(api_doc, op.path, op.method)

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def check(case):
        if mode is GenerationMode.POSITIVE:
            case.body = _integers(case.body)
        _clamp(case.body)
        response = case.call(headers={"Authorization": f"Bearer {API_KEY}"}, timeout=REPLY_WAIT_S)
        assert "Traceback" not in response.text and 'File "' not in response.text, response.text
        # a "negative" body can still follow the document: the generator negates one branch's
        # enum, and another branch of the discriminated union takes the value (a thinking
        # block's "redacted_thinking"); such a body is rightly answered
        negative = mode is GenerationMode.NEGATIVE and not (
            valid is not None and isinstance(case.body, dict) and valid.is_valid(case.body))
        case.validate_response(response, checks=[not_a_server_error, negative_data_rejection]
                               if negative else [not_a_server_error])

    check()


def test_the_server_still_answers_afterwards(fuzzed):
    status, _, body = fuzzed.raw("POST", "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4})
    assert status == 200, body
    assert body["choices"][0]["message"]["content"]
