"""The soak's judging (no server): reply comparison, RSS flatness, tallies, conversation
histories, and the Soak section that shares docs/benchmarks/server.md with bench server."""

from __future__ import annotations

import os

from bench.client import HttpReply
from bench.process import rss_bytes
from bench.soak import plan
from bench.soak.report import keep_section, split, write_section
from bench.timing import first_difference


def test_a_reply_matches_only_with_the_same_text_and_finish_reason():
    solo = HttpReply("Hello there.", "stop")
    assert plan.mismatch(solo, HttpReply("Hello there.", "stop")) is None
    assert "finish_reason 'length'" in plan.mismatch(solo, HttpReply("Hello there.", "length"))
    assert "character 6" in plan.mismatch(solo, HttpReply("Hello world.", "stop"))
    assert "character 5" in plan.mismatch(solo, HttpReply("Hello", "stop"))  # cut short
    assert first_difference("abcd", "abXd") == 2 and first_difference("ab", "abc") == 2
    assert first_difference([1, 2, 3], [1, 2, 3]) == 3


def test_rss_is_flat_within_the_tolerance_after_warm_up_only():
    mib = 1 << 20
    warm = [(0.0, 100 * mib), (5.0, 200 * mib)]  # growth while warming up does not count
    steady = [(10.0 + i, 300 * mib + i * mib // 10) for i in range(10)]
    v = plan.rss_verdict(warm + steady, warmup_s=10)
    assert v["flat"] is True and abs(v["growth"]) < 0.01
    leak = [(10.0 + i, 300 * mib + i * 5 * mib) for i in range(10)]  # +15% by the end
    v = plan.rss_verdict(warm + leak, warmup_s=10)
    assert v["flat"] is False and v["growth"] > 0.05 and v["max_bytes"] == 345 * mib
    assert plan.rss_verdict(warm + steady[:5], warmup_s=10)["flat"] is None  # too few samples


def test_tallies_add_up_and_keep_the_distinct_mismatched_replies():
    a, b = plan.Tally(requests=3, busy=2), plan.Tally(requests=1, errors=1)
    a.mismatch("hello", "Hi!", known=True)
    b.mismatch("hello", "Hi!", known=False)
    b.mismatch("edit", "def f", known=False)
    a.add(b)
    assert (a.requests, a.busy, a.errors, a.mismatches, a.known_variants) == (4, 2, 1, 3, 1)
    assert a.mismatched == {"hello": {"Hi!": 2}, "edit": {"def f": 1}}


def test_a_follow_up_turn_carries_the_solo_replies_of_the_turns_before_it():
    by_id = {t.id: t for t in plan.turns()}
    replies = {"review-1": "R1", "review-2": "R2"}
    msgs = plan.body(by_id["review-3"], replies)["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert msgs[0]["content"] == plan.SYSTEM_A
    assert (msgs[2]["content"], msgs[4]["content"]) == ("R1", "R2")
    text = plan.body(by_id["text-stop"], replies)
    assert text["prompt"] == "def fibonacci(n):\n" and text["stop"] == ["\n\n"]
    assert text["temperature"] == 0 and text["stream"] is False


def test_the_soak_section_and_the_bench_server_report_keep_each_other(tmp_path):
    out = tmp_path / "server.md"
    out.write_text("# Duet's server\n\n| a |\n\n## Two clients taking turns\n\nrows\n")
    write_section(out, "## Soak\n\nfirst soak\n")
    write_section(out, "## Soak\n\nsecond soak\n")  # replaces, not appends
    text = out.read_text()
    assert text.count("## Soak") == 1 and "second soak" in text and "rows" in text
    new_bench = "# Duet's server\n\n| b |\n"
    kept = keep_section(out, new_bench)
    assert "| b |" in kept and "second soak" in kept and "| a |" not in kept
    rest, section = split(kept)
    assert section.startswith("## Soak") and "second soak" not in rest


def test_rss_of_a_live_process_and_of_none():
    assert rss_bytes(os.getpid()) > 1 << 20
    assert rss_bytes(2 ** 22 + 12345) is None  # above the kernel's default pid_max


def test_a_mismatch_is_explained_by_a_solo_variant_or_a_near_tie_only():
    from bench.soak.margin import unexplained

    cases = [{"count": 5, "known": True, "gap": 2.0},  # another solo reply: explained
             {"count": 3, "known": False, "gap": 0.2},  # a near-tie: explained
             {"count": 2, "known": False, "gap": 1.5},  # a clear choice that changed: not
             {"count": 1, "known": False, "gap": None}]  # never reached: not
    assert unexplained(11, cases, near_tie=0.5) == 3
    assert unexplained(11, cases, near_tie=2.0) == 1
    assert unexplained(12, cases, near_tie=0.5) == 4  # beyond the cases examined


def test_the_reported_command_leaves_out_the_note():
    from bench.soak.command import _command_line

    assert _command_line(["soak", "--note", "busy `machine`", "--minutes", "5"]) == \
        "python -m bench soak --minutes 5"
    assert _command_line(["soak", "--note=x y", "--model", "a b"]) == \
        "python -m bench soak --model 'a b'"
