"""Images through libmtmd on the real SmolLM2 with the seeded test projector (LLaVA ``mlp``):
an image is a run of positions like text, so rewind, the state caches, drafting and exact
decoding need no image-only path. The replies mean nothing (random weights); the token ids,
cached counts and encoder runs are what is checked."""

from __future__ import annotations

import pytest

from engine.chat.messages import Image, Message
from engine.decode.sampling import SamplingParams
from engine.decode.speculative.controller import CostModel
from engine.decode.speculative.draft_model import ModelDrafter
from engine.decode.speculative.ngram import NgramDrafter
from engine.decode.speculative.params import SpeculativeParams
from engine.decode.speculative.speculator import Speculation
from engine.errors import ModelLoadError
from engine.events import Done
from engine.llama.context import LlamaSequence, Part, decode_batch
from engine.llama.context_params import ContextParams
from engine.llama.media import is_media
from engine.llama.projector import Projector
from engine.prompts.request import Chat, Policy, RequestError, prepare
from engine.runtime.generate import Generator
from tests.images import picture, write_projector

GREEDY = SamplingParams(temperature=0, max_tokens=24)
PHOTO = Image(picture(7), "receipt.png")
OTHER = Image(picture(8), "diagram.png")


def ask(model, text="What is in this picture?", images=(PHOTO,)):
    return [Message("user", text, images=tuple(images))]


def reply(gen, messages, params=GREEDY) -> Done:
    done = list(gen.chat(messages, params))[-1]
    assert isinstance(done, Done) and done.reason in ("stop", "length"), done
    return done


def fresh(model, spec=None, n_ctx=1024):
    return Generator.alone(LlamaSequence(model, ContextParams(n_ctx=n_ctx)), spec)


def test_an_image_is_a_run_of_positions(smol_vision):
    turn = prepare(smol_vision, Chat(tuple(ask(smol_vision)), GREEDY), Policy(1024))
    media = [t for t in turn.prompt if is_media(t)]
    assert len(media) == 16  # (32 / 8)^2 patches of the test projector
    again = prepare(smol_vision, Chat(tuple(ask(smol_vision, "Something else")), GREEDY), Policy(1024))
    assert [t for t in again.prompt if is_media(t)] == media  # named by the picture's content
    other = prepare(smol_vision, Chat(tuple(ask(smol_vision, images=(OTHER,))), GREEDY), Policy(1024))
    assert not set(media) & {t for t in other.prompt if is_media(t)}


def test_same_request_same_tokens_alone_cached_and_beside_another(smol_vision, same_tokens):
    encoded = smol_vision.projector.encoded
    alone = reply(fresh(smol_vision), ask(smol_vision))
    assert smol_vision.projector.encoded <= encoded + 1  # at most this picture, once
    gen = fresh(smol_vision)
    first = reply(gen, ask(smol_vision))
    cached = reply(gen, ask(smol_vision))  # the whole prompt is in the cache
    assert cached.stats.n_cached_tokens == cached.stats.n_prompt_tokens - 1
    same_tokens(smol_vision, None, first.token_ids, alone.token_ids)
    same_tokens(smol_vision, None, cached.token_ids, alone.token_ids)
    # beside another sequence: one pass takes both (decode_batch reads each in turn)
    turn = prepare(smol_vision, Chat(tuple(ask(smol_vision)), GREEDY), Policy(1024))
    other = prepare(smol_vision, Chat(tuple(ask(smol_vision, "Hello", images=())), GREEDY), Policy(1024))
    with LlamaSequence(smol_vision, ContextParams(n_ctx=1024, n_parallel=2)) as ctx:
        a, b = ctx.sequences
        rows = decode_batch([Part(a, turn.prompt), Part(b, other.prompt)])
        assert int(rows[0][-1].argmax()) == alone.token_ids[0]
        assert a.kv_pos_max() == len(turn.prompt) - 1 and b.kv_pos_max() == len(other.prompt) - 1
    assert smol_vision.projector.encoded <= encoded + 1  # never encoded again


def test_the_same_picture_in_a_new_conversation_is_not_encoded_again(smol_vision):
    projector = smol_vision.projector
    reply(fresh(smol_vision), ask(smol_vision, "Describe it.", images=(OTHER,)))
    before = projector.encoded
    done = reply(fresh(smol_vision), [Message("system", "You read receipts."),
                                      *ask(smol_vision, "Total?", images=(OTHER,))])
    assert projector.encoded == before and done.stats.n_cached_tokens == 0  # read, not encoded


def test_editing_the_message_after_an_image_rewinds_without_encoding(smol_vision):
    gen = fresh(smol_vision)
    reply(gen, ask(smol_vision, "What colour is it?"))
    before = smol_vision.projector.encoded
    edited = reply(gen, ask(smol_vision, "What shape is it?"))
    assert smol_vision.projector.encoded == before
    text_before = len(prepare(smol_vision, Chat(tuple(ask(smol_vision, "")), GREEDY), Policy(1024)).prompt)
    assert edited.stats.n_cached_tokens >= text_before - 8  # up to the edit: the image stayed


def test_drafted_replies_are_the_plain_ones(smol_vision, smol, same_tokens):
    msgs = ask(smol_vision, "Repeat after me: red blue green red blue green red blue green")
    plain = reply(fresh(smol_vision), msgs, SamplingParams(temperature=0, max_tokens=40))
    ngram = Speculation(SpeculativeParams(drafter="ngram", adaptive=False), CostModel(((1, 1.0),)),
                        ngram=NgramDrafter())
    drafted = reply(fresh(smol_vision, ngram), msgs, SamplingParams(temperature=0, max_tokens=40))
    same_tokens(smol_vision, None, drafted.token_ids, plain.token_ids)
    assert drafted.stats.proposed > 0
    # a text-only draft model never drafts after an image it did not see
    with LlamaSequence(smol, ContextParams(n_ctx=1024)) as dctx:
        model = Speculation(SpeculativeParams(drafter="model", adaptive=False), CostModel(((1, 1.0),)),
                            model=ModelDrafter(dctx, p_min=0.0))
        by_model = reply(fresh(smol_vision, model), msgs, SamplingParams(temperature=0, max_tokens=40))
        assert by_model.stats.proposed == 0 and not dctx.tokens
    same_tokens(smol_vision, None, by_model.token_ids, plain.token_ids)


def test_a_model_without_a_projector_says_why(smol):
    with pytest.raises(RequestError, match="cannot read images: no vision projector"):
        prepare(smol, Chat(tuple(ask(smol)), GREEDY), Policy(1024))


def test_a_bad_picture_is_a_request_error(smol_vision):
    broken = Image(picture(9, fmt="JPEG")[:200])
    with pytest.raises(RequestError) as e:
        prepare(smol_vision, Chat(tuple(ask(smol_vision, images=(broken,))), GREEDY), Policy(1024))
    assert e.value.code == "invalid_image"


def test_a_projector_of_another_width_is_refused(smol_path, tmp_path):
    from engine.llama.model import Model

    wrong = write_projector(tmp_path / "mmproj-wide.gguf", 896)
    with Model(smol_path) as m:
        with pytest.raises(ModelLoadError, match="projector"):
            Projector(m, wrong, n_threads=1)
        assert m.projector is None
