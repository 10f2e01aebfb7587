"""Speculative decoding on real models: exactness, acceptance, cache consistency, compatibility."""

import threading

import pytest

from engine.chat.messages import Message
from engine.decode.sampling import SamplingParams
from engine.decode.speculative.compat import check_pair
from engine.decode.speculative.params import SpeculativeParams
from engine.events import Done, Token
from engine.llama.context_params import ContextParams
from engine.llama.model import Model, ModelSpec
from engine.runtime.runtime import Runtime, RuntimeConfig

GREEDY = SamplingParams(temperature=0, max_tokens=48)
REPEAT = ("Repeat this list exactly, twice, one item per line: apple, banana, cherry, date, "
          "elderberry, fig, grape, honeydew, kiwi, lemon, mango, nectarine.")


def runtime(path, drafter="none", draft=None, **spec):
    cfg = RuntimeConfig(target=ModelSpec(path), draft=ModelSpec(draft) if draft else None,
                        context=ContextParams(n_ctx=1024), sampling=GREEDY,
                        speculative=SpeculativeParams(drafter=drafter, **spec))
    return Runtime(cfg)


def reply(rt, text=REPEAT, params=GREEDY, cancel=None):
    events = list(rt.generator.chat([Message("user", text)], params, cancel))
    assert isinstance(events[-1], Done)
    return events


def check_cache(rt, done):
    """The KV cache holds exactly prompt + reply minus its last token, in both contexts' mirrors."""
    assert rt.ctx.n_past == done.stats.n_prompt_tokens + done.stats.n_tokens - 1
    assert rt.ctx.kv_pos_max() == rt.ctx.n_past - 1
    if rt.draft_ctx is not None:
        assert rt.draft_ctx.kv_pos_max() == rt.draft_ctx.n_past - 1


@pytest.fixture(scope="module")
def plain(smol_path):
    with runtime(smol_path) as rt:
        yield reply(rt)[-1]


def test_target_as_its_own_draft_accepts_and_reproduces_plain(smol_path, plain):
    with runtime(smol_path, "model", draft=smol_path, adaptive=False, p_min=0.0, draft_max=4) as rt:
        events = reply(rt)
        done = events[-1]
        assert done.token_ids == plain.token_ids
        assert done.stats.proposed > 20
        assert done.stats.acceptance_rate > 0.95
        assert done.stats.tokens_per_pass > 3
        drafted = [e for e in events if isinstance(e, Token) and e.from_draft]
        assert drafted and all(e.drafter == "model" for e in drafted)
        check_cache(rt, done)
        # the draft context follows by delta sync: it holds the accepted history
        assert rt.draft_ctx.tokens[: rt.ctx.n_past] == rt.ctx.tokens[: len(rt.draft_ctx.tokens)]


def test_ngram_drafter_accepts_on_repetitive_text_and_matches_plain(smol_path, plain):
    with runtime(smol_path, "ngram", adaptive=False, draft_max=8) as rt:
        done = reply(rt)[-1]
        assert done.token_ids == plain.token_ids
        assert done.stats.accepted > 10 and done.stats.drafters_used.get("ngram", 0) > 0
        check_cache(rt, done)
        # a second turn continues from the cache after partial acceptances
        again = list(rt.generator.chat([Message("user", REPEAT), Message("assistant", done.text),
                                        Message("user", "Now only the first three.")], GREEDY))[-1]
        assert again.stats.n_cached_tokens > done.stats.n_prompt_tokens
        check_cache(rt, again)


def test_eog_inside_an_accepted_run_ends_the_reply(smol_path):
    with runtime(smol_path, "model", draft=smol_path, adaptive=False, p_min=0.0, draft_max=16) as rt:
        done = reply(rt, "Say yes.", SamplingParams(temperature=0, max_tokens=100))[-1]
        assert done.reason == "stop" and rt.target.is_eog(done.token_ids[-1])
        assert not any(rt.target.is_eog(t) for t in done.token_ids[:-1])
        check_cache(rt, done)


def test_cancel_mid_run_leaves_consistent_caches(smol_path):
    with runtime(smol_path, "model", draft=smol_path, adaptive=False, p_min=0.0, draft_max=8) as rt:
        cancel = threading.Event()
        n = 0
        for ev in rt.generator.chat([Message("user", REPEAT)], SamplingParams(temperature=0, max_tokens=300), cancel):
            if isinstance(ev, Token):
                n += 1
                if n == 10:
                    cancel.set()
            done = ev
        assert done.reason == "cancelled" and done.stats.n_tokens < 40
        check_cache(rt, done)
        assert reply(rt, "Hi")[-1].stats.n_tokens > 0


@pytest.mark.parametrize("drafter", ["model", "ngram"])
def test_a_seeded_sampled_reply_is_the_same_with_and_without_drafts(smol_path, drafter):
    """Sampling draws by (seed, position): verifying a draft accepts exactly the token plain
    sampling draws there, so --seed reproduces a reply under any drafter."""
    p = SamplingParams(temperature=0.8, seed=3, max_tokens=40)
    with runtime(smol_path) as rt:
        plain = reply(rt, params=p)[-1]
    kw = dict(draft=smol_path) if drafter == "model" else {}
    with runtime(smol_path, drafter, adaptive=False, p_min=0.0, draft_max=4, **kw) as rt:
        a = reply(rt, params=p)[-1]
        check_cache(rt, a)
        assert a.stats.accepted > 0
    assert a.token_ids == plain.token_ids


def test_incompatible_pairs_are_refused_with_reason(smol, qwen_target, qwen_draft, gemma):
    assert check_pair(qwen_target, qwen_draft) is None
    assert check_pair(qwen_target, smol) == \
        "the draft's vocabulary has 49,152 tokens, the target's 151,936"
    assert check_pair(qwen_target, gemma) == \
        "the draft's vocabulary has 262,144 tokens, the target's 151,936"
    assert check_pair(smol, gemma) == "the draft's vocabulary has 262,144 tokens, the target's 49,152"


def test_runtime_falls_back_to_ngram_with_incompatible_draft(smol_path):
    from tests.conftest import model_path

    with runtime(smol_path, "auto", draft=model_path("gemma")) as rt:
        assert rt.draft_ctx is None and rt.draft_model is None
        with Model(ModelSpec(model_path("gemma"), vocab_only=True)) as gemma_vocab:
            reason = check_pair(rt.target, gemma_vocab)
        assert reason and rt.draft_problem == f"the draft model cannot be used with this target: {reason}"
        assert rt.speculation.ngram is not None and rt.speculation.model is None


@pytest.mark.parametrize("last_n", [64, 0])
def test_greedy_verify_applies_the_repeat_penalty_as_plain_decoding_does(smol_path, last_n):
    """Greedy verification penalises the same window as the sampler: the last ``last_n`` tokens,
    or none at all when it is 0 (llama.cpp's "off", not "the whole history")."""
    params = SamplingParams(temperature=0, max_tokens=48, repeat_penalty=1.5, repeat_last_n=last_n)
    with runtime(smol_path) as rt:
        want = reply(rt, params=params)[-1]
    with runtime(smol_path, "model", draft=smol_path, adaptive=False, p_min=0.0, draft_max=4) as rt:
        got = reply(rt, params=params)[-1]
        check_cache(rt, got)
    assert got.stats.proposed > 20  # the verify path ran
    assert got.token_ids == want.token_ids  # a verify that skipped the penalty would part
