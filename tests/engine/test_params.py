"""The parameter table: one declaration per parameter, and everything derived from it agrees."""

import argparse
import math

import pytest

from engine import params
from engine.cache.params import CacheParams
from engine.conversation.presets import Preset
from engine.decode.sampling import SamplingParams
from engine.decode.speculative.params import SpeculativeParams
from engine.llama.context_params import ContextParams
from engine.llama.placement_params import MAX_GPU_LAYERS, PlacementParams
from engine.params import ParamError
from engine.runtime.runtime import add_runtime_arguments, config_from_args

CLASSES = (SamplingParams, SpeculativeParams, ContextParams, CacheParams, PlacementParams)


def edges(row: params.Param) -> list[tuple[object, bool]]:
    """Values at and just past a row's bounds, each with whether the row must accept it."""
    s = row.spec
    if s.choices:
        return [(c, True) for c in s.choices] + [("bogus", False)]
    if row.type is bool:
        return [(True, True), (False, True), (1, False)]
    out: list[tuple[object, bool]] = []
    if s.coerce is not None:  # any integer is folded into the range (the seed)
        return [(-5, True), (2**70, True), (1.5, False)]
    if s.minimum is not None:
        lo = row.type(s.minimum)
        out.append((lo, not s.exclusive_minimum))
        out.append((lo - (1 if row.type is int else 0.01), False))
    if s.maximum is not None:
        hi = row.type(s.maximum)
        out += [(hi, True), (hi + (1 if row.type is int else 0.01), False)]
    if row.type is float:
        out += [(math.nan, False), (math.inf, False)]
    return out


@pytest.mark.parametrize("cls", CLASSES)
def test_the_dataclass_checks_each_row_at_its_bounds(cls):
    for row in params.table(cls):
        if row.type is tuple:
            continue
        for value, ok in edges(row):
            # the widest pairs, so that the rules across fields (min <= max) hold
            base = (dict(draft_min=1, draft_max=64, ngram_min=1, ngram_max=16)
                    if cls is SpeculativeParams else {})
            kwargs = {**base, row.name: value}
            if ok:
                cls(**kwargs)
            else:
                with pytest.raises(ParamError) as e:
                    cls(**kwargs)
                assert e.value.name == row.name and "\n" not in str(e.value)


def test_an_int_is_a_float_but_a_bool_is_not_a_number():
    assert SamplingParams(temperature=1).temperature == 1.0
    assert type(SamplingParams(temperature=1).temperature) is float
    with pytest.raises(ParamError, match="top-k must be an integer"):
        SamplingParams(top_k=True)


def test_every_setting_and_preset_value_is_one_the_engine_takes():
    """The app's settings and the presets check values with the table's rows: a value they
    accept can never be refused later by SamplingParams (the Top-p 0 / Min-p 1 trap)."""
    from app.control.settings import DEFAULTS, OPTIONS, sampling_params

    for row in params.table(SamplingParams):
        if row.type is tuple:
            continue
        option = OPTIONS[row.name]
        for value, _ in edges(row):
            try:
                option.validate(value)
            except ValueError:
                continue
            sampling_params({**DEFAULTS, row.name: value})  # must not raise
            Preset.from_json({"name": "p", row.name: value})


def test_a_preset_cannot_hold_a_value_the_engine_refuses():
    with pytest.raises(ValueError, match="top-p"):
        Preset.from_json({"name": "p", "top_p": 1.5})
    with pytest.raises(ValueError):
        Preset.from_json({"name": "p", "drafter": "bogus"})
    assert Preset.from_json({"name": "p", "drafter": "none"}).drafter == "none"


def test_a_preset_keeps_every_sampling_value():
    """Applying a preset gives the conversation all of its sampling values (none silently
    reset to the engine's defaults)."""
    p = Preset.from_json({"name": "p", "top_k": 7, "min_p": 0.2, "repeat_penalty": 1.3,
                          "temperature": 0.4})
    chat = p.chat_settings()
    assert (chat["top_k"], chat["min_p"], chat["repeat_penalty"], chat["temperature"]) == \
        (7, 0.2, 1.3, 0.4)
    assert Preset.from_json(p.to_json()) == p


def test_requests_are_read_under_each_dialects_names():
    base = SamplingParams()
    got = params.read(SamplingParams, {"max_completion_tokens": 9, "max_tokens": 3,
                                       "stop": "x", "temperature": 0}, "openai", base)
    assert (got.max_tokens, got.stop, got.temperature) == (9, ("x",), 0.0)
    got = params.read(SamplingParams, {"num_predict": 5, "top_k": 3}, "ollama", base)
    assert (got.max_tokens, got.top_k) == (5, 3)
    got = params.read(SamplingParams, {"stop_sequences": ["a", "b"]}, "anthropic", base)
    assert got.stop == ("a", "b")
    assert params.read(SamplingParams, {"seed": -7}, "openai", base).seed == -1
    assert params.read(SamplingParams, {"temperature": None}, "openai", base) is base


@pytest.mark.parametrize("body, field", [({"temperature": "hot"}, "temperature"),
                                         ({"max_completion_tokens": 0}, "max_completion_tokens"),
                                         ({"top_p": 2}, "top_p"), ({"stop": [1]}, "stop")])
def test_a_bad_request_value_names_the_field_as_the_client_sent_it(body, field):
    with pytest.raises(ParamError) as e:
        params.read(SamplingParams, body, "openai", SamplingParams())
    assert e.value.api_name == field and field in str(e.value)


def test_the_command_line_flags_come_from_the_table():
    p = argparse.ArgumentParser()
    add_runtime_arguments(p)
    flags = {a for action in p._actions for a in action.option_strings}
    for cls in CLASSES:
        for row in params.table(cls):
            if row.cli is not None:
                assert row.cli in flags
    args = p.parse_args(["--model", "/nonexistent.gguf", "--top-p", "0.5", "--stop", "a",
                         "--stop", "b", "--ctx", "512", "--kv-type", "q8_0", "--seed", "-3",
                         "--drafter", "none"])
    cfg = config_from_args(args)
    assert cfg.sampling.top_p == 0.5 and cfg.sampling.stop == ("a", "b")
    assert cfg.sampling.seed == -1 and cfg.speculative.drafter == "none"
    assert (cfg.context.n_ctx, cfg.context.type_k, cfg.context.type_v) == (512, "q8_0", "q8_0")


def test_the_openapi_properties_carry_the_ranges():
    props = params.api_properties(SamplingParams, "openai")
    assert props["temperature"]["maximum"] == 2 and props["temperature"]["default"] == 0.7
    assert props["top_p"]["minimum"] == 0 and "max_completion_tokens" in props
    assert "num_predict" in params.api_properties(SamplingParams, "ollama")


def test_gpu_layers_have_one_range_everywhere(tmp_path):
    """The target's and the draft's flags, the settings and a model's remembered settings all
    take -1..MAX_GPU_LAYERS, from one row."""
    from app.control.settings import SCHEMA
    from engine.runtime.model_settings import ModelSettings

    p = argparse.ArgumentParser()
    add_runtime_arguments(p)
    for flags in (["--gpu-layers", str(MAX_GPU_LAYERS + 1)], ["--gpu-layers", "-2"]):
        with pytest.raises(Exception, match="--gpu-layers"):
            config_from_args(p.parse_args(["--model", "/nonexistent.gguf", *flags]))
    with pytest.raises(SystemExit):  # argparse's own one-line refusal
        p.parse_args(["--draft-gpu-layers", str(MAX_GPU_LAYERS + 1)])
    args = p.parse_args(["--model", "/m.gguf", "--draft", "/d.gguf", "--gpu-layers", "-1"])
    cfg = config_from_args(args)
    assert cfg.target.n_gpu_layers == -1 and cfg.draft is not None and cfg.draft.n_gpu_layers == -1
    options = {o.name: o for o in SCHEMA}
    for name in ("gpu_layers_target", "gpu_layers_draft"):
        assert options[name].validate(MAX_GPU_LAYERS) == MAX_GPU_LAYERS
        with pytest.raises(ValueError):
            options[name].validate(MAX_GPU_LAYERS + 1)
    assert ModelSettings.from_json({"n_gpu_layers": MAX_GPU_LAYERS + 1}) is None
    assert ModelSettings.from_json({"n_gpu_layers": 7}) == ModelSettings(n_gpu_layers=7)


def test_every_name_a_request_gives_is_checked_though_the_first_wins():
    base = SamplingParams()
    got = params.read(SamplingParams, {"max_completion_tokens": 7, "max_tokens": 9}, "openai", base)
    assert got.max_tokens == 7
    with pytest.raises(ParamError) as e:  # found by the API fuzz: max_tokens 0 was let through
        params.read(SamplingParams, {"max_completion_tokens": 7, "max_tokens": 0}, "openai", base)
    assert e.value.api_name == "max_tokens"
