"""The FedMPS ledger's comparisons: every claim that rests on measured numbers carries comparisons, each with the
trends of its two sides, whose groups name the runs behind the cells (so that the evidence planner can give them
more seeds), one-seed tables and sweeps included; and docs/fedmps.md states the floors of the exact tests."""

import re

import numpy as np
import pandas as pd
import pytest

from fedlib import claims as C
from fedlib import results
from fedlib.config import run_id
from fedlib.papers import fedmps as S
from fedlib.paths import CHECKOUT
from tests.papers.conftest import ids, sides

BEST = "FedMPS has the highest accuracy of the eight methods on Fashion-MNIST"


def summaries(per_seed: dict[str, list[float]]) -> dict:
    """Table III summaries (one per seed) whose best round is ``per_seed`` (%) under either rule."""
    return {m: [{"metrics": {"acc_proto_own": {"best": a / 100}, "acc_head": {"best": a / 100}}} for a in v]
            for m, v in per_seed.items()}


# the archived paper-protocol Table III (seeds 1234-1236), best round, the paper's rule
FEDMPS, FEDPROTO = [92.19, 88.22, 89.77], [90.29, 86.95, 87.18]
FEDGKD = [85.57, 78.53, 79.79]


def test_highest_accuracy_by_1_92_within_the_sample_std_of_2_00_is_inconclusive(finished):
    """The paper-protocol claim was supported with +1.92 against a seed std of 1.63 (ddof 0); the sample std of the
    same seeds is 2.00, so the margin is within the spread."""
    assert np.mean(FEDMPS) - np.mean(FEDPROTO) == pytest.approx(1.92, abs=1e-9)
    assert np.std(FEDMPS) == pytest.approx(1.63, abs=0.005) and C.sample_std(FEDMPS) == pytest.approx(2.00, abs=0.005)
    quick, paper = S.load_plan("quick"), S.load_plan("paper")
    rows = S.table3(paper, summaries({"fedmps": FEDMPS, "fedproto": FEDPROTO, "fedgkd": FEDGKD}))
    head = S.table3(paper, summaries({"fedmps": FEDMPS, "fedproto": FEDPROTO, "fedgkd": FEDGKD}), S.COMMON_METRIC)
    pt3 = {"plan": paper, "rows": rows, "head": head, "trends": S.trends(paper)}
    by = {(c.source, c.claim): c for c in S.ledger(quick, {"table3_paper": pt3})}
    best = by[("Table III, paper protocol", BEST)]
    assert best.verdict == C.INCONCLUSIVE
    assert "FedMPS 90.06 ± 2.00 vs best other FedProto 88.14 ± 1.87" in best.evidence
    assert "margin within the seed spread: FedMPS - FedProto +1.92 (seed std 2.00, paired exact p 0.25" in best.note
    cfgs = S.table3_configs(paper)
    assert sides(best) == {ids(cfgs["fedmps"], paper.seeds), ids(cfgs["fedproto"], paper.seeds)}
    assert {t.group.metric for t in (best.tests[0].a_trend, best.tests[0].b_trend)} == {"acc_proto_own"}
    # the prototype methods against the best parameter method: beyond the sample spread, still supported
    protos = by[("Table III, paper protocol", "The prototype methods (FedProto, FedMPS) beat every parameter-sharing "
                                              "method")]
    assert protos.verdict == C.SUPPORTED and "FedProto - FedGKD +6.84 (seed std 3.75" in protos.note
    assert sides(protos) == {ids(cfgs["fedproto"], paper.seeds), ids(cfgs["fedgkd"], paper.seeds)}
    # the significance claim: 3 vs 3 cannot reach p < 0.05; its rank-sum comparisons name every method's runs
    sig = by[("Table III, paper protocol", "FedMPS is significantly better than every baseline (Wilcoxon rank-sum, "
                                           "p < 0.05)")]
    assert sig.verdict == C.INCONCLUSIVE and "cannot go below p = 0.10" in sig.note
    assert all(not t.paired and t.p_min == C.smallest_p(3, 3) for t in sig.tests)
    assert sides(sig) == {ids(cfgs[m], paper.seeds) for m in ("fedmps", "fedproto", "fedgkd")}
    common = by[("Table III, paper protocol, common rule", "(our check) FedMPS still wins under one common rule, the "
                                                          "head over all classes")]
    assert {t.group.metric for t in (common.tests[0].a_trend, common.tests[0].b_trend)} == {S.COMMON_METRIC}


def test_table3_names_the_seeds_the_evidence_planner_added_in_both_claims(finished):
    """FedMPS with 6 seeds and FedProto with 4 (3 the profile's, the rest added): the best-method and the
    significance claims say so instead of the profile's 3 seeds."""
    quick, paper = S.load_plan("quick"), S.load_plan("paper")
    per = {"fedmps": FEDMPS + [91.0, 90.5, 92.5], "fedproto": FEDPROTO + [88.0], "fedgkd": FEDGKD}
    seeds = {m: range(1234, 1234 + len(v)) for m, v in per.items()}
    runs = {m: [{"seed": x, **s} for x, s in zip(seeds[m], summaries({m: v})[m], strict=True)] for m, v in per.items()}
    pt3 = {"plan": paper, "rows": S.table3(paper, runs), "head": S.table3(paper, runs, S.COMMON_METRIC),
           "trends": S.trends(paper)}
    by = {(c.source, c.claim): c for c in S.ledger(quick, {"table3_paper": pt3})}
    added = "and the seeds the evidence planner added: FedMPS 1237-1239; FedProto 1237)"
    best = by[("Table III, paper protocol", BEST)]
    sig = by[("Table III, paper protocol", "FedMPS is significantly better than every baseline (Wilcoxon rank-sum, "
                                           "p < 0.05)")]
    assert best.evidence.endswith("seeds [1234, 1235, 1236], " + added)
    assert sig.evidence.endswith("seeds [1234, 1235, 1236], " + added) and "; 3 seeds" not in sig.evidence
    # under the paper profile itself (the report's FedMPS section), Table III is the main table
    rows = {"table3": pt3["rows"], "table3_head": pt3["head"], "trends": pt3["trends"]}
    own = {(c.source, c.claim): c for c in S.ledger(paper, rows)}
    assert own[("Table III", BEST)].evidence.endswith("seeds [1234, 1235, 1236], " + added)


def test_one_seed_table3_keeps_its_comparisons(finished):
    plan = S.load_plan("paper", seeds=[1234])
    rows = S.table3(plan, summaries({"fedmps": FEDMPS[:1], "fedproto": FEDPROTO[:1], "fedgkd": FEDGKD[:1]}))
    best = {c.claim: c for c in S.ledger(plan, {"table3": rows, "trends": S.trends(plan)})}[BEST]
    assert best.verdict == C.INCONCLUSIVE and "one seed" in best.note and best.tests[0].n == 1
    cfgs = S.table3_configs(plan)
    assert sides(best) == {ids(cfgs["fedmps"], [1234]), ids(cfgs["fedproto"], [1234])}


def test_tables_6_and_7_compare_per_n_and_per_row_on_the_paper_protocols_runs(finished):
    quick, paper = S.load_plan("quick"), S.load_plan("paper")
    ways = {"plan": paper, "rows": {3: {"fedmps": (92.19, 1.0), "fedproto": (90.29, 2.0), "fedavg": (74.29, 3.0)},
                                    4: {"fedmps": (88.0, 1.0), "fedproto": (89.5, 2.0)}},
            "trends": S.trends(paper, [("ways", m, n) for m in ("fedmps", "fedproto", "fedavg") for n in (3, 4)])}
    abl = {r: {"proto_own_best": b, "proto_own_last": b - 0.5, "head_last": b - 1}
           for r, b in {1: 90.36, 2: 90.68, 3: 92.51, 4: 90.14, 5: 92.52, 6: 92.19}.items()}
    seven = {"plan": paper, "rows": abl, "trends": S.trends(paper, [("ablation", r) for r in abl])}
    by = {(c.source, c.claim): c for c in S.ledger(quick, {"ways_paper": ways, "ablation_paper": seven})}
    n = by[("Table VI, paper protocol", "FedMPS is the best method for every average number of classes n")]
    assert n.verdict == C.INCONCLUSIVE and "one seed" in n.note
    assert [(t.label, round(t.margin, 2)) for t in n.tests] == [("FedMPS (n = 3) - FedProto (n = 3)", 1.9),
                                                               ("FedMPS (n = 4) - FedProto (n = 4)", -1.5)]
    wc = S.ways_configs(paper)
    assert sides(n) == {ids(wc[(m, k)], [1234]) for m in ("fedmps", "fedproto") for k in (3, 4)}
    ac = S.ablation_configs(paper)
    alone = by[("Table VII, paper protocol", "Each loss term alone adds accuracy over cross-entropy (rows 2-4 above "
                                             "row 1)")]
    assert alone.verdict == C.INCONCLUSIVE and [t.label for t in alone.tests] == [
        "(2) - (1), best round", "(3) - (1), best round", "(4) - (1), best round"]
    # the rows' trends name the paper profile's Table VII runs: every seed of its ablation_seeds
    assert paper.ablation_seeds() == paper.seeds
    assert sides(alone) == {ids(ac[r], paper.seeds) for r in (1, 2, 3, 4)}
    soft = by[("Table VII, paper protocol", "Soft labels add accuracy on top of both contrastive terms (row 6 above "
                                            "row 5)")]
    assert soft.verdict == C.INCONCLUSIVE and sides(soft) == {ids(ac[r], paper.seeds) for r in (5, 6)}
    assert ids(ac[6], [1234]) == ids(S.table3_configs(paper)["fedmps"], [1234])   # row 6 is Table III's FedMPS run


def test_sweeps_time_temperatures_and_attack_name_their_runs(finished):
    plan = S.load_plan("paper")
    tr = S.trends(plan)
    tt = {"fedavg": {"round": None}, "fedproto": {"round": 30}, "fedmps": {"round": 20}}
    stdev = {1: {"fedproto": 87.5, "fedmps": 92.4}, 3: {"fedproto": 74.1, "fedmps": 85.8}}
    clients = {20: {"fedproto": 81.7, "fedmps": 88.8, "fedavg": 70.0}}
    tau = {"tau1": {0.1: 89.0, 0.5: 90.0, 1.0: 89.5}, "tau2": {1.0: 90.0, 10.0: 90.2}}
    tau_std = {t: float(np.std(list(v.values()))) for t, v in tau.items()}
    attack = pd.DataFrame({"source": ["prototype", "prototype", "class_average"], "levels": ["low", "high", "-"],
                           "ssim": [0.465, 0.462, 0.491]})
    by = {c.claim: c for c in S.ledger(plan, {"time": tt, "stdev": stdev, "clients": clients, "tau_std": tau_std,
                                              "tau": tau, "attack": attack, "trends": tr})}
    t3 = S.table3_configs(plan)
    fast = by["FedMPS converges fastest (fewest rounds to a target accuracy)"]
    assert fast.verdict == C.INCONCLUSIVE and "one seed" in fast.note
    assert [(t.label, t.margin) for t in fast.tests] == [("FedProto - FedMPS (rounds to target)", 10.0)]
    assert sides(fast) == {ids(t3["fedmps"], plan.seeds), ids(t3["fedproto"], plan.seeds)}   # Table III, every seed
    std = by["FedMPS stays ahead as the noise std varies"]
    assert [t.label for t in std.tests] == ["FedMPS - FedProto (std 1)", "FedMPS - FedProto (std 3)"]
    std_cfgs = S.grid_configs(plan, "stdev")
    assert sides(std) == {ids(std_cfgs[(m, s)], [1234]) for m in ("fedmps", "fedproto") for s in (1, 3)}
    n = by["FedMPS stays ahead as the number of clients N varies"]
    assert n.verdict == C.INCONCLUSIVE and [t.label for t in n.tests] == ["FedMPS - FedProto (N = 20)"]
    assert sides(n) == {ids(S.grid_configs(plan, "clients")[(m, 20)], [1234]) for m in ("fedmps", "fedproto")}
    temp = by["FedMPS is insensitive to its temperatures (accuracy std across the grid: tau1 0.36, tau2 0.13 points "
              "on Fashion-MNIST)"]
    assert temp.verdict == C.INCONCLUSIVE and "one seed" in temp.note
    assert [(t.label, round(t.margin, 2)) for t in temp.tests] == [("1 - std across the tau1 grid", 0.59),
                                                                  ("1 - std across the tau2 grid", 0.9)]
    tc = {t: S.grid_configs(plan, t) for t in ("tau1", "tau2")}   # each side: the grid's lowest and highest run, on
    assert sides(temp) == {ids(tc[t][("fedmps", x)], plan.seeds)   # every seed (the claim is per seed)
                           for t, x in (("tau1", 0.1), ("tau1", 0.5), ("tau2", 1.0), ("tau2", 10.0))}
    leak = by["Uploaded prototypes do not let the server reconstruct the client's images"]
    assert leak.verdict == C.INCONCLUSIVE and leak.tests[0].label == "class average + 0.02 - SSIM"
    assert leak.tests[0].margin == pytest.approx(0.491 + 0.02 - 0.465)
    assert ids(leak.tests[0].a_trend.group.cfg, leak.tests[0].a_trend.group.seeds) == ids(t3["fedmps"], [1234])


def test_a_threshold_over_seeds_is_judged_on_their_spread():
    """Temperature insensitivity with one std per seed: below 1 point on every seed by far more than their spread is
    supported; around 1 point, inconclusive."""
    plan = S.load_plan("paper")
    text = ("FedMPS is insensitive to its temperatures (accuracy std across the grid: tau1 0.36, tau2 0.13 points on "
            "Fashion-MNIST)")
    low = {c.claim: c for c in S.ledger(plan, {"tau_std": {"tau1": [0.3, 0.4, 0.35], "tau2": [0.1, 0.2, 0.15]}})}
    assert low[text].verdict == C.SUPPORTED and all(t.n == 3 for t in low[text].tests)
    edge = {c.claim: c for c in S.ledger(plan, {"tau_std": {"tau1": [0.6, 1.4, 0.9], "tau2": [0.1, 0.2, 0.15]}})}
    assert edge[text].verdict == C.INCONCLUSIVE and "1 - std across the tau1 grid" in edge[text].note


def _doc_floors(text: str) -> dict:
    """``{(args of claims.smallest_p): stated p}`` for every ``p = X (`claims.smallest_p(...)`)`` of the doc."""
    out = {}
    for p, args in re.findall(r"p = (\d+\.\d+) \(`(?:fedlib\.)?claims\.smallest_p\(([^)]*)\)`\)", text):
        out[args.replace(" ", "")] = float(p)
    return out


def test_docs_state_the_exact_floors_and_call_0_0495_the_normal_approximation():
    doc = (CHECKOUT / "docs" / "fedmps.md").read_text()
    floors = _doc_floors(" ".join(doc.split()))
    assert floors.get("3,3") == pytest.approx(C.smallest_p(3, 3))                     # rank-sum, 3 vs 3: 0.10
    assert floors.get("3,paired=True") == pytest.approx(C.smallest_p(3, paired=True))  # sign-flip, 3 pairs: 0.25
    lines = doc.splitlines()
    prose = " ".join(" ".join(line for line in lines if not line.startswith("|")).split())
    for sentence in re.split(r"(?<=[.;])\s+(?=[A-Z(])", prose):
        if "0.0495" in sentence:
            assert "approximation" in sentence, sentence
            assert not re.search(r"smallest (p )?(a|any) 3 vs 3 test", sentence), sentence
    for i, line in enumerate(lines):   # a table cell: only beside the exact p, under a header naming the approximation
        if line.startswith("|") and "0.0495" in line:
            header = next(lines[j] for j in range(i, -1, -1) if not lines[j - 1].startswith("|"))
            assert "(0.0495)" in line and "normal approx" in header, line


# -- per seed: the time to target on every Table III seed, Table VII on the profile's ablation_seeds ---------------
FAST = "FedMPS converges fastest (fewest rounds to a target accuracy)"


def _records(first: int | None, metric: str, rounds: int = 100) -> list[dict]:
    """A run's round records whose ``metric`` is 0.80 before round ``first`` and 0.90 from it (``None``: never at the
    85% target); one second a round."""
    return [{"round": r, "seconds": 1.0, "acc": {metric: {"mean": 0.9 if first is not None and r >= first else 0.8}}}
            for r in range(1, rounds + 1)]


def _per_seed_times(plan, firsts: dict) -> dict:
    return S.times_to_target(plan, {m: [_records(f, plan.paper_metric(m)) for f in v] for m, v in firsts.items()})


def test_time_to_target_is_compared_per_seed_with_never_as_a_lower_bound(finished):
    """The archived paper-protocol Table III reaches 85% at FedMPS 2, 8, 3 and FedProto 27, 67, 58 (every other
    method later or never): FedProto - FedMPS per seed 25, 59, 55, mean +46.33 against a sample std of 20.98, so the
    claim once judged on the first seed alone ("one seed") is supported on the three."""
    plan = S.load_plan("paper")
    tt = _per_seed_times(plan, {"fedavg": [None, None, None], "fedgkd": [89, None, None],
                                "fedproto": [27, 67, 58], "fedmps": [2, 8, 3]})
    assert [t["round"] for t in tt["fedmps"]] == [2, 8, 3] and tt["fedmps"][1]["seconds"] == 8.0
    fast = {c.claim: c for c in S.ledger(plan, {"time": tt, "trends": S.trends(plan)})}[FAST]
    (t,) = fast.tests
    assert (t.label, t.n, t.paired) == ("FedProto - FedMPS (rounds to target)", 3, True)
    assert t.margin == pytest.approx(46.33, abs=0.005) and t.spread == pytest.approx(C.sample_std([27, 67, 58]))
    assert t.spread == pytest.approx(20.98, abs=0.005)
    assert fast.verdict == C.SUPPORTED and "n = 3" in fast.note and "never reached" not in fast.note
    assert "FedGKD 89/never/never (mean ≥ 97.0)" in fast.evidence and "FedMPS 2/8/3 (mean 4.3)" in fast.evidence
    t3 = S.table3_configs(plan)
    assert sides(fast) == {ids(t3["fedproto"], plan.seeds), ids(t3["fedmps"], plan.seeds)}
    # the fastest rival never reaches the target on one seed: counted as 101 rounds, a lower bound, named in the note
    tt = _per_seed_times(plan, {"fedproto": [27, None, 58], "fedmps": [2, 8, 3]})
    fast = {c.claim: c for c in S.ledger(plan, {"time": tt})}[FAST]
    assert [round(x, 2) for x in (fast.tests[0].margin,)] == [round(np.mean([25, 93, 55]), 2)]
    assert fast.verdict == C.SUPPORTED and "never reached: counted as 101 rounds, a lower bound" in fast.note
    # per-seed rounds that overlap: FedProto 3, 9, 2 against FedMPS 2, 8, 3 is within the spread
    tt = _per_seed_times(plan, {"fedproto": [3, 9, 2], "fedmps": [2, 8, 3]})
    fast = {c.claim: c for c in S.ledger(plan, {"time": tt})}[FAST]
    assert fast.verdict == C.INCONCLUSIVE and fast.tests[0].margin == pytest.approx(1 / 3)
    assert "margin within the seed spread" in fast.note
    # FedMPS slower on every seed by more than the spread: not supported
    tt = _per_seed_times(plan, {"fedproto": [2, 3, 4], "fedmps": [20, 30, 25]})
    assert {c.claim: c for c in S.ledger(plan, {"time": tt})}[FAST].verdict == C.NOT_SUPPORTED


def _ablation_rows(best: dict, last_shift: float = -0.5) -> dict:
    """:func:`S.ablation_table`-shaped rows from per-seed best-round accuracies."""
    return {r: {"proto_own_best": float(np.mean(v)), "proto_own_last": float(np.mean(v)) + last_shift,
                "head_last": float(np.mean(v)) + 1.0, "seed_std": C.sample_std(v), "n": len(v),
                "seeds": [1234, 1235, 1236],
                "per_seed": {"proto_own_best": list(v), "proto_own_last": [x + last_shift for x in v],
                             "head_best": [x + 1.0 for x in v], "head_last": [x + 1.0 for x in v]}}
            for r, v in best.items()}


def test_table7_rows_are_compared_per_seed_paired(finished):
    """Table VII on three seeds: each row against its reference per seed (paired), judged against the seeds' spread.
    Rows 2-4 gain 1.0-2.0 points on every seed against spreads of 0.5: supported; row 6 is 0.5 below row 5 on every
    seed (spread 0.5): within the spread, inconclusive."""
    quick, paper = S.load_plan("quick"), S.load_plan("paper")
    best = {1: [90.0, 90.5, 89.5], 2: [91.0, 91.5, 90.5], 3: [92.0, 92.5, 91.5], 4: [91.5, 92.0, 91.0],
            5: [92.5, 93.0, 92.0], 6: [92.0, 92.5, 91.5]}
    rows = _ablation_rows(best)
    seven = {"plan": paper, "rows": rows, "seeds": paper.seeds,
             "trends": S.trends(paper, [("ablation", r) for r in rows])}
    by = {(c.source, c.claim): c for c in S.ledger(quick, {"ablation_paper": seven})}
    alone = by[("Table VII, paper protocol", "Each loss term alone adds accuracy over cross-entropy (rows 2-4 above "
                                             "row 1)")]
    assert [(t.label, round(t.margin, 2), round(t.spread, 2), t.n, t.paired) for t in alone.tests] == [
        ("(2) - (1), best round", 1.0, 0.5, 3, True), ("(3) - (1), best round", 2.0, 0.5, 3, True),
        ("(4) - (1), best round", 1.5, 0.5, 3, True)]
    assert alone.verdict == C.SUPPORTED and "best round (mean over seeds) (1) 90.00, (2) 91.00" in alone.evidence
    assert "seeds 1234, 1235, 1236" in alone.note
    soft = by[("Table VII, paper protocol", "Soft labels add accuracy on top of both contrastive terms (row 6 above "
                                            "row 5)")]
    (t,) = soft.tests
    assert (round(t.margin, 2), round(t.spread, 2), t.n) == (-0.5, 0.5, 3)
    assert soft.verdict == C.INCONCLUSIVE and "margin within the seed spread" in soft.note
    ac = S.ablation_configs(paper)
    assert sides(soft) == {ids(ac[r], paper.seeds) for r in (5, 6)}
    # row 4 below row 1 on every seed, beyond the spread: not supported; one seed's rows (scalars): inconclusive
    rows = _ablation_rows({**best, 4: [88.0, 88.5, 87.5]})
    alone = {c.claim: c for c in S.ledger(paper, {"ablation": rows})}[alone.claim]
    assert alone.verdict == C.NOT_SUPPORTED and "(4) - (1), best round -2.00 (seed std 0.50" in alone.note
    one = {r: {"proto_own_best": v[0], "proto_own_last": v[0], "head_last": v[0]} for r, v in best.items()}
    assert {c.verdict for c in S.ledger(paper, {"ablation": one}) if c.source == "Table VII"} == {C.INCONCLUSIVE}


def test_ablation_table_reads_every_seed_and_the_notebook_shows_mean_std_n(monkeypatch):
    """:func:`S.ablation_table` over three seeds: means, per-seed values, the sample std; Table VII's cells show
    mean ± sample std over seeds with n, and the gain over row (1) from the paired per-seed differences."""
    from fedlib import report

    plan = S.load_plan("paper")
    configs = S.ablation_configs(plan)

    def summary(seed, best):
        return {"seed": seed, "metrics": {S.PAPER_METRIC_PROTO: {"best": best / 100, "best_std": 0.1, "last":
                                                                 (best - 1) / 100, "best_round": 90 + seed - 1234},
                                          S.COMMON_METRIC: {"best": best / 100, "last": (best + 1) / 100}}}
    monkeypatch.setattr(results, "rounds", lambda cfg, seed, archive_root=None, protocol=False: [
        {"round": 2, "local": {"l_soft": 0.1 * (seed - 1233)}}] if cfg["algorithm"]["mu"] else [{"round": 2}])
    runs = {1: [summary(s, b) for s, b in zip(plan.seeds, (90.0, 91.0, 89.0), strict=True)],
            6: [summary(s, b) for s, b in zip(plan.seeds, (92.0, 93.5, 90.5), strict=True)]}
    rows = S.ablation_table(plan, runs, configs)
    assert rows[6]["per_seed"]["proto_own_best"] == pytest.approx([92.0, 93.5, 90.5])
    assert rows[6]["proto_own_best"] == pytest.approx(92.0) and rows[6]["seed_std"] == pytest.approx(1.5)
    assert (rows[6]["n"], rows[6]["seeds"], rows[6]["best_round"]) == (3, plan.seeds, [90, 91, 92])
    assert rows[6]["l_soft_mean"] == pytest.approx(0.2) and rows[1]["l_soft_mean"] is None
    assert rows[6]["proto_own_best_std"] == pytest.approx(10.0)   # the std across clients, mean over seeds
    frame = S._table7_frame(report.load_paper("fedmps"), rows)
    six = frame.loc[[i for i in frame.index if i.startswith("(6)")][0]]
    assert six["ours: best round"] == "92.00 ± 1.50 (n = 3)"
    assert six["our gain over (1)"] == "+2.00 ± 0.50"   # per seed +2.0, +2.5, +1.5
    assert six["ours: head, last round"] == "93.00 ± 1.50 (n = 3)" and six["best round"] == "90, 91, 92"
    assert S._seeds_text(rows).startswith("seeds 1234, 1235, 1236 (n = 3); mean ± sample std over seeds")


def test_table7_reads_the_seeds_the_evidence_planner_added_to_a_row(finished):
    """Row 6 is Table III's FedMPS run, to which the planner added seeds 1237-1239: Table VII reads them for row 6
    alone (its mean over 6 seeds, its gain over row (1) paired on the 3 seeds both hold), the claim on rows 5-6 names
    them and compares the rows unpaired (the exact rank-sum test, 3 vs 6), the claim on rows 1-4 does not name them,
    and row 6's trend names its 6 seeds, so the planner adds seeds to the rows' run groups (not the profile's), as
    many as the paired test needs given the shared seeds against the margin."""
    from fedlib import evidence, report

    paper = S.load_plan("paper")
    best = {1: [90.0, 90.5, 89.5], 2: [91.0, 91.5, 90.5], 3: [92.0, 92.5, 91.5], 4: [91.5, 92.0, 91.0],
            5: [92.5, 93.0, 92.0], 6: [92.0, 92.5, 91.5]}
    rows = _ablation_rows(best)
    six = [92.0, 92.5, 91.5, 94.0, 93.5, 93.0]
    rows[6] = {**_ablation_rows({6: six})[6], "seeds": [1234, 1235, 1236, 1237, 1238, 1239]}
    assert S._row_seeds(rows) == [1234, 1235, 1236]
    assert S._added_rows(rows) == ", and the seeds the evidence planner added: row 6 1237-1239"
    assert S._seeds_text(rows).startswith("seeds 1234, 1235, 1236 (n = 3), and the seeds the evidence planner added: "
                                          "row 6 1237-1239; mean ± sample std")
    shown = {r: {**x, "proto_own_best_std": 1.0, "best_round": [90] * x["n"], "l_soft_mean": None}
             for r, x in rows.items()}
    frame = S._table7_frame(report.load_paper("fedmps"), shown)
    got = frame.loc[[i for i in frame.index if i.startswith("(6)")][0]]
    assert got["ours: best round"] == "92.75 ± 0.94 (n = 6)" and got["our gain over (1)"] == "+2.00 ± 0.00"
    read = {("ablation", r): r_["seeds"] for r, r_ in rows.items()}
    by = {c.claim: c for c in S.ledger(paper, {"ablation": rows, "trends": S.trends(paper, list(read), more=read)})}
    soft = by["Soft labels add accuracy on top of both contrastive terms (row 6 above row 5)"]
    (t,) = soft.tests
    assert (t.paired, t.n, round(t.p_min, 4), round(t.margin, 2)) == (False, 3, round(2 / 84, 4), 0.25), soft.note
    assert "the seeds the evidence planner added: row 6 1237-1239" in soft.note
    alone = by["Each loss term alone adds accuracy over cross-entropy (rows 2-4 above row 1)"]
    assert "planner added" not in alone.note
    # seeds added to row 5 as well: the claim names both rows' seeds beyond the table's 1234-1236 (it once named
    # row 6's beyond the seeds rows 5 and 6 share: "row 6 1238-1239")
    grown = {**rows, 5: {**_ablation_rows({5: best[5] + [93.5]})[5], "seeds": [1234, 1235, 1236, 1237]}}
    read = {("ablation", r): r_["seeds"] for r, r_ in grown.items()}
    by = {c.claim: c for c in S.ledger(paper, {"ablation": grown, "trends": S.trends(paper, list(read), more=read)})}
    assert "the seeds the evidence planner added: row 5 1237; row 6 1237-1239" in by[soft.claim].note
    assert t.a_trend.group.seeds == (1234, 1235, 1236, 1237, 1238, 1239) and t.a_trend.group.more
    # the 3 seeds both rows hold all go against the margin (-0.5 each): paired, the exact test needs 9 seeds
    assert t.minority == 3
    item = evidence.plan_claim("FedMPS", 9, soft)
    assert [(a.kind, a.group.label, a.added) for a in item.actions] == [
        ("seeds", "FedMPS ablation row 6", (1240, 1241, 1242)),
        ("seeds", "FedMPS ablation row 5", (1237, 1238, 1239, 1240, 1241, 1242))]


def test_the_paper_profile_runs_table7_on_every_seed_and_the_others_keep_their_first(tmp_path):
    """``ablation_seeds: all`` in the paper profile only: its Table VII adds the runs of seeds 1235-1236 (row 6 is
    Table III's FedMPS run); the other profiles keep their one first-seed run per row, so no run id changes."""
    from fedlib import archive
    from fedlib.paths import ARCHIVE

    paper, quick = S.load_plan("paper"), S.load_plan("quick")
    assert paper.ablation_seeds() == [1234, 1235, 1236] and quick.ablation_seeds() == [1234]
    assert S.load_plan("paper", seeds=[7]).ablation_seeds() == [7]
    assert [(name, seeds) for name, _, seeds in S.archived_tables()][2] == ("FedMPS Table VII (paper profile)",
                                                                           paper.seeds)
    ac = S.ablation_configs(paper)
    # the repository's archived first-seed runs keep their ids
    assert all(archive.entry(c, 1234, ARCHIVE).exists() for c in ac.values())
    jobs = {run_id(c, s) for c, s in S.all_jobs(quick)}
    assert {run_id(c, 1234) for c in S.ablation_configs(quick).values()} <= jobs
    assert not {run_id(c, s) for c in S.ablation_configs(quick).values() for s in (1235, 1236)} & jobs
    pjobs = {run_id(c, s) for c, s in S.all_jobs(paper)}
    assert {run_id(c, s) for c in ac.values() for s in paper.seeds} <= pjobs
    got = S.paper_table7(S.load_plan("smoke", results_dir=str(tmp_path)))
    assert got["total"] == 18 and set(got["seeds"]) <= set(paper.seeds)


def test_a_model_from_a_run_extended_past_the_paper_rounds_is_named(monkeypatch, capsys):
    """FedMPS's figures from trained models say which model came from a run extended past the paper's rounds (the
    line once read a plan attribute FedMPS's plan does not have, and raised instead of printing)."""
    import types

    plan = S.load_plan("smoke")
    main = plan.settings["rounds"]["main"]
    configs = S.table3_configs(plan)
    extended = next(iter(configs))
    monkeypatch.setattr(S.results, "state", lambda cfg, seed: types.SimpleNamespace(
        round=main + 5 if cfg is configs[extended] else main))
    monkeypatch.setattr(S, "table3_configs", lambda plan: configs)
    nb = types.SimpleNamespace(plan=plan, seed0=plan.seeds[0], label=plan.label, once=lambda key, make: make())
    states = S._states(nb)
    assert set(states) == set(configs)
    out = capsys.readouterr().out
    assert f"The models of {plan.label(extended)} (round {main + 5}) come from runs extended past the paper's {main} " \
           "rounds" in out


def test_a_temperature_written_as_a_whole_number_is_the_same_run():
    from fedlib.config import run_id

    ids = {}
    for value in (5, 5.0):
        plan = S.load_plan("smoke")
        plan.settings["tau1"] = [value]
        [cfg] = S.grid_configs(plan, "tau1").values()
        ids[value] = run_id(cfg, 0)
    assert ids[5] == ids[5.0]


def test_table6_claim_reads_the_further_seeds_of_each_n_and_names_them(finished):
    """Table VI's display keeps the first seed; its claim reads every seed each (method, n) holds beyond it (at n = 3
    the runs are Table III's, whose seeds go on to 1239), compares per seed where both hold several, and says which
    seeds and that the evidence is a mean over them; n = 4 on one seed stays "one seed", and the planner adds seeds
    there to the run groups (not to the profile)."""
    from fedlib import evidence

    paper = S.load_plan("paper")
    wc = S.ways_configs(paper)

    def summary(seed, acc):
        return {"seed": seed, "metrics": {S.PAPER_METRIC_PROTO: {"best": acc / 100, "best_std": 0.01}}}
    done = {("fedmps", 3): [summary(s, 92.0 + i) for i, s in enumerate(range(1234, 1240))],
            ("fedproto", 3): [summary(s, 90.0 + i) for i, s in enumerate(range(1234, 1240))],
            ("fedmps", 4): [summary(1234, 88.0)], ("fedproto", 4): [summary(1234, 89.5)]}
    ways = S.ways_per_seed(paper, done)
    assert ways[3]["fedmps"] == pytest.approx([92.0, 93.0, 94.0, 95.0, 96.0, 97.0])
    assert ways["seeds"][4]["fedproto"] == [1234] and S.ways_rows(paper, done)[3]["fedmps"] == (92.0, 1.0)
    read = {("ways", m, n): got for n, row in ways["seeds"].items() for m, got in row.items()}
    (n,) = [c for c in S.ledger(paper, {"ways": ways, "trends": S.trends(paper, list(read), more=read)})
            if c.claim.startswith("FedMPS is the best method for every")]
    three, four = n.tests
    assert (three.n, round(three.margin, 2), three.paired) == (6, 2.0, True) and four.n == 1
    assert "means over seeds" in n.evidence and "FedMPS (n = 3) 1235-1239" in n.note
    assert "(at n = 3 Table III's, and any the evidence planner added)" in n.note
    assert sides(n) >= {ids(wc[("fedmps", 3)], range(1234, 1240))}
    got = evidence.plan_claim("FedMPS", 7, n)
    assert {(a.kind, a.group.label, a.added) for a in got.actions} == {
        ("seeds", "FedMPS n = 4", (1235, 1236)), ("seeds", "FedProto n = 4", (1235, 1236))}


def test_fig10_grids_run_on_every_seed_and_each_seed_gets_its_own_std(monkeypatch):
    """Fig. 10's claim is a per-seed threshold, so its grids train (and are archived) on every seed of the profile, and
    each seed's std is taken across that seed's grid: a hand computation on made-up accuracies."""
    import types

    plan = S.load_plan("paper")
    made = {("tau1", 0.1): [0.80, 0.90, 0.85], ("tau1", 0.5): [0.82, 0.90, 0.86], ("tau1", 1.0): [0.84, 0.90, 0.87],
            ("tau2", 1.0): [0.80, 0.91, 0.85], ("tau2", 2.0): [0.80, 0.91, 0.85], ("tau2", 5.0): [0.80, 0.91, 0.85],
            ("tau2", 10.0): [0.84, 0.91, 0.85]}
    asked = {}

    def run(m, seed, a):
        return {"seed": seed, "metrics": {plan.paper_metric(m): {"best": a}}}

    def train(configs, seeds=None, **kw):
        asked.update(keys=sorted(configs, key=str), seeds=seeds)
        return {(t, m, v): [run(m, s, a) for s, a in zip(seeds, made[(t, v)], strict=True)] for (t, m, v) in configs}

    # seeds the evidence planner added: tau1's ends hold 1237 (and 0.1 also 1238), its middle value is Table III's run
    # (1237-1239); tau2's values hold none, so tau2 stays on the profile's seeds
    added = {("tau1", 0.1): {1237: 0.70, 1238: 0.99}, ("tau1", 0.5): {1237: 0.72, 1238: 0.5, 1239: 0.5},
             ("tau1", 1.0): {1237: 0.74}}

    def with_more_seeds(configs, runs, protocol=False):
        assert protocol
        return {(t, m, v): got + [run(m, s, a) for s, a in added.get((t, v), {}).items()]
                for (t, m, v), got in runs.items()}

    monkeypatch.setattr(S.results, "train", train)
    monkeypatch.setattr(S.results, "with_more_seeds", with_more_seeds)
    nb = types.SimpleNamespace(plan=plan, workers=1, once=lambda key, make: make())
    got = S._temperatures(nb)
    assert asked["seeds"] == plan.seeds == [1234, 1235, 1236]
    assert len(asked["keys"]) == 7 and {k[1] for k in asked["keys"]} == {"fedmps"}
    assert got["tau_std"]["tau1"] == pytest.approx([np.std([80, 82, 84]), 0.0, np.std([85, 86, 87]),
                                                    np.std([70, 72, 74])])
    assert got["tau_std"]["tau2"] == pytest.approx([np.sqrt(3), 0.0, 0.0])   # 80, 80, 80, 84: population std sqrt(3)
    assert got["tau_seeds"] == {"tau1": [1234, 1235, 1236, 1237], "tau2": plan.seeds}
    assert got["tau"]["tau1"][0.1] == pytest.approx((80 + 90 + 85 + 70) / 4)   # 1238: not every value holds it
    assert got["tau"]["tau2"][10.0] == pytest.approx((84 + 91 + 85) / 3)
    quick = types.SimpleNamespace(plan=S.load_plan("quick"), workers=1, once=lambda key, make: make())
    monkeypatch.setattr(S.results, "with_more_seeds", lambda *a, **k: pytest.fail("a quick profile read added seeds"))
    made.update({k: v[:1] for k, v in made.items()})   # quick: one seed, the same grids
    assert S._temperatures(quick)["tau_seeds"] == {"tau1": [1234], "tau2": [1234]}
    # the paper profile's jobs and archive hold every seed of both grids; Figs. 8-9 keep the first seed
    jobs = {run_id(c, s) for c, s in S.all_jobs(plan)}
    assert {run_id(c, s) for c in S.temperature_configs(plan).values() for s in plan.seeds} <= jobs
    assert not {run_id(c, 1235) for (m, v), c in S.grid_configs(plan, "stdev").items() if v != 2} & jobs  # 2: Table III
    assert S.archived_tables()[-1][0] == "FedMPS Fig. 10 temperature grids (paper profile)"
    assert S.archived_tables()[-1][2] == plan.seeds


def test_fig10_claim_reads_the_seeds_added_to_its_grid_and_the_planner_adds_them_there(finished):
    """Fig. 10's claim (a per-seed std against 1 point) on the seeds its tau1 grid was read on, any the evidence
    planner added included: its sides name those runs and the seeds, the note says which were added, and with one seed
    against the margin the planner asks for seeds on the grid's run groups (not the profile's)."""
    from fedlib import evidence

    paper = S.load_plan("paper")
    tc = S.temperature_configs(paper)
    tau_seeds = {"tau1": list(range(1234, 1238)), "tau2": paper.seeds}
    tau = {"tau1": {0.1: 88.0, 0.5: 90.0, 1.0: 89.0}, "tau2": {1.0: 89.0, 2.0: 89.1, 5.0: 89.2, 10.0: 89.3}}
    std = {"tau1": [1.2, 1.1, 0.9, 1.3], "tau2": [0.2, 0.3, 0.25]}
    read = {(t, "fedmps", v): got for t, got in tau_seeds.items() for v in paper.settings[t]}
    res = {"tau": tau, "tau_std": std, "trends": S.trends(paper, list(read), more=read)}
    (c,) = [c for c in S.ledger(paper, res) if c.source == "Fig. 10"]
    t1 = next(t for t in c.tests if "tau1" in t.label)
    assert t1.n == 4 and round(t1.margin, 3) == round(1 - np.mean(std["tau1"]), 3)
    assert sides(c) >= {ids(tc[("tau1", "fedmps", 0.1)], range(1234, 1238)),
                        ids(tc[("tau1", "fedmps", 0.5)], range(1234, 1238))}
    assert "the seeds the evidence planner added: tau1 1237" in c.note and c.verdict == C.INCONCLUSIVE
    got = evidence.plan_claim("FedMPS", 13, c)
    assert {a.kind for a in got.actions} == {"seeds"}
    assert {a.added for a in got.actions} == {(1238, 1239, 1240)}


def test_figs_8_9_read_the_seeds_added_to_each_point_and_one_missing_grid_leaves_the_other(monkeypatch):
    """Figs. 8-9 run the first seed (the paper's one run a point); under the paper profile each (method, value) also
    reads the seeds the evidence planner added to it, and names them for its claim's trends; a quick profile reads
    none. While the archive alone is read, a grid the archive lacks is left out and the other one kept; with neither
    there the cell is not archived."""
    import types

    plan = S.load_plan("paper")
    asked = []

    def run(m, seed, a):
        return {"seed": seed, "metrics": {plan.paper_metric(m): {"best": a}}}

    def train(configs, seeds=None, **kw):
        kinds = {("clients" if "/N" in c["name"] else "stdev") for c in configs.values()}
        asked.append((kinds, seeds))
        if "clients" in kinds and missing:
            raise S.results.NotArchived("24 runs not in the run archive")
        return {(m, v): [run(m, seeds[0], 0.80 + 0.01 * v)] for (m, v) in configs}

    added = {("fedmps", 1): [0.95, 0.96], ("fedproto", 1): [0.90]}

    def with_more_seeds(configs, runs, protocol=False):
        assert protocol
        return {k: got + [run(k[0], 1235 + i, a) for i, a in enumerate(added.get(k, []) if k[1] == 1 else [])]
                for k, got in runs.items()}

    missing = True
    monkeypatch.setattr(S.results, "train", train)
    monkeypatch.setattr(S.results, "with_more_seeds", with_more_seeds)
    nb = types.SimpleNamespace(plan=plan, workers=1, seed0=1234, once=lambda key, make: make())
    got = S._sweeps(nb)
    assert asked == [({"stdev"}, [1234]), ({"clients"}, [1234])]
    assert "clients" not in got and sorted(got["stdev"]) == [1, 2, 3]
    assert got["stdev"][1]["fedmps"] == pytest.approx([81.0, 95.0, 96.0])
    assert got["stdev"][3]["fedproto"] == pytest.approx([83.0])
    assert got["sweep_seeds"][("stdev", "fedmps", 1)] == [1234, 1235, 1236]
    assert got["sweep_seeds"][("stdev", "fedproto", 1)] == [1234, 1235]
    # both grids missing: the cell is not archived (the render skips it)
    monkeypatch.setattr(S.results, "train", lambda *a, **k: (_ for _ in ()).throw(S.results.NotArchived("none")))
    with pytest.raises(S.results.NotArchived):
        S._sweeps(nb)
    # a quick profile reads no added seeds, and trains both grids
    missing = False
    monkeypatch.setattr(S.results, "train", train)
    monkeypatch.setattr(S.results, "with_more_seeds", lambda *a, **k: pytest.fail("a quick profile read added seeds"))
    quick = types.SimpleNamespace(plan=S.load_plan("quick"), workers=1, seed0=1234, once=lambda key, make: make())
    got = S._sweeps(quick)
    assert set(got["clients"]) == {20, 30} and all(len(v) == 1 for v in got["sweep_seeds"].values())
    # the paper profile's archived tables hold Fig. 8's grid on the first seed
    name, cfgs, seeds = S.archived_tables()[3]
    assert (name, seeds, len(cfgs)) == ("FedMPS Fig. 8 noise grid (paper profile)", [1234], 6)


def test_fig8_claim_reads_the_seeds_added_to_each_point_and_the_planner_adds_them_there(finished):
    """The noise-std claim compares FedMPS and FedProto per point on the seeds both hold (std 1: six, paired; std 2:
    Table III's run; std 3: the first seed alone, "one seed"), names the added seeds, and the planner asks for seeds
    at std 3 on its two run groups, not on the profile."""
    from fedlib import evidence

    paper = S.load_plan("paper")
    six = list(range(1234, 1240))
    stdev = {1: {"fedmps": [90.0 + i for i in range(6)], "fedproto": [88.0 + i for i in range(6)]},
             3: {"fedmps": [86.0], "fedproto": [85.0]}}
    read = {("stdev", m, 1): six for m in ("fedmps", "fedproto")}
    read.update({("stdev", m, 3): [1234] for m in ("fedmps", "fedproto")})
    (c,) = [c for c in S.ledger(paper, {"stdev": stdev, "trends": S.trends(paper, list(read), more=read)})
            if c.claim == "FedMPS stays ahead as the noise std varies"]
    one, three = c.tests
    assert (one.label, one.n, one.paired, round(one.margin, 2)) == ("FedMPS - FedProto (std 1)", 6, True, 2.0)
    assert one.p == pytest.approx(2 / 2 ** 6) and three.n == 1
    assert c.verdict == C.INCONCLUSIVE and ("the further seeds of the same runs (at std 2 Table III's, and any the "
                                            "evidence planner added): FedMPS std 1 1235-1239") in c.note
    got = evidence.plan_claim("FedMPS", 11, c)
    assert {(a.kind, a.group.label, a.added) for a in got.actions} == {
        ("seeds", "FedMPS std 3", (1235, 1236)), ("seeds", "FedProto std 3", (1235, 1236))}
