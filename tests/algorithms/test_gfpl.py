"""GFPL: the simplex ETF, the Bhattacharyya distance and Algorithm 1 by hand, pseudo-feature
sampling statistics, the frozen extractor in retraining, the communication counted from the
messages, and the ablation with both parts off equal to Local."""

import math

from pathlib import Path

import numpy as np
import pytest
import torch

from fedlib.algorithms import make_algorithm
from fedlib.algorithms.base import Round
from fedlib.algorithms.gfpl import dot_regression
from fedlib.data import FederatedData
from fedlib.data.partition import label_partition
from fedlib.engine import Simulator
from fedlib.mixtures import bhattacharyya, fit_class_mixtures, fuse, fuse_class, sample, simplex_etf
from fedlib.validation import ConfigError
from tests.conftest import make_ctx, tiny_image_dataset


@pytest.mark.parametrize("d,k", [(50, 10), (10, 10), (128, 100)])
def test_simplex_etf_unit_rows_and_equal_angles(d, k):
    z = simplex_etf(d, k, seed=3).double()
    assert z.shape == (k, d)
    gram = z @ z.T
    assert torch.allclose(gram.diagonal(), torch.ones(k, dtype=torch.float64), atol=1e-6)
    off = gram[~torch.eye(k, dtype=torch.bool)]
    assert torch.allclose(off, torch.full_like(off, -1 / (k - 1)), atol=1e-6)
    assert torch.equal(simplex_etf(d, k, seed=3), simplex_etf(d, k, seed=3))
    assert not torch.equal(simplex_etf(d, k, seed=3), simplex_etf(d, k, seed=4))
    with pytest.raises(ValueError, match="dimension of at least 10"):
        simplex_etf(9, 10, seed=0)


def test_bhattacharyya_by_hand_and_eq7():
    # two 2-d diagonal Gaussians: s = (2, 1); 1/8 (1/2 + 4/1) + 1/2 [ln 2 + ln 1 - 1/2 ln 1 - 1/2 (ln 3 + ln 1)]
    d = bhattacharyya(torch.tensor([[0.0, 0.0]]), torch.tensor([[1.0, 1.0]]),
                      torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0, 1.0]]))
    assert d.shape == (1, 1)
    assert d.item() == pytest.approx(4.5 / 8 + 0.5 * (math.log(2) - 0.5 * math.log(3)), rel=1e-12)
    # d = 1 is the univariate Eq. 7: 1/4 (mu1 - mu2)^2 / (s1^2 + s2^2) + 1/2 ln((s1^2 + s2^2) / (2 s1 s2))
    m1, v1, m2, v2 = 0.3, 0.5, -1.1, 2.0
    eq7 = 0.25 * (m1 - m2) ** 2 / (v1 + v2) + 0.5 * math.log((v1 + v2) / (2 * math.sqrt(v1 * v2)))
    got = bhattacharyya(*(torch.tensor([[t]], dtype=torch.float64) for t in (m1, v1, m2, v2)))
    assert got.item() == pytest.approx(eq7, rel=1e-12)
    # identical Gaussians are at distance 0; the matrix is symmetric
    mu, var = torch.randn(5, 3), torch.rand(5, 3) + 0.1
    full = bhattacharyya(mu, var, mu, var)
    assert torch.allclose(full.diagonal(), torch.zeros(5, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(full, full.T)


def _one_d(means, weights):
    return (torch.tensor(means).unsqueeze(1), torch.ones(len(means), 1), torch.tensor(weights))


def test_algorithm1_complete_linkage_and_moment_matching():
    # 1-d, unit variances: D_B = (mu1 - mu2)^2 / 8. A=0 (w 3), B=0.5, C=10, D=1.2 (w 1); S_C = 0.1
    # D(A,B) = 0.031 merges; D(B,D) = 0.061 < 0.1 but D(A,D) = 0.18: complete linkage keeps D out
    m, v, w = _one_d([0.0, 0.5, 10.0, 1.2], [3.0, 1.0, 1.0, 1.0])
    fm, fv, fw, clusters = fuse_class(m, v, w, threshold=0.1)
    assert clusters == [[0, 1], [2], [3]]
    assert fw.tolist() == [4.0, 1.0, 1.0]
    assert fm[0].item() == pytest.approx(0.125)                        # (3 * 0 + 1 * 0.5) / 4
    assert fv[0].item() == pytest.approx((3 * (1 + 0.125 ** 2) + (1 + 0.375 ** 2)) / 4)  # line 15
    assert fm[1:].flatten().tolist() == [10.0, pytest.approx(1.2)] and fv[1:].flatten().tolist() == [1.0, 1.0]
    # threshold 0: nothing merges (every component kept: "concatenation"); a large one merges all
    assert len(fuse_class(m, v, w, threshold=0.0)[3]) == 4
    big = fuse_class(m, v, w, threshold=100.0)
    assert big[3] == [[0, 1, 3, 2]] and big[2].item() == 6.0
    assert big[0].item() == pytest.approx((0.5 + 10 + 1.2) / 6)


def test_algorithm1_sequential_add_versus_line5_literally():
    # seed S=0 (heaviest); P=-0.8 and Q=0.8 are each 0.08 from S but 0.32 from each other
    m, v, w = _one_d([-0.8, 0.0, 0.8], [1.0, 5.0, 1.0])
    assert fuse_class(m, v, w, 0.1, add="sequential")[3] == [[1, 0], [2]]   # closest first (tie: lower index)
    assert fuse_class(m, v, w, 0.1, add="batch")[3] == [[1, 0, 2]]         # both added, unchecked
    with pytest.raises(ValueError, match="sequential"):
        fuse_class(m, v, w, 0.1, add="single")


def test_fuse_works_per_class():
    a = {"means": torch.tensor([[0.0], [0.1]]), "vars": torch.ones(2, 1), "weights": torch.ones(2),
         "classes": torch.tensor([0, 1])}
    b = {"means": torch.tensor([[0.05], [5.0]]), "vars": torch.ones(2, 1), "weights": torch.ones(2),
         "classes": torch.tensor([2, 1])}
    fused, counts = fuse([a, b], threshold=1.0)
    # class 1: 0.1 and 5.0 are 3.0 apart in D_B: kept apart; classes 0 and 2 never merge with each other
    assert fused["classes"].tolist() == [0, 1, 1, 2] and counts == {"components": 4, "clusters": 4}
    fused, counts = fuse([a, b], threshold=4.0)
    assert fused["classes"].tolist() == [0, 1, 2] and fused["weights"].tolist() == [1.0, 2.0, 1.0]


def test_sampling_statistics():
    # one class, two components (weights 1 : 3), 20,000 draws; another class with one component
    means = torch.tensor([[0.0, 0.0], [10.0, -10.0], [3.0, 3.0]])
    variances = torch.tensor([[1.0, 4.0], [0.25, 1.0], [1.0, 1.0]])
    weights = torch.tensor([10.0, 30.0, 7.0])
    classes = torch.tensor([5, 5, 2])
    f, y = sample(means, variances, weights, classes, 20_000, torch.Generator().manual_seed(0))
    assert f.shape == (40_000, 2) and torch.bincount(y).tolist()[2] == 20_000 and (y == 5).sum() == 20_000
    f5 = f[y == 5]
    second = f5[:, 0] > 5
    assert second.float().mean().item() == pytest.approx(0.75, abs=0.01)
    for sel, k in ((~second, 0), (second, 1)):
        assert f5[sel].mean(0).tolist() == pytest.approx(means[k].tolist(), abs=0.05)
        assert f5[sel].var(0).tolist() == pytest.approx(variances[k].tolist(), rel=0.05)
    only = sample(means, variances, weights, classes, 4, torch.Generator().manual_seed(0), which=torch.tensor([2]))
    assert only[1].tolist() == [2] * 4


def test_fit_class_mixtures_rows_and_weights():
    rng = np.random.default_rng(0)
    z = np.concatenate([rng.normal(0, 1, (30, 3)), rng.normal(5, 1, (3, 3))]).astype(np.float32)
    y = np.array([1] * 30 + [4] * 3)
    comps = fit_class_mixtures(z, y, n_components=4, seed=0)
    assert comps["classes"].tolist() == [1] * 4 + [4] * 3          # 3 samples: 3 components
    assert comps["means"].shape == comps["vars"].shape == (7, 3)
    assert comps["weights"][:4].sum().item() == pytest.approx(30)
    assert comps["weights"][4:].sum().item() == pytest.approx(3)
    assert (comps["vars"] >= 1e-3).all()
    again = fit_class_mixtures(z, y, n_components=4, seed=0)
    assert all(torch.equal(comps[k], again[k]) for k in comps)


def test_dot_regression_by_hand():
    etf = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    h = torch.tensor([[1.0, 0.0], [0.6, 0.8]])
    # 1/2 (1 - 1)^2 and 1/2 (0.8 - 1)^2 for labels 0, 1: mean 0.01
    assert dot_regression(h, etf, torch.tensor([0, 1])).item() == pytest.approx(0.01)


def _setup(num_clients=3, classes_per_client=2):
    ds = tiny_image_dataset()
    part = label_partition("pathological", ds.y_train.numpy(), ds.y_test.numpy(), 4, num_clients=num_clients,
                           classes_per_client=classes_per_client, balance=True, seed=1, split="official")
    return FederatedData(ds, part), make_ctx(num_clients=num_clients, batch_size=4)


@pytest.mark.slow
def test_retraining_changes_only_g_and_the_projection():
    data, ctx = _setup()
    algo = make_algorithm({"name": "gfpl", "start": 1, "every": 1})
    client = algo.init_client(ctx, 0)
    server = algo.init_server(ctx)
    rnd = Round(1, 1, ctx.seed)
    ups = {}
    clients = {}
    for cid in range(3):
        clients[cid], ups[cid], _ = algo.local_update(ctx, cid, algo.init_client(ctx, cid),
                                                      algo.broadcast(ctx, server, cid, rnd), data.train[cid], rnd)
    server, metrics = algo.aggregate(ctx, server, ups, rnd)
    assert metrics["components"] == sum(len(u["classes"]) for u in ups.values())
    msg = algo.reply(ctx, server, 0, rnd)
    assert set(msg["classes"].tolist()) == set(data.train[0].y.unique().tolist())   # own classes only
    client = clients[0]
    for mode, trained in (("both", ("backbone.head", "proj")), ("projection", ("proj",))):
        a = make_algorithm({"name": "gfpl", "start": 1, "every": 1, "retrain": mode})
        after, m = a.receive(ctx, 0, client, msg, data.train[0], rnd)
        assert m["pseudo_features"] == 16 * len(msg["classes"].unique())
        for k, v in client["model"].items():
            changed = not torch.equal(v, after["model"][k])
            assert changed == k.startswith(trained), (mode, k)
    with pytest.raises(ConfigError, match="retrain"):
        make_algorithm({"name": "gfpl", "dcs": False, "retrain": "projection"})


@pytest.mark.slow
def test_communication_is_what_the_messages_hold():
    data, ctx = _setup()
    algo = make_algorithm({"name": "gfpl", "start": 2, "every": 2, "n_components": 2})
    recs = Simulator(algo, ctx, data, rounds=3, progress=False).run()
    d = 32 * 2 * 2   # cnn_fmnist's high level on 8x8 inputs
    held = [len(data.train[c].y.unique()) for c in range(3)]
    # round 1: the ETF once per client, nothing up; round 3: nothing at all
    assert (recs[0]["up_params"], recs[0]["down_params"]) == (0, 3 * 4 * d)
    assert (recs[2]["up_params"], recs[2]["down_params"]) == (0, 0)
    # round 2: n (2d + 1) floats per held class up; down the fused components of the client's classes
    assert recs[1]["up_params"] == sum(2 * (2 * d + 1) * h for h in held)
    assert recs[1]["server"]["components"] == 2 * sum(held)
    assert recs[1]["local"]["pseudo_features"] == pytest.approx(16 * np.mean(held))
    assert recs[1]["down_params"] % (2 * d + 1) == 0 and recs[1]["down_params"] > 0
    # a merge-free fusion (S_C = 0) sends every component of the client's classes back
    algo0 = make_algorithm({"name": "gfpl", "start": 2, "every": 2, "n_components": 2, "threshold": 0.0})
    r0 = Simulator(algo0, ctx, data, rounds=2, progress=False).run()[1]
    per_class = np.bincount(np.concatenate([data.train[c].y.unique().numpy() for c in range(3)]), minlength=4)
    expected = sum(2 * per_class[j] for c in range(3) for j in data.train[c].y.unique().tolist())
    assert r0["down_params"] == expected * (2 * d + 1) and r0["server"]["merge_rate"] == 0.0


@pytest.mark.slow
def test_without_dcs_and_pfg_gfpl_is_local():
    data, ctx = _setup()
    off = make_algorithm({"name": "gfpl", "dcs": False, "pfg": False, "same_init": False})
    a = Simulator(off, ctx, data, rounds=3, progress=False).run()
    b = Simulator(make_algorithm({"name": "local"}), ctx, data, rounds=3, progress=False).run()
    for ra, rb in zip(a, b, strict=True):
        assert ra["train_loss"] == rb["train_loss"]
        assert ra["acc"]["acc_head"] == rb["acc"]["acc_head"]
        assert ra["up_params"] == ra["down_params"] == 0
    # the full method differs (the DR term trains the extractor too)
    full = Simulator(make_algorithm({"name": "gfpl", "same_init": False}), ctx, data, rounds=1, progress=False).run()
    assert full[0]["train_loss"] != a[0]["train_loss"]


@pytest.mark.slow
def test_same_init_gives_every_client_one_model():
    _, ctx = _setup()
    one = make_algorithm({"name": "gfpl"})
    own = make_algorithm({"name": "gfpl", "same_init": False})
    assert all(torch.equal(one.init_client(ctx, 0)["model"][k], one.init_client(ctx, 2)["model"][k])
               for k in one.init_client(ctx, 0)["model"])
    assert not torch.equal(own.init_client(ctx, 0)["model"]["proj.weight"],
                           own.init_client(ctx, 2)["model"]["proj.weight"])


def test_study_readers_rounds_to_convergence_and_traffic():
    from fedlib.papers import gfpl as G

    def rec(r, acc, up, down):
        return {"round": r, "acc": {"acc_head": {"mean": acc / 100}}, "up_params": up, "down_params": down}

    recs = [rec(1, 50, 0, 500), rec(2, 80, 0, 0), rec(3, 89.5, 30, 90), rec(4, 88.6, 0, 0), rec(5, 90, 30, 90)]
    # from round 3 on every accuracy is within 1 point of the last (90): 89.5, 88.6 is 1.4 away -> round 5
    assert G.converged_round(recs, "acc_head") == 5
    assert G.converged_round(recs, "acc_head", tol=2.0) == 3
    # several seeds: the seed-mean curve decides. Seed 0 alone settles at round 5; with seed 1 their
    # mean (65, 80, 89.75, 89.3, 90) is within 1 point of 90 from round 3 on
    other = [rec(1, 80, 0, 500), rec(2, 80, 0, 0), rec(3, 90, 30, 90), rec(4, 90, 0, 0), rec(5, 90, 30, 90)]
    assert G.converged_round(other, "acc_head") == 3 and G.converged_round([recs, other], "acc_head") == 3
    assert G.converged_round([recs, recs], "acc_head") == 5  # equal seeds: the one-seed answer
    cells = G.table1(G.load_plan("paper"), {("fmnist", 3, "fedavg"): [
        {"metrics": {"acc_head": {"last": 0.9, "best": 0.9, "last_std": 0.1}}}] * 2},
        {("fmnist", 3, "fedavg"): [recs, other]})
    assert cells[("fmnist", 3, "fedavg")]["rounds_to_converge"] == 3
    assert cells[("fmnist", 3, "fedavg")]["converge_seeds"] == 2
    assert cells[("fmnist", 3, "fedavg")]["comm"]["up_total"] == 60.0  # traffic of the first seed
    c = G.communication(recs)
    assert c == {"up_per_round": 12.0, "down_per_round": 136.0, "up_per_active_round": 30.0, "active_rounds": 2,
                 "up_total": 60.0, "down_total": 680.0}
    # the Table 1 and ablation configs: the profile's schedule, w-hat 1 apart from s-hat, room for the largest shots
    plan = G.load_plan("paper")
    ab = G.ablation_configs(plan)
    part = ab[(20, "gfpl")]["partition"]
    assert (part["ways_stdev"], part["stdev"], part["block"]) == (1, 20, 120)
    assert ab[(20, "no_dcs_no_pfg")]["algorithm"]["dcs"] is False
    t1 = G.table1_configs(G.load_plan("smoke"))
    assert t1[("mnist5k", 4, "gfpl")]["algorithm"]["start"] == 2 and t1[("mnist5k", 4, "local")]["train"]["rounds"] == 4


def test_paper_protocol_table1_in_a_short_profile(tmp_path):
    from fedlib.papers import gfpl as G

    smoke = G.load_plan("smoke", results_dir=str(tmp_path), methods=["local", "fedproto", "gfpl"])
    got = G.paper_table1(smoke)  # reads the cache only: nothing finished, nothing trained
    assert got["plan"].rounds == 100 and got["plan"].seeds == [0, 1, 2]
    assert (got["found"], got["total"], got["columns"], got["cells"]) == (0, 2 * 3 * 3 * 3, [], {})
    assert not any(tmp_path.iterdir())

    def cell(seeds, rounds, up, down=0):
        return {"mean": float(np.mean(seeds)), "std": 1.0, "seed_std": float(np.std(seeds)), "n": len(seeds),
                "per_seed": seeds, "rounds_to_converge": rounds, "converge_seeds": 3,
                "comm": {"up_per_round": up, "down_per_round": down}}

    pplan = got["plan"]
    cells = {("mnist5k", 4, "local"): cell([90.0, 89.0, 91.0], 10, 0),
             ("mnist5k", 4, "fedproto"): cell([93.0, 92.5, 93.5], 30, 500, 900),
             ("mnist5k", 4, "gfpl"): cell([95.0, 95.5, 94.5], 20, 200, 1500)}
    quick_cells = {("mnist5k", 4, "local"): cell([91.0], 5, 0), ("mnist5k", 4, "fedproto"): cell([92.0], 5, 500),
                   ("mnist5k", 4, "gfpl"): cell([90.0], 6, 200)}
    claims = G.ledger(smoke, {"table1": quick_cells,
                              "table1_paper": {"plan": pplan, "cells": cells, "columns": [("mnist5k", 4)]}})
    by = {(c.source, c.claim): c for c in claims}
    best = "GFPL has the best accuracy in every column of Table 1"
    short = by[("Table 1", best)]  # 90 vs FedProto 92, but one seed of the smoke profile decides nothing
    assert short.verdict == "inconclusive" and "smoke-profile evidence only" in short.note
    paper = by[("Table 1, paper protocol", best)]
    assert paper.verdict == "supported" and "GFPL 95.00 (seed std 0.41) vs FedProto 93.00 (seed std 0.41)" \
        in paper.evidence
    assert "paper profile: 100 rounds, seeds [0, 1, 2]" in paper.note
    assert "GFPL - FedProto +2.00 (seed std 0.50, paired exact p 0.25 (smallest possible 0.25), n = 3)" in paper.note
    # these cells hold one rounds value each (no rounds_per_seed): one value per side, no seed spread to judge by
    fewest = by[("Table 1, paper protocol (Comm. Round)", "GFPL converges in the fewest rounds")]
    assert fewest.verdict == "inconclusive" and fewest.tests[0].label.startswith("rounds FedProto - GFPL")
    comm = by[("Table 1, paper protocol (Comm. Param.)", "GFPL communicates the fewest parameters (2 x 10^3 per "
                                                         "round on MNIST)")]
    # judged on the uplink (the paper's column): 200 is the fewest; up + down 1,700 (above FedProto's 1,400) beside it
    assert comm.verdict == "by construction" and "GFPL 200 (1,700)" in comm.evidence
    assert "rule: the uplink" in comm.note and "up + down, GFPL is not the fewest" in comm.note
    frame = G.table1_frame(pplan, cells, "mnist5k", {"rows": {"gfpl": {"w4": [98.0, 1.0]}}, "comm_rounds": {
        "gfpl": 80, "local": 100, "fedproto": 100}})
    assert frame.loc[("GFPL", "w4"), "rounds to converge (ours, mean curve of 3 seeds; paper)"] == "20; 80"
    assert frame.loc[("GFPL", "w4"), "ours: std over seeds (n)"] == "0.41 (3)"
    assert "diff" in frame.columns  # the paper profile's own table: no "not converged" label


def test_paper_protocol_table2_and_figs_in_a_short_profile(tmp_path):
    from fedlib.papers import gfpl as G

    smoke = G.load_plan("smoke", results_dir=str(tmp_path))
    t2, figs = G.paper_table2(smoke), G.paper_figs(smoke)  # the cache only: nothing finished, nothing trained
    assert (t2["found"], t2["total"], t2["acc"]) == (0, 2 * 4 * 6, None)  # s-hat 1, 20 x 4 variants x 6 seeds
    assert (figs["found"], figs["total"], figs["n"], figs["thresholds"]) == (0, (5 + 5) * 6, None, None)  # figs_seeds
    assert not any(tmp_path.iterdir())
    pplan = t2["plan"]
    assert pplan.settings["ablation"]["dataset"] == "fmnist" and pplan.rounds == 100
    assert {c["partition"]["shots"] for c in G.ablation_configs(pplan).values()} == {100}

    quick_ab = {(1, "no_dcs_no_pfg"): 95.0, (1, "no_dcs"): 94.0, (1, "no_pfg"): 95.5, (1, "gfpl"): 94.5}
    paper_ab = {(1, "no_dcs_no_pfg"): 90.0, (1, "no_dcs"): 92.0, (1, "no_pfg"): 93.0, (1, "gfpl"): 94.0,
                (20, "no_dcs_no_pfg"): 90.0, (20, "no_dcs"): 92.0, (20, "no_pfg"): 95.0, (20, "gfpl"): 94.0}
    per_seed = {(1, "no_dcs_no_pfg"): [90.0, 90.2, 89.8], (1, "no_dcs"): [92.0, 92.1, 91.9],
                (1, "no_pfg"): [93.0, 93.1, 92.9], (1, "gfpl"): [94.0, 94.1, 93.9],
                (20, "no_dcs_no_pfg"): [90.0, 90.0, 90.0], (20, "no_dcs"): [92.0, 91.0, 93.0],
                (20, "no_pfg"): [95.0, 95.1, 94.9], (20, "gfpl"): [94.0, 94.1, 93.9]}
    figs = {"plan": pplan, "n": {1: 90.0, 4: 91.0, 8: 92.0, 16: 92.0}, "n_seeds": [0], "threshold_seeds": [0],
            "thresholds": {1: (90.0, 0.0, 9e3), 100: (92.0, 0.5, 5e3), 1e4: (91.0, 0.9, 2e3)}}
    claims = G.ledger(smoke, {"ablation": quick_ab, "ablation_paper": {"plan": pplan, "acc": paper_ab,
                                                                       "per_seed": per_seed}, "figs_paper": figs})
    by = {(c.source, c.claim): c for c in claims}
    helps = "Each component helps and both together are best (s-hat {})"
    assert by[("Table 2", helps.format(1))].verdict == "inconclusive"  # smoke profile
    assert by[("Table 2, paper protocol", helps.format(1))].verdict == "supported"  # every step 1-2 points, std 0.1
    assert by[("Table 2, paper protocol", helps.format(20))].verdict == "not supported"  # w/o PFG 95 above 94
    assert "Fashion-MNIST, s-bar 100" in by[("Table 2, paper protocol", helps.format(1))].note
    means_only = G.ledger(smoke, {"ablation_paper": {"plan": pplan, "acc": paper_ab}})
    assert {c.verdict for c in means_only if c.source == "Table 2, paper protocol"} == {"inconclusive"}
    n8 = by[("Fig. 3b, paper protocol", "n = 8 components per class is best (Fig. 3b)")]
    assert n8.verdict == "inconclusive" and "paper profile: 100 rounds, seed 0" in n8.note  # one seed
    assert "one seed" in n8.note
    sc = by[("Fig. 6, paper protocol", "An intermediate S_C is best (accuracy against merging)")]
    assert sc.verdict == "inconclusive" and "S_C 100: 92.00 (merge rate 0.50)" in sc.evidence
    assert not [c for c in G.ledger(pplan, {"ablation_paper": {"plan": pplan, "acc": paper_ab}, "figs_paper": figs})
                if c.source.endswith("paper protocol")]


def test_threshold_values_read_merge_rates_and_traffic(tmp_path):
    """Fig. 6's numbers from a finished run: the merge rate averaged over interaction rounds, the downlink per round."""
    from fedlib.papers import gfpl as G

    plan = G.load_plan("smoke", results_dir=str(tmp_path))
    cfg = {**G.threshold_configs(plan)[next(iter(plan.settings["thresholds"]))]}
    recs = [{"round": 1, "up_params": 0, "down_params": 0},
            {"round": 2, "up_params": 10, "down_params": 30, "server": {"components": 8, "clusters": 6,
                                                                      "merge_rate": 0.25}},
            {"round": 3, "up_params": 0, "down_params": 0},
            {"round": 4, "up_params": 10, "down_params": 30, "server": {"components": 8, "clusters": 4,
                                                                      "merge_rate": 0.5}}]
    summary = {"seed": 0, "metrics": {"acc_head": {"last": 0.9}}}
    import fedlib.results as P

    orig = P.rounds
    P.rounds = lambda c, s, archive_root=None: recs
    try:
        got = G.threshold_values(plan, {1.0: [summary]}, {1.0: cfg})
    finally:
        P.rounds = orig
    assert got == {1.0: (90.0, 0.375, 15.0)}


def test_bench_gfpl_suite_is_table1s_setting():
    from fedlib import bench

    cfgs = bench.configs("gfpl", 0.05, 3, "cpu", "batched")
    assert len(cfgs) == 3 and all(label.endswith("GFPL Table 1 (MNIST-5k, w-bar 4)") for label in cfgs)
    assert [cfg["algorithm"]["name"] for cfg in cfgs.values()] == ["fedavg", "fedproto", "gfpl"]
    for cfg in cfgs.values():
        assert (cfg["train"]["batch_size"], cfg["train"]["rounds"], cfg["executor"]) == (4, 3, "batched")
        assert (cfg["partition"]["ways"], cfg["partition"]["num_clients"], cfg["seeds"]) == (4, 20, [0])


@pytest.mark.slow
def test_headless_command_runs_table2_and_the_figures(tmp_path, monkeypatch, capsys):
    """``python -m fedlib.papers.gfpl --table 2|figs``: the ablation and the n / S_C sweeps headless."""
    from fedlib.papers import gfpl as G

    monkeypatch.setenv("FEDLIB_ROOT", str(tmp_path))
    assert G.main(["--profile", "smoke", "--table", "figs", "--rounds", "2", "--workers", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("GFPL Figs. 3b and 6, MNIST-5k, w-bar 4, profile smoke: 2 rounds, seed 0; last round, mean over "
                      "clients (%)")
    assert out[1].startswith("Fig. 3b: n = 1: ") and ", n = 4: " in out[1]
    assert [line.split(":")[1].strip() for line in out[2:]] == ["S_C 1", "S_C 1000"]
    assert "merge rate 0.000" in out[2]  # S_C = 1 merges nothing (docs/gfpl.md, decision 11)
    assert G.main(["--profile", "smoke", "--table", "2", "--rounds", "2", "--workers", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("GFPL Table 2, MNIST-5k, s-bar 6 (smoke profile), w-bar 4, profile smoke: 2 rounds, "
                             "seeds [0]")
    assert [line.split()[2] for line in out[1:]] == ["w/o", "w/o", "w/o", "GFPL"]
    with pytest.raises(SystemExit):  # argparse: "argument --table: invalid choice: '3'"
        G.main(["--profile", "smoke", "--table", "3"])


@pytest.mark.slow
def test_headless_table1_runs_one_w_bar_column_and_names_a_bad_one(tmp_path, monkeypatch, capsys):
    """``--ways 4`` runs Table 1's w-bar 4 column only (the long paper runs go column by column, so each
    finished column is a complete one); a w-bar outside the profile's is refused with the allowed values."""
    from fedlib.papers import gfpl as G

    monkeypatch.setenv("FEDLIB_ROOT", str(tmp_path))
    assert G.main(["--profile", "quick", "--ways", "6", "--rounds", "1"]) == 2
    assert capsys.readouterr().out == "error: --ways: got [6]; allowed: 3, 4, 5 (profile quick)\n"
    assert G.main(["--profile", "quick", "--ways", "4", "--methods", "local", "fedavg", "--rounds", "1",
                   "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("GFPL Table 1, MNIST-5k, s-bar 18 (paper: MNIST), profile quick: 1 rounds, seeds [0]")
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in out.splitlines() if line.startswith("| ")][1:]
    assert len(rows) == 10 and {r[1] for r in rows} == {"w4"}           # the paper's ten rows, column w4 only
    assert {r[0] for r in rows if r[3] != "not run"} == {"Local", "FedAvg"}  # ours only where a run was asked for
    assert len(list(tmp_path.glob("results/*/summary.json"))) == 2   # two runs: one column, two methods


def test_table1_a_diverged_seed_has_no_last_round_accuracy():
    from fedlib.papers import gfpl as G

    plan = G.load_plan("paper")

    def summary(last, best, diverged_at=None):
        s = {"metrics": {"acc_head": {"last": last, "best": best, "last_std": 0.1}}}
        return {**s, "diverged_at": diverged_at} if diverged_at else s

    def recs(diverged):
        out = [{"round": r, "acc": {"acc_head": {"mean": 0.5 + r / 100}}, "up_params": 10, "down_params": 10}
               for r in range(1, 4)]
        return out + [{"round": 4, "train_loss": float("nan"), "diverged": True, "up_params": 10,
                       "down_params": 10}] if diverged else out

    # FedFA: seed 0 diverged at round 33 after peaking at 0.80 (its last finite round read 0.55)
    results = {("fmnist", 3, "fedfa"): [summary(0.55, 0.80, 33), summary(0.90, 0.92), summary(0.70, 0.84)],
               ("fmnist", 3, "gfpl"): [summary(0.90, 0.91)] * 3}
    cells = G.table1(plan, results, {("fmnist", 3, "fedfa"): recs(True), ("fmnist", 3, "gfpl"): recs(False)})
    fa = cells[("fmnist", 3, "fedfa")]
    assert fa["mean"] == pytest.approx(80.0) and fa["n"] == 2  # (90 + 70) / 2: the diverged seed is left out
    assert fa["std"] == pytest.approx(10.0) and math.isnan(fa["per_seed"][0])
    assert fa["best"] == pytest.approx(100 * (0.80 + 0.92 + 0.84) / 3)
    assert fa["diverged_at"] == [33, None, None] and fa["rounds_to_converge"] is None
    assert cells[("fmnist", 3, "gfpl")]["diverged_at"] is None
    assert G.diverged_text(fa) == "diverged at round 33 (1 of 3 seeds; best 85.33 before)"
    # every seed diverged: no accuracy at all, and the table says why
    results[("fmnist", 3, "fedfa")] = [summary(0.55, 0.80, 33), summary(0.45, 0.72, 50)]
    results[("fmnist", 3, "fedavg")] = [summary(0.85, 0.86)] * 2
    cells = G.table1(plan, results, {("fmnist", 3, "fedfa"): recs(True), ("fmnist", 3, "gfpl"): recs(False),
                                     ("fmnist", 3, "fedavg"): recs(False)})
    assert math.isnan(cells[("fmnist", 3, "fedfa")]["mean"]) and cells[("fmnist", 3, "fedfa")]["n"] == 0
    frame = G.table1_frame(plan, cells, "fmnist", {"rows": {"fedfa": {"w3": [95.0, 1.0]}, "gfpl": {"w3": [98.0, 1.0]}},
                                                   "comm_rounds": {"fedfa": 110, "gfpl": 80,
                                                                                   "fedavg": 150}})
    assert frame.loc[("FedFA", "w3"), "ours"] == "—"
    assert frame.loc[("FedFA", "w3"), "diverged"] == "diverged at rounds 33, 50 (2 of 2 seeds; best 76.00 before)"
    assert frame.loc[("GFPL", "w3"), "diverged"] == "—"
    assert frame.loc[("FedFA", "w3"), "rounds to converge (ours, one seed; paper)"] == "—; 110"
    # the ledger's best-in-column claim compares the methods that have an accuracy
    claims = G.ledger(plan, {"table1": cells})
    assert claims[0].verdict == "supported"
    assert claims[0].evidence == ("Fashion-MNIST, s-bar 100 w3: GFPL 90.00 (seed std 0.00) vs FedAvg 85.00 (seed "
                                  "std 0.00)")
    assert "GFPL - FedAvg +5.00 (seed std 0.00, exact p 0.20" in claims[0].note  # 3 vs 2 seeds: unpaired
    assert "FedFA" not in claims[1].evidence  # nor does a diverged run count in the fewest-rounds claim


@pytest.mark.slow
def test_paper_profile_notebook_reads_the_archive_and_trains_one_run(tmp_path, monkeypatch):
    from fedlib import archive, results
    from fedlib.papers import gfpl as G

    # an empty results folder beside the committed run archive (a fresh clone): every paper-profile run of the
    # notebook is read, except the GFPL run whose checkpoint the figures load
    monkeypatch.setattr(archive, "ARCHIVE", Path(archive.__file__).resolve().parents[1] / "archive")
    plan = G.load_plan("paper", results_dir=str(tmp_path))
    jobs = G.notebook_jobs(plan)
    assert jobs == [(G.config(plan, "gfpl", "mnist5k", 4), 0)]
    # Table 2 and Figs. 3b / 6 on six seeds; n = 4 and S_C = 1 are one config, Table 1's GFPL run on seeds 0-2
    assert len(G.all_jobs(plan)) == 180 + 8 * 6 + 9 * 6 - 3
    cfgs = {k: c for k, c in G.table1_configs(plan).items() if k[:2] == ("fmnist", 5)}
    got = results.run_or_read(cfgs, workers=1, progress=False)   # reads, trains nothing (the folder stays empty)
    assert not any(tmp_path.iterdir())
    assert [s["executor"] for s in got[("fmnist", 5, "gfpl")]] == ["batched"] * 3
    recs = results.rounds(cfgs[("fmnist", 5, "gfpl")], 0)
    assert len(recs) == 100 and recs[-1]["round"] == 100
    # the short profiles keep their own runs: nothing is left out, and an unfinished run has no records
    quick = G.load_plan("quick", results_dir=str(tmp_path))
    assert G.notebook_jobs(quick) == G.all_jobs(quick)
    assert results.rounds_here(G.config(quick, "gfpl"), 0) == []


def test_the_paper_profile_runs_figs_3b_and_6_on_every_seed_and_reads_the_finished_ones(tmp_path, monkeypatch):
    """``figs_seeds`` in the paper profile only: Figs. 3b and 6 run its six seeds there (n 4 and S_C 1 are Table 1's
    GFPL run), the other profiles keep their first-seed runs (same run ids). A short profile's paper-protocol part
    reads each sweep over the seeds on which all its values have finished, paired by seed, and says which."""
    from fedlib import archive, results
    from fedlib.config import run_id
    from fedlib.papers import gfpl as G
    from fedlib.paths import ARCHIVE

    paper, quick = G.load_plan("paper"), G.load_plan("quick")
    six = [0, 1, 2, 3, 4, 5]
    assert paper.figs_seeds() == six and quick.figs_seeds() == [0] and G.load_plan("smoke").figs_seeds() == [0]
    assert paper.ablation_seeds() == six and paper.seeds == [0, 1, 2] and quick.ablation_seeds() == quick.seeds
    # a seeds override applies to every table, the figures' and the ablation's own lists too
    assert G.load_plan("paper", seeds=[5]).figs_seeds() == [5] == G.load_plan("paper", seeds=[5]).ablation_seeds()
    assert G.archived_tables()[2][0] == "GFPL Figs. 3b and 6 (paper profile)" and G.archived_tables()[2][2] == six
    figs = {**G.n_configs(paper), **{("sc", t): c for t, c in G.threshold_configs(paper).items()}}
    assert all(archive.entry(c, 0, ARCHIVE).exists() for c in figs.values())   # the archived seed-0 runs keep their ids
    assert run_id(G.n_configs(paper)[4], 1) == run_id(G.config(paper, "gfpl", "mnist5k", 4), 1)
    assert {run_id(c, s) for c in figs.values() for s in (0, 1, 2)} <= {run_id(c, s) for c, s in G.all_jobs(paper)}
    qjobs = {run_id(c, s) for c, s in G.all_jobs(quick)}
    qfigs = [*G.n_configs(quick).values(), *G.threshold_configs(quick).values()]
    assert {run_id(c, 0) for c in qfigs} <= qjobs and not {run_id(c, 1) for c in qfigs} & qjobs

    # seeds 0 and 1 finished for every n, seed 2 for some: Fig. 3b over seeds 0 and 1; Fig. 6 over none yet
    def find(cfg, seed, archive_root=None, archived=True):
        n = cfg["algorithm"]["n_components"]
        ok = cfg["algorithm"]["threshold"] == 1.0 and (seed < 2 or n in (4, 8))
        return (cfg, {"seed": seed, "rounds": 100, "metrics": {"acc_head": {"last": (0.9 + n / 1000 + seed / 100)}}}
                ) if ok else (None, None)

    def cached(configs, seeds, archive_root=None, protocol=False, more=False):
        done = {k: [find(c, s)[1] for s in seeds] for k, c in configs.items()}
        done = {k: v for k, v in done.items() if all(v)}
        return done, sum(len(v) for v in done.values())
    monkeypatch.setattr(results, "find", find)
    monkeypatch.setattr(results, "cached", cached)
    monkeypatch.setattr(results, "rounds", lambda c, s, archive_root=None: [])
    got = G.paper_figs(G.load_plan("smoke", results_dir=str(tmp_path)))
    assert got["n_seeds"] == [0, 1] and got["threshold_seeds"] == []
    assert got["n_per_seed"][8] == pytest.approx([90.8, 91.8]) and got["n"][8] == pytest.approx(91.3)
    assert got["thresholds"] is None and got["total"] == 60   # (5 n + 5 S_C) x 6 seeds
    by = {c.claim: c for c in G.ledger(G.load_plan("smoke"), {"figs_paper": got})}
    n8 = by["n = 8 components per class is best (Fig. 3b)"]
    # n 8 against n 16 per seed: 90.8 - 91.6, 91.8 - 92.6: -0.8 on both seeds, beyond the spread of 0.71: not supported
    assert n8.tests[0].label == "n 8 - n 16" and n8.tests[0].n == 2 and n8.tests[0].margin == pytest.approx(-0.8)
    assert n8.verdict == "not supported" and "seeds 0, 1" in n8.note
