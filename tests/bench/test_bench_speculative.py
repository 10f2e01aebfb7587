"""The suite's runner on the real test model: multi-turn prompts reuse the first turn's cache, and
a tiny run writes the JSON, Markdown and per-category summary."""

import json

import pytest

from bench import speculative
from bench.cli import main
from bench.report import geomean, summarize
from bench.suite import build_suite, suite_hash
from engine.chat.fit import chat_tokens
from engine.chat.messages import Message
from engine.decode.sampling import SamplingParams
from engine.llama.context_params import ContextParams

TURNS = ("Name three colours.", "Now name three more, different from those.")


@pytest.fixture(scope="module")
def plain_rt(smol_path):
    rt = speculative._runtime("plain", smol_path, smol_path, ContextParams(n_ctx=1024, n_threads=1),
                              SamplingParams(temperature=0, max_tokens=16), draft_max=8)
    yield rt
    rt.close()


def test_second_turn_reuses_the_first_turns_cache(plain_rt):
    sampling = SamplingParams(temperature=0, max_tokens=16)
    plain_rt.ctx.clear()
    result = speculative._run_turns(plain_rt, TURNS, sampling)
    first = chat_tokens(plain_rt.target, [Message("user", TURNS[0])])
    second = result["prompt_ids"]
    # Turn 2's prompt holds turn 1's prompt, its reply (16 tokens) and the new message ...
    assert second[:len(first)] == first and len(second) > len(first) + 16
    assert TURNS[1] in plain_rt.target.detokenize(second[len(first):])
    # ... and turn 1's prompt and reply came from the cache: only the rest was decoded.
    assert result["n_cached"] >= len(first) + 12
    assert result["n_tokens"] > 0 and result["tokens_per_s"] > 0


def test_identity_is_judged_on_the_whole_conversation(plain_rt):
    """A reply that parts from plain in an earlier turn gives the timed turn another prompt:
    the report says where the conversation parted, not where two unrelated replies differ."""
    sampling = SamplingParams(temperature=0, max_tokens=16)
    plain_rt.ctx.clear()
    plain = speculative._run_turns(plain_rt, TURNS, sampling)
    prompt, ids = plain["prompt_ids"], plain["token_ids"]
    assert speculative._compare(plain_rt, prompt, ids, dict(plain)) == {"identical": True}
    swapped = dict(plain, token_ids=ids[:3] + [ids[3] + 1] + ids[4:])
    assert speculative._compare(plain_rt, prompt, ids, swapped)["first_diff"] == 3
    first = chat_tokens(plain_rt.target, [Message("user", TURNS[0])])
    earlier = dict(plain, prompt_ids=prompt[:len(first) + 2] + [prompt[len(first) + 2] + 1]
                   + prompt[len(first) + 3:])
    got = speculative._compare(plain_rt, prompt, ids, earlier)
    assert got["identical"] is False and got["earlier_turn"] is True
    assert got["first_diff"] == len(first) + 2 and got["margin"] >= 0


def test_a_tiny_suite_run_writes_the_reports(tmp_path, capsys):
    code = main(["speculative", "--suite", "--model", "test", "--draft", "test",
                 "--modes", "ngram", "--prompts", "multi_turn-02", "--max-tokens", "16",
                 "--ctx", "1024", "--threads", "1", "--out", str(tmp_path)])
    assert code == 0
    report = json.loads((tmp_path / "suite.json").read_text())
    assert report["n_prompts"] == 1 and report["python"]
    assert report["suite_hash"] == suite_hash(build_suite())
    assert [(r["prompt"], r["mode"]) for r in report["rows"]] == [("multi_turn-02", "plain"),
                                                                   ("multi_turn-02", "ngram")]
    plain, ngram = report["rows"]
    assert plain["speedup"] == 1.0 and plain["identical"] is True and plain["n_cached"] > 30
    assert ngram["speedup"] > 0 and ngram["identical"] in (True, False) and ngram["n_tokens"] > 0
    assert report["summary"]["categories"]["multi_turn"]["ngram"]["n"] == 1
    assert set(report["summary"]["overall"]) == {"plain", "ngram"}
    md = (tmp_path / "suite.md").read_text()
    assert "| multi_turn |" in md and report["suite_hash"] in md and "| multi_turn-02 | ngram |" in md
    assert md in capsys.readouterr().out


def test_bad_selection_is_one_line(capsys):
    code = main(["speculative", "--suite", "--category", "poetry", "--model", "test"])
    _, err = capsys.readouterr()
    assert code == 1 and err.count("\n") == 1 and "unknown categories: poetry" in err


def test_summary_takes_geometric_means_per_category():
    rows = [{"category": c, "mode": m, "speedup": s, "acceptance": None, "tokens_per_pass": None}
            for c, m, s in [("a", "plain", 1.0), ("a", "x", 2.0), ("a", "plain", 1.0), ("a", "x", 0.5),
                            ("b", "plain", 1.0), ("b", "x", 4.0)]]
    summary = summarize(rows)
    assert summary["categories"]["a"]["x"]["speedup"] == pytest.approx(1.0)
    assert summary["categories"]["a"]["x"]["min_speedup"] == 0.5
    assert summary["overall"]["x"] == pytest.approx(2.0)  # categories weigh alike: sqrt(1 * 4)
    assert geomean([]) == 0.0
