"""The OpenAPI document the server publishes: valid OpenAPI 3.1, every route of every dialect,
the sampling fields from the parameter table under each dialect's names."""

from __future__ import annotations

import schemathesis

from engine import params
from engine.decode.sampling import SamplingParams
from engine.server.app import ROUTES


def test_the_document_is_valid_and_lists_every_route(served):
    status, _, doc = served.raw("GET", "/openapi.json", key=None)  # no key needed
    assert status == 200
    schemathesis.openapi.from_dict(doc).validate()
    routes = {(r.path, m.lower()) for r in ROUTES for m in r.methods if m != "HEAD"}
    listed = {(path, method) for path, ops in doc["paths"].items() for method in ops}
    assert listed == routes
    for ops in doc["paths"].values():
        for op in ops.values():
            assert op["responses"]["default"]["content"]["application/json"]["schema"]["$ref"]


def test_sampling_fields_come_from_the_parameter_table(served):
    _, _, doc = served.raw("GET", "/openapi.json", key=None)
    schemas = doc["components"]["schemas"]
    chat = schemas["OpenAIChatCompletionRequest"]["properties"]
    top_p = params.row(SamplingParams, "top_p")
    assert chat["top_p"]["maximum"] == top_p.spec.maximum and chat["top_p"]["title"] == "Top-p"
    assert chat["max_completion_tokens"]["minimum"] == 1 and "top_logprobs" in chat
    messages = schemas["AnthropicMessagesRequest"]
    assert "max_tokens" in messages["required"] and messages["properties"]["max_tokens"]["type"] \
        == "integer"
    assert {"stop_sequences", "top_k", "temperature"} <= set(messages["properties"])
    assert "stop" not in messages["properties"] and "min_p" not in messages["properties"]
    options = schemas["OllamaChatRequest"]["properties"]["options"]["anyOf"][0]["properties"]
    assert {"num_predict", "repeat_penalty", "repeat_last_n", "min_p", "seed", "stop"} \
        <= set(options)
    assert options["num_ctx"]["maximum"] == served.n_ctx
    assert "max_tokens" not in options
    model = schemas["OllamaChatRequest"]["properties"]["model"]
    assert model["enum"] == [served.model_id, f"{served.model_id}:latest"]
