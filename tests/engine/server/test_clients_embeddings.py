"""Embeddings for other programs, through the clients people point at local servers, unchanged:
OpenAI's (float and base64), Ollama's ``embed`` (and the older ``embeddings``), LangChain's
``OpenAIEmbeddings``. The vectors come from the chat model, mean-pooled (no embedding model was
given), and the answer's ``model`` says so."""

from __future__ import annotations

import numpy as np
import ollama
import openai
import pytest

API_KEY = "test-key-0123"  # the served fixture's (conftest.py)

SIMILAR = ("The cat sat on the mat.", "A cat was sitting on the mat.")
OTHER = "Quarterly revenue rose by eight percent."


def _cos(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_openai_embeddings_float_and_base64_agree_and_rank_meaning(served):
    client = served.client()
    r = client.embeddings.create(model="anything", input=[*SIMILAR, OTHER])
    vecs = [d.embedding for d in r.data]
    assert [d.index for d in r.data] == [0, 1, 2]
    assert "mean-pooled chat model" in r.model
    assert r.usage.prompt_tokens > 10 and r.usage.total_tokens == r.usage.prompt_tokens
    assert _cos(vecs[0], vecs[1]) > _cos(vecs[0], vecs[2])
    assert abs(np.linalg.norm(vecs[0]) - 1) < 1e-3  # L2-normalised, as llama-server
    # the SDK asks for base64 when no format is given and decodes it itself
    b64 = client.embeddings.create(model="anything", input=SIMILAR[0], encoding_format="base64")
    one = client.embeddings.create(model="anything", input=SIMILAR[0], encoding_format="float")
    assert np.allclose(np.frombuffer(__import__("base64").b64decode(b64.data[0].embedding), "<f4"),
                       one.data[0].embedding, atol=1e-6)
    assert np.allclose(one.data[0].embedding, vecs[0], atol=1e-4)  # a batch changes nothing


def test_openai_refuses_bad_input_in_one_line(served):
    client = served.client()
    for bad in ([], "", [""]):
        with pytest.raises(openai.BadRequestError) as err:
            client.embeddings.create(model="m", input=bad)
        assert err.value.body["param"] == "input" and "\n" not in err.value.body["message"]
    with pytest.raises(openai.BadRequestError) as err:
        client.embeddings.create(model="m", input="hi", dimensions=7)
    assert err.value.body["param"] == "dimensions"


def test_ollama_embed_and_the_older_embeddings(served):
    client = ollama.Client(host=served.url, headers={"Authorization": f"Bearer {API_KEY}"})
    r = client.embed(model="test", input=[*SIMILAR, OTHER])
    e = r["embeddings"]
    assert len(e) == 3 and _cos(e[0], e[1]) > _cos(e[0], e[2])
    assert r["prompt_eval_count"] > 10
    old = client.embeddings(model="test", prompt=SIMILAR[0])
    assert np.allclose(old["embedding"], e[0], atol=1e-4)


def test_langchain_openai_embeddings(served):
    from langchain_openai import OpenAIEmbeddings

    lc = OpenAIEmbeddings(base_url=served.url + "/v1", api_key=API_KEY, model="test",
                          check_embedding_ctx_length=False)
    docs = lc.embed_documents([*SIMILAR, OTHER])
    q = lc.embed_query(SIMILAR[0])
    assert len(docs) == 3 and _cos(q, docs[1]) > _cos(q, docs[2])


def test_a_dedicated_embedding_model_makes_the_vectors(server_factory, smol_path):
    """``--embedding-model embed`` (all-MiniLM-L6-v2 from the catalog): its vectors, its name."""
    from engine.runtime.runtime import resolve_model

    server, served = server_factory(smol_path, drafter="none",
                                    embedding_model=resolve_model("embed"))
    try:
        r = served.client().embeddings.create(model="all-minilm", input=[*SIMILAR, OTHER])
    finally:
        server.close()
        served.engine.close()
    vecs = [d.embedding for d in r.data]
    assert r.model == "all-minilm-l6-v2-f16" and len(vecs[0]) == 384
    assert _cos(vecs[0], vecs[1]) > 0.8 > _cos(vecs[0], vecs[2])
