"""ProtoNorm's homogeneous-model baselines (Table 3): FedNH and FedUV.

Hand-computed regularisers and prototype updates, FedNH's prototype initialisation and its
frozen prototypes, FedUV(0, 0) == FedAvg, and the engine's byte counts on a 2-round run.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from fedlib.algorithms import make_algorithm
from fedlib.algorithms.fednh import PROTO_KEY, PrototypeHead, init_prototypes, smooth_prototypes
from fedlib.algorithms.feduv import uniformity_loss, variance_loss
from fedlib.data import FederatedData
from fedlib.data.partition import label_partition
from fedlib.engine import Simulator
from tests.conftest import R, make_ctx, tiny_image_dataset


def strip_time(records):
    return [{k: v for k, v in r.items() if "seconds" not in k} for r in records]


@pytest.fixture(scope="module")
def fed_data():
    ds = tiny_image_dataset()
    part = label_partition("pathological", ds.y_train.numpy(), ds.y_test.numpy(), 4, num_clients=4,
                           classes_per_client=2, balance=True, seed=1, split="official")
    return FederatedData(ds, part)


@pytest.fixture(scope="module")
def runs(fed_data):
    """2-round runs shared by several tests (each run costs about a second)."""
    out = {}
    for key, spec in {"fedavg": {"name": "fedavg"}, "feduv0": {"name": "feduv", "mu": 0.0, "lam": 0.0},
                      "feduv": {"name": "feduv"}, "fednh": {"name": "fednh"}}.items():
        sim = Simulator(make_algorithm(spec), make_ctx(), fed_data, rounds=2, progress=False)
        out[key] = (sim, sim.run())
    return out


# -- FedUV regularisers ----------------------------------------------------------------------


def test_variance_loss_by_hand():
    logits = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]], requires_grad=True)  # q = [.5,.5], [.75,.25]
    got = variance_loss(logits)
    std = 0.25 / math.sqrt(2)  # unbiased std of {a, b} is |a - b| / sqrt(2), both columns
    assert got.item() == pytest.approx(1 / math.sqrt(2) - std, abs=1e-6)
    got.backward()
    assert torch.isfinite(logits.grad).all() and logits.grad.abs().sum() > 0
    # gamma is the per-class std of one-hot outputs of a balanced batch (the code's eye(C) target)
    for C in (2, 4, 10):
        assert torch.eye(C).std(0).mean().item() == pytest.approx(C ** -0.5, abs=1e-6)
    # near one-hot predictions of a balanced batch already reach gamma: no penalty
    onehot = 50.0 * torch.eye(4)
    assert variance_loss(onehot).item() == pytest.approx(0.0, abs=1e-6)
    # a collapsed batch (identical predictions) pays the full gamma
    assert variance_loss(torch.zeros(3, 4)).item() == pytest.approx(0.5, abs=1e-6)
    assert variance_loss(torch.zeros(1, 4)).item() == 0.0  # no spread from one sample


def test_uniformity_loss_by_hand():
    z = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
    # squared distances 1, 4, 5 -> median t = 4
    expected = (math.exp(-1 / 4) + math.exp(-4 / 4) + math.exp(-5 / 4)) / 3
    assert uniformity_loss(z).item() == pytest.approx(expected, rel=1e-6)
    # a duplicate pair stays in the mean but not in the median: distances 0, 9, 9 -> t = 9
    dup = torch.tensor([[0.0, 0.0], [0.0, 0.0], [3.0, 0.0]], requires_grad=True)
    loss = uniformity_loss(dup)
    assert loss.item() == pytest.approx((1 + 2 * math.exp(-1)) / 3, rel=1e-6)
    loss.backward()
    assert torch.isfinite(dup.grad).all()
    # even count of distances: torch.median's lower middle value (the code's convention)
    four = torch.tensor([[0.0], [1.0], [3.0], [7.0]])  # 1, 9, 49, 4, 36, 16 -> sorted 1 4 9 16 36 49 -> 9
    d2 = torch.tensor([1.0, 9.0, 49.0, 4.0, 36.0, 16.0])
    assert uniformity_loss(four).item() == pytest.approx(torch.exp(-d2 / 9).mean().item(), rel=1e-6)
    assert uniformity_loss(torch.ones(3, 2)).item() == pytest.approx(1.0)  # all pairs coincide
    assert uniformity_loss(torch.ones(1, 2)).item() == 0.0


def test_feduv_local_loss_adds_weighted_terms():
    algo = make_algorithm({"name": "feduv", "mu": 2.0, "lam": 3.0})
    model = make_ctx().new_model(0)
    x, y = torch.randn(6, 1, 8, 8, generator=torch.Generator().manual_seed(0)), torch.tensor([0, 1, 2, 3, 0, 1])
    model.eval()  # BatchNorm in eval mode: both forward passes see the same outputs
    logits, feats = model(x)
    expected = F.cross_entropy(logits, y) + 2.0 * variance_loss(logits) + 3.0 * uniformity_loss(feats["high"])
    assert algo.local_loss(model(x), y, {}, {}, {}).item() == pytest.approx(expected.item(), rel=1e-6)


def test_feduv_with_zero_weights_equals_fedavg(runs):
    sim_a, rec_a = runs["fedavg"]
    sim_u, rec_u = runs["feduv0"]
    assert strip_time(rec_u) == strip_time(rec_a)
    assert all(torch.equal(sim_u.server["weights"][k], v) for k, v in sim_a.server["weights"].items())


def test_feduv_default_trains_differently_with_fedavg_messages(runs):
    (_, rec_a), (_, rec_u) = runs["fedavg"], runs["feduv"]
    assert rec_u[0]["train_loss"] != rec_a[0]["train_loss"]
    for key in ("up_params", "up_bytes", "down_params", "down_bytes"):
        assert [r[key] for r in rec_u] == [r[key] for r in rec_a]
    assert rec_u[0]["up_params"] == 4 * (13_440 + 516)  # cnn_fmnist on 1x8x8: body + Linear(128, 4)


# -- FedNH -----------------------------------------------------------------------------------


def test_prototype_head_is_a_scaled_cosine():
    head = PrototypeHead(2, 2, scale=2.0)
    head.prototypes.copy_(torch.eye(2))
    assert torch.allclose(head(torch.tensor([[3.0, 4.0]])), torch.tensor([[1.2, 1.6]]))
    assert [n for n, _ in head.named_parameters()] == ["scale"]  # prototypes are a buffer, never trained
    assert not PrototypeHead(2, 2, learn_scale=False).scale.requires_grad


def test_fednh_initial_prototypes_are_unit_and_seeded():
    algo = make_algorithm({"name": "fednh"})
    p0 = algo.init_server(make_ctx(seed=0))["weights"][PROTO_KEY]
    assert p0.shape == (4, 128)
    assert torch.allclose(p0.norm(dim=1), torch.ones(4), atol=1e-6)
    assert torch.allclose(p0 @ p0.T, torch.eye(4), atol=1e-5)  # C <= d: orthonormal rows
    assert torch.equal(algo.init_server(make_ctx(seed=0))["weights"][PROTO_KEY], p0)
    assert not torch.allclose(algo.init_server(make_ctx(seed=1))["weights"][PROTO_KEY], p0)
    gen = torch.Generator().manual_seed(0)
    wide = init_prototypes(5, 3, "orthogonal", gen)  # C > d: unit rows
    assert torch.allclose(wide.norm(dim=1), torch.ones(5), atol=1e-6)
    rand = init_prototypes(6, 16, "uniform", gen)
    assert torch.allclose(rand.norm(dim=1), torch.ones(6), atol=1e-6)
    circle = init_prototypes(3, 2, "uniform", gen)  # evenly spaced on the circle (FedNH's 2-D option)
    s = math.sqrt(3) / 2
    assert torch.allclose(circle, torch.tensor([[1.0, 0.0], [-0.5, s], [-0.5, -s]]), atol=1e-6)


def test_fednh_server_smoothing_and_body_average_by_hand():
    ctx = make_ctx(num_classes=3, input_shape=(2,), model="mlp_spiral")  # 2-d features
    for weighted, shift in ((False, 2.0), (True, 2.5)):
        algo = make_algorithm({"name": "fednh", "weighted": weighted})
        init = algo.init_server(ctx)["weights"]
        old = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
        server = {"weights": {**init, PROTO_KEY: old}}
        body = [k for k in init if k != PROTO_KEY]
        ups = {0: {**{k: init[k] + 1.0 for k in body}, "protos": torch.tensor([[0.0, 1.0], [1.0, 0.0]]),
                   "classes": torch.tensor([0, 1]), "counts": torch.tensor([3, 1]), "num_samples": 1},
               1: {**{k: init[k] + 3.0 for k in body}, "protos": torch.tensor([[1.0, 0.0]]),
                   "classes": torch.tensor([0]), "counts": torch.tensor([1]), "num_samples": 3}}
        new = algo.aggregate(ctx, server, ups, R)[0]["weights"]
        # class 0: count-weighted mean (3 [0,1] + 1 [1,0]) / 4 -> [1,3]/sqrt(10); then 0.9 old + 0.1 mean
        mu0 = torch.tensor([1.0, 3.0]) / math.sqrt(10)
        p0 = F.normalize(0.9 * old[0] + 0.1 * mu0, dim=0)
        p1 = torch.tensor([0.1, 0.9]) / math.sqrt(0.82)  # class 1: only client 0's [1, 0]
        assert torch.allclose(new[PROTO_KEY], torch.stack([p0, p1, old[2]]), atol=1e-6)  # class 2 absent: kept
        assert torch.allclose(new[PROTO_KEY].norm(dim=1), torch.ones(3), atol=1e-6)
        assert all(torch.allclose(new[k], init[k] + shift) for k in body)  # equal / sample weights
    assert torch.equal(smooth_prototypes(old, [], 0.9), old)


def test_fednh_local_training_keeps_prototypes(fed_data):
    ctx = make_ctx()
    for learn in (True, False):
        algo = make_algorithm({"name": "fednh", "learn_scale": learn, "scale": 3.0})
        server = algo.init_server(ctx)
        msg = algo.broadcast(ctx, server, 0, R)
        client, up, _ = algo.local_update(ctx, 0, algo.init_client(ctx, 0), msg, fed_data.train[0], R)
        assert torch.equal(client["model"]["head.prototypes"], msg[PROTO_KEY])
        assert PROTO_KEY not in up  # unchanged by clients, so not sent back
        body = "w.layer1.0.weight"
        assert not torch.equal(up[body], msg[body])  # the body did train
        assert (up["w.head.scale"].item() != 3.0) == learn
        data = fed_data.train[0]
        assert up["classes"].tolist() == data.classes.tolist()
        assert up["counts"].tolist() == [int((data.y == c).sum()) for c in data.classes]
        assert torch.allclose(up["protos"].norm(dim=1), torch.ones(len(up["classes"])), atol=1e-6)


def test_fednh_two_rounds_counts_and_unit_prototypes(runs, fed_data):
    sim, recs = runs["fednh"]
    assert all(len(fed_data.train[c].classes) == 2 for c in range(4))
    body, scale, protos = 13_440, 1, 4 * 128  # cnn_fmnist on 1x8x8; C = 4 prototypes of d = 128
    for r in recs:
        assert r["down_params"] == 4 * (body + scale + protos)
        assert r["down_bytes"] == 4 * 4 * (body + scale + protos)
        assert r["up_params"] == 4 * (body + scale + 2 * 128)  # two held classes per client
        # float32 tensors + classes/counts (2 int64 each) + num_samples (the loss is a metric, not sent)
        assert r["up_bytes"] == 4 * (4 * (body + scale + 2 * 128) + 2 * 2 * 8 + 1 * 8)
    p = sim.server["weights"][PROTO_KEY]
    assert torch.allclose(p.norm(dim=1), torch.ones(4), atol=1e-6)
    init = make_algorithm({"name": "fednh"}).init_server(make_ctx())["weights"][PROTO_KEY]
    assert not torch.allclose(p, init)  # semantics were smoothed in
    assert 0.0 <= recs[-1]["acc"]["acc_head"]["mean"] <= 1.0
