"""One server over the four local models by name (engine.runtime.pool through
engine.server.run.offered and open_model, as ``duet-cli serve`` builds it), driven by the real
openai, anthropic and ollama clients: a model loads on its first request, the memory budget
holds (the two largest models, no more) whatever the order, an idle model expires, ``keep_alive`` 0
unloads it, and a file that will not load is named in a clear error while the others serve."""

from __future__ import annotations

from dataclasses import dataclass

import anthropic
import ollama
import openai
import pytest

from engine.decode.sampling import SamplingParams
from engine.decode.speculative.params import SpeculativeParams
from engine.llama.context_params import ContextParams
from engine.llama.model import ModelSpec
from engine.models.hub.remote_header import local_header
from engine.runtime.pool import Pool
from engine.runtime.runtime import RuntimeConfig
from engine.server.app import ApiConfig, create_pool_app
from engine.server.run import BackgroundServer, offered, open_model
from tests.conftest import REPLY_WAIT_S

KEY = "fleet-key"
NAMES = ("test", "gemma", "draft", "target")  # the catalogue's keys: each answers to its own


@dataclass
class Fleeted:
    url: str
    fleet: Pool
    peaks: list[int]  # the fleet's estimated use at each load's start (the reservation included)
    loads: list[str]

    def openai(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=KEY, max_retries=0,
                             timeout=REPLY_WAIT_S)

    def ollama(self) -> ollama.Client:
        return ollama.Client(host=self.url, headers={"Authorization": f"Bearer {KEY}"},
                             timeout=REPLY_WAIT_S)

    def anthropic(self) -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=self.url, api_key=KEY, max_retries=0,
                                   timeout=REPLY_WAIT_S)

    def loaded(self) -> list[str]:
        return [lo.offer.name for lo in self.fleet.loaded()]


def serve(smol_path, extra_dirs=(), *, two: bool = True, ttl_s: float = 600):
    """The server ``duet-cli serve --model test --drafter none`` builds, over the models folder
    (and ``extra_dirs``); ``two``: a budget that holds the two largest models and no more."""
    config = RuntimeConfig(target=ModelSpec(smol_path),
                           context=ContextParams(n_ctx=512, n_threads=0),
                           sampling=SamplingParams(temperature=0, max_tokens=4),
                           speculative=SpeculativeParams(drafter="none"))
    offers = offered(config, list(extra_dirs), "test")
    needs = sorted(o.bytes_needed for o in offers)
    budget = needs[-1] + needs[-2] if two else sum(needs)
    api = ApiConfig(offers[0].name, offers[0].aliases, api_key=KEY)
    peaks: list[int] = []
    loads: list[str] = []
    fleet: Pool

    def load(offer, cores):
        peaks.append(fleet.used)
        loads.append(offer.name)
        return open_model(config, api, 8, offer, cores)

    fleet = Pool(offers, load, budget=budget, max_loaded=4, ttl_s=ttl_s)
    server = BackgroundServer(create_pool_app(fleet, api, config.sampling))
    return server, Fleeted(server.url, fleet, peaks, loads)


@pytest.fixture(scope="module")
def fleeted(smol_path, duet_home):
    server, handle = serve(smol_path)
    yield handle
    server.close()
    handle.fleet.close()


def test_every_local_chat_model_is_listed_by_name_and_none_is_loaded_before_it_is_asked(fleeted):
    c = fleeted.openai()
    listed = {m.id: m for m in c.models.list().data}
    assert set(listed) == {o.name for o in fleeted.fleet.offers} and len(listed) == 4
    assert not any("minilm" in name for name in listed)  # the embedding model is not a chat model
    for m in listed.values():
        extra = m.model_extra or {}
        assert extra["status"]["value"] in ("loaded", "unloaded") and extra["meta"]["memory"] > 0
    tags = {m.model for m in fleeted.ollama().list().models}
    assert tags == set(listed)


def test_each_client_switches_models_by_name_and_the_budget_holds(fleeted):
    o, a, ol = fleeted.openai(), fleeted.anthropic(), fleeted.ollama()
    order = ["test", "target", "gemma", "draft", "target", "test", "draft", "gemma"]
    for i, name in enumerate(order):
        offer = fleeted.fleet.find(name)
        if name == "gemma":  # a base model (no chat template): raw prompts only
            c = o.completions.create(model=name, prompt="Hi", max_tokens=4)
            assert c.model == offer.name and c.choices[0].text is not None
        elif i % 3 == 0:
            r = o.chat.completions.create(model=name, messages=[{"role": "user", "content": "Hi"}])
            assert r.model == offer.name and r.choices[0].message.content is not None
        elif i % 3 == 1:
            m = a.messages.create(model=name, max_tokens=4,
                                  messages=[{"role": "user", "content": "Hi"}])
            assert m.model == offer.name and m.content
        else:
            g = ol.chat(model=f"{name}:latest", messages=[{"role": "user", "content": "Hi"}],
                        options={"num_predict": 4})
            assert g.model == offer.name and g.message.content is not None
        assert offer.name in fleeted.loaded()
        assert sum(lo.offer.bytes_needed for lo in fleeted.fleet.loaded()) <= fleeted.fleet.budget
    assert max(fleeted.peaks) <= fleeted.fleet.budget
    assert len(fleeted.loads) > 4  # models were unloaded and loaded again to keep to it
    ps = {m.model for m in ol.ps().models}
    assert ps == set(fleeted.loaded())


def test_a_loaded_model_answers_without_loading_again(fleeted):
    c = fleeted.openai()
    c.chat.completions.create(model="test", messages=[{"role": "user", "content": "Hi"}])
    before = list(fleeted.loads)
    for _ in range(3):
        c.chat.completions.create(model="test", messages=[{"role": "user", "content": "Hi"}])
    assert fleeted.loads == before


def test_keep_alive_zero_and_the_routers_routes_unload(fleeted):
    ol = fleeted.ollama()
    ol.generate(model="gemma", prompt="Hi", options={"num_predict": 2})
    assert "gemma-3-270m-q4_k_m" in fleeted.loaded()
    gone = ol.generate(model="gemma", prompt="", keep_alive=0)  # Ollama's way to unload
    assert gone.done_reason == "unload" and "gemma-3-270m-q4_k_m" not in fleeted.loaded()
    http = openai.OpenAI(base_url=fleeted.url, api_key=KEY, max_retries=0, timeout=REPLY_WAIT_S)
    assert http.post("/models/load", body={"model": "gemma"}, cast_to=object) == {"success": True}
    assert "gemma-3-270m-q4_k_m" in fleeted.loaded()
    assert http.post("/models/unload", body={"model": "gemma"}, cast_to=object) == {"success": True}
    assert http.post("/models/unload", body={"model": "gemma"}, cast_to=object) == {"success": False}
    ol.generate(model="gemma", prompt="Hi", keep_alive=0, options={"num_predict": 2})
    # the reply's lease ends once its last byte is sent; the fleet's thread unloads it then
    assert fleeted.fleet.wait_until(lambda f: "gemma-3-270m-q4_k_m" not in fleeted.loaded(),
                                    REPLY_WAIT_S)


def test_a_keep_alive_of_ages_is_listed_as_for_ever(fleeted):
    """Ollama's keep_alive may be any number of seconds; /api/ps said 500 ("year 684062144 is out
    of range") after a keep_alive of 10^16 s, which the API fuzz sent."""
    ol = fleeted.ollama()
    ol.generate(model="test", prompt="Hi", options={"num_predict": 2}, keep_alive=1e16)
    listed = {m.model: m for m in ol.ps().models}
    assert listed["smollm2-135m-instruct-q4_1"].expires_at.year == 2318  # Ollama's "for ever"


def test_a_model_loaded_ahead_reads_its_templates_opening_before_its_first_request(fleeted):
    """Between its load and its first request a model reads what every chat without a system
    message starts with (the default system prompt, the user's header): the first request
    reads only its own part."""
    name = fleeted.fleet.find("draft").name  # Qwen's template: a default system prompt
    if fleeted.fleet.unload(name):
        assert fleeted.fleet.wait_until(lambda f: name not in fleeted.loaded(), REPLY_WAIT_S)
    http = openai.OpenAI(base_url=fleeted.url, api_key=KEY, max_retries=0, timeout=REPLY_WAIT_S)
    assert http.post("/models/load", body={"model": name}, cast_to=object) == {"success": True}
    served = next(lo.value for lo in fleeted.fleet.loaded() if lo.offer.name == name)
    assert served.engine.wait_until(lambda e: len(e.runtime.ctx.tokens) > 0, REPLY_WAIT_S)
    r = fleeted.openai().chat.completions.create(
        model=name, max_tokens=2, messages=[{"role": "user", "content": "Name a colour."}])
    cached = r.usage.prompt_tokens_details.cached_tokens
    assert 10 < cached < r.usage.prompt_tokens, r.usage  # the opening, not the question


def test_an_unknown_name_is_a_404_in_each_dialect(fleeted):
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        fleeted.openai().chat.completions.create(model="nothing", messages=[
            {"role": "user", "content": "Hi"}])
    with pytest.raises(anthropic.NotFoundError):
        fleeted.anthropic().messages.create(model="nothing", max_tokens=2, messages=[
            {"role": "user", "content": "Hi"}])
    with pytest.raises(ollama.ResponseError, match="does not exist"):
        fleeted.ollama().chat(model="nothing", messages=[{"role": "user", "content": "Hi"}])


def test_idle_models_unload_after_the_time_to_live(smol_path, duet_home):
    server, handle = serve(smol_path, two=False, ttl_s=0)
    try:
        c = handle.openai()
        c.chat.completions.create(model="test", messages=[{"role": "user", "content": "Hi"}])
        # due as the reply's lease ends (ttl 0): the fleet's own thread unloads it
        assert handle.fleet.wait_until(lambda f: handle.loaded() == [], REPLY_WAIT_S)
        listed = {m.id: (m.model_extra or {})["status"]["value"] for m in c.models.list().data}
        assert set(listed.values()) == {"unloaded"}
    finally:
        server.close()
        handle.fleet.close()


def test_a_file_that_will_not_load_is_named_and_the_others_serve(smol_path, duet_home, tmp_path):
    broken = tmp_path / "more" / "broken-model.gguf"
    broken.parent.mkdir()
    with open(smol_path, "rb") as src:  # its header, and half its data
        broken.write_bytes(src.read(local_header(smol_path).header_size + smol_path.stat().st_size // 2))
    assert broken.stat().st_size < smol_path.stat().st_size
    server, handle = serve(smol_path, [broken.parent], two=False)
    try:
        c = handle.openai()
        with pytest.raises(openai.InternalServerError) as e:
            c.chat.completions.create(model="broken-model", messages=[{"role": "user", "content": "Hi"}])
        message = e.value.body["message"] if isinstance(e.value.body, dict) else str(e.value)
        assert str(broken) in message and "could not load" in message and "\n" not in message
        r = c.chat.completions.create(model="test", messages=[{"role": "user", "content": "Hi"}])
        assert r.choices[0].message.content is not None
        status = {m.id: (m.model_extra or {})["status"] for m in c.models.list().data}
        assert status["broken-model"]["failed"] is True
    finally:
        server.close()
        handle.fleet.close()
