"""The ProtoNorm study's bookkeeping: Table 1 protocol configs, sweeps, scoring, margins, PA traces."""

import math

import numpy as np
import pytest
import torch

from fedlib import report
from fedlib.config import run_id
from fedlib.ledgers import protonorm as protonorm_ledger
from fedlib.papers import protonorm as P
from fedlib.prototypes import thomson_align


def test_table1_config_follows_the_paper_protocol():
    plan = P.load_plan("paper")
    cfg = P.table1_config(plan, "protonorm", "practical")
    assert cfg["model"] == {"name": "ht0", "feature_dim": 512}
    assert cfg["train"] == {**cfg["train"], "rounds": 300, "batch_size": 32, "lr": 0.01, "momentum": 0.0,
                            "local_epochs": 1}
    assert cfg["partition"]["scheme"] == "dirichlet" and cfg["partition"]["alpha"] == 0.1
    assert cfg["partition"]["num_clients"] == 20 and cfg["partition"]["split"] == "merge"
    assert "fraction" not in cfg["dataset"] and cfg["seeds"] == [0, 1, 2]
    assert cfg["algorithm"]["gamma"] == 100.0 and cfg["algorithm"]["lam"] == 1.0
    path = P.table1_config(plan, "fedproto", "pathological")["partition"]
    assert path["scheme"] == "pathological" and path["classes_per_client"] == 2
    # FedKD's energy threshold goes from T_start to T_end over the run's own rounds: the default
    # (null) reads them from the round record, so the study patches nothing
    assert P.table1_config(plan, "fedkd")["algorithm"]["schedule_rounds"] is None
    assert P.table1_config(plan, "protonorm_code")["algorithm"]["lam"] == 10.0  # the code's default lambda
    quick = P.load_plan("quick")
    q = P.table1_config(quick, "fedkd")
    assert q["algorithm"]["schedule_rounds"] is None and q["train"]["rounds"] == 10
    assert q["model"]["name"] == "ht0_lite" and q["dataset"]["fraction"] == 0.05
    assert P.table1_config(quick, "fednh", homogeneous=True)["model"] == {"name": "fedavg_cnn"}


def test_table1_config_rejects_unknown_method_and_partition():
    plan = P.load_plan("quick")
    with pytest.raises(Exception, match="method: got 'fedavg'"):
        P.table1_config(plan, "fedavg")
    with pytest.raises(Exception, match="partition: got 'iid'"):
        P.table1_config(plan, "protonorm", "iid")
    with pytest.raises(Exception, match="methods: got"):
        P.load_plan("quick", methods=["protonorm", "nope"])
    with pytest.raises(Exception, match="profile: got 'fast'"):
        P.load_plan("fast")


def test_gamma_sweeps_reuse_the_table1_runs():
    plan = P.load_plan("quick")
    g = P.gamma_configs(plan)
    assert sorted(k for k in g if k[0] == "protonorm") == [("protonorm", 1.0), ("protonorm", 100.0),
                                                           ("protonorm", 400.0), ("protonorm", 1000.0)]
    assert sorted(k for k in g if k[0] == "fedtgp") == [("fedtgp", 1.0), ("fedtgp", 1.2), ("fedtgp", 1.4)]
    t1 = P.table1_configs(plan)
    for m, gamma in (("protonorm", 100.0), ("fedproto", 1.0), ("fedtgp", 1.0)):
        assert run_id(g[(m, gamma)], 0) == run_id(t1[(m, "practical")], 0)
    assert g[("fedproto", 1.4)]["algorithm"]["gamma"] == 1.4
    jobs = P.all_jobs(plan)
    ids = [run_id(c, s) for c, s in jobs]
    # Table 1 (8 rows), the code protocol (4), Table 3, new gamma runs, PA phase
    assert len(ids) == len(set(ids)) == 16 + 4 + 3 + 3 + 4 + 1
    assert jobs[0][0]["model"]["name"] == "ht0_lite" and jobs[-1][0]["train"]["rounds"] == 1


def test_a_profile_sweeps_gamma_only_for_its_table1_methods():
    smoke = P.load_plan("smoke")   # Table 1: FedProto and ProtoNorm only
    assert sorted(P.gamma_configs(smoke)) == [("fedproto", 1.0), ("fedproto", 1.2), ("protonorm", 1.0),
                                              ("protonorm", 100.0)]
    assert not [c for c, _ in P.all_jobs(smoke) if c["algorithm"]["name"] == "fedtgp"]


def test_score_is_the_best_round_of_the_pooled_accuracy_under_the_methods_rule():
    plan = P.load_plan("quick")
    assert plan.metric("protonorm") == plan.metric("fedtgp") == "acc_proto"
    assert plan.metric("feddistill") == "acc_head"
    # the best round is that of the pooled accuracy, not of the unweighted mean ("best_round")
    sums = [{"metrics": {"acc_proto": {"best_weighted": 0.8, "best_weighted_round": 3, "best_round": 4}}},
            {"metrics": {"acc_proto": {"best_weighted": 0.9, "best_weighted_round": 7, "best_round": 6}}}]
    s = P.score(plan, "protonorm", sums)
    assert s["mean"] == pytest.approx(85.0) and s["std"] == pytest.approx(np.std([80, 90], ddof=1))
    assert s["best_rounds"] == [3, 7]
    assert s["per_seed"] == pytest.approx([80.0, 90.0])


def test_margins_by_hand():
    # three prototypes on a line at 0, 1, 3: nearest-neighbour distances 1, 1, 2 -> / 2
    protos = np.array([[0.0, 0.0], [1.0, 0.0], [3.0, 0.0]])
    assert P.margins(protos).tolist() == [0.5, 0.5, 1.0]
    # a regular simplex has equal margins
    square = np.array([[1.0, 0], [0, 1.0], [-1.0, 0], [0, -1.0]])
    assert np.allclose(P.margins(square), 1.0)


def test_simplex_distance_and_pa_reaching_it():
    assert P.simplex_distance(10) == pytest.approx(1.490712, abs=1e-6)
    assert P.simplex_distance(100) == pytest.approx(1.421338, abs=1e-6)
    torch.manual_seed(0)
    protos = torch.rand(4, 3) + 2.0  # four close prototypes in R^3: the optimum is the tetrahedron
    _, _, hist = thomson_align(protos, record=True, patience=10**6, max_iter=400)
    summary = protonorm_ledger._distance_summary(hist)
    assert summary.shape == (400, 3) and summary[0, 1] < summary[-1, 1]
    assert summary[-1, 0] == pytest.approx(P.simplex_distance(4), abs=1e-3)
    assert summary[-1, 2] == pytest.approx(P.simplex_distance(4), abs=1e-3)


def test_pa_history_needs_a_recorded_phase():
    class S:
        cfg = {"algorithm": {"record_pa": False}}
        server = {"history": []}
    with pytest.raises(Exception, match="record_pa"):
        P.pa_history(S())


def test_diverged_and_pa_iterations_from_round_records():
    recs = [{"round": 1, "train_loss": 2.3, "server": {"pa_iterations": 113}},
            {"round": 2, "train_loss": 1.9, "server": {"pa_iterations": 40}}]
    assert not P.diverged(recs) and P.pa_iterations(recs).tolist() == [113, 40]
    assert P.diverged(recs + [{"round": 3, "train_loss": math.nan}])
    assert P.diverged(recs + [{"round": 3, "train_loss": math.inf}])


def test_paper_numbers_are_transcribed():
    t = report.load_paper("protonorm")["tables"]
    assert t["table1"]["rows"]["protonorm"]["practical_cifar10"] == [88.56, 0.11]
    assert t["table1"]["rows"]["fedproto"]["pathological_cifar10"] == [80.55, 0.05]
    assert len(t["table1"]["rows"]) == 7 and all(len(r) == 7 for r in t["table1"]["rows"].values())
    assert t["table4"]["rows"]["tinyimagenet"]["1000"] is None and t["table4"]["rows"]["cifar100"]["200"] == 47.41
    assert t["table5"]["rows"]["fedtgp_cifar100"]["1.2"] == 47.33


def test_cifar_tables_take_the_papers_gamma_and_classes_per_client(tmp_path):
    from fedlib.data.sources import present

    plan = P.load_plan("paper")
    c100 = P.table1_config(plan, "protonorm", "pathological", dataset="cifar100")
    assert c100["algorithm"]["gamma"] == 200.0 and c100["partition"]["classes_per_client"] == 10
    assert c100["dataset"]["name"] == "cifar100" and c100["name"].startswith("protonorm-study/cifar100/")
    assert P.table1_config(plan, "protonorm", dataset="cifar10")["algorithm"]["gamma"] == 100.0
    with pytest.raises(Exception, match="dataset: got 'svhn'"):
        P.table1_config(plan, "protonorm", dataset="svhn")
    assert present("cifar10", tmp_path) is False and present("cifar100", tmp_path) is False
    with pytest.raises(ValueError, match="allowed"):
        present("fmnist", tmp_path)


def test_claims_margins_and_ranks_by_hand():
    plan = P.load_plan("quick", methods=["feddistill", "fedproto", "fedtgp", "protonorm"])
    rows = report.load_paper("protonorm")["tables"]["table1"]["rows"]
    ours = {"practical": {"feddistill": 80.0, "fedproto": 50.0, "fedtgp": 70.0, "protonorm": 75.0}}
    c = P.claims(plan, ours, rows, {"practical": "practical_cifar10"})
    mine = c[("practical", "ours", "ProtoNorm (lambda 1, paper)")]
    assert (mine["minus FedProto"], mine["minus FedTGP"], mine["minus best baseline"]) == (25.0, 5.0, -5.0)
    assert mine["best baseline"] == "FedDistill" and mine["rank among baselines + it"] == 2
    theirs = c[("practical", "paper CIFAR-10", "ProtoNorm (lambda 1, paper)")]
    assert theirs["minus FedProto"] == round(88.56 - 82.90, 2) and theirs["rank among baselines + it"] == 1


def test_code_protocol_changes_only_the_split_redraw_and_the_batch_order():
    plan = P.load_plan("quick")
    cp = P.code_protocol_configs(plan)
    assert set(cp) == {"fedproto", "fedtgp", "protonorm", "protonorm_code"}
    for m, cfg in cp.items():
        ref = P.table1_config(plan, m, "practical")
        assert cfg["partition"] == ref["partition"]    # quick keeps PFLlib's least_samples
        assert cfg["train"] == {**ref["train"], "shuffle": False}
        assert cfg["algorithm"] == ref["algorithm"] and run_id(cfg, 0) != run_id(ref, 0)
    jobs = {run_id(c, s) for c, s in P.all_jobs(plan)}
    assert all(run_id(c, plan.seeds[0]) in jobs for c in cp.values())
    assert all(c["partition"]["min_size"] == 1 for c in P.code_protocol_configs(P.load_plan("paper")).values())
    assert P.code_protocol_configs(P.load_plan("smoke"))   # valid at 1% of the data


def test_ledger_by_construction_not_tested_and_per_seed_table1():
    """PA's geometry and the message sizes hold by construction; every dataset and the full Ht0 protocol not run
    are listed; Table 1 is judged per seed under the paper protocol and inconclusive under quick."""
    from fedlib import claims as C

    def row(*seeds):
        return {"mean": float(np.mean(seeds)), "std": float(np.std(seeds)), "n": len(seeds), "per_seed": list(seeds)}

    hist = np.array([[0.19, 0.40], [1.44, 1.4905]])
    res = {"table1": {"practical": {"protonorm": row(88.5, 88.6, 88.4), "feddistill": row(89.2, 89.3, 89.1),
                                    "fedproto": row(43.0, 44.0, 43.6), "fedtgp": row(86.9, 87.0, 86.8)}},
           "pa_phase": (hist, 10), "margins": {"fedproto": 0.44, "protonorm": 0.99},
           "comm": {"fedproto": (141_824, 141_824), "protonorm": (141_824, 141_824)},
           "spiral": {"fedproto_iid": {"angle": 7.2, "acc": 61.0}, "fedproto_noniid": {"angle": 1.1, "acc": 98.8},
                      "pa": {"angle": 59.9, "acc": 99.2}, "pa_pu": {"angle": 60.0, "acc": 99.9}}}
    paper = {c.claim: c for c in P.ledger(P.load_plan("paper"), res)}
    beats = paper["ProtoNorm beats every baseline, practical split"]
    assert beats.verdict == C.NOT_SUPPORTED  # -0.70 against a seed std of 0.08
    assert "ProtoNorm (lambda 1, paper) 88.50 ± 0.08 vs best baseline FedDistill 89.20 ± 0.08" in beats.evidence
    assert paper["ProtoNorm beats the prototype methods FedProto and FedTGP, practical split"].verdict == C.SUPPORTED
    for text in ("Prototype Alignment spreads the global prototypes evenly",
                 "One PA phase drives the prototypes to the simplex (evenly spread) distance",
                 "ProtoNorm's global prototypes have the most uniform margins",
                 "PBFL methods send (K_i + K) x d floats per client and round"):
        assert paper[text].verdict == C.BY_CONSTRUCTION, text
    assert paper["Under non-IID clients FedProto's global prototypes collapse towards each other"].verdict == \
        C.INCONCLUSIVE  # the spiral runs one seed
    untested = {c.claim: c.note for c in paper.values() if c.verdict == C.NOT_TESTED}
    assert set(untested) == {"CIFAR-10 columns", "CIFAR-100 columns", "Flowers102 columns", "TinyImageNet columns"}
    quick = {c.claim: c for c in P.ledger(P.load_plan("quick"), {**res, "datasets": ["cifar10"]})}
    assert quick["ProtoNorm beats every baseline, practical split"].verdict == C.INCONCLUSIVE
    assert "CIFAR-10 columns" not in quick and "CIFAR-100 columns" in quick
    full = quick["Full Ht0 protocol (ResNet-8, MobileNetV2, ShuffleNetV2, EfficientNet-B0; all of the data, "
                 "300 rounds)"]
    assert full.verdict == C.NOT_TESTED and "ht0_lite, 5% of Fashion-MNIST, 10 rounds" in full.note


def test_converged_tables_beside_a_short_profiles_figures_keep_each_its_profile():
    """The converged profile's Tables 1, 3 and 4-5 (three seeds, paired) are judged as converged evidence; the
    spiral and Fig. 3a beside them keep the short profile they ran under; a row still rising says so."""
    from fedlib import claims as C

    def row(*seeds, plateau=""):
        return {"mean": float(np.mean(seeds)), "std": float(np.std(seeds, ddof=1)), "n": len(seeds),
                "per_seed": list(seeds), "plateau": plateau}

    conv, quick = P.load_plan("converged"), P.load_plan("quick")
    rising = "not plateaued (+0.61 in the last 20% of rounds)"
    res = {"table1": {"practical": {"protonorm": row(90.5, 90.6, 90.4, plateau=rising),
                                    "fedproto": row(43.0, 44.0, 43.6), "fedtgp": row(86.9, 87.0, 86.8)}},
           "homogeneous": {"protonorm": [80.0, 80.2, 79.9], "fednh": [75.0, 75.1, 74.8], "feduv": [70.0, 70.0, 70.1]},
           "gamma": [{"method": "protonorm", "gamma": 1.0, "acc": 85.0, "per_seed": [85.0, 85.1, 84.9],
                      "diverged": False},
                     {"method": "protonorm", "gamma": float(P.table1_config(conv, "protonorm")["algorithm"]["gamma"]),
                      "acc": 90.5, "per_seed": [90.5, 90.6, 90.4], "diverged": False}],
           "spiral": {"fedproto_iid": {"angle": 7.2, "acc": 61.0}, "fedproto_noniid": {"angle": 1.1, "acc": 98.8},
                      "pa": {"angle": 59.9, "acc": 99.2}, "pa_pu": {"angle": 60.0, "acc": 99.9}},
           "pa_iterations": {"practical": np.array([90, 80, 70, 60, 50, 40])}, "short_plan": quick}
    got = {c.claim: c for c in P.ledger(conv, res)}
    beats = got["ProtoNorm beats every baseline, practical split"]
    assert beats.verdict == C.SUPPORTED and beats.profile == "converged" and "plateau" not in beats.note
    # the same numbers with ProtoNorm's curve still rising (:func:`plateaus`): the side behind (FedTGP here) has
    # plateaued, so the margin of +3.6 stands; for gamma, the side behind (gamma 1) still rises and could gain 10
    climbing = C.trend("rising", [list(np.linspace(75, 85, 100))])        # 0.101 a round: up to 60.6 by 400
    flat = C.trend("flat", [[50.0] * 10 + [90.0] * 90])
    still = {("table1", "practical", "protonorm"): climbing, ("table1", "practical", "fedtgp"): flat,
             ("gamma", "protonorm", 1.0): climbing}
    capped = {c.claim: c for c in P.ledger(conv, {**res, "rising": still})}
    beats = capped["ProtoNorm beats every baseline, practical split"]
    assert beats.verdict == C.SUPPORTED and "early decision" not in beats.note
    gamma = capped["Prototype Upscaling is what makes the gain: gamma > 1 beats gamma = 1"]
    assert gamma.verdict == C.INCONCLUSIVE and gamma.note.startswith(C.NOT_PLATEAUED)
    assert "the side behind could still gain up to 60.61 (rising: 100 rounds, still rising" in gamma.note
    assert capped["With homogeneous models ProtoNorm beats FedNH and FedUV"].verdict == C.SUPPORTED
    homo = got["With homogeneous models ProtoNorm beats FedNH and FedUV"]
    assert homo.verdict == C.SUPPORTED and "mean of 3 seeds" in homo.evidence
    assert got["Prototype Upscaling is what makes the gain: gamma > 1 beats gamma = 1"].verdict == C.SUPPORTED
    spiral = got["Under non-IID clients FedProto's global prototypes collapse towards each other"]
    assert spiral.verdict == C.INCONCLUSIVE and spiral.profile == "quick"
    fig3a = got["PA needs fewer iterations as training goes on"]
    assert fig3a.profile == "quick" and fig3a.note.startswith("10 rounds of the paper's 300; quick-profile evidence")


def test_the_converged_cell_shows_finished_rows_only_with_their_plateau(monkeypatch):
    from fedlib.study.notebook import Shown

    nb = P.notebook("smoke")
    cp = P.load_plan("converged")

    def sc(*seeds, plateau=""):
        return {"mean": float(np.mean(seeds)), "std": float(np.std(seeds)), "n": len(seeds), "per_seed": list(seeds),
                "plateau": plateau, "metric": "acc_proto"}

    data = {"plan": cp, "found": 7, "total": 99, "complete": False, "made_by": "toy",
            "table1": {"practical": {"protonorm": sc(90.0, 91.0, 92.0, plateau="not plateaued (+0.61 in the last 20% "
                                                                               "of rounds)")},
                       "pathological": {"protonorm": sc(95.0, 95.0, 95.0)}},
            "code": {}, "homogeneous": None, "gamma": []}
    monkeypatch.setattr(P, "converged_runs", lambda plan: data)
    got = P.show_converged(nb)
    assert isinstance(got, Shown)
    text = nb.section.parts[-1]
    assert "7 of 99 runs of Tables 1, 3, 4-5 and the code protocol finished · toy" in text
    assert "| ProtoNorm (lambda 1, paper) | 91.00 ± 0.82 | no (+0.61) |" in text
    assert "| 95.00 ± 0.00 | yes |" in text
    assert "Not finished yet (every seed), so not shown: FedAvg-Lite" not in text  # a name that is no method
    assert "Not finished yet (every seed), so not shown: " in text and "FedProto" in text.split("not shown: ")[1]


def test_plateaus_judges_every_finished_group_on_its_seed_mean_curve(monkeypatch):
    """Table 1, Table 3 and Tables 4-5 groups whose every seed finished get the plateau text of their seed-mean
    curve under their scoring rule; unfinished groups are left out."""
    from fedlib import results
    from fedlib.config import run_id

    cp = P.load_plan("converged")
    t1, homo, gam = P.table1_configs(cp), P.homogeneous_configs(cp), P.gamma_configs(cp)
    def key(cfg):
        return run_id(cfg, 0)

    finished = {key(t1[("protonorm", "practical")]), key(t1[("fedtgp", "practical")]), key(homo["fednh"]),
                key(gam[("fedproto", 1.0)])}

    def cached(cfgs, seeds, more=False):
        done = {k: [{"seed": s} for s in seeds] for k, c in cfgs.items() if key(c) in finished}
        return done, len(done) * len(seeds)

    flat = [50.0] * 8 + [90.0] * 12
    late = [50.0 + 2 * r for r in range(20)]           # +8 points over the last 4 of 20 rounds

    def rounds(cfg, seed):
        metric = "acc_head" if key(cfg) == key(homo["fednh"]) else cp.metric(cfg["algorithm"]["name"])
        curve = late if key(cfg) == key(t1[("protonorm", "practical")]) and seed == cp.seeds[0] else flat
        return [{"round": r + 1, "acc": {metric: {"weighted": a / 100}}} for r, a in enumerate(curve)]

    monkeypatch.setattr(results, "cached", cached)
    monkeypatch.setattr(results, "rounds", rounds)
    got = P.plateaus(cp)
    # Table 1's practical runs are also Tables 4-5's gamma 1 (FedProto, FedTGP) and default-gamma (ProtoNorm) runs
    assert set(got) == {("table1", "practical", "protonorm"), ("table1", "practical", "fedtgp"),
                        ("table1", "practical", "fedproto"), ("homogeneous", "fednh"), ("gamma", "fedproto", 1.0),
                        ("gamma", "fedtgp", 1.0), ("gamma", "protonorm", 100.0)}
    same = got[("gamma", "protonorm", 100.0)], got[("table1", "practical", "protonorm")]
    assert (same[0].rounds, same[0].rise, same[0].gain) == (same[1].rounds, same[1].rise, same[1].gain)
    assert same[0].label == "ProtoNorm (lambda 1, paper) gamma 100"
    # the mean of one rising seed and two flat ones: (88 - 80) / 3 over the last 20% of rounds
    assert got[("table1", "practical", "protonorm")].plateau_text() == "not plateaued (+2.67 in the last 20% of rounds)"
    assert got[("table1", "practical", "fedtgp")].plateaued and got[("homogeneous", "fednh")].plateaued
    assert key(got[("table1", "practical", "protonorm")].group.cfg) == key(t1[("protonorm", "practical")])


def test_gamma_results_say_which_seeds_diverged_and_the_ledger_weighs_every_seed(monkeypatch):
    """Tables 4-5 keep every seed's accuracy and which seeds diverged, and the Table 4 claim built from them is
    judged over the seeds (not "one seed") and names the diverged ones (the converged profile's gamma 1000 diverged
    on two of three seeds; the notebook's ledger once dropped the per-seed values)."""
    from fedlib import claims as C
    from fedlib import results
    from fedlib.config import run_id

    cp = P.load_plan("converged")
    cfgs = P.gamma_configs(cp)
    default = float(P.table1_config(cp, "protonorm")["algorithm"]["gamma"])
    metric = cp.metric("protonorm")
    acc = {1.0: [58.0, 58.5, 58.2], default: [66.0, 70.0, 65.0], 1000.0: [60.0, 50.0, 53.0]}

    def summary(a):
        return {"metrics": {metric: {"best_weighted": a / 100}}, "best_round": 10}

    runs = {("protonorm", g): [summary(a) for a in v] for g, v in acc.items()}
    stopped = {run_id(cfgs[("protonorm", 1000.0)], s) for s in cp.seeds[1:]}

    def rounds(cfg, seed):
        recs = [{"round": 1, "train_loss": 1.0}]
        return recs + [{"round": 2, "diverged": True, "train_loss": math.inf}] if run_id(cfg, seed) in stopped else recs

    monkeypatch.setattr(results, "rounds", rounds)
    gam = P.gamma_results(cp, runs)
    by = {r["gamma"]: r for r in gam}
    assert by[1000.0]["diverged"] and by[1000.0]["diverged_seeds"] == cp.seeds[1:]
    assert not by[1.0]["diverged"] and by[1.0]["diverged_seeds"] == []
    assert by[default]["per_seed"] == pytest.approx(acc[default])
    got = {c.claim: c for c in P.ledger(cp, {"gamma": gam})}
    up = got["Prototype Upscaling is what makes the gain: gamma > 1 beats gamma = 1"]
    assert "gamma 1000: 54.33 (diverged on 2 of 3 seeds)" in up.evidence and "gamma 1: 58.23," in up.evidence
    assert "one seed" not in up.note and up.verdict == C.SUPPORTED   # +9.43 against a seed std of 2.16


def test_scaling_sensitivity_is_not_supported_when_a_larger_gamma_helps_beyond_the_spread():
    """Table 5's claim is that gamma >= 1.3 hurts: the margin it rests on is gamma 1 minus gamma 1.4, so a gamma
    1.4 that is better on every seed makes it not supported (it once read the margin the other way round, and
    called FedProto's +5 points at gamma 1.4 support for "scaling hurts")."""
    from fedlib import claims as C

    cp = P.load_plan("converged")

    def row(m, g, *seeds):
        return {"method": m, "gamma": g, "acc": float(np.mean(seeds)), "per_seed": list(seeds), "diverged": False,
                "diverged_seeds": []}

    gam = [row("fedproto", 1.0, 43.0, 43.5, 43.2), row("fedproto", 1.2, 45.0, 45.5, 45.6),
           row("fedproto", 1.4, 48.0, 48.6, 48.4), row("fedtgp", 1.0, 85.0, 85.2, 85.1),
           row("fedtgp", 1.4, 80.0, 80.1, 80.3)]
    got = {c.claim: c for c in P.ledger(cp, {"gamma": gam})}
    helps = got["FedProto is sensitive to scaling: gamma >= 1.3 hurts or diverges"]
    assert helps.verdict == C.NOT_SUPPORTED and "gamma 1 - gamma 1.4 -5.10" in helps.note
    hurts = got["FedTGP is sensitive to scaling: gamma >= 1.3 hurts or diverges"]
    assert hurts.verdict == C.SUPPORTED and "gamma 1 - gamma 1.4 +4.97" in hurts.note


def test_table3_shows_every_method_over_the_same_seeds():
    """Table 3 showed seed 0 for FedNH and FedUV beside ProtoNorm's 3-seed mean, unlabelled, while the ledger used
    the 3-seed means for the same cells: every cell is now the mean ± sample std of the same seeds."""
    plan = P.load_plan("converged")
    paper = {"table3": {"rows": {m: {"cnn_cifar100": [50.0, 1.0]} for m in ("protonorm", "fednh", "feduv")}}}

    def sums(metric, *accs):
        return [{"metrics": {metric: {"best_weighted": a / 100}}} for a in accs]

    runs = {"protonorm": sums("acc_proto", 80.0, 82.0, 84.0), "fednh": sums("acc_head", 70.0, 60.0, 65.0),
            "feduv": sums("acc_head", 75.0, 76.0, 77.0)}
    frame = P.table3_frame(plan, runs, paper)
    assert frame.loc[plan.label("fednh"), "ours: Fashion-MNIST practical"] == "65.00 ± 5.00"   # not seed 0's 70.00
    assert frame.loc[plan.label("protonorm"), "ours: Fashion-MNIST practical"] == "82.00 ± 2.00"
    assert list(frame["seeds"]) == [3, 3, 3]
    one = P.table3_frame(plan, {"fednh": sums("acc_head", 70.0)}, paper)
    assert one.loc[plan.label("fednh"), "ours: Fashion-MNIST practical"] == "70.00 (n=1)"
    # the ledger judges the same per-seed values
    assert P.homogeneous_accuracy(runs)["fednh"] == [70.0, 60.0, 65.0]


def test_table1_and_gamma_name_the_seeds_the_evidence_planner_added_as_every_study_does():
    """Seeds added beyond the converged profile's 0-2 are named by run group and seed ("FedDistill 3-5"), in the
    words every study uses (fedlib.study.added_seeds_text), on Table 1's split and on the gamma tables."""
    from fedlib import claims as C
    from fedlib import plateau

    conv = P.load_plan("converged")
    cfg = P.table1_config(conv, "feddistill", "practical")

    def tr(label, seeds):
        return C.trend(label, [[90.0] * 100] * len(seeds), plateau.Group(label, cfg, tuple(seeds), "acc"))

    def row(*v):
        return {"mean": float(np.mean(v)), "std": C.sample_std(v), "n": len(v), "per_seed": list(v)}

    six, three = range(6), range(3)
    res = {"table1": {"practical": {"protonorm": row(90.5, 90.6, 90.4, 90.7, 90.5, 90.6),
                                    "feddistill": row(89.0, 89.1, 88.9, 89.2, 89.0, 89.1),
                                    "fedtgp": row(86.9, 87.0, 86.8)}},
           "gamma": [{"method": "fedproto", "gamma": g, "acc": 80.0, "per_seed": [80.0] * n, "diverged": False}
                     for g, n in ((1.0, 6), (1.4, 3))],
           "rising": {("table1", "practical", "protonorm"): tr("p", six), ("table1", "practical", "feddistill"):
                      tr("d", six), ("table1", "practical", "fedtgp"): tr("t", three),
                      ("gamma", "fedproto", 1.0): tr("g1", six), ("gamma", "fedproto", 1.4): tr("g14", three)}}
    tabs = P.tables(conv, res)
    where = tabs["table1_practical"].text["where"]
    assert ", and the seeds the evidence planner added: ProtoNorm (lambda 1, paper) 3-5; FedDistill 3-5" in where
    assert "FedTGP" not in where.split("added:")[1]
    assert tabs["table5_fedproto"].caveat == "the seeds the evidence planner added: gamma 1 3-5"
