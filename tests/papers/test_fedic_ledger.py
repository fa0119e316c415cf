"""The FedIC ledger on the verdict rule of fedlib.claims: every comparison carries the trends of its two sides (the
early decision under the converged profile, the runs for the evidence planner), comparisons are built with one seed
too, and the converged profile's run count counts a run shared between Table 1 and Figs. 2 / 4 once."""

import numpy as np
import pytest

from fedlib import claims as C
from fedlib import plateau, results
from fedlib.config import run_id
from fedlib.papers import fedic as I

PRA = "FedIC beats every baseline on Fashion-MNIST Pra (Dir 0.1)"


def _cell(*seeds, curve=None, group=None):
    """A cell as :func:`fedic.cells` makes it: ``curve`` is every seed's accuracy curve (%, None: flat at the mean),
    its trend (:func:`fedlib.claims.trend`) and its plateau text."""
    t = C.trend("x", [curve or [float(np.mean(seeds))] * 100] * len(seeds), group)
    return {"best": float(np.mean(seeds)), "last": float(np.mean(seeds)), "n": len(seeds),
            "best_std": C.sample_std(seeds), "per_seed": list(seeds), "best_round": 1,
            "plateau": t.plateau_text(), "trend": t}


def test_a_converged_claim_whose_side_behind_still_rises_is_decided_once_the_margin_survives_the_projection():
    conv = I.load_plan("converged")
    slow = list(np.linspace(89.0, 90.0, 100))   # still rising (+0.2 over the last 20%), +0.5 over the last doubling
    fedpac = _cell(90.0, 90.3, 89.7, curve=slow)
    # the reach: twice the larger of the rate kept up to 400 rounds (0.2 / 20 x 300 = 3.03) and two more doublings
    assert not fedpac["trend"].plateaued and fedpac["trend"].reach() == pytest.approx(2 * 0.2 / 20 * 300 * 100 / 99)
    t1 = {("pra", "fedic"): _cell(97.0, 97.2, 96.8), ("pra", "fedpac"): fedpac}
    beats = {c.claim: c for c in I.ledger(conv, {"table1": t1})}[PRA]
    # FedIC +7.00, spread 0.30; FedPAC can gain at most ~6.06 by 400 rounds: the margin stands (it was capped at
    # inconclusive on "FedPAC pra: not plateaued")
    assert beats.verdict == C.SUPPORTED
    assert "decided before the curves plateaued (early decision): FedIC - FedPAC" in beats.note
    assert beats.tests[0].b_trend is fedpac["trend"] and beats.tests[0].a_trend is t1[("pra", "fedic")]["trend"]


def test_one_seed_comparisons_are_built_and_name_their_runs():
    quick = I.load_plan("quick")
    cfgs = I.table1_configs(quick)
    groups = {k: plateau.Group(f"{k[1]} {k[0]}", cfgs[k], (0,), I.metric(quick, k[-1])) for k in cfgs}
    t1 = {k: _cell(v, group=groups[k]) for k, v in ((("pra", "fedic"), 80.0), (("pra", "fedpac"), 78.0))}
    ks = {k: _cell(v) for k, v in ((1, 70.0), (3, 80.0), (5, 75.0))}
    ab = {v: _cell(70.0 + i) for i, v in enumerate(("baseline", "clustering", "collaboration", "fedic"))}
    got = {c.claim: c for c in I.ledger(quick, {"table1": t1, "k": ks, "ablation": ab})}
    pra = got[PRA]
    # one seed decides nothing, but the planner sees the comparison and the runs that need more seeds
    assert pra.verdict == C.INCONCLUSIVE and len(pra.tests) == 1 and pra.tests[0].n == 1
    assert pra.tests[0].a_trend.group == groups[("pra", "fedic")]
    assert pra.tests[0].b_trend.group == groups[("pra", "fedpac")]
    assert len(got["An intermediate K is best (K = 3 on Fashion-MNIST)"].tests) == 1
    assert len(got["baseline < + clustering < + collaboration < both"].tests) == 3


def test_cells_carry_the_trend_of_their_config_and_seeds(monkeypatch):
    plan = I.load_plan("converged")
    cfgs = I.k_configs(plan)

    def recs(cfg, seed, archive_root=None):
        return [{"round": r + 1, "acc": {"acc_head": {"weighted": (80 + r / 10) / 100}}} for r in range(100)]

    monkeypatch.setattr(results, "rounds", recs)
    summary = {"metrics": {"acc_head": {"best_weighted": 0.9, "last_weighted": 0.9, "best_weighted_round": 100}}}
    got = I.cells(plan, {3: [{**summary, "seed": s} for s in plan.seeds]}, None, cfgs)[3]
    assert got["best_std"] == 0.0 and not got["trend"].plateaued and got["trend"].rounds == 100
    assert got["trend"].group == plateau.Group("K 3", cfgs[3], tuple(plan.seeds), "acc_head", "weighted")


def test_the_converged_run_count_counts_a_run_shared_between_tables_once(monkeypatch, tmp_path):
    conv = I.load_plan("converged")
    parts = (I.table1_configs(conv), I.k_configs(conv), I.ablation_configs(conv))
    unique = {run_id(c, s) for cfgs in parts for c in cfgs.values() for s in conv.seeds}
    listed = sum(len(cfgs) for cfgs in parts) * len(conv.seeds)
    # K = 3 and the full ablation variant are Table 1's FedIC Pra run, K = 1 is "+ collaboration"
    assert listed - len(unique) == 3 * len(conv.seeds)

    def summary(cfg, seed):
        acc = {"best_weighted": 0.9, "last_weighted": 0.9, "best_weighted_round": 10}
        return {"seed": seed, "run_id": run_id(cfg, seed), "metrics": {"acc_head": acc, "acc_proto": acc},
                "rounds": 10, "seconds_per_round_median": 60.0, "code": "abc", "archived": True}

    def cached(configs, seeds, archive_root=None, more=False):
        return {k: [summary(c, s) for s in seeds] for k, c in configs.items()}, len(configs) * len(seeds)

    def rounds(cfg, seed, archive_root=None):
        acc = {"weighted": 0.9}
        return [{"round": r, "acc": {"acc_head": acc, "acc_proto": acc}, "train_seconds": 1.0, "up_params": 1,
                 "down_params": 1, "server": {"bias_global": 2.0, "bias_cluster": 1.0}} for r in range(1, 11)]

    monkeypatch.setattr(results, "cached", cached)
    monkeypatch.setattr(results, "rounds", rounds)
    monkeypatch.setattr(results, "find", lambda cfg, seed, archive_root=None: (cfg, summary(cfg, seed)))
    got = I.converged_runs(I.load_plan("quick", results_dir=str(tmp_path)))
    assert got["complete"] and (got["found"], got["total"]) == (len(unique), len(unique))
    assert f"summed over {len(unique)} runs" in got["made_by"]
    assert f"{len(unique)} of {len(unique)} runs read from the run archive" in got["made_by"]
    assert "trend" in got["table1"][("pra", "fedic")] and got["bias"] == {"global": 2.0, "cluster": 1.0}


def test_a_note_names_the_seeds_the_evidence_planner_added_beyond_the_profiles():
    """FedIC Pra and FedPAC Pra read seeds 0-5 under a profile of seeds 0-2: the claim's note says which were added
    (it said "seeds [0, 1, 2]" alone while its comparison counted six)."""
    conv = I.load_plan("converged")
    assert conv.seeds == [0, 1, 2]
    per_seed = {("pra", "fedic"): (90.0, 90.4, 89.8, 90.2, 90.6, 90.1),
                ("pra", "fedpac"): (89.0, 89.2, 89.1, 89.3, 89.0, 88.9)}
    six = {k: {**_cell(*v), "seeds": list(range(6))} for k, v in per_seed.items()}
    note = {c.claim: c for c in I.ledger(conv, {"table1": six})}[PRA].note
    assert "seeds [0, 1, 2], and the seeds the evidence planner added: FedIC pra 3-5; FedPAC pra 3-5" in note
    three = {k: {**c, "seeds": [0, 1, 2]} for k, c in six.items()}
    assert "evidence planner" not in {c.claim: c for c in I.ledger(conv, {"table1": three})}[PRA].note


def test_a_claim_on_one_partition_names_only_the_seeds_added_to_its_own_cells():
    """Seeds added to the Pra cells only: the Pra claim's note names them, the Pat claim's note (on the same Table 1)
    does not (it once named Pra's added seeds too, the added-seeds text being the table's)."""
    conv = I.load_plan("converged")
    pra = {("pra", m): {**_cell(*v), "seeds": list(range(6))} for m, v in (
        ("fedic", (90.0, 90.4, 89.8, 90.2, 90.6, 90.1)), ("fedpac", (89.0, 89.2, 89.1, 89.3, 89.0, 88.9)))}
    pat = {("pat", m): {**_cell(*v), "seeds": [0, 1, 2]} for m, v in (("fedic", (97.0, 97.2, 96.9)),
                                                                      ("fedpac", (96.0, 96.1, 96.3)))}
    notes = {c.claim: c.note for c in I.ledger(conv, {"table1": {**pat, **pra}})}
    assert "the seeds the evidence planner added: FedIC pra 3-5; FedPAC pra 3-5" in notes[PRA]
    pat_claim = "FedIC beats every baseline on Fashion-MNIST Pat (2 classes per client)"
    assert "evidence planner" not in notes[pat_claim] and "seeds [0, 1, 2]" in notes[pat_claim]

