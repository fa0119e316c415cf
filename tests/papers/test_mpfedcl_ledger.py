"""The MP-FedCL ledger's comparisons: every claim that rests on measured numbers carries comparisons, each with the
trends of its two sides, whose groups name the runs behind the cells (so that the evidence planner can give them
more seeds), one-seed sweeps included."""

import math

import numpy as np
import pandas as pd
import pytest

from fedlib import claims as C
from fedlib.config import run_id
from fedlib.papers import mpfedcl as M
from tests.papers.conftest import ids, sides


def row(seeds, rounds=60):
    return {"mean": float(np.mean(seeds)), "std": C.sample_std(seeds), "n": len(seeds), "per_seed": list(seeds),
            "rounds": rounds}


def by_claim(claims) -> dict:
    return {c.claim: c for c in claims}


# the archived Table VI (paper profile, seeds 0-2, last round): margins of 0.4-1.07 inside sample stds of 2.7-3.6
TABLE6 = {"fedavg": row([81.0, 85.4, 78.2], 110), "fedprox": row([81.0, 85.4, 78.4], 100),
          "fedproto": row([25.8, 25.2, 31.0], 100), "dpfedcl": row([77.6, 82.6, 82.6]),
          "spfedcl": row([77.2, 83.0, 82.8]), "mpfedcl": row([79.0, 84.2, 82.8])}


def test_table6_margins_within_the_spread_are_inconclusive_and_name_the_table6_runs(finished):
    plan = M.load_plan("paper")
    cfgs = M.configs(plan, "table6")
    by = by_claim(M.ledger(plan, {"table6": TABLE6, "trends": M.trends(plan)}))
    for text, rival in (("MP-FedCL has the best accuracy on MNIST under label skew (Dir 0.05)", "fedprox"),
                        ("Several prototypes per class beat one (MP above SP-FedCL)", "spfedcl"),
                        ("K-means beats DBSCAN (MP above DP-FedCL)", "dpfedcl"),
                        ("With 60 rounds MP-FedCL beats FedAvg after its 110 (half the communication rounds)",
                         "fedavg")):
        c = by[text]
        assert c.verdict == C.INCONCLUSIVE and "margin within the seed spread" in c.note
        assert [t.status(False) for t in c.tests] == [C.WITHIN] and c.tests[0].n == 3 and c.tests[0].paired
        assert sides(c) == {ids(cfgs["mpfedcl"], plan.seeds), ids(cfgs[rival], plan.seeds)}
        assert {t.group.metric for t in (c.tests[0].a_trend, c.tests[0].b_trend)} == \
            {plan.metric("mpfedcl"), plan.metric(rival)}
    best = by["MP-FedCL has the best accuracy on MNIST under label skew (Dir 0.05)"]
    assert "MP-FedCL - FedProx +0.40 (seed std 3.54" in best.note   # the sample std of FedProx's seeds
    weakest = by["FedProto, which shares no model, is the weakest from scratch on MNIST"]
    assert weakest.verdict == C.SUPPORTED and "DP-FedCL - FedProto +53.60 (seed std 3.19" in weakest.note
    assert sides(weakest) == {ids(cfgs["dpfedcl"], plan.seeds), ids(cfgs["fedproto"], plan.seeds)}


def test_one_seed_table6_keeps_its_comparisons_for_the_planner(finished):
    plan = M.load_plan("paper", seeds=[0])
    t6 = {m: row(r["per_seed"][:1], r["rounds"]) for m, r in TABLE6.items()}
    c = by_claim(M.ledger(plan, {"table6": t6, "trends": M.trends(plan)}))[
        "MP-FedCL has the best accuracy on MNIST under label skew (Dir 0.05)"]
    assert c.verdict == C.INCONCLUSIVE and "one seed" in c.note
    # seed 0: MP-FedCL 79.0 behind FedAvg and FedProx (81.0 each; the first listed is the best other)
    assert c.tests[0].n == 1 and c.tests[0].label == "MP-FedCL - FedAvg" and c.tests[0].margin == pytest.approx(-2.0)
    t6c = M.configs(plan, "table6")
    assert sides(c) == {ids(t6c["mpfedcl"], [0]), ids(t6c["fedavg"], [0])}


def test_k_is_judged_against_the_best_other_k_over_its_seeds(finished):
    plan = M.load_plan("paper")
    ks = M.configs(plan, "k")
    clear = {1: [80.0, 81.0, 82.0], 2: [85.0, 86.0, 87.0], 3: [79.0, 80.0, 81.0], 4: [81.0, 82.0, 83.0]}
    c = by_claim(M.ledger(plan, {"k": clear, "trends": M.trends(plan)}))[
        "K = 2 is the best number of prototypes per class on MNIST"]
    assert c.verdict == C.SUPPORTED and "K = 2 - K = 4 +4.00 (seed std 1.00" in c.note
    assert c.evidence == "K = 1: 81.00, K = 2: 86.00, K = 3: 80.00, K = 4: 82.00"
    assert sides(c) == {ids(ks[2], plan.seeds), ids(ks[4], plan.seeds)}
    # one seed (the quick profile's shape, or means only): inconclusive, the comparison still names the runs
    tie = by_claim(M.ledger(plan, {"k": {1: 81.0, 2: 82.0, 3: 81.13, 4: 82.0}, "trends": M.trends(plan)}))[
        "K = 2 is the best number of prototypes per class on MNIST"]
    assert tie.verdict == C.INCONCLUSIVE and "a tie is not a win" in tie.note and "one seed" in tie.note
    assert tie.tests[0].n == 1 and sides(tie) == {ids(ks[2], plan.seeds), ids(ks[4], plan.seeds)}


def test_sweeps_of_means_compare_at_every_value_with_both_sides_named(finished):
    """Means only (no per-seed values): inconclusive at every value, each comparison naming the sweep's runs, which
    the paper profile makes on its first twelve seeds (its ``sweep_seeds``)."""
    plan = M.load_plan("paper")
    tr, seeds = M.trends(plan), plan.grid_seeds("alpha")
    assert seeds == list(range(12)) == plan.grid_seeds("clients")
    al, cl = M.configs(plan, "alpha"), M.configs(plan, "clients")
    alpha = {1.0: {"mpfedcl": 87.0, "fedavg": 87.0, "fedproto": 40.0}, 0.1: {"mpfedcl": 84.0, "fedavg": 84.4}}
    clients = {5: {"mpfedcl": 80.0, "fedavg": 75.6, "spfedcl": 79.0}, 40: {"mpfedcl": 60.0, "fedavg": 10.0}}
    by = by_claim(M.ledger(plan, {"alpha": alpha, "clients": clients, "trends": tr}))
    ahead = by["MP-FedCL stays ahead as label skew varies from Dir(1.0) to Dir(0.1)"]
    assert ahead.verdict == C.INCONCLUSIVE and "one seed" in ahead.note
    assert [t.label for t in ahead.tests] == ["MP-FedCL - FedAvg (alpha 1)", "MP-FedCL - FedAvg (alpha 0.1)"]
    assert [round(t.margin, 2) for t in ahead.tests] == [0.0, -0.4]
    assert sides(ahead) == {ids(al[(m, a)], seeds) for m in ("mpfedcl", "fedavg") for a in (1.0, 0.1)}
    gap = by["MP-FedCL is at least 7.2 points above FedAvg for 5 to 40 clients"]
    assert gap.verdict == C.INCONCLUSIVE and gap.evidence == "N = 5: +4.40, N = 40: +50.00"
    assert [(t.label, round(t.margin, 2)) for t in gap.tests] == [("MP-FedCL - 7.2 - FedAvg (N = 5)", -2.8),
                                                                 ("MP-FedCL - 7.2 - FedAvg (N = 40)", 42.8)]
    assert sides(gap) == {ids(cl[(m, n)], seeds) for m in ("mpfedcl", "fedavg") for n in (5, 40)}


def test_each_grid_runs_on_its_profiles_seeds():
    """Table VI, Fig. 5 and the stand-in on every seed of the profile; Figs. 8-9 on its first ``sweep_seeds`` (the
    paper profile: twelve, what the evidence planner asked for Fig. 8's claim); Fig. 1 and the attack on the first. The
    archive keeps each paper-profile table on the seeds its grid runs on, and the notebook's jobs are exactly those."""
    paper, quick = M.load_plan("paper"), M.load_plan("quick")
    assert paper.seeds == list(range(24))
    assert {g: paper.grid_seeds(g) for g in M.GRIDS} == {
        "table6": paper.seeds, "k": paper.seeds, "feature_skew": paper.seeds, "alpha": list(range(12)),
        "clients": list(range(12)), "fig1": [0], "attack": [0]}
    assert {g: quick.grid_seeds(g) for g in M.GRIDS} == dict.fromkeys(M.GRIDS, [0])
    assert M.load_plan("paper", seeds=[3, 4]).grid_seeds("clients") == [3, 4]
    tables = {name: (cfgs, seeds) for name, cfgs, seeds in M.archived_tables()}
    assert tables["MP-FedCL Fig. 9a (clients) (paper profile)"] == (M.configs(paper, "clients"), list(range(12)))
    assert tables["MP-FedCL Fig. 5 (K) (paper profile)"] == (M.configs(paper, "k"), paper.seeds)
    # the runs two grids share are one job: Fig. 5's K = 2 is Table VI's MP-FedCL; Fig. 9a's N = 5 is Fig. 8's
    # alpha 0.1; Fig. 1's Local and FedAvg are Fig. 8's at alpha 0.1
    g = {name: M.configs(paper, name) for name in M.GRIDS}
    assert run_id(g["k"][2], 0) == run_id(g["table6"]["mpfedcl"], 0)
    assert all(run_id(g["clients"][(m, 5)], 0) == run_id(g["alpha"][(m, 0.1)], 0) for m in ("fedavg", "mpfedcl"))
    assert run_id(g["fig1"]["local"], 0) == run_id(g["alpha"][("local", 0.1)], 0)
    every = {(run_id(c, s), s) for name in M.GRIDS for c in g[name].values() for s in paper.grid_seeds(name)}
    assert sorted((run_id(c, s), s) for c, s in M.all_jobs(paper)) == sorted(every)


def test_at_least_7_2_points_is_a_threshold_judged_over_the_seeds():
    """With per-seed values the threshold is a comparison with its own spread: 9.5 to 10.5 points above FedAvg
    clears 7.2 by more than the seeds' spread; 7.5 to 8.5 does not."""
    plan = M.load_plan("paper")
    text = "MP-FedCL is at least 7.2 points above FedAvg for 5 to 40 clients"
    wide = {5: {"mpfedcl": [80.0, 81.0, 82.0], "fedavg": [70.5, 70.5, 71.5]}}
    c = by_claim(M.ledger(plan, {"clients": wide}))[text]
    assert c.verdict == C.SUPPORTED and c.tests[0].n == 3 and c.tests[0].paired
    close = {5: {"mpfedcl": [80.0, 81.0, 82.0], "fedavg": [72.5, 72.5, 73.5]}}
    assert by_claim(M.ledger(plan, {"clients": close}))[text].verdict == C.INCONCLUSIVE
    short = {5: {"mpfedcl": [80.0, 81.0, 82.0], "fedavg": [76.5, 76.5, 77.5]}}   # 4.5 points above, every seed
    assert by_claim(M.ledger(plan, {"clients": short}))[text].verdict == C.NOT_SUPPORTED


def test_budget_feature_skew_and_attack_name_their_runs(finished):
    plan = M.load_plan("paper")
    tr, t6, fs = M.trends(plan), M.configs(plan, "table6"), M.configs(plan, "feature_skew")
    budget = {"fedavg": {"rounds": 110, "accuracy": 81.0}, "fedproto": {"rounds": 64, "accuracy": 26.0},
              "mpfedcl": {"rounds": 60, "accuracy": 79.0}}
    seeds = {"mpfedcl": [59.0, 60.5, 60.0], "local": [44.0, 45.0, 44.3], "fedavg": [30.0, 31.0, 29.0],
             "fedprox": [30.5, 31.2, 29.4], "fedproto": [40.0, 41.0, 39.0], "spfedcl": [59.2, 60.6, 59.9],
             "dpfedcl": [58.9, 60.1, 59.7]}
    frame = pd.DataFrame({"source": ["prototype", "class_average"], "levels": ["high", "-"], "ssim": [0.477, 0.427]})
    by = by_claim(M.ledger(plan, {"budget": budget, "feature_skew": {m: float(np.mean(v)) for m, v in seeds.items()},
                                  "feature_skew_seeds": seeds, "attack": {1: frame, 2: frame}, "trends": tr}))
    near = by["Under the same training time MP-FedCL is best or near-best"]   # within 1 point of the best
    assert near.verdict == C.INCONCLUSIVE and "one seed" in near.note
    assert [(t.label, round(t.margin, 2)) for t in near.tests] == [("MP-FedCL + 1 - FedAvg", -1.0)]
    assert sides(near) == {ids(t6["mpfedcl"], plan.seeds), ids(t6["fedavg"], plan.seeds)}   # Table VI, every seed
    par = by["Under feature skew MP-FedCL is on par with SP- and DP-FedCL (Digit-5: SP-FedCL 0.41 above it)"]
    assert par.verdict == C.SUPPORTED
    assert sides(par) == {ids(fs[m], plan.seeds) for m in ("mpfedcl", "spfedcl", "dpfedcl")}
    beats = by["Under feature skew (one domain per client) MP-FedCL beats Local, FedAvg, FedProx and FedProto "
               "(+4.6% relative to FedProto on Digit-5)"]
    assert beats.verdict == C.SUPPORTED and len(beats.tests) == 4
    leak = by["Prototypes are privacy-preserving: the centroids reveal no more than a class average"]
    assert leak.verdict == C.INCONCLUSIVE and "one seed" in leak.note
    assert [(t.label, round(t.margin, 3)) for t in leak.tests] == [
        ("class average + 0.02 - SSIM (K = 1)", -0.03), ("class average + 0.02 - SSIM (K = 2)", -0.03)]
    assert {ids(t.a_trend.group.cfg, t.a_trend.group.seeds) for t in leak.tests} == \
        {ids(M.configs(plan, "attack")[k], [0]) for k in (1, 2)}


NEAR = "Under the same training time MP-FedCL is best or near-best"


def _recs(rounds: int, seconds: float, acc: float, metric: str) -> list[dict]:
    """A run of ``rounds`` rounds of ``seconds`` training time each, evaluated every round at ``acc`` (%)."""
    return [{"round": r, "train_seconds": seconds, "acc": {metric: {"mean": acc / 100}}} for r in range(1, rounds + 1)]


def test_table8_is_judged_per_seed_within_each_seeds_own_budget(finished):
    """Table VIII on three seeds: each seed's budget is MP-FedCL's own training time on it (60 rounds of 2, 1 and 3
    s), each method cut there; MP-FedCL + 1 against the best other method, paired by seed. Before, the first seed
    alone decided nothing ("one seed")."""
    plan = M.load_plan("paper")
    mp, avg = plan.metric("mpfedcl"), plan.metric("fedavg")
    recs = {"mpfedcl": [_recs(60, sec, a, mp) for sec, a in ((2.0, 79.0), (1.0, 84.2), (3.0, 82.8))],
            "fedavg": [_recs(110, 1.5, a, avg) for a in (80.2, 81.0, 78.2)],       # 80, 40 and 110 rounds in budget
            "fedproto": [_recs(100, 3.0, a, plan.metric("fedproto")) for a in (26.0, 25.0, 31.0)]}
    budgets, eq = M.equal_budget_seeds(plan, recs)
    assert budgets == [120.0, 60.0, 180.0]
    assert eq["fedavg"]["rounds"] == [80, 40, 110] and eq["fedproto"]["rounds"] == [40, 20, 60]
    assert eq["mpfedcl"]["accuracy"] == pytest.approx([79.0, 84.2, 82.8])
    near = by_claim(M.ledger(plan, {"budget": eq, "trends": M.trends(plan)}))[NEAR]
    (t,) = near.tests
    # MP-FedCL + 1 - FedAvg per seed: -0.2, +4.2, +5.6; mean +3.2 against the larger sample std (2.69, MP-FedCL's)
    assert (t.label, t.n, t.paired) == ("MP-FedCL + 1 - FedAvg", 3, True)
    assert t.margin == pytest.approx(3.2) and t.spread == pytest.approx(C.sample_std([79.0, 84.2, 82.8]))
    assert near.verdict == C.SUPPORTED and "beyond the seed spread" in near.note
    assert "MP-FedCL 82.00 ± 2.69 (rounds 60/60/60)" in near.evidence and "FedAvg 79.80 ± 1.44" in near.evidence
    t6 = M.configs(plan, "table6")
    assert sides(near) == {ids(t6["mpfedcl"], plan.seeds), ids(t6["fedavg"], plan.seeds)}
    # a rival 3 points ahead on every seed: MP-FedCL + 1 stays 2 behind, beyond the spread of 0.5: not supported
    ahead = {"mpfedcl": {"accuracy": [80.0, 80.5, 79.5], "rounds": [60] * 3},
             "fedavg": {"accuracy": [83.0, 83.5, 82.5], "rounds": [110] * 3}}
    got = by_claim(M.ledger(plan, {"budget": ahead}))[NEAR]
    assert got.verdict == C.NOT_SUPPORTED and got.tests[0].margin == pytest.approx(-2.0)
    # a method with no evaluated round within a seed's budget: NaN there, that seed left out of the pair
    holes = {"mpfedcl": {"accuracy": [80.0, 81.0, 79.0], "rounds": [60] * 3},
             "fedavg": {"accuracy": [70.0, math.nan, 71.0], "rounds": [30, 0, 30]}}
    got = by_claim(M.ledger(plan, {"budget": holes}))[NEAR]
    assert got.tests[0].n == 2 and got.verdict == C.SUPPORTED


def test_figs_8_9_draw_the_sweep_the_archive_holds_and_leave_the_other_out(tmp_path, monkeypatch):
    """While the report renders from the archive alone, a sweep whose runs the archive lacks is left out of Figs. 8-9
    (its panel says so) and the other is drawn over its seeds: mean ± sample std (n), the training loss a mean over
    the same seeds; with neither, the cell is left out (NotArchived)."""
    from fedlib import results

    monkeypatch.setenv("FEDLIB_ROOT", str(tmp_path))
    nb = M.notebook("paper", workers=0)
    per = {5: {"fedavg": [80.0, 82.0, 81.0], "mpfedcl": [84.0, 86.0, 85.0]},
           40: {"fedavg": [10.0, 12.0, 11.0], "mpfedcl": [60.0, 64.0, 62.0]}}

    def sweep(nb, grid):
        if grid == "alpha":
            raise results.NotArchived("Fig. 8's runs")
        return per

    monkeypatch.setattr(M, "sweep", sweep)
    monkeypatch.setattr(results, "rounds", lambda cfg, seed, archive_root=None: [{"train_loss": 1.0 + seed}])
    assert M.fig8_9(nb, draw=False) == (None, per)
    fig, acc, loss = M.fig8_9(nb)
    assert fig.axes[0].get_title() == "Fig. 8 on MNIST: not in the run archive" and not fig.axes[0].axison
    assert [t.get_text() for t in fig.axes[1].get_legend().get_texts()] == ["FedAvg", "MP-FedCL"]
    assert list(acc.index) == [("clients", "5"), ("clients", "40")] and list(acc.columns) == ["FedAvg", "MP-FedCL"]
    assert acc.loc[("clients", "5"), "MP-FedCL"] == "85.00 ± 1.00"
    assert loss.loc[40, "FedAvg"] == 6.5   # 1 + the mean of seeds 0-11
    monkeypatch.setattr(M, "sweep", lambda nb, grid: sweep(nb, "alpha"))
    with pytest.raises(results.NotArchived, match="neither sweep"):
        M.fig8_9(nb)


def test_label_skew_claim_reads_seeds_added_to_a_sweep_point_and_the_planner_adds_them_there(finished):
    """Fig. 8's claim on the seeds each (method, alpha) was read on: at alpha 0.1 MP- and SP-FedCL hold 14 (the grid's
    12 and two the evidence planner added, :func:`sweep_seeds`), compared paired on all 14, the sides naming those
    runs and the note the added seeds; the planner then adds seeds to those run groups, not to the profile."""
    from fedlib import evidence

    plan = M.load_plan("paper")
    al, own = M.configs(plan, "alpha"), plan.grid_seeds("alpha")
    rng = np.random.default_rng(0)
    sp = list(85.0 + rng.normal(0, 2, 14))
    alpha = {1.0: {"mpfedcl": [87.0] * 12, "spfedcl": [87.0] * 12},
             0.1: {"mpfedcl": [x + d for x, d in zip(sp, [-1.5, 0.7] * 7, strict=True)], "spfedcl": sp}}
    read = M.sweep_seeds(plan, "alpha", alpha)
    assert read[("alpha", "mpfedcl", 0.1)] == list(range(14)) and read[("alpha", "spfedcl", 1.0)] == own
    tr = {**M.trends(plan), **M.trends(plan, more=read)}
    (c,) = [c for c in M.ledger(plan, {"alpha": alpha, "trends": tr}) if c.source == "Fig. 8"]
    low = next(t for t in c.tests if t.label.endswith("(alpha 0.1)"))
    assert (low.n, low.paired, round(low.margin, 3)) == (14, True, -0.4)
    assert sides(c) >= {ids(al[(m, 0.1)], range(14)) for m in ("mpfedcl", "spfedcl")}
    assert "the seeds the evidence planner added: MP-FedCL 0.1 12-13; SP-FedCL 0.1 12-13" in c.note
    assert c.verdict == C.INCONCLUSIVE
    got = evidence.plan_claim("MP-FedCL", 8, c).actions   # alpha 1 is a tie; alpha 0.1 goes against the claim
    assert {(a.kind, a.group.label, a.added) for a in got} == {
        ("seeds", f"{label} alpha 0.1", tuple(range(14, 28))) for label in ("MP-FedCL", "SP-FedCL")}
