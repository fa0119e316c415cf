"""The one verdict rule of every claims ledger (fedlib.claims): exact tests, the smallest p a design reaches,
the plateau criterion and the verdict summary table."""

import math

import numpy as np
import pytest
from scipy.stats import mannwhitneyu

from fedlib import claims as C


def test_smallest_p_of_exact_designs():
    assert C.smallest_p(3, 3) == pytest.approx(0.1)          # 2 / C(6, 3): 3 vs 3 seeds never reach 0.05
    assert C.smallest_p(5, 5) == pytest.approx(2 / 252)
    assert C.smallest_p(3, paired=True) == pytest.approx(0.25)  # 2 / 2**3 sign patterns
    assert C.smallest_p(1, 1) == 1.0 and C.smallest_p(0, 3) == 1.0
    with pytest.raises(ValueError, match="n_b is required"):
        C.smallest_p(3)


def test_exact_tests_reach_their_floor_and_not_below():
    a, b = [3.0, 4.0, 5.0], [1.0, 1.5, 2.0]
    assert C.rank_sum_p(a, b) == pytest.approx(0.1)  # complete separation: the exact floor, not the 0.0495 of ranksums
    assert C.rank_sum_p(a, b) == mannwhitneyu(a, b, method="exact").pvalue
    assert C.paired_p(a, b) == pytest.approx(0.25)
    assert C.paired_p([3, 4, 5, 6, 7], [1] * 5) == pytest.approx(2 / 32)
    assert C.paired_p([1, 2], [1, 2]) == 1.0
    # mixed signs: of the 8 sign patterns of (2, -1, 1), 6 give |mean| >= 2/3 (all but +-(2, -1, -1))
    assert C.paired_p([3, 0, 2], [1, 1, 1]) == pytest.approx(0.75)


def test_compare_margin_spread_and_errors():
    c = C.compare("A - B", [82.0, 85.0, 79.0], [81.0, 84.0, 81.0])
    assert c.margin == pytest.approx(0.0) and c.spread == pytest.approx(np.std([82, 85, 79]))
    assert c.paired and c.n == 3 and c.p_min == pytest.approx(0.25) and not c.decisive
    u = C.compare("A - B", [90.0, 91.0, 92.0], [80.0, 80.5, 81.0], paired=False)
    assert u.decisive and u.p == pytest.approx(0.1) and not u.paired
    assert u.text() == "A - B +10.50 (seed std 0.82, exact p 0.10 (smallest possible 0.10), n = 3)"
    one = C.compare("A - B", [90.0], [80.0])
    assert one.n == 1 and math.isnan(one.spread) and not one.decisive and one.text() == "A - B +10.00 (one seed)"
    nan = C.compare("A - B", [90.0, np.nan, 91.0], [80.0, 85.0, 81.0])  # a diverged seed drops its pair
    assert nan.n == 2 and nan.margin == pytest.approx(10.0)
    with pytest.raises(ValueError, match="paired needs as many values on each side, got 2 and 3"):
        C.compare("x", [1.0, 2.0], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="a side has no finite value"):
        C.compare("x", [np.nan], [1.0])
    s = C.from_summary("A - B", (82.0, 2.9, 3), (81.6, 0.5, 3))
    assert s.margin == pytest.approx(0.4) and s.spread == 2.9 and s.p is None and not s.decisive
    best = C.versus_best("MP", {"MP": [1.0, 2.0], "FedAvg": [0.0, 0.0], "FedProx": [3.0, 3.0]})
    assert best.label == "MP - FedProx" and best.margin == pytest.approx(-1.5) and best.paired
    uneven = C.versus_best("MP", {"MP": [1.0, 2.0, 3.0], "FedProx": [3.0, 3.0]})  # seeds cannot pair up
    assert not uneven.paired and uneven.p == pytest.approx(C.rank_sum_p([1.0, 2.0, 3.0], [3.0, 3.0]))


def test_the_verdict_rule():
    up = C.compare("A - B", [90.0, 91.0, 92.0], [80.0, 81.0, 82.0])    # +10 against std 0.82
    down = C.compare("A - B", [80.0, 81.0, 82.0], [90.0, 91.0, 92.0])
    noise = C.compare("A - B", [82.0, 85.0, 79.5], [81.0, 84.0, 81.0])  # +0.17 against std 2.25
    assert C.verdict(None, "paper", 3) == (C.NOT_TESTED, "")
    assert C.verdict(True, "paper", 3, [up])[0] == C.SUPPORTED
    assert C.verdict(True, "converged", 3, [up])[0] == C.SUPPORTED
    assert C.verdict(False, "paper", 3, [down])[0] == C.NOT_SUPPORTED
    v, why = C.verdict(True, "paper", 3, [up, noise])
    assert v == C.INCONCLUSIVE and why.startswith("margin within the seed spread: A - B +0.17 (seed std 2.25")
    v, why = C.verdict(True, "paper", 3, [noise, down])  # one decisive counter-example outweighs the rest
    assert v == C.NOT_SUPPORTED and "A - B -10.00" in why
    assert C.verdict(True, "quick", 3, [up]) == (
        C.INCONCLUSIVE, "quick-profile evidence only (not the paper protocol or a converged run)")
    assert C.verdict(True, "paper", 1) == (C.INCONCLUSIVE, "one seed: no seed spread to judge the margin against")
    assert C.verdict(True, "paper", 3, None)[0] == C.INCONCLUSIVE  # a difference without its per-seed values
    assert C.verdict(True, "paper", 3) == (C.SUPPORTED, "3 seeds")  # a threshold rule on a multi-seed measure
    # a tie is no win: K = 2 and K = 4 both at 82.00
    tie = C.compare("K2 - K4", [82.0, 82.0, 82.0], [82.0, 82.0, 82.0])
    assert C.verdict(True, "paper", 3, [tie])[0] == C.INCONCLUSIVE
    # a count that holds follows from what the method sends: stated, never counted as support
    assert C.verdict(True, "quick", 1, exact=True) == (
        C.BY_CONSTRUCTION, "exact counts, fixed by what the method sends: true by construction, not counted as "
                           "evidence")
    assert C.verdict(True, "paper", 3, exact=True)[0] == C.BY_CONSTRUCTION
    # one the messages contradict refutes the claim under any profile
    assert C.verdict(False, "smoke", 1, exact=True) == (
        C.NOT_SUPPORTED, "exact counts: independent of seed and training length")
    v, why = C.verdict(True, "paper", 1, construction="a client's prototype is in its own cluster")
    assert v == C.BY_CONSTRUCTION and why == "true by construction: a client's prototype is in its own cluster"
    assert C.verdict(False, "paper", 3, construction="x")[0] == C.NOT_SUPPORTED


def test_a_converged_run_still_rising_caps_the_verdict_at_inconclusive():
    up = C.compare("A - B", [90.0, 91.0, 92.0], [80.0, 81.0, 82.0])
    down = C.compare("A - B", [80.0, 81.0, 82.0], [90.0, 91.0, 92.0])
    rising = "A: not plateaued (+0.85 in the last 20% of rounds)"
    v, why = C.verdict(True, "converged", 3, [up], rising=rising)
    assert v == C.INCONCLUSIVE
    assert why == (f"{C.NOT_PLATEAUED} {rising} (would be supported: beyond the seed spread: A - B +10.00 (seed std "
                   "0.82, paired exact p 0.25 (smallest possible 0.25), n = 3))")
    assert C.verdict(False, "converged", 3, [down], rising=rising)[0] == C.INCONCLUSIVE
    # the paper protocol's fixed rounds are the paper's budget: named, not capped
    v, why = C.verdict(True, "paper", 3, [up], rising=rising)
    assert v == C.SUPPORTED and why.endswith(f"; not plateaued: {rising}")
    # plateaued curves (no text) leave the verdict alone; already inconclusive stays so, with the curve named
    assert C.verdict(True, "converged", 3, [up], rising="") == C.verdict(True, "converged", 3, [up])
    assert C.verdict(True, "quick", 3, [up], rising=rising)[0] == C.INCONCLUSIVE
    # counts and by-construction claims rest on no curve
    assert C.verdict(True, "converged", 3, exact=True, rising=rising)[0] == C.BY_CONSTRUCTION
    assert C.verdict(False, "converged", 1, exact=True, rising=rising)[0] == C.NOT_SUPPORTED
    assert C.verdict(True, "converged", 1, construction="x", rising=rising)[0] == C.BY_CONSTRUCTION
    c = C.claim("A beats B", "Table 1", "A 91 vs B 81", True, "converged", 3, [up], rising=rising)
    assert c.verdict == C.INCONCLUSIVE and C.NOT_PLATEAUED in c.note


def test_claim_and_untested_carry_the_reason():
    c = C.claim("A beats B", "Table 1", "A 91.00 vs B 81.00", True, "quick", 1, note="short runs")
    assert (c.verdict, c.note, c.profile) == (C.INCONCLUSIVE, "short runs; quick-profile evidence only (not the "
                                              "paper protocol or a converged run)", "quick")
    u = C.untested("CIFAR-10 column", "Table 1", "the data are not on this machine")
    assert (u.verdict, u.evidence, u.note) == (C.NOT_TESTED, "—", "the data are not on this machine")
    with pytest.raises(ValueError, match="say why it was not tested"):
        C.untested("x", "y", "")


def test_plateau_on_hand_made_curves():
    slow = [50, 70, 80, 85, 88, 89, 89.5, 89.6, 89.7, 89.8]  # last 20% = 2 rounds: best 89.6 -> 89.8
    done, rise = C.plateau(slow)
    assert rise == pytest.approx(0.2) and done is False  # 0.2 points is not below 0.2 points
    assert C.plateau(slow, tol=0.25)[0] is True
    assert C.plateau(slow, window=0.4) == (False, pytest.approx(0.8))  # 4 rounds back: 89 -> 89.8
    rising = list(np.linspace(50, 90, 100))  # still climbing 0.404 a round: the last 20 rounds add 8.08
    done, rise = C.plateau(rising)
    assert not done and rise == pytest.approx(20 * 40 / 99)
    assert C.plateau_text(rising) == "not plateaued (+8.08 in the last 20% of rounds)"
    # a dip at the end does not count as a rise: best-so-far is flat
    assert C.plateau([10, 80, 90, 90, 90, 90, 90, 90, 90, 85]) == (True, 0.0)
    assert C.plateau_text([10, 80, 90, 90, 90, 90, 90, 90, 90, 85]) == ""
    assert C.plateau([10, 90, np.nan, 90, 90]) == (True, 0.0)  # NaN rounds skipped
    assert C.plateau([80.0])[0] is False and math.isnan(C.plateau([80.0])[1])
    with pytest.raises(ValueError, match=r"window must be in \(0, 1\), got 1.5"):
        C.plateau(rising, window=1.5)
    with pytest.raises(ValueError, match="tol must be > 0 points, got 0"):
        C.plateau(rising, tol=0)


def test_mean_curve():
    assert C.mean_curve([[1.0, 2.0], [3.0, 4.0]]).tolist() == [2.0, 3.0]
    with pytest.raises(ValueError, match=r"curves of different lengths \[1, 2\]"):
        C.mean_curve([[1.0], [1.0, 2.0]])


def test_counts_summary_and_the_report_summary_table():
    ledger = [C.claim("a", "T1", "x", True, "paper", 3), C.claim("b", "T1", "x", True, "quick", 1),
              C.claim("c", "T2", "x", True, "paper", 1, construction="by design"),
              C.claim("d", "T3", "x", False, "converged", 3), C.untested("e", "T4", "no data")]
    assert C.counts(ledger) == {"supported": 1, "not supported": 1, "inconclusive": 1, "by construction": 1,
                                "not tested": 1}
    assert C.summary_line(ledger) == ("1 supported, 1 not supported, 1 inconclusive, 1 by construction, "
                                      "1 not tested here")
    assert C.protocols(ledger) == "paper, converged"
    frame = C.summary_table({"FedX": ledger, "FedY": ledger[1:2]})
    assert frame.loc["FedX"].tolist() == [1, 1, 1, 1, 1, "paper, converged"]
    assert frame.loc["FedY"].tolist() == [0, 0, 1, 0, 0, "—"]
    assert C.table(ledger).loc[3, "verdict"] == "by construction"


def test_a_section_judged_before_counts_became_by_construction_asks_for_a_re_render():
    head = ("## P\n\n_profile `quick` · commit abc_\n\n**Claims ledger (x).**\n\n"
            "| # | claim | source | evidence | profile | verdict | note |\n|---|---:|---:|---:|---:|---:|---:|\n")
    old = head + "| 1 | fewer floats | Table V | 30 vs 1,240 | quick | supported | exact counts: independent of seed |\n"
    claims, current = C.parse_ledger(old)
    assert [c.verdict for c in claims] == ["supported"] and not current
    new = head + ("| 1 | fewer floats | Table V | 30 vs 1,240 | quick | by construction | exact counts, fixed by "
                  "what the method sends |\n| 2 | fewer, ours | Table V | 333 vs 58 | quick | not supported | "
                  "exact counts: independent of seed |\n")
    claims, current = C.parse_ledger(new)
    assert [c.verdict for c in claims] == ["by construction", "not supported"] and current


def test_a_converged_section_decided_on_a_rising_curve_asks_for_a_re_render():
    head = ("## P\n\n_profile `converged` · commit abc_\n\n**Claims ledger (x).**\n\n"
            "| # | claim | source | evidence | profile | verdict | note |\n|---|---:|---:|---:|---:|---:|---:|\n")
    old = head + ("| 1 | A beats B | Table 1 | 91.03 vs 90.45 | converged | supported | Not plateaued (best-so-far "
                  "accuracy still rising): A: not plateaued (+0.40 in the last 20% of rounds).; beyond the seed "
                  "spread |\n")
    assert not C.parse_ledger(old)[1]
    new = C.claim("A beats B", "Table 1", "91.03 vs 90.45", True, "converged", 3,
                  [C.compare("A - B", [91.0, 92.0, 90.1], [90.0, 90.5, 90.85])],
                  rising="A: not plateaued (+0.40 in the last 20% of rounds)")
    md = head + f"| 1 | {new.claim} | {new.source} | {new.evidence} | converged | {new.verdict} | {new.note} |\n"
    claims, current = C.parse_ledger(md)
    assert [c.verdict for c in claims] == [C.INCONCLUSIVE] and current
    # a paper-protocol claim may name a rising curve and stay decided (the paper's own budget)
    paper = head.replace("`converged`", "`paper`") + ("| 1 | A beats B | Table 1 | x | paper | supported | beyond "
                                                      "the seed spread; not plateaued: A (+0.4) |\n")
    assert C.parse_ledger(paper)[1]


def test_seed_mean_plateau_leaves_out_runs_that_diverged():
    """A run the engine stopped at a diverged round (shorter records, the last flagged ``diverged``) has ended:
    the seed-mean curve is that of the other seeds, and a group whose every seed diverged reports no rising
    curve. Before, the shorter curve made the seed mean fail (curves of different lengths)."""
    from fedlib import papers

    def recs(curve, diverged_at=None):
        out = [{"round": r + 1, "acc": {"acc_proto": {"weighted": a / 100}}} for r, a in enumerate(curve)]
        if diverged_at:
            out = out[:diverged_at - 1] + [{"round": diverged_at, "diverged": True, "train_loss": math.inf}]
        return out

    rising = list(np.linspace(50, 90, 20))   # +8.42 over the last 4 of 20 rounds
    flat = [50.0] * 8 + [90.0] * 12
    assert papers.plateau_text([recs(rising), recs(flat, 13), recs(flat, 12)], "acc_proto", "weighted") == \
        "not plateaued (+8.42 in the last 20% of rounds)"
    assert papers.plateau_text([recs(flat), recs(rising, 13)], "acc_proto", "weighted") == ""
    assert papers.plateau_text([recs(rising, 13), recs(rising, 12)], "acc_proto", "weighted") == ""
    with pytest.raises(ValueError, match=r"curves of different lengths \[12, 20\]"):  # unflagged: still an error
        papers.plateau_text([recs(flat), recs(flat)[:12]], "acc_proto", "weighted")
