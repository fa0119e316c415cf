"""The GFPL ledger on the verdict rule of fedlib.claims: "fewest rounds" is a per-seed comparison, the communication
claim is judged on the uplink (the paper's column), and every comparison, one-seed ones too, carries the trends of
its sides so that the evidence planner finds the runs."""

import math

import numpy as np
import pytest

from fedlib import claims as C
from fedlib import plateau, results
from fedlib.papers import gfpl as G

FEWEST = "GFPL converges in the fewest rounds"
COMM = "GFPL communicates the fewest parameters (2 x 10^3 per round on MNIST)"


def _cell(acc, rounds, up=0.0, down=0.0, curve_rounds=None):
    """A Table 1 cell as :func:`gfpl.table1` makes it: per-seed accuracy ``acc`` and per-seed rounds to converge
    ``rounds``; ``curve_rounds`` the seed-mean curve's (default: the rounded mean)."""
    return {"mean": float(np.mean(acc)), "std": 1.0, "seed_std": C.sample_std(acc), "n": len(acc), "per_seed": acc,
            "rounds_to_converge": curve_rounds if curve_rounds is not None else (
                None if np.isnan(rounds).any() else round(float(np.mean(rounds)))),   # None: a seed diverged
            "rounds_per_seed": [float(r) for r in rounds], "converge_seeds": len(rounds),
            "comm": {"up_per_round": up, "down_per_round": down}}


def _ledger(cells):
    plan = G.load_plan("paper")
    return {c.claim: c for c in G.ledger(plan, {"table1": cells})}


def test_fewest_rounds_within_the_seed_spread_is_inconclusive():
    # the seed-mean curves say GFPL 33 vs FedProto 30 (the old rule: not supported); per seed 40, 20, 39 against
    # 25, 35, 30: -3 rounds against a spread of 11
    cells = {("mnist5k", 4, "local"): _cell([90.0, 89.0, 91.0], [5, 5, 5]),
             ("mnist5k", 4, "fedavg"): _cell([91.0, 90.0, 92.0], [60, 70, 65]),
             ("mnist5k", 4, "fedproto"): _cell([92.0, 91.0, 93.0], [25, 35, 30], curve_rounds=30),
             ("mnist5k", 4, "gfpl"): _cell([93.0, 92.0, 94.0], [40, 20, 39], curve_rounds=33)}
    got = _ledger(cells)[FEWEST]
    assert got.verdict == C.INCONCLUSIVE
    assert "margin within the seed spread: rounds FedProto - GFPL (MNIST-5k, s-bar 18 w4) -3.00" in got.note
    assert "rule: per seed, the first round from which the seed's accuracy stays within 1 point" in got.note
    (t,) = got.tests
    assert t.paired and t.n == 3 and t.margin == -3.0   # Local (fewest, 5) sends nothing: left out
    assert "FedProto 30.0" in got.evidence and "GFPL 33.0" in got.evidence


def test_fewest_rounds_beyond_the_seed_spread_decides_either_way():
    base = {("mnist5k", 4, "fedavg"): _cell([91.0, 90.0, 92.0], [60, 70, 65]),
            ("mnist5k", 4, "fedproto"): _cell([92.0, 91.0, 93.0], [30, 32, 31])}
    fast = _ledger({**base, ("mnist5k", 4, "gfpl"): _cell([93.0, 92.0, 94.0], [10, 12, 11])})[FEWEST]
    assert fast.verdict == C.SUPPORTED and fast.tests[0].margin == 20.0   # positive: GFPL needs fewer rounds
    slow = _ledger({**base, ("mnist5k", 4, "gfpl"): _cell([93.0, 92.0, 94.0], [50, 52, 51])})[FEWEST]
    assert slow.verdict == C.NOT_SUPPORTED and slow.tests[0].margin == -20.0
    # a diverged seed has no round: its pair is left out
    nan = _ledger({**base, ("mnist5k", 4, "gfpl"): _cell([93.0, 92.0, 94.0], [10, math.nan, 11])})[FEWEST]
    assert nan.tests[0].n == 2


def test_the_communication_claim_is_judged_on_the_uplink_with_up_plus_down_beside_it():
    cells = {("mnist5k", 4, "local"): _cell([90.0, 89.0, 91.0], [5, 5, 5]),
             ("mnist5k", 4, "fedproto"): _cell([93.0, 92.5, 93.5], [30, 30, 30], 500, 900),
             ("mnist5k", 4, "gfpl"): _cell([95.0, 95.5, 94.5], [20, 20, 20], 200, 1500)}
    # uplink 200 is the fewest (the paper's column); up + down 1,700 is above FedProto's 1,400 (it was judged on
    # that: not supported)
    comm = _ledger(cells)[COMM]
    assert comm.verdict == C.BY_CONSTRUCTION
    assert "FedProto 500 (1,400), GFPL 200 (1,700)" in comm.evidence and "Local" not in comm.evidence
    assert "rule: the uplink" in comm.note and "up + down, GFPL is not the fewest" in comm.note
    cells[("mnist5k", 4, "gfpl")] = _cell([95.0, 95.5, 94.5], [20, 20, 20], 600, 100)
    comm = _ledger(cells)[COMM]
    assert comm.verdict == C.NOT_SUPPORTED and "up + down, GFPL is the fewest" in comm.note


def test_table1_cells_give_rounds_per_seed_and_the_trend_of_their_runs(monkeypatch):
    plan = G.load_plan("paper")
    key = ("mnist5k", 4, "gfpl")
    cfg = G.table1_configs(plan)[key]

    def rec(r, acc):
        return {"round": r, "acc": {"acc_head": {"mean": acc / 100}}, "up_params": 10, "down_params": 10}

    # seed 0 settles at round 3, seed 1 at round 5 (its round 4 is 2 points off its last)
    seed0 = [rec(1, 50), rec(2, 80), rec(3, 90), rec(4, 90), rec(5, 90)]
    seed1 = [rec(1, 50), rec(2, 80), rec(3, 90), rec(4, 88), rec(5, 90)]
    monkeypatch.setattr(results, "rounds", lambda c, s, archive_root=None: [seed0, seed1][s])
    summaries = [{"seed": s, "metrics": {"acc_head": {"last": 0.9, "best": 0.9, "last_std": 0.1}}} for s in (0, 1)]
    got = G.table1(plan, {key: summaries}, {key: [seed0, seed1]}, {key: cfg})[key]
    assert got["rounds_per_seed"] == [3.0, 5.0]
    assert got["trend"].rounds == 5
    assert got["trend"].group == plateau.Group("GFPL (MNIST-5k, s-bar 18 w4)", cfg, (0, 1), "acc_head", "mean")


def test_one_seed_sweeps_and_the_ablation_carry_comparisons_with_their_trends():
    smoke = G.load_plan("smoke")
    pplan = G.load_plan("paper")
    seed0 = pplan.seeds[0]
    trend = {n: C.trend(f"GFPL n {n}", [[a] * 10], plateau.Group(f"GFPL n {n}", {}, (seed0,), "acc_head", "mean"))
             for n, a in ((4, 95.0), (8, 94.0))}
    ab_trends = {(1, v): C.trend(v, [[90.0] * 10], plateau.Group(v, {}, (0, 1, 2), "acc_head", "mean"))
                 for v in ("gfpl", "no_dcs", "no_pfg", "no_dcs_no_pfg")}
    per_seed = {(1, v): [90.0 + i, 91.0 + i, 89.0 + i] for i, v in enumerate(("no_dcs_no_pfg", "no_dcs", "no_pfg",
                                                                               "gfpl"))}
    figs = {"plan": pplan, "n": {4: 95.0, 8: 94.0}, "n_trends": trend,
            "thresholds": {1.0: (95.0, 0.0, 1.0), 10.0: (94.0, 0.1, 1.0), 100.0: (96.0, 0.5, 1.0)},
            "threshold_trends": {}}
    got = {(c.source, c.claim): c for c in G.ledger(smoke, {
        "figs_paper": figs, "ablation_paper": {"plan": pplan, "acc": {k: np.mean(v) for k, v in per_seed.items()},
                                               "per_seed": per_seed, "trends": ab_trends}})}
    n8 = got[("Fig. 3b, paper protocol", "n = 8 components per class is best (Fig. 3b)")]
    assert n8.verdict == C.INCONCLUSIVE and "one seed" in n8.note
    (t,) = n8.tests
    assert t.label == "n 8 - n 4" and t.n == 1 and t.a_trend is trend[8] and t.b_trend is trend[4]
    sc = got[("Fig. 6, paper protocol", "An intermediate S_C is best (accuracy against merging)")]
    assert [t.label for t in sc.tests] == ["S_C 10 - S_C 100"]
    ab = got[("Table 2, paper protocol", "Each component helps and both together are best (s-hat 1)")]
    assert len(ab.tests) == 4 and ab.tests[0].a_trend is ab_trends[(1, "gfpl")]
    assert ab.tests[0].b_trend is ab_trends[(1, "no_dcs")]


def test_figs_3b_and_6_are_judged_per_seed_paired():
    """Figs. 3b and 6 on the paper profile's three seeds (``figs_seeds: all``): n = 8 against the best other n (mean
    over seeds), and the best interior S_C against the better end, each paired by seed and judged against the seeds'
    spread. The archived first seed alone (n 8: 94.75 vs n 4: 95.27) decided nothing."""
    smoke, pplan = G.load_plan("smoke"), G.load_plan("paper")
    n_per = {1: [94.43, 94.0, 94.2], 2: [95.12, 94.8, 95.0], 4: [95.27, 95.6, 95.4], 8: [94.75, 94.9, 94.6],
             16: [94.92, 95.0, 94.8]}
    t_per = {1.0: [95.27, 95.6, 95.4], 10.0: [94.18, 94.5, 94.3], 100.0: [96.35, 96.7, 96.5],
             1000.0: [94.63, 94.6, 94.5], 10000.0: [95.33, 95.1, 95.2]}
    figs = {"plan": pplan, "n": {n: float(np.mean(v)) for n, v in n_per.items()}, "n_per_seed": n_per,
            "n_seeds": [0, 1, 2], "thresholds": {t: (float(np.mean(v)), 0.1, 1.0) for t, v in t_per.items()},
            "threshold_per_seed": t_per, "threshold_seeds": [0, 1, 2]}
    got = {(c.source, c.claim): c for c in G.ledger(smoke, {"figs_paper": figs})}
    n8 = got[("Fig. 3b, paper protocol", "n = 8 components per class is best (Fig. 3b)")]
    (t,) = n8.tests
    # per seed 94.75 - 95.27, 94.9 - 95.6, 94.6 - 95.4: mean -0.6767 against a spread of 0.17: not supported
    assert (t.label, t.n, t.paired) == ("n 8 - n 4", 3, True)
    assert t.margin == pytest.approx(np.mean([94.75 - 95.27, 94.9 - 95.6, 94.6 - 95.4]))
    assert t.spread == pytest.approx(max(C.sample_std(n_per[8]), C.sample_std(n_per[4])))
    assert n8.verdict == C.NOT_SUPPORTED and "paper profile: 100 rounds, seeds 0, 1, 2" in n8.note
    assert "n = 8: 94.75 ± 0.15 (n = 3)" in n8.evidence
    sc = got[("Fig. 6, paper protocol", "An intermediate S_C is best (accuracy against merging)")]
    (t,) = sc.tests
    # S_C 100 against the better end (S_C 1): +1.08, +1.10, +1.10 against a spread of 0.17: supported
    assert (t.label, t.n, t.paired) == ("S_C 100 - S_C 1", 3, True) and t.margin == pytest.approx(1.0933, abs=1e-4)
    assert sc.verdict == C.SUPPORTED and "S_C 100: 96.52 ± 0.18 (n = 3) (merge rate 0.10)" in sc.evidence
    # within the spread: n = 8 above n = 4 on two seeds of three
    close = {**n_per, 8: [95.6, 95.0, 95.9]}
    n8 = {c.claim: c for c in G.ledger(pplan, {"n": close})}[n8.claim]
    assert n8.verdict == C.INCONCLUSIVE and "margin within the seed spread" in n8.note


def test_sweep_values_average_seeds_and_keep_them(monkeypatch):
    """:func:`G.sweep_per_seed` keeps each seed's accuracy; :func:`G.sweep_values` and :func:`G.threshold_values` give
    the means over seeds (merge rate and downlink too)."""
    plan = G.load_plan("paper")
    cfg = G.threshold_configs(plan)[10.0]

    def summary(seed, acc):
        return {"seed": seed, "metrics": {"acc_head": {"last": acc / 100}}}
    rates = {0: 0.1, 1: 0.3, 2: 0.2}
    monkeypatch.setattr(results, "rounds", lambda c, s, archive_root=None: [
        {"round": 10, "up_params": 5, "down_params": 100 * (s + 1), "server": {"clusters": 3, "merge_rate": rates[s]}}])
    runs = {10.0: [summary(0, 94.0), summary(1, 95.0), summary(2, 96.5)]}
    assert G.sweep_per_seed(plan, runs) == {10.0: pytest.approx([94.0, 95.0, 96.5])}
    (acc, rate, down), = G.threshold_values(plan, runs, {10.0: cfg}).values()
    assert (acc, rate, down) == (pytest.approx(95.1667, abs=1e-4), pytest.approx(0.2), pytest.approx(200.0))
    assert G.sweep_values(plan, {8: runs[10.0]}, {}, {})["n"] == {8: pytest.approx(95.1667, abs=1e-4)}
    frame = G.sweep_frame({10.0: (acc, rate, down)}, G.sweep_per_seed(plan, runs))
    assert frame.loc["S_C 10", "accuracy (%)"] == "95.17 ± 1.26 (n = 3)"
    assert G.sweep_frame({10.0: (acc, rate, down)}).loc["S_C 10", "accuracy (%)"] == 95.17   # one seed: as before


def test_sweeps_and_the_ablation_read_and_name_the_seeds_the_evidence_planner_added(monkeypatch):
    """n 8 and n 2 read seeds 6-11 beyond the paper profile's 0-5: the claim pairs them on twelve seeds, its note
    names the added seeds, and the planner adds the next seeds to those two groups (runnable ``seeds`` actions, no
    longer "the profile's seeds would have to grow"); Table 2's per-point claims name only their own point's."""
    from fedlib import evidence as E

    pplan = G.load_plan("paper")
    assert pplan.figs_seeds() == [0, 1, 2, 3, 4, 5] and pplan.ablation_seeds() == [0, 1, 2, 3, 4, 5]
    monkeypatch.setattr(E, "seconds_per_round", lambda g: 1.0)
    rng = np.random.default_rng(1)

    def group(label, cfg, seeds):
        return C.trend(label, [[95.0] * 100] * len(seeds), plateau.Group(label, cfg, tuple(seeds), "acc_head",
                                                                         "mean", more=True))
    n_cfgs = G.n_configs(pplan)
    twelve, six = list(range(12)), list(range(6))
    n_per = {n: [94.0, 94.5, 93.5] * 2 for n in n_cfgs}
    n_per.update({8: [95.0, 95.5, 94.5] * 4, 2: [95.2, 95.3, 94.8] * 4})   # n 8 - n 2: -0.1, within the spread
    n_trends = {n: group(f"GFPL n {n}", c, twelve if n in (2, 8) else six) for n, c in n_cfgs.items()}
    ab_cfgs = G.ablation_configs(pplan)
    ab_per = {k: list(90.0 + rng.normal(0, 0.5, 12 if k[0] == 20 else 6)) for k in ab_cfgs}
    ab_trends = {k: group(G.group_label(pplan, k), c, twelve if k[0] == 20 else six) for k, c in ab_cfgs.items()}
    got = {c.claim: c for c in G.ledger(pplan, {"n": n_per, "n_trends": n_trends, "ablation": ab_per,
                                                "ablation_trends": ab_trends})}
    n8 = got["n = 8 components per class is best (Fig. 3b)"]
    (t,) = n8.tests
    assert (t.label, t.n, t.paired, n8.verdict) == ("n 8 - n 2", 12, True, C.INCONCLUSIVE)
    assert "the seeds the evidence planner added: GFPL n 2 6-11; GFPL n 8 6-11" in n8.note
    it = E.plan_claim("GFPL", 6, n8)
    assert [(a.kind, a.group.label, a.added[:2]) for a in it.actions] == [("seeds", "GFPL n 8", (12, 13)),
                                                                          ("seeds", "GFPL n 2", (12, 13))]
    s20 = got["Each component helps and both together are best (s-hat 20)"]
    s1 = got["Each component helps and both together are best (s-hat 1)"]
    assert "the seeds the evidence planner added: " in s20.note and "GFPL (s-hat 20) 6-11" in s20.note
    assert "evidence planner" not in s1.note
    assert all(t.n == 12 for t in s20.tests) and all(t.n == 6 for t in s1.tests)
