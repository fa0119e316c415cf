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
    # the seed spread is the sample std (ddof 1): 3.00 here, where the population std would say 2.45
    assert c.margin == pytest.approx(0.0) and c.spread == pytest.approx(3.0)
    assert c.paired and c.n == 3 and c.p_min == pytest.approx(0.25) and not c.decisive
    u = C.compare("A - B", [90.0, 91.0, 92.0], [80.0, 80.5, 81.0], paired=False)
    assert u.decisive and u.p == pytest.approx(0.1) and not u.paired
    assert u.text() == "A - B +10.50 (seed std 1.00, exact p 0.10 (smallest possible 0.10), n = 3)"
    # below 0.01 a p keeps two significant digits: 12 seeds against 3 give 2 / C(15, 3) = 0.0044, not "0.00"; an
    # unpaired comparison names both sides' seeds where they differ
    far = C.compare("A - B", [90.0 + i / 10 for i in range(12)], [80.0, 80.5, 81.0], paired=False)
    assert far.p == pytest.approx(2 / 455) and "exact p 0.0044 (smallest possible 0.0044), n = 12 and 3)" in far.text()
    assert [C.p_text(p) for p in (0.25, 0.01, 0.0099, 0.000244)] == ["0.25", "0.01", "0.0099", "0.00024"]
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
    up = C.compare("A - B", [90.0, 91.0, 92.0], [80.0, 81.0, 82.0])    # +10 against std 1.00
    down = C.compare("A - B", [80.0, 81.0, 82.0], [90.0, 91.0, 92.0])
    noise = C.compare("A - B", [82.0, 85.0, 79.5], [81.0, 84.0, 81.0])  # +0.17 against std 2.75
    assert C.verdict(None, "paper", 3) == (C.NOT_TESTED, "")
    assert C.verdict(True, "paper", 3, [up])[0] == C.SUPPORTED
    assert C.verdict(True, "converged", 3, [up])[0] == C.SUPPORTED
    assert C.verdict(False, "paper", 3, [down])[0] == C.NOT_SUPPORTED
    v, why = C.verdict(True, "paper", 3, [up, noise])
    assert v == C.INCONCLUSIVE and why.startswith("margin within the seed spread: A - B +0.17 (seed std 2.75")
    v, why = C.verdict(True, "paper", 3, [noise, down])  # one decisive counter-example outweighs the rest
    assert v == C.NOT_SUPPORTED and "A - B -10.00" in why
    assert C.verdict(True, "quick", 3, [up]) == (
        C.INCONCLUSIVE, "quick-profile evidence only (not the paper protocol or a converged run)")
    assert C.verdict(True, "paper", 1) == (C.INCONCLUSIVE, "one seed: no seed spread to judge the margin against")
    assert C.verdict(True, "paper", 3, None)[0] == C.INCONCLUSIVE  # a difference without its per-seed values
    # a measured claim with no comparison has no seed spread to judge by: it is not decided (it used to be, on
    # "3 seeds" alone: GFPL's "fewest rounds" rested on a 3-round difference); a threshold is a comparison
    assert C.verdict(True, "paper", 3) == (
        C.INCONCLUSIVE, "3 seeds, but no per-seed comparison to judge the margin against the seed spread")
    assert C.verdict(False, "converged", 3, ())[0] == C.INCONCLUSIVE
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
                   "1.00, paired exact p 0.25 (smallest possible 0.25), n = 3))")
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
    up = C.compare("A - B", [90.0, 91.0, 92.0], [80.0, 81.0, 82.0])
    ledger = [C.claim("a", "T1", "x", True, "paper", 3, [up]), C.claim("b", "T1", "x", True, "quick", 1),
              C.claim("c", "T2", "x", True, "paper", 1, construction="by design"),
              C.claim("d", "T3", "x", False, "converged", 3,
                      [C.compare("B - A", [80.0, 81.0, 82.0], [90.0, 91.0, 92.0])]),
              C.untested("e", "T4", "no data")]
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
    old = (head + "| 1 | fewer floats | Table V | 30 vs 1,240 | quick | supported | exact counts: independent of "
           "seed |\n")
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
    from fedlib import study

    def recs(curve, diverged_at=None):
        out = [{"round": r + 1, "acc": {"acc_proto": {"weighted": a / 100}}} for r, a in enumerate(curve)]
        if diverged_at:
            out = out[:diverged_at - 1] + [{"round": diverged_at, "diverged": True, "train_loss": math.inf}]
        return out

    rising = list(np.linspace(50, 90, 20))   # +8.42 over the last 4 of 20 rounds
    flat = [50.0] * 8 + [90.0] * 12
    assert study.plateau_text([recs(rising), recs(flat, 13), recs(flat, 12)], "acc_proto", "weighted") == \
        "not plateaued (+8.42 in the last 20% of rounds)"
    assert study.plateau_text([recs(flat), recs(rising, 13)], "acc_proto", "weighted") == ""
    assert study.plateau_text([recs(rising, 13), recs(rising, 12)], "acc_proto", "weighted") == ""
    # seeds of one group extended to different lengths (an extension step cut short): judged on their common rounds
    assert study.plateau_text([recs(rising), recs(rising)[:10]], "acc_proto", "weighted") == \
        C.plateau_text(rising[:10])


def test_trend_projects_twice_the_larger_of_the_rate_and_the_last_doubling_to_the_cap():
    # 100 rounds, every seed's curve the same straight climb 50 -> 90 (0.404 a round): its last 20 rounds gained
    # 20 * 40/99, its last doubling (rounds 50..100) 50 * 40/99. Kept up to 400 rounds the rate gives 300 * 40/99;
    # two more doublings give 2 * 50 * 40/99: the larger, twice (REACH_SAFETY), is the reach
    rising = list(np.linspace(50, 90, 100))
    t = C.trend("B", [rising, rising])
    step = 40 / 99
    assert (t.rounds, t.plateaued, t.window) == (100, False, 20)
    assert t.gain == pytest.approx(50 * step) and t.tail == pytest.approx(20 * step)
    assert t.reach() == pytest.approx(C.REACH_SAFETY * 300 * step)
    assert t.reach(cap=200) == pytest.approx(C.REACH_SAFETY * 100 * step)
    assert t.reach(cap=100) == pytest.approx(C.REACH_SAFETY * 100 * step)    # at the cap: one more doubling
    # a curve whose gain came early: the doubling projection is the larger one
    early = [50.0] * 50 + list(np.linspace(50, 80, 30)) + list(np.linspace(80, 80.3, 21))[1:]
    e = C.trend("E", [early])
    assert not e.plateaued and e.reach() == pytest.approx(C.REACH_SAFETY * 2 * e.gain)
    assert 2 * e.gain > e.tail / e.window * 300
    flat = [50.0] * 10 + [90.0] * 90
    f = C.trend("A", [flat, flat])
    assert f.plateaued and f.reach() == 0.0 and f.plateau_text() == ""
    assert t.plateau_text() == C.plateau_text(rising)
    # the gains are those of the seed-mean of per-seed best-so-far curves (the value a comparison uses), the seeds cut
    # to the shortest: bests at round 2 (80, 50), at round 4 (80, 70)
    dip = [50.0, 80.0, 60.0, 60.0]
    assert C.trend("D", [dip, [50.0, 50.0, 50.0, 70.0, 99.0]]).gain == pytest.approx((80 + 70) / 2 - (80 + 50) / 2)


def test_each_comparison_is_judged_then_combined():
    """A claim over several settings is not supported as soon as one comparison is decided against it, even while
    another side still rises (before, one rising curve capped the whole claim: benchmark claims 8, 13, 15)."""
    flat = C.trend("flat", [[50.0] * 10 + [90.0] * 90] * 3)
    rising = C.trend("rising", [list(np.linspace(50, 90, 100))] * 3)       # could still gain 242.4 by 400
    lost = C.compare("A - B (pat)", [80.0, 81.0, 82.0], [90.0, 91.0, 92.0], a_trend=flat, b_trend=flat)
    open_ = C.compare("A - B (dir)", [90.0, 91.0, 92.0], [80.0, 81.0, 82.0], a_trend=flat, b_trend=rising)
    assert lost.status() == C.AGAINST and open_.status() == C.OPEN
    v, why = C.verdict(False, "converged", 3, [lost, open_])
    assert v == C.NOT_SUPPORTED and "A - B (pat) -10.00" in why and "(dir)" not in why
    v, why = C.verdict(True, "converged", 3, [open_])
    assert v == C.INCONCLUSIVE and why.startswith(C.NOT_PLATEAUED) and "could still gain up to 242.42" in why
    assert why.endswith("(would be supported were they plateaued)")
    # under the paper protocol the rounds are the paper's budget: nothing is projected
    assert open_.status(converged=False) == C.FOR and C.verdict(True, "paper", 3, [open_])[0] == C.SUPPORTED


def test_the_early_decision_is_the_margin_beyond_the_spread_after_the_reach():
    # B (behind) still rises, slowly: +0.20 over its last 20 rounds (0.01 a round, 3.0 by round 400), +0.5 over its
    # last doubling (1.0 for two more); the reach is twice the larger: 6.0. The seed std is 1.00.
    b_curve = [70.0] * 50 + list(np.linspace(70.0, 70.5, 51))[1:]
    behind = C.trend("B", [b_curve] * 3)
    assert not behind.plateaued and behind.gain == pytest.approx(0.5) and behind.reach() == pytest.approx(6.0)
    ahead = C.trend("A", [list(np.linspace(60, 80, 100))] * 3)            # the side ahead rising only widens it
    wide = C.compare("A - B", [78.5, 79.5, 80.5], [71.0, 72.0, 73.0], a_trend=ahead, b_trend=behind)   # 7.5 - 6 > 1
    narrow = C.compare("A - B", [77.5, 78.5, 79.5], [71.0, 72.0, 73.0], a_trend=ahead, b_trend=behind)  # 6.5 - 6 < 1
    edge = C.compare("A - B", [78.0, 79.0, 80.0], [71.0, 72.0, 73.0], a_trend=ahead, b_trend=behind)   # 7 - 6 = 1: no
    assert (wide.status(), narrow.status(), edge.status()) == (C.FOR, C.OPEN, C.OPEN)
    v, why = C.verdict(True, "converged", 3, [wide])
    assert v == C.SUPPORTED and "early decision" in why and "at most +6.00 to come" in why
    # against the claim the same way: the claim's side is behind and cannot catch up
    assert C.compare("B - A", [71.0, 72.0, 73.0], [78.5, 79.5, 80.5], a_trend=behind, b_trend=ahead).status() \
        == C.AGAINST


def test_a_decision_on_a_plateau_with_little_to_spare_says_so():
    """A side behind that plateaued can still gain (the archive's extended runs: up to 0.73 points after the
    criterion called a curve plateaued): a decision with less than PLATEAU_SLACK beyond the spread keeps its verdict
    and says how little it has to spare; one with more, or one under the paper protocol, says nothing of it."""
    flat = C.trend("B", [[50.0] * 10 + [90.0] * 90] * 3)
    assert flat.plateaued and flat.since == 20
    thin = C.compare("A - B", [90.4, 91.4, 92.4], [89.0, 90.0, 91.0], a_trend=flat, b_trend=flat)   # 1.4 - 1.0
    wide = C.compare("A - B", [92.0, 93.0, 94.0], [89.0, 90.0, 91.0], a_trend=flat, b_trend=flat)   # 3.0 - 1.0
    assert thin.spare() == pytest.approx(0.4) and wide.spare() == pytest.approx(2.0)
    v, why = C.verdict(True, "converged", 3, [thin])
    assert v == C.SUPPORTED and why.endswith(
        "decided on a plateau with little to spare (curves called plateaued have gone on to gain up to 0.75 "
        "points): A - B: B plateaued from round 20 at 100 rounds, 0.40 to spare")
    assert "little to spare" not in C.verdict(True, "converged", 3, [wide])[1]
    assert "little to spare" not in C.verdict(True, "paper", 3, [thin])[1] and thin.spare(converged=False) is None
    # a per-round measure (seconds) rides on its runs' trend but has no plateau to doubt (FedIC's timing claim)
    timing = C.compare("1.5 x B's seconds - A's", [2.4, 2.5, 2.6], [1.0, 1.1, 1.2], a_trend=C.fixed_budget(flat),
                       b_trend=C.fixed_budget(flat))
    assert timing.status() == C.FOR and timing.spare() is None
    # decided by the exact test alone (6 seeds, margin 0.3 within the spread): the margin itself is what it spares
    a = [80.0, 82.0, 84.0, 86.0, 88.0, 90.0]
    exact = C.compare("A - B", [x + 0.3 for x in a], a, a_trend=flat, b_trend=flat)
    assert exact.status() == C.FOR and exact.spare() == pytest.approx(0.3)
    # still rising, or within the spread: nothing to spare
    rising = C.trend("R", [list(np.linspace(50, 90, 100))] * 3)
    assert C.compare("A - B", [90.4, 91.4, 92.4], [89.0, 90.0, 91.0], b_trend=rising).spare() is None
    assert C.compare("A - B", [89.5, 90.5, 91.5], [89.0, 90.0, 91.0], b_trend=flat).spare() is None


def test_a_threshold_claim_is_a_comparison_with_its_own_spread():
    t = C.against_threshold("ratio - 10", [12.0, 13.0, 14.0], 10.0)
    assert t.margin == pytest.approx(3.0) and t.spread == pytest.approx(1.0) and t.paired and t.status() == C.FOR
    assert C.against_threshold("x", [10.5, 12.0, 9.0], 10.0).status() == C.WITHIN
    one = C.against_threshold("x", [12.0], 10.0)
    assert one.n == 1 and C.verdict(True, "paper", 1, [one])[0] == C.INCONCLUSIVE


def test_the_paired_test_equals_scipys_enumeration_and_stays_small_at_24_seeds():
    """The sign-flip p counted half by half equals scipy's full enumeration (ties included), and 24 pairs (the
    MP-FedCL Table VI seeds; scipy's enumeration there holds 2**24 patterns, gigabytes) take little memory."""
    import resource

    from scipy.stats import permutation_test

    rng = np.random.default_rng(7)
    for trial in range(120):
        n = 2 + trial % 9
        a = rng.integers(0, 4, size=n).astype(float) if trial % 2 else np.round(rng.normal(80, 2, size=n), 2)
        b = rng.integers(0, 4, size=n).astype(float) if trial % 2 else np.round(rng.normal(80, 2, size=n), 2)
        if not (a - b).any():
            continue
        ref = permutation_test((a - b,), np.mean, permutation_type="samples", alternative="two-sided",
                               n_resamples=np.inf).pvalue
        assert C.paired_p(a, b) == ref
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert C.paired_p([1.0] * 24, [0.0] * 24) == 2 / 2 ** 24          # every pair on one side: the two extremes
    assert C.paired_p([1.0] * 12 + [0.0] * 12, [0.0] * 12 + [1.0] * 12) == 1.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000   # kB: under 200 MB more


def test_a_verdict_the_exact_test_decided_does_not_say_beyond_the_seed_spread():
    """Six seeds, each one point apart, on sides whose seeds spread by 18.7: the paired test (p = 2/64) decides
    what the margin cannot, and the verdict says which of the two decided (FedIC claim 3's timings)."""
    a = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0]
    up = C.compare("A - B", a, [x - 1.0 for x in a])
    assert up.margin == pytest.approx(1.0) and up.spread > 18 and up.p == pytest.approx(2 / 64)
    v, why = C.verdict(True, "paper", 6, [up])
    assert v == C.SUPPORTED and why.startswith("by the exact test (p below 0.05): A - B +1.00 (seed std 18.71")
    down = C.compare("A - B", [x - 1.0 for x in a], a)
    v, why = C.verdict(False, "paper", 6, [down])
    assert v == C.NOT_SUPPORTED and why.startswith("by the exact test (p below 0.05) against the claim: A - B -1.00")
    wide = C.compare("C - D", [90.0, 91.0, 92.0, 93.0, 94.0, 95.0], [80.0, 81.0, 82.0, 83.0, 84.0, 85.0])
    v, why = C.verdict(True, "paper", 6, [wide, up])
    assert v == C.SUPPORTED and why.startswith("beyond the seed spread or by the exact test (p below 0.05): C - D")
    assert C.verdict(True, "paper", 6, [wide])[1].startswith("beyond the seed spread: C - D +10.00")
