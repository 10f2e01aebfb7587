"""Every number is finite and in range where it enters: the engine's parameters and the CLI."""

from __future__ import annotations

import math
import os

import pytest

from engine.decode.sampling import Sampler, SamplingParams
from engine.decode.speculative.params import SpeculativeParams
from engine.llama.context_params import ContextParams

NON_FINITE = [math.nan, math.inf, -math.inf]


@pytest.mark.parametrize("value", NON_FINITE)
@pytest.mark.parametrize("name", ["temperature", "top_p", "min_p", "repeat_penalty"])
def test_sampling_refuses_non_finite(name, value):
    with pytest.raises(ValueError, match="finite"):
        SamplingParams(**{name: value})


@pytest.mark.parametrize("value", NON_FINITE)
def test_speculative_refuses_non_finite(value):
    with pytest.raises(ValueError):
        SpeculativeParams(p_min=value)


def test_wrong_types_are_refused():
    with pytest.raises(ValueError):
        SamplingParams(top_k=2.5)
    with pytest.raises(ValueError):
        SpeculativeParams(draft_max=True)
    with pytest.raises(ValueError):
        ContextParams(n_ctx=4096.0)
    with pytest.raises(ValueError):
        ContextParams(n_threads=-3)
    with pytest.raises(ValueError):
        ContextParams(n_ctx=0)


@pytest.mark.parametrize("seed", [0, 2**64 - 1, 2**64, 2**70])
def test_any_integer_seeds_the_sampler(seed):
    import numpy as np

    p = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=seed)
    logits = np.linspace(0, 1, 50, dtype=np.float32)
    assert Sampler(p).pick(logits, [3]) == Sampler(p).pick(logits, [3])


@pytest.mark.parametrize("seed", [-1, -5, -(2**80)])
def test_a_negative_seed_means_a_new_one_every_reply(seed):
    assert SamplingParams(seed=seed).seed == -1


def test_threads_are_bounded_by_the_cores(caplog):
    cores = os.cpu_count() or 1
    assert ContextParams(n_threads=256).threads() == min(cores, 256)
    assert cores >= 256 or "256 threads" in caplog.text
    assert ContextParams(n_threads=1).threads() == 1


@pytest.mark.parametrize("flags", [
    ["--temperature", "nan"], ["--repeat-penalty", "nan"], ["--top-p", "inf"],
    ["--p-min", "nan"], ["--ctx", "0"], ["--threads", "-2"], ["--min-p=-inf"],
])
def test_cli_flags_give_one_line_errors(flags, capsys):
    from engine.cli.main import main

    assert main(["generate", "--model", "test", *flags, "hi"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("duet-cli: error: ") and err.count("\n") == 1


def test_cli_seeds(smol_path):
    from engine.cli.main import build_parser
    from engine.runtime.runtime import config_from_args

    def seed(*flags):
        args = build_parser().parse_args(["generate", "--model", str(smol_path), *flags, "hi"])
        return config_from_args(args).sampling.seed

    assert seed("--seed", "-1") == -1 and seed() == -1 and seed("--seed", "-7") == -1  # random
    assert seed("--seed", str(2**70)) == 2**70 % 2**64 and seed("--seed", "7") == 7


def test_cli_runs_with_any_seed_and_too_many_threads(smol_path, capsys, monkeypatch, caplog):
    from engine.cli.main import main

    monkeypatch.setattr(os, "cpu_count", lambda: 1)  # one spinning thread on a busy machine

    args = ["generate", "--model", str(smol_path), "--max-tokens", "2", "--ctx", "256",
            "--seed", "-7", "--threads", "200", "hi"]
    assert main(args) == 0 and capsys.readouterr().out
    assert "200 threads asked for but this machine has 1 cores" in caplog.text
    assert main([*args[:-2], "10000", "hi"]) == 1
    assert "--threads must be between 0 and 256, not 10000" in capsys.readouterr().err
