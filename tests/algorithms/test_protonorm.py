"""ProtoNorm: Prototype Alignment geometry and stopping, Upscaling loss, server by hand."""

import math

import pytest
import torch
import torch.nn.functional as F

from fedlib.algorithms import make_algorithm
from fedlib.algorithms.protonorm import batch_distance_loss
from fedlib.prototypes import thomson_align
from tests.conftest import R, make_ctx
from tests.algorithms.test_algorithms import tiny_run


def pairwise(x):
    d = torch.cdist(x.double(), x.double())
    return d[~torch.eye(len(x), dtype=torch.bool)]


@pytest.mark.parametrize("k,d,expected", [(2, 2, 2.0), (3, 2, math.sqrt(3)), (4, 3, math.sqrt(8 / 3))])
def test_alignment_reaches_the_regular_simplex(k, d, expected):
    g = torch.Generator().manual_seed(0)
    start = torch.rand(k, d, generator=g) + 1.0  # correlated, non-negative: all in one orthant
    aligned, iters, _ = thomson_align(start, max_iter=2000, patience=200)
    assert torch.allclose(aligned.norm(dim=1), torch.ones(k), atol=1e-6)
    assert pairwise(aligned).min() == pytest.approx(expected, abs=2e-3)


def test_alignment_in_512_d_approaches_the_simplex_distance_and_keeps_classes():
    # K = 10 << d: the minimum-energy configuration is the simplex, distance sqrt(2K/(K-1)) = 1.4907
    g = torch.Generator().manual_seed(1)
    start = F.normalize(torch.eye(10, 512) * 0.3 + torch.rand(10, 512, generator=g), dim=1)
    aligned, iters, hist = thomson_align(start, record=True)
    assert 21 <= iters <= 500 and len(hist) == iters
    assert pairwise(aligned).mean() == pytest.approx(math.sqrt(20 / 9), abs=2e-3)
    assert pairwise(start).mean() < 0.8  # the inputs were crowded
    # each aligned prototype is still nearest to its own class's input
    assert torch.equal((aligned @ start.T).argmax(1), torch.arange(10))


def test_alignment_stopping_rule_counts_from_iteration_ten():
    # two antipodal points: the force is constant from the start, so the rounded mean force
    # is unchanged at every check; the rule fires after 10 equal values following it = 10
    start = torch.tensor([[1.0, 0.0], [-1.0, 0.0]])
    _, iters, _ = thomson_align(start)
    assert iters == 21


def test_batch_distance_loss_by_hand():
    z = torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0]])
    y = torch.tensor([0, 0, 1])
    targets = torch.tensor([[0.0, 0.0], [0.0, 5.0]])
    has = torch.tensor([True, True])
    # class 0 mean (2, 0) -> distance 2; class 1 mean (0, 2) -> distance 3
    assert float(batch_distance_loss(z, y, targets, has)) == pytest.approx(5.0)
    assert float(batch_distance_loss(z, y, targets, torch.tensor([True, False]))) == pytest.approx(2.0)


def test_server_mean_then_normalise_without_alignment():
    algo = make_algorithm({"name": "protonorm", "align": False})
    ctx = make_ctx(num_classes=3)
    ups = {0: {"protos": torch.tensor([[2.0, 0.0], [0.0, 4.0]]), "classes": torch.tensor([0, 1])},
           1: {"protos": torch.tensor([[0.0, 2.0]]), "classes": torch.tensor([0])}}
    server, _ = algo.aggregate(ctx, algo.init_server(ctx), ups, R)
    msg = algo.broadcast(ctx, server, 0, R)
    s = 1 / math.sqrt(2)
    assert msg["classes"].tolist() == [0, 1]
    assert torch.allclose(msg["protos"], torch.tensor([[s, s], [0.0, 1.0]]))  # mean (1, 1) and (0, 4), normalised
    aligned, stats = make_algorithm({"name": "protonorm"}).aggregate(ctx, algo.init_server(ctx), ups, R)
    assert stats["pa_iterations"] >= 21
    assert torch.allclose(aligned["protos"][:2].norm(dim=1), torch.ones(2))
    spread = float(torch.dist(aligned["protos"][0], aligned["protos"][1]))
    assert spread > float(torch.dist(msg["protos"][0], msg["protos"][1]))
    assert aligned["history"] == []  # nothing kept unless record_pa
    rec, rec_stats = make_algorithm({"name": "protonorm", "record_pa": True}).aggregate(ctx, algo.init_server(ctx),
                                                                                       ups, R)
    assert len(rec["history"]) == rec_stats["pa_iterations"] + 1  # before PA, then after each iteration
    before = float(torch.dist(msg["protos"][0], msg["protos"][1]))
    assert float(rec["history"][0][0, 1]) == pytest.approx(before, abs=1e-6)
    assert float(rec["history"][-1][0, 1]) == pytest.approx(spread, abs=1e-5)


def test_lam_zero_trains_like_local_and_reports_three_rules():
    sim_p, rec_p = tiny_run("protonorm", lam=0.0, rounds=2)
    sim_l, _ = tiny_run("local", rounds=2)
    for cid in range(4):
        a, b = sim_p.clients[cid]["model"], sim_l.clients[cid]["model"]
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert {"acc_head", "acc_proto", "acc_proto_local"} <= set(rec_p[-1]["acc"])


@pytest.mark.slow
def test_upscaled_targets_pull_features_toward_gamma_prototypes():
    _, rec = tiny_run("protonorm", rounds=3, gamma=10.0, lam=1.0)
    _, rec_plain = tiny_run("protonorm", rounds=3, gamma=10.0, lam=0.0)
    # with the regulariser the loss includes ||f - 10 c_hat||^2 / d: larger than CE alone
    assert rec[2]["train_loss"] > rec_plain[2]["train_loss"]


def test_fedtgp_margin_loss_and_adaptive_margin_by_hand():
    from fedlib.algorithms.fedtgp import adaptive_margin, margin_loss

    centers = torch.tensor([[0.0, 0.0], [3.0, 4.0]])
    p = torch.tensor([[0.0, 0.0]])
    # distances 0 (true class, + margin 1) and 5: CE over (-1, -5)
    expected = -math.log(math.exp(-1) / (math.exp(-1) + math.exp(-5)))
    assert float(margin_loss(p, torch.tensor([0]), centers, 1.0)) == pytest.approx(expected, rel=1e-5)
    means = torch.tensor([[0.0, 0.0], [3.0, 4.0], [0.0, 1.0]])
    # nearest other class: 1 (class 0), 4.24 (class 1), 1 (class 2) -> max 4.24, capped by the threshold
    assert adaptive_margin(means, torch.tensor([True, True, True]), 100.0) == pytest.approx(math.sqrt(18))
    assert adaptive_margin(means, torch.tensor([True, True, True]), 2.0) == 2.0
    assert adaptive_margin(means, torch.tensor([True, False, False]), 2.0) == 0.0


def test_fedtgp_server_learns_separated_prototypes_and_scales_them():
    algo = make_algorithm({"name": "fedtgp", "server_epochs": 100, "server_lr": 0.1, "gamma": 2.0})
    ctx = make_ctx(num_classes=3)
    e = torch.eye(16)
    ups = {0: {"protos": torch.stack([e[0], e[1]]), "classes": torch.tensor([0, 1])},
           1: {"protos": torch.stack([e[2], e[0] + 0.1 * e[3]]), "classes": torch.tensor([2, 0])}}
    torch.manual_seed(0)
    server, stats = algo.aggregate(ctx, algo.init_server(ctx), ups, R)
    assert stats["server_loss"] < 0.5 * stats["server_loss_first_epoch"]
    assert stats["margin"] == pytest.approx(math.sqrt(2.0025))  # class 0 mean e0 + 0.05 e3 to e1 or e2
    inputs = torch.stack([e[0], e[1], e[2]])
    assert torch.cdist(inputs, server["protos"]).argmin(1).tolist() == [0, 1, 2]
    msg = algo.broadcast(ctx, server, 0, R)
    assert torch.allclose(msg["protos"], 2.0 * server["protos"])


def test_spiral_study_configs_and_smallest_angle():
    import numpy as np

    from fedlib.papers import protonorm as P

    cfgs = P.spiral_configs(P.load_plan("quick"))
    assert list(cfgs) == ["fedproto_iid", "fedproto_noniid", "pa", "pa_pu"]
    assert cfgs["pa_pu"]["algorithm"]["gamma"] == 10.0 and cfgs["pa"]["algorithm"]["gamma"] == 1.0
    assert cfgs["fedproto_noniid"]["partition"]["alpha"] == 0.1 and cfgs["fedproto_iid"]["partition"]["scheme"] == "iid"
    assert all(c["train"]["rounds"] == 200 and c["model"]["feature_dim"] == 2 for c in cfgs.values())
    six = np.stack([[math.cos(k * math.pi / 3), math.sin(k * math.pi / 3)] for k in range(6)])
    assert P.smallest_angle(six) == pytest.approx(60.0)
    assert P.smallest_angle(np.array([[1.0, 0.0], [1.0, 1.0], [-1.0, 0.0]])) == pytest.approx(45.0)


@pytest.mark.slow
def test_round_log_carries_the_alignment_iterations():
    _, rec = tiny_run("protonorm", rounds=2)
    assert all(r["server"]["pa_iterations"] >= 21 for r in rec)
    _, rec = tiny_run("protonorm", rounds=1, align=False)
    assert rec[0]["server"]["pa_iterations"] == 0
    _, rec = tiny_run("fedavg", rounds=1)
    assert "server" not in rec[0]


def test_fedproto_gamma_scales_what_is_sent_and_keeps_old_run_ids():
    from fedlib.config import run_id

    algo = make_algorithm({"name": "fedproto", "gamma": 1.2})
    ctx = make_ctx(num_classes=2)
    ups = {0: {"protos": torch.tensor([[1.0, 2.0]]), "classes": torch.tensor([0]), "counts": torch.tensor([3])}}
    server, _ = algo.aggregate(ctx, algo.init_server(ctx), ups, R)
    assert torch.allclose(algo.broadcast(ctx, server, 0, R)["protos"], torch.tensor([[1.2, 2.4]]))
    assert torch.equal(server["protos"][0], torch.tensor([1.0, 2.0]))  # the server keeps the unscaled mean
    cfg = {"name": "x", "dataset": {"name": "fmnist"}, "algorithm": {"name": "fedproto", "lam": 1.0, "gamma": 1.0}}
    old = {**cfg, "algorithm": {"name": "fedproto", "lam": 1.0}}
    assert run_id(cfg, 1) == run_id(old, 1)
    assert run_id({**cfg, "algorithm": {**cfg["algorithm"], "gamma": 1.2}}, 1) != run_id(old, 1)
