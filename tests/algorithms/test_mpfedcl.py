"""MP-FedCL: the global prototype pool, Eq. 11 and Eq. 13 by hand, K = 1 as the single-prototype
path, FedPCL's MNIST partition, and the communication counted from the messages."""

import math

import numpy as np
import pytest
import torch

from fedlib.algorithms import make_algorithm
from fedlib.algorithms.mpfedcl import build_pool, cluster, pool_contrastive
from fedlib.data import FederatedData
from fedlib.data.partition import fedpcl, label_partition
from fedlib.engine import Simulator
from fedlib.prototypes import message_scores, nearest_prototype_scores
from tests.conftest import make_ctx, tiny_image_dataset


def test_pool_groups_by_class_and_pads_underfilled_slots_with_the_class_mean():
    # client 0 sends 2 prototypes of class 0 and 1 of class 1; client 1 sends 2 of class 1
    ups = [{"protos": torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 5.0]]), "classes": torch.tensor([0, 0, 1])},
           {"protos": torch.tensor([[0.0, 1.0], [0.0, 3.0]]), "classes": torch.tensor([1, 1])}]
    pool, present = build_pool(ups, num_classes=3, k=2, pad_all=True)
    assert pool.shape == (2, 3, 2, 2) and present.tolist() == [True, True, False]
    assert pool[0, 0].tolist() == [[1.0, 0.0], [3.0, 0.0]]   # K genuine prototypes kept
    mean1 = [0.0, 3.0]                                          # Eq. 9: (5 + 1 + 3) / 3 over the genuine ones
    assert pool[0, 1].tolist() == [mean1, mean1]               # Eq. 10: fewer than K -> every slot the mean
    assert pool[1, 0].tolist() == [[2.0, 0.0], [2.0, 0.0]]      # a class the client lacks: the mean too
    assert pool[1, 1].tolist() == [[0.0, 1.0], [0.0, 3.0]]
    kept, _ = build_pool(ups, num_classes=3, k=2, pad_all=False)  # DP-FedCL: pad only the missing slots
    assert kept[0, 1].tolist() == [[0.0, 5.0], mean1]


def test_eq11_by_hand():
    # one pool client, K = 1, two classes: -log softmax over the classes of v . u / tau
    v = torch.tensor([[1.0, 0.0]])
    pool = torch.tensor([[[[1.0, 0.0]], [[0.0, 1.0]]]])          # (N=1, C=2, K=1, d=2)
    tau = 0.5
    expected = -math.log(math.exp(1 / tau) / (math.exp(1 / tau) + math.exp(0 / tau)))
    present = torch.tensor([True, True])
    assert pool_contrastive(v, torch.tensor([0]), pool, present, tau).item() == pytest.approx(expected, rel=1e-6)
    # two pool clients, K = 2: the mean over the N K (client, slot) softmaxes
    pool2 = torch.stack([pool[0], pool[0] * 2]).repeat(1, 1, 2, 1)  # (2, 2, 2, 2)
    terms = [-math.log(math.exp(s / tau) / (math.exp(s / tau) + 1)) for s in (1, 1, 2, 2)]
    got = pool_contrastive(v, torch.tensor([0]), pool2, present, tau)
    assert got.item() == pytest.approx(sum(terms) / 4, rel=1e-6)
    # a sample whose class nobody holds contributes zero; gradient only reaches v
    v.requires_grad_(True)
    absent = pool_contrastive(v, torch.tensor([1]), pool, torch.tensor([True, False]), tau)
    assert absent.item() == 0.0
    pool_contrastive(v, torch.tensor([0]), pool, present, tau).backward()
    assert v.grad is not None and v.grad.abs().sum() > 0


def test_eq13_the_class_of_the_nearest_pool_prototype_wins():
    # class 0's prototypes are far on average but one is next to the query; class 1's mean is nearer
    algo = make_algorithm({"name": "mpfedcl", "normalize": False})
    pool = torch.tensor([[[[0.0, 0.1], [10.0, 10.0]], [[2.0, 0.0], [2.0, 0.0]]]])  # (N=1, C=2, K=2, d=2)
    msg = {"pool": pool, "pool_classes": torch.tensor([0, 1])}
    scores = algo.scores(make_ctx(num_classes=2), 0, {}, msg, torch.zeros(1, 2), {"high": torch.zeros(1, 2)})
    assert scores["proto"].argmax(1).tolist() == [0]
    class_means = pool[0].mean(1)
    by_mean = nearest_prototype_scores(torch.zeros(1, 2), class_means, torch.tensor([True, True]))
    assert by_mean.argmax(1).tolist() == [1]  # a single prototype per class would get it wrong


def test_k1_is_the_single_prototype_path():
    # k-means with one cluster gives the class mean (SP-FedCL), and the pool's nearest-prototype rule is then
    # FedProto's rule on the class table
    z = np.random.default_rng(0).normal(size=(50, 4)).astype(np.float32)
    km = cluster(z, 1, "kmeans", 0, 0.3, 3, 10, "random")
    assert np.allclose(km, z.mean(0, keepdims=True), atol=1e-6)
    assert np.array_equal(cluster(z, 1, "mean", 0, 0.3, 3, 10, "random"), z.mean(0, keepdims=True))
    protos = torch.randn(3, 4)
    pool = protos.view(1, 3, 1, 4)
    feats = torch.randn(20, 4)
    algo = make_algorithm({"name": "mpfedcl", "k": 1, "clustering": "mean", "normalize": False})
    got = algo.scores(make_ctx(num_classes=3), 0, {}, {"pool": pool, "pool_classes": torch.arange(3)},
                      torch.zeros(20, 3), {"high": feats})["proto"]
    ref = message_scores(feats, {"protos": protos, "classes": torch.arange(3)}, 3)
    assert torch.equal(got, ref)


def test_kmeans_sends_nothing_for_a_class_smaller_than_k():
    z = np.zeros((1, 4), dtype=np.float32)
    assert cluster(z, 2, "kmeans", 0, 0.3, 3, 10, "random").shape == (0, 4)
    spread = np.concatenate([np.zeros((5, 2)), np.ones((5, 2)) * 5]).astype(np.float32)
    assert len(cluster(spread, 2, "dbscan", 0, 0.5, 2, 10, "random")) == 2  # DP-FedCL finds both groups


def test_fedpcl_partition_takes_the_first_train_size_images_and_test_blocks():
    y_tr = np.tile(np.arange(10), 400)  # 4000 labels
    y_te = np.tile(np.arange(10), 100)
    p = fedpcl(y_tr, y_te, 10, num_clients=5, alpha=0.05, train_size=2000, min_size=10, test_size=100, seed=0)
    assert sum(len(t) for t in p.train) == 2000 and min(len(t) for t in p.train) >= 10
    assert all(len(t) == 100 for t in p.test)
    pooled_test = np.concatenate(p.test)
    assert len(np.unique(pooled_test)) == 500  # disjoint blocks
    assert (p.counts > 0).sum(1).min() < 10  # label skew: some client lacks classes
    assert p.hash == fedpcl(y_tr, y_te, 10, 5, 0.05, 2000, 10, 100, 0).hash != fedpcl(
        y_tr, y_te, 10, 5, 0.05, 2000, 10, 100, 1).hash


def test_communication_is_the_model_plus_k_prototypes_per_held_class():
    # MP-FedCL Table II on MNIST: 798,474 model parameters and 2 x 10 x 256 prototype floats for a client of
    # all ten classes; the downlink adds the whole pool (N x C x K x 256)
    ds = tiny_image_dataset(per_class_train=12, per_class_test=3, num_classes=10, shape=(1, 28, 28))
    part = label_partition("iid", ds.y_train.numpy(), ds.y_test.numpy(), 10, num_clients=2, seed=0, split="official")
    data = FederatedData(ds, part)
    ctx = make_ctx(num_classes=10, input_shape=(1, 28, 28), num_clients=2, model="mlp_mnist", batch_size=32)
    recs = Simulator(make_algorithm({"name": "mpfedcl", "k": 2}), ctx, data, rounds=2, progress=False).run()
    assert all((data.train[c].y.bincount(minlength=10) >= 2).all() for c in range(2))
    assert recs[0]["up_params"] == recs[1]["up_params"] == 2 * (798_474 + 2 * 10 * 256)
    assert recs[0]["down_params"] == 2 * 798_474  # round 1: no pool yet
    assert recs[1]["down_params"] == 2 * (798_474 + 2 * 10 * 2 * 256)
    assert recs[1]["server"]["pool_k"] == 2


@pytest.mark.slow
def test_first_round_is_cross_entropy_only_then_the_pool_acts():
    ds = tiny_image_dataset()
    part = label_partition("iid", ds.y_train.numpy(), ds.y_test.numpy(), 4, num_clients=2, seed=0, split="official")
    data, ctx = FederatedData(ds, part), make_ctx(num_clients=2)
    mp = Simulator(make_algorithm({"name": "mpfedcl"}), ctx, data, rounds=2, progress=False).run()
    avg = Simulator(make_algorithm({"name": "fedavg"}), ctx, data, rounds=2, progress=False).run()
    assert mp[0]["train_loss"] == avg[0]["train_loss"] and mp[1]["train_loss"] != avg[1]["train_loss"]
    with pytest.raises(Exception, match="1 with clustering: mean"):
        make_algorithm({"name": "mpfedcl", "clustering": "mean", "k": 2})


def test_ledger_margins_within_the_seed_spread_and_ties_are_inconclusive():
    """MP-FedCL 82.00 against FedProx 81.60 with a seed std near 3 (and behind it on 2 of 3 seeds) decides
    nothing; K = 2 tying K = 4 is no win; the prototype/model size ratio holds by construction."""
    from fedlib.papers import mpfedcl as M

    plan = M.load_plan("paper")

    def row(seeds, rounds=60):
        return {"mean": float(np.mean(seeds)), "std": float(np.std(seeds)), "n": len(seeds), "per_seed": seeds,
                "rounds": rounds}

    t6 = {"mpfedcl": row([86.0, 79.0, 81.0]), "fedprox": row([80.8, 82.0, 82.0], 110),
          "fedavg": row([80.5, 81.5, 82.6], 110), "fedproto": row([27.0, 27.5, 27.5]),
          "spfedcl": row([71.0, 72.0, 70.0])}
    got = M.ledger(plan, {"table6": t6, "comm": {"model": 798_474, "prototypes": 1_536, "full": 5_120},
                          "k": {1: 81.0, 2: 82.0, 3: 81.13, 4: 82.0}})
    by = {c.claim: c for c in got}
    best = by["MP-FedCL has the best accuracy on MNIST under label skew (Dir 0.05)"]
    assert best.verdict == "inconclusive"
    assert "MP-FedCL 82.00 ± 2.94 vs best other FedProx 81.60 ± 0.57" in best.evidence
    assert "MP-FedCL - FedProx +0.40 (seed std 3.61, paired exact p 1.00 (smallest possible 0.25), n = 3)" in best.note
    assert by["With 60 rounds MP-FedCL beats FedAvg after its 110 (half the communication rounds)"].verdict == \
        "inconclusive"
    assert by["Several prototypes per class beat one (MP above SP-FedCL)"].verdict == "supported"  # +11 vs std 2.94
    assert by["FedProto, which shares no model, is the weakest from scratch on MNIST"].verdict == "supported"
    k2 = by["K = 2 is the best number of prototypes per class on MNIST"]
    assert k2.verdict == "inconclusive" and "a tie is not a win" in k2.note and "one seed" in k2.note
    size = by["Prototype traffic is below a tenth of the model's (MNIST: 5,120 vs 798,474)"]
    assert size.verdict == "by construction" and size.note.startswith("true by construction: K x C x d")


def test_feature_skew_claims_are_judged_on_their_seeds_paired():
    """The stand-in's three seeds, paired per seed: a 15-point lead over every baseline beyond the spread is
    supported; the same means without their per-seed values stay inconclusive; "on par within 1 point" is the
    shifted difference MP + 1 - variant."""
    from fedlib.papers import mpfedcl as M

    plan = M.load_plan("paper")
    seeds = {"mpfedcl": [59.0, 60.5, 60.0], "local": [44.0, 45.0, 44.3], "fedavg": [30.0, 31.0, 29.0],
             "fedprox": [30.5, 31.2, 29.4], "fedproto": [40.0, 41.0, 39.0], "spfedcl": [59.2, 60.6, 59.9],
             "dpfedcl": [58.9, 60.1, 59.7]}
    means = {m: float(np.mean(v)) for m, v in seeds.items()}
    beats = "Under feature skew (one domain per client) MP-FedCL beats Local, FedAvg, FedProx and FedProto " \
            "(+4.6% relative to FedProto on Digit-5)"
    par = "Under feature skew MP-FedCL is on par with SP- and DP-FedCL (Digit-5: SP-FedCL 0.41 above it)"
    by = {c.claim: c for c in M.ledger(plan, {"feature_skew": means, "feature_skew_seeds": seeds})}
    assert by[beats].verdict == "supported" and "MP-FedCL - Local +15.40" in by[beats].note
    assert by[par].verdict == "supported" and "MP-FedCL + 1 - SP-FedCL +0.93" in by[par].note
    blind = {c.claim: c for c in M.ledger(plan, {"feature_skew": means})}
    assert blind[beats].verdict == "inconclusive" and "per-seed values were not at hand" in blind[beats].note
    worse = {**seeds, "local": [60.0, 62.0, 61.0]}  # a baseline ahead on every seed: not supported
    by = {c.claim: c for c in M.ledger(plan, {"feature_skew": {**means, "local": 61.0},
                                               "feature_skew_seeds": worse})}
    assert by[beats].verdict == "not supported"
