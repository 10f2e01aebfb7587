"""bench edge's figure: the worst over its cases (issue 72: one reply length failed where another passed)."""

from __future__ import annotations

from bench.edge import CASES, worst


def test_the_figure_is_the_worst_of_every_case():
    fine = {"turns_past": 5, "worst_share": 0.87, "worst_over_median": 1.2, "not_restored": 0,
            "duet_verifies": True}
    bad = {"turns_past": 3, "worst_share": 0.0, "worst_over_median": 9.1, "not_restored": 2,
           "duet_verifies": True}
    assert worst([fine, bad, {"turns_past": 0}]) == {
        "turns_past": 8, "worst_share": 0.0, "worst_over_median": 9.1, "not_restored": 2,
        "duet_verifies": True}
    assert worst([fine, {**fine, "duet_verifies": False}])["duet_verifies"] is False
    assert worst([{"turns_past": 0}]) == {"turns_past": 0}
    assert {"60", "90", "120", "200"} <= set(CASES)  # the reproduction's lengths
