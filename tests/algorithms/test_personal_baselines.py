"""FedPer, FedRep and FeSEM (GFPL Table 1 baselines): what is shared, what stays personal, FedRep's two phases,
FeSEM's k-means step on the models."""

import pytest
import torch

from fedlib.algorithms import make_algorithm
from fedlib.algorithms.base import Round
from fedlib.engine import Simulator
from tests.algorithms.test_gfpl import _setup


def _round(algo, ctx, data, clients, server, r=1):
    rnd = Round(r, 1, ctx.seed)
    ups = {}
    for cid in clients:
        clients[cid], ups[cid], _ = algo.local_update(ctx, cid, clients[cid], algo.broadcast(ctx, server, cid, rnd),
                                                      data.train[cid], rnd)
    return clients, ups, algo.aggregate(ctx, server, ups, rnd)[0]


def test_fedper_shares_the_base_and_keeps_each_head():
    data, ctx = _setup()
    algo = make_algorithm({"name": "fedper"})
    clients = {c: algo.init_client(ctx, c) for c in range(3)}
    clients, ups, server = _round(algo, ctx, data, clients, algo.init_server(ctx))
    model_keys = {k for k, v in clients[0]["model"].items() if v.is_floating_point()}
    assert {k[2:] for k in ups[0] if k.startswith("w.")} == {k for k in model_keys if not k.startswith("head.")}
    assert not any(k.startswith("w.head.") for k in algo.broadcast(ctx, server, 0, Round(2, 2, 0)))
    # at prediction every client holds the global base under its own head
    w = [algo.predict_weights(ctx, c, clients[c], algo.broadcast(ctx, server, c, Round(2, 2, 0))) for c in range(3)]
    assert all(torch.equal(w[0][k], w[c][k]) for c in (1, 2) for k in model_keys if not k.startswith("head."))
    assert not torch.equal(w[0]["head.weight"], w[1]["head.weight"])


@pytest.mark.slow
def test_fedrep_trains_the_head_first_then_the_body_with_the_head_frozen():
    data, ctx = _setup()
    for head_epochs, head_moves in ((0, False), (2, True)):
        algo = make_algorithm({"name": "fedrep", "head_epochs": head_epochs})
        server = algo.init_server(ctx)
        start = algo.init_client(ctx, 0)
        msg = algo.broadcast(ctx, server, 0, Round(1, 1, 0))
        before = {**start["model"], **{k[2:]: v for k, v in msg.items()}}
        after, up, _ = algo.local_update(ctx, 0, start, msg, data.train[0], Round(1, 1, 0))
        assert torch.equal(before["head.weight"], after["model"]["head.weight"]) != head_moves
        assert not torch.equal(before["layer1.0.weight"], after["model"]["layer1.0.weight"])  # the body phase
        assert all(p.requires_grad for p in algo.module(ctx, 0, after["model"]).parameters())
    recs = Simulator(make_algorithm({"name": "fedrep", "head_epochs": 1}), ctx, data, rounds=2, progress=False).run()
    assert recs[1]["acc"]["acc_head"]["mean"] > 0


def test_fesem_one_kmeans_step_on_the_uploaded_models():
    _, ctx = _setup()
    algo = make_algorithm({"name": "fesem", "k": 2})
    rnd = Round(2, 2, ctx.seed)
    ups = {c: {"w.a": torch.tensor([v]), "w.b": torch.tensor([[0.0]]), "num_samples": n}
           for c, (v, n) in enumerate([(0.0, 1), (1.0, 3), (9.0, 1)])}
    server = {"centers": [{"w.a": torch.tensor([0.4]), "w.b": torch.tensor([[0.0]])},
                          {"w.a": torch.tensor([8.0]), "w.b": torch.tensor([[0.0]])}],
              "assign": torch.tensor([1, 1, 0]), "weights": {}}
    new, metrics = algo.aggregate(ctx, server, ups, rnd)
    assert new["assign"].tolist() == [0, 0, 1] and metrics == {"clusters_used": 2}      # E-step: nearest centre
    assert new["centers"][0]["w.a"].tolist() == [0.5] and new["centers"][1]["w.a"].tolist() == [9.0]  # M-step
    assert algo.broadcast(ctx, new, 1, rnd)["w.a"].tolist() == [0.5]                      # client 1 gets its centre
    weighted = make_algorithm({"name": "fesem", "k": 2, "weighted": True}).aggregate(ctx, server, ups, rnd)[0]
    assert weighted["centers"][0]["w.a"].tolist() == [0.75]                               # (0 * 1 + 1 * 3) / 4
    # a centre nobody joins is kept; round 1 starts the centres from k uploaded models
    far = {"centers": server["centers"] + [{"w.a": torch.tensor([-50.0]), "w.b": torch.tensor([[0.0]])}],
           "assign": torch.zeros(3, dtype=torch.int64), "weights": {}}
    kept = make_algorithm({"name": "fesem", "k": 3}).aggregate(ctx, far, ups, rnd)[0]
    assert kept["centers"][2]["w.a"].tolist() == [-50.0]
    first, _ = algo.aggregate(ctx, algo.init_server(ctx), ups, Round(1, 2, ctx.seed))
    assert len(first["centers"]) == 2
    # round 1: every client starts from the server's one initial model
    init = algo.init_server(ctx)
    to0, to2 = (algo.broadcast(ctx, init, c, Round(1, 2, 0)) for c in (0, 2))
    assert init["weights"] and all(torch.equal(to0[k], to2[k]) for k in init["weights"])
