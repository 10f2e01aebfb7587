"""engine.documents.embeddings: sentence vectors from real models, the dedicated MiniLM and a chat model.

The reference numbers below were computed once with sentence-transformers 6.2.0 (torch 2.13.0
CPU, transformers 5.24.0) on the same all-MiniLM-L6-v2 weights
(``SentenceTransformer(...).encode(SENTENCES, normalize_embeddings=True)``, then ``e @ e.T``):
only the numbers are kept here, not torch."""

from __future__ import annotations

import numpy as np
import pytest

from engine.documents.embeddings import Embedder, EmbeddingSource, InputTooLongError
from engine.errors import DuetError
from engine.llama.context import LlamaSequence
from engine.llama.context_params import ContextParams
from engine.llama.model import Model
from tests.conftest import model_path

TOLERANCE = 5e-4  # a vector's largest difference between a batch and one text alone
SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "A man is riding a horse.",
    "A man is riding a white horse on an enclosed ground.",
    "The new movie is awesome.",
    "The new movie is so great.",
    "The cat sits outside.",
    "How do I reset my password?",
    "I forgot my password and cannot log in.",
    "Python is a programming language.",
]

# sentence-transformers' cosine similarities of SENTENCES (rounded to 4 places)
REFERENCE = np.array([
    [1.0, 0.7553, 0.2474, 0.1707, -0.0461, -0.0311, 0.0836, -0.0012, -0.0063, -0.0471],
    [0.7553, 1.0, 0.1442, 0.1157, -0.0583, -0.0243, 0.1022, -0.009, 0.0196, -0.1202],
    [0.2474, 0.1442, 1.0, 0.7369, 0.013, 0.0158, 0.0262, 0.0704, -0.0322, 0.0511],
    [0.1707, 0.1157, 0.7369, 1.0, 0.0152, 0.0067, 0.165, -0.0105, -0.0648, 0.0254],
    [-0.0461, -0.0583, 0.013, 0.0152, 1.0, 0.9007, -0.0282, -0.0441, -0.0411, 0.0938],
    [-0.0311, -0.0243, 0.0158, 0.0067, 0.9007, 1.0, -0.0079, -0.0344, -0.0305, 0.054],
    [0.0836, 0.1022, 0.0262, 0.165, -0.0282, -0.0079, 1.0, 0.0404, 0.0059, 0.023],
    [-0.0012, -0.009, 0.0704, -0.0105, -0.0441, -0.0344, 0.0404, 1.0, 0.7966, 0.0896],
    [-0.0063, 0.0196, -0.0322, -0.0648, -0.0411, -0.0305, 0.0059, 0.7966, 1.0, 0.1008],
    [-0.0471, -0.1202, 0.0511, 0.0254, 0.0938, 0.054, 0.023, 0.0896, 0.1008, 1.0],
])

# (anchor, paraphrase, unrelated): the paraphrase must come closer, for either model
TRIPLETS = [
    ("The new movie is awesome.", "The new movie is so great.", "The cat sits outside."),
    ("How do I reset my password?", "I forgot my password and cannot log in.", "Python is a programming language."),
    ("The stock market fell sharply.", "Shares dropped a lot today.", "My dog loves the beach."),
    ("Where is the nearest train station?", "How do I get to the railway station?", "I like green tea."),
    ("The meeting was postponed.", "The meeting has been delayed.", "Birds migrate in winter."),
]


@pytest.fixture(scope="module")
def minilm():
    with Model(model_path("embed")) as m:
        yield m


@pytest.fixture(scope="module")
def mini(minilm):
    with Embedder(minilm) as e:
        yield e


@pytest.fixture(scope="module")
def smol_embedder(smol):
    with Embedder(smol) as e:
        yield e


# --- the dedicated model -------------------------------------------------------------------------


def test_minilm_takes_its_pooling_and_size_from_the_gguf(mini: Embedder) -> None:
    assert (mini.pooling, mini.n_embd, mini.n_ctx) == ("mean", 384, 512)


def test_minilm_tokenizes_as_the_hugging_face_tokenizer(mini: Embedder) -> None:
    # transformers' BertTokenizerFast on the same files: lower case, accents stripped, CLS/SEP
    assert mini.tokenize("A man is eating food.") == [101, 1037, 2158, 2003, 5983, 2833, 1012, 102]
    assert mini.tokenize("Héllo WORLD, unbelievable!") == [101, 7592, 2088, 1010, 23653, 999, 102]


def test_minilm_matches_sentence_transformers(mini: Embedder) -> None:
    v = mini.embed(SENTENCES)
    assert v.dtype == np.float32 and v.shape == (len(SENTENCES), 384)
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    sims = v @ v.T
    # F16 weights: within 0.002 of the float32 reference (measured: 3e-4) ...
    assert np.abs(sims - REFERENCE).max() < 2e-3
    # ... and the same nearest neighbour for every sentence, and the same order of all pairs
    off = ~np.eye(len(SENTENCES), dtype=bool)
    assert (np.where(off, sims, -2).argmax(1) == np.where(off, REFERENCE, -2).argmax(1)).all()
    iu = np.triu_indices(len(SENTENCES), 1)
    assert _spearman(sims[iu], REFERENCE[iu]) > 0.99


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = a.argsort().argsort(), b.argsort().argsort()
    return float(np.corrcoef(ra, rb)[0, 1])


@pytest.mark.parametrize("which", ["mini", "smol_embedder"])
def test_paraphrases_are_closer_than_unrelated_sentences(which: str, request: pytest.FixtureRequest) -> None:
    e: Embedder = request.getfixturevalue(which)
    for anchor, near, far in TRIPLETS:
        a, p, n = e.embed([anchor, near, far])
        assert a @ p > a @ n + 0.05, (anchor, float(a @ p), float(a @ n))


@pytest.mark.parametrize("which", ["mini", "smol_embedder"])
def test_batching_gives_the_vectors_of_one_at_a_time(which: str, request: pytest.FixtureRequest) -> None:
    e: Embedder = request.getfixturevalue(which)
    together = e.embed(SENTENCES)  # one llama_decode, ten sequences
    alone = np.stack([e.embed([s])[0] for s in SENTENCES])
    # (an embedding model's passes use flash attention, whose tiled sums differ by ~1e-4 with
    # the batch: engine/documents/embeddings.py; the cosine similarities move by far less)
    assert np.abs(together - alone).max() < TOLERANCE


def test_inputs_are_split_into_batches_by_count_and_by_tokens(minilm: Model, mini: Embedder) -> None:
    alone = mini.embed(SENTENCES)
    with Embedder(minilm, max_seqs=3, n_ctx=24) as small:
        assert [len(g) for _, g in small._batches([small.tokenize(s) for s in SENTENCES])] == [2, 2, 3, 2, 1]
        assert np.abs(small.embed(SENTENCES) - alone).max() < TOLERANCE


def test_usage_counts_the_tokens_read(mini: Embedder) -> None:
    vectors, n_tokens = mini.embed_counted(SENTENCES[:3])
    assert vectors.shape == (3, 384)
    assert n_tokens == mini.n_tokens == 8 + 11 + 9  # as the Hugging Face tokenizer counts them


# --- refusals ------------------------------------------------------------------------------------


def test_an_input_longer_than_the_context_is_refused_in_one_line(mini: Embedder) -> None:
    long_text = "word " * 600
    with pytest.raises(InputTooLongError) as info:
        mini.embed(["short", long_text])
    message = str(info.value)
    assert "\n" not in message
    assert message == "input 1 is too long to embed: 602 tokens, the most is 512"
    assert (info.value.index, info.value.n_tokens, info.value.limit) == (1, 602, 512)
    assert isinstance(info.value, DuetError)
    assert mini.embed(["short"]).shape == (1, 384)  # nothing was decoded; it still works


def test_a_single_string_is_not_taken_for_a_list_of_characters(mini: Embedder) -> None:
    with pytest.raises(TypeError):
        mini.embed("A man is eating food.")  # type: ignore[arg-type]


def test_no_inputs_give_no_rows(mini: Embedder) -> None:
    assert mini.embed([]).shape == (0, 384)


# --- a chat model --------------------------------------------------------------------------------


def test_a_chat_model_embeds_beside_its_chat_context(smol: Model, smol_embedder: Embedder) -> None:
    """The model has no pooling in its metadata: mean. Its chat context, on the same weights,
    is not disturbed by the embedder's decodes."""
    assert (smol_embedder.pooling, smol_embedder.n_embd) == ("mean", smol.n_embd)
    with LlamaSequence(smol, ContextParams(n_ctx=256)) as chat:
        prompt = smol.tokenize("The capital of France is")
        chat.decode(prompt)
        before = chat.logits().copy()
        v = smol_embedder.embed(SENTENCES[:4])
        assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
        chat.rewind(0)
        chat.decode(prompt)
        assert np.array_equal(chat.logits(), before)


def test_closing_the_model_closes_its_embedder(smol_path) -> None:
    with Model(smol_path) as model:
        e = Embedder(model)
        assert e.embed(["hello"]).shape == (1, model.n_embd)
    with pytest.raises(DuetError, match="closed"):
        e.embed(["hello"])


def test_a_source_reads_each_text_once_and_gives_its_vector_again(smol: Model) -> None:
    asked: list[list[str]] = []
    source = EmbeddingSource(smol, model_path("embed"))
    counted = source.embed_counted
    source.embed_counted = lambda texts: (asked.append(list(texts)), counted(texts))[1]  # type: ignore[method-assign]
    try:
        first = source.embed(SENTENCES[:3])
        again = source.embed([SENTENCES[2], SENTENCES[0], SENTENCES[3], SENTENCES[0]])
        assert asked == [SENTENCES[:3], [SENTENCES[3]]]  # only the new text is read
        assert np.array_equal(again[0], first[2]) and np.array_equal(again[1], first[0])
        assert np.array_equal(again[3], first[0])
        fresh = source.embed_counted([SENTENCES[3]])[0][0]
        assert np.abs(again[2] - fresh).max() < TOLERANCE
    finally:
        source.close()


def test_a_text_too_long_is_named_by_its_index_among_the_texts_asked(smol: Model) -> None:
    """The source reads only texts it does not remember; its refusal must still name the text
    by its place in the caller's list (retrieval cuts that text and asks again)."""
    source = EmbeddingSource(smol, model_path("embed"))
    long = "word " * 600  # past all-MiniLM's 512 tokens
    try:
        source.embed(SENTENCES[:2])
        with pytest.raises(InputTooLongError) as caught:
            source.embed([SENTENCES[0], SENTENCES[1], long])
        assert caught.value.index == 2  # (it is the first of the texts not yet remembered)
    finally:
        source.close()
