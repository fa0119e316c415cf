"""FedFA and FedPA (GFPL Table 1 baselines): the anchor loss, anchor update, calibration and aggregation of FedFA,
the generator losses, label weights, prototype aggregation and repulsion of FedPA, what each uploads, and their
equivalence with FedAvg when the added terms are off."""

import math

import pytest
import torch

from fedlib.algorithms import make_algorithm
from fedlib.algorithms import loops
from fedlib.algorithms.base import Round, derive_seed
from fedlib.algorithms.fedfa import anchor_loss, initial_anchors
from fedlib.algorithms.fedpa import SERVER_DRAW, diversity_loss, label_weights
from fedlib.engine import Simulator, message_size
from tests.conftest import make_ctx
from tests.algorithms.test_gfpl import _setup

SMALL_GEN = {"hidden_dim": 16, "noise_dim": 4}  # a small generator keeps the FedPA tests fast


def _first_round(algo, ctx, data, cid=0, r=1):
    server = algo.init_server(ctx)
    client = algo.init_client(ctx, cid)
    rnd = Round(r, 2, ctx.seed)
    msg = algo.broadcast(ctx, server, cid, rnd)
    return server, client, msg, rnd


def _same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# -- FedFA -----------------------------------------------------------------------------------------
def test_fedfa_anchor_loss_and_initial_anchors_by_hand():
    z = torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0]])
    y = torch.tensor([0, 0, 1])
    anchors = torch.tensor([[0.0, 0.0], [0.0, 1.0], [5.0, 5.0]])
    # class 0: (1 + 9) / 2, class 1: 1 / 1, class 2 absent; divided by C = 3
    assert anchor_loss(z, y, anchors).item() == pytest.approx((5.0 + 1.0) / 3)
    one_hot = initial_anchors(4, 6, "onehot", seed=3)
    assert torch.equal(one_hot.sum(1), torch.ones(4)) and torch.equal(one_hot.max(1).values, torch.ones(4))
    assert len(set(one_hot.argmax(1).tolist())) == 4                       # distinct dimensions
    assert torch.equal(one_hot, initial_anchors(4, 6, "onehot", seed=3))   # seeded
    for anchors in (initial_anchors(7, 3, "onehot", seed=0), initial_anchors(4, 6, "gaussian", seed=0)):
        assert torch.allclose(anchors.norm(dim=1), torch.ones(len(anchors)))   # C > d falls back to Gaussian rows
        assert (anchors != 0).all()


def test_fedfa_aggregate_by_hand():
    _, ctx = _setup()
    rnd = Round(1, 1, 0)
    ups = {0: {"w.a": torch.tensor([0.0]), "anchors": torch.tensor([[0.0, 4.0], [1.0, 1.0]]), "num_samples": 1},
           1: {"w.a": torch.tensor([4.0]), "anchors": torch.tensor([[4.0, 0.0], [1.0, 1.0]]), "num_samples": 3}}
    server = {"weights": {"w.a": torch.tensor([9.0])}, "anchors": torch.zeros(2, 2)}
    new, _ = make_algorithm({"name": "fedfa"}).aggregate(ctx, server, ups, rnd)
    assert new["weights"]["w.a"].tolist() == [3.0]                          # (0 * 1 + 4 * 3) / 4
    assert new["anchors"].tolist() == [[3.0, 1.0], [1.0, 1.0]]              # every row, the same weights
    plain, _ = make_algorithm({"name": "fedfa", "weighted": False}).aggregate(ctx, server, ups, rnd)
    assert plain["weights"]["w.a"].tolist() == [2.0] and plain["anchors"].tolist() == [[2.0, 2.0], [1.0, 1.0]]
    assert make_algorithm({"name": "fedfa"}).aggregate(ctx, server, {}, rnd)[0] is server


def _replay_anchors(algo, ctx, start, anchors, data, rnd, cid=0):
    """The anchor update computed by hand from the batches sgd_epochs draws (lr 0: the model never moves)."""
    model = algo.module(ctx, cid, start, fresh=True)
    model.train()
    gen = rnd.generator(cid)
    n, bs = len(data), ctx.train.batch_size
    new = anchors.clone()
    for _ in range(ctx.train.local_epochs):
        perm = torch.randperm(n, generator=gen)
        sums, hits, steps = torch.zeros_like(anchors), torch.zeros(len(anchors)), loops.steps(n, ctx.train)
        for b in range(steps):
            idx = perm[b * bs:(b + 1) * bs]
            with torch.no_grad():
                z = model(data.x[idx])[1]["high"]
            for c in data.y[idx].unique().tolist():
                sums[c] += z[data.y[idx] == c].mean(0)
                hits[c] += 1
        for c in torch.nonzero(hits).flatten().tolist():
            div = steps if algo.anchor_mean == "batches" else hits[c]
            new[c] = 0.5 * new[c] + 0.5 * sums[c] / div
    return new


def test_fedfa_local_anchor_update_replayed_by_hand():
    data, _ = _setup()
    ctx = make_ctx(num_clients=3, batch_size=4, lr=0.0, local_epochs=2)
    got = {}
    for mean in ("batches", "class_batches"):
        algo = make_algorithm({"name": "fedfa", "calibration": "none", "anchor_mean": mean})
        server, client, msg, rnd = _first_round(algo, ctx, data)
        start = {**client["model"], **{k[2:]: v for k, v in msg.items() if k.startswith("w.")}}
        after, up, metrics = algo.local_update(ctx, 0, client, msg, data.train[0], rnd)
        expected = _replay_anchors(algo, ctx, start, msg["anchors"], data.train[0], rnd)
        assert torch.allclose(up["anchors"], expected, atol=1e-6), mean
        held = set(data.train[0].y.tolist())
        for c in range(ctx.num_classes):                       # rows of classes the client lacks stay the global ones
            assert torch.equal(up["anchors"][c], msg["anchors"][c]) == (c not in held)
        assert metrics["anchor_loss"] > 0 and "calibration_steps" not in metrics
        assert all(torch.equal(after["model"][k], start[k]) for k, v in start.items() if v.is_floating_point()
                   and "running" not in k)                     # lr 0: only BatchNorm statistics move
        got[mean] = up["anchors"]
    assert not torch.equal(got["batches"], got["class_batches"])   # some batch of 4 misses a class


def test_fedfa_calibration_steps_replayed_by_hand():
    data, _ = _setup()
    ctx = make_ctx(num_clients=3, batch_size=4, lr=0.0, local_epochs=2)
    steps = loops.steps(len(data.train[0]), ctx.train)
    for mode, count in (("batch", 2 * steps), ("epoch", 2), ("none", 0)):
        algo = make_algorithm({"name": "fedfa", "lam": 0.0, "calibration": mode})
        server, client, msg, rnd = _first_round(algo, ctx, data)
        start = {**client["model"], **{k[2:]: v for k, v in msg.items() if k.startswith("w.")}}
        after, up, metrics = algo.local_update(ctx, 0, client, msg, data.train[0], rnd)
        head = algo.module(ctx, 0, start, fresh=True).head.eval()
        opt = torch.optim.Adam(head.parameters(), lr=1e-3)
        for _ in range(count):     # Adam steps on CE(head(a_c), c) over all anchors, nothing else moves the head
            loss = torch.nn.functional.cross_entropy(head(msg["anchors"]), torch.arange(ctx.num_classes))
            opt.zero_grad()
            loss.backward()
            opt.step()
        assert metrics.get("calibration_steps", 0) == count, mode
        assert torch.allclose(after["model"]["head.weight"], head.weight.detach(), atol=1e-7), mode
        assert torch.allclose(after["model"]["head.bias"], head.bias.detach(), atol=1e-7), mode
        assert torch.equal(after["model"]["head.weight"], start["head.weight"]) == (mode == "none")
        assert torch.equal(after["model"]["layer1.0.weight"], start["layer1.0.weight"])


@pytest.mark.slow
def test_fedfa_with_lam_zero_and_no_calibration_is_fedavg():
    runs = {}
    for spec in ({"name": "fedavg"}, {"name": "fedfa", "lam": 0.0, "calibration": "none"}):
        data, ctx = _setup()
        sim = Simulator(make_algorithm(spec), ctx, data, rounds=2, progress=False)
        runs[spec["name"]] = (sim.run(), sim.server)
    (ra, sa), (rf, sf) = runs["fedavg"], runs["fedfa"]
    assert _same_weights(sa["weights"], sf["weights"])
    assert [r["acc"] for r in ra] == [r["acc"] for r in rf]
    assert not torch.equal(sf["anchors"], make_algorithm({"name": "fedfa"}).init_server(_setup()[1])["anchors"])
    # the anchor term changes the models
    data, ctx = _setup()
    sim = Simulator(make_algorithm({"name": "fedfa", "calibration": "none"}), ctx, data, rounds=1, progress=False)
    sim.run()
    assert not _same_weights(sim.server["weights"], sa["weights"])


def test_fedfa_messages_and_their_size():
    data, ctx = _setup()
    algo = make_algorithm({"name": "fedfa"})
    server, client, msg, rnd = _first_round(algo, ctx, data)
    model_keys = {"w." + k for k, v in client["model"].items() if v.is_floating_point()}
    assert set(msg) == model_keys | {"anchors"} and torch.equal(msg["anchors"], server["anchors"])
    d = algo.build(ctx, 0).feature_dims["high"]
    assert msg["anchors"].shape == (ctx.num_classes, d)
    _, up, _ = algo.local_update(ctx, 0, client, msg, data.train[0], rnd)
    assert set(up) == model_keys | {"anchors", "num_samples"} and up["num_samples"] == len(data.train[0])
    n_model = sum(client["model"][k[2:]].numel() for k in model_keys)
    assert message_size(up)[0] == n_model + ctx.num_classes * d              # the model plus C x d anchor floats
    _, again, _ = algo.local_update(ctx, 0, algo.init_client(ctx, 0), msg, data.train[0], rnd)
    assert all(torch.equal(up[k], again[k]) for k in up if k != "num_samples")   # deterministic


# -- FedPA -----------------------------------------------------------------------------------------
def test_fedpa_diversity_label_weights_and_schedule_by_hand():
    eps = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    out = torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.0, 4.0]])
    y = torch.tensor([0, 0, 1])
    # pairs of different labels: (0, 2): 0.5 x 2, (1, 2): 1 x 3, each twice; the mean runs over all 9 pairs
    assert diversity_loss(eps, out, y).item() == pytest.approx(math.exp(-8 / 9))
    assert diversity_loss(eps, out, torch.zeros(3, dtype=torch.int64)).item() == 1.0
    counts = torch.tensor([[2.0, 0.0, 1.0], [6.0, 0.0, 0.0]])
    assert torch.allclose(label_weights(counts, 1.0), torch.tensor([[0.3, 0.5, 2 / 3], [0.7, 0.5, 1 / 3]]))
    assert torch.equal(label_weights(counts, 0.0), torch.tensor([[0.25, 0.0, 1.0], [0.75, 0.0, 0.0]]))
    algo = make_algorithm({"name": "fedpa"})
    assert algo.schedule(25, 1e-4, Round(1, 9, 0)) == 25
    assert algo.schedule(25, 1e-4, Round(3, 9, 0)) == pytest.approx(25 * 0.98 ** 2)
    assert algo.schedule(5, 0.15, Round(300, 300, 0)) == 0.15                # the floor
    assert algo.schedule(0, 0.15, Round(3, 9, 0)) == 0.0                     # a zero weight switches the term off


def test_fedpa_aggregates_prototypes_by_class_count():
    _, ctx = _setup()
    algo = make_algorithm({"name": "fedpa", "alpha": 0.0})
    server = algo.init_server(ctx)
    w = server["weights"]
    ups = {0: {**w, "num_samples": 1, "protos": torch.tensor([[0.0, 4.0], [1.0, 1.0]]),
               "classes": torch.tensor([0, 2]), "counts": torch.tensor([1, 5])},
           1: {**w, "num_samples": 3, "protos": torch.tensor([[4.0, 0.0]]),
               "classes": torch.tensor([0]), "counts": torch.tensor([3])}}
    new, metrics = algo.aggregate(ctx, server, ups, Round(1, 1, 0))
    assert new["present"].tolist() == [True, False, True, False] and metrics == {}
    assert new["protos"][0].tolist() == [3.0, 1.0] and new["protos"][2].tolist() == [1.0, 1.0]  # (0*1+4*3)/4 ...
    assert new["generator"] is None                                         # alpha 0: no generator at all
    plain = make_algorithm({"name": "fedpa", "alpha": 0.0, "weighted": False}).aggregate(ctx, server, ups,
                                                                                         Round(1, 1, 0))[0]
    assert plain["protos"][0].tolist() == [2.0, 2.0]
    msg = algo.broadcast(ctx, new, 0, Round(2, 2, 0))
    assert msg["classes"].tolist() == [0, 2] and not any(k.startswith("g.") for k in msg)


@pytest.mark.slow
def test_fedpa_with_zero_weights_is_fedavg_and_round_one_trains_like_fedavg():
    runs = {}
    for spec in ({"name": "fedavg"}, {"name": "fedpa", "alpha": 0.0, "beta": 0.0}):
        data, ctx = _setup()
        sim = Simulator(make_algorithm(spec), ctx, data, rounds=2, progress=False)
        runs[spec["name"]] = (sim.run(), sim.server)
    assert _same_weights(runs["fedavg"][1]["weights"], runs["fedpa"][1]["weights"])
    assert [r["acc"] for r in runs["fedavg"][0]] == [r["acc"] for r in runs["fedpa"][0]]
    # round 1 (no generator, no prototypes yet) is FedAvg's local training at the default weights
    data, ctx = _setup()
    fedavg, fedpa = make_algorithm({"name": "fedavg"}), make_algorithm({"name": "fedpa", **SMALL_GEN})
    _, c_avg, m_avg, rnd = _first_round(fedavg, ctx, data)
    _, c_pa, m_pa, _ = _first_round(fedpa, ctx, data)
    torch.manual_seed(0)
    a, up_a, _ = fedavg.local_update(ctx, 0, c_avg, m_avg, data.train[0], rnd)
    torch.manual_seed(0)
    b, up_b, _ = fedpa.local_update(ctx, 0, c_pa, m_pa, data.train[0], rnd)
    assert _same_weights(a["model"], b["model"])
    # the upload: the model, the class means of the features and the training-set class counts
    y = data.train[0].y
    held = y.unique()
    assert torch.equal(up_b["classes"], held) and torch.equal(up_b["counts"], torch.bincount(y)[held])
    d = fedpa.build(ctx, 0).feature_dims["high"]
    assert up_b["protos"].shape == (len(held), d)
    assert message_size(up_b)[0] == message_size(up_a)[0] + len(held) * d


@pytest.mark.slow
def test_fedpa_generator_round_messages_and_determinism():
    data, ctx = _setup()
    algo = make_algorithm({"name": "fedpa", "server_steps": 5, **SMALL_GEN})
    server = algo.init_server(ctx)
    clients = {c: algo.init_client(ctx, c) for c in range(3)}
    rnd = Round(1, 2, ctx.seed)
    ups = {}
    for c in range(3):
        clients[c], ups[c], _ = algo.local_update(ctx, c, clients[c], algo.broadcast(ctx, server, c, rnd),
                                                  data.train[c], rnd)
    server, metrics = algo.aggregate(ctx, server, ups, rnd)
    assert set(metrics) == {"gen_loss", "gen_fidelity", "gen_diversity", "gen_repulsion"}
    assert metrics["gen_repulsion"] == 0.0                                   # no prototypes before round 1's
    assert server["present"].all() and server["gen_opt"] is not None
    rnd2 = Round(2, 2, ctx.seed)
    msg = algo.broadcast(ctx, server, 0, rnd2)
    gen_keys = {k for k in msg if k.startswith("g.")}
    floats = {k: v for k, v in server["generator"].items() if v.is_floating_point()}
    assert gen_keys == {"g." + k for k in floats}
    assert sum(msg[k].numel() for k in gen_keys) == sum(v.numel() for v in floats.values())
    # round 2: the client trains against the generator and the prototypes, deterministically
    first = algo.local_update(ctx, 0, clients[0], msg, data.train[0], rnd2)
    again = algo.local_update(ctx, 0, clients[0], msg, data.train[0], rnd2)
    assert first[2]["gen_ce"] > 0 and first[2]["proto"] > 0
    assert _same_weights(first[0]["model"], again[0]["model"])
    plain = make_algorithm({"name": "fedpa", "alpha": 0.0, "beta": 0.0}).local_update(ctx, 0, clients[0], msg,
                                                                                       data.train[0], rnd2)
    assert not _same_weights(first[0]["model"], plain[0]["model"])
    # the generator keeps training across rounds from its state (Adam moments included)
    server2, _ = algo.aggregate(ctx, server, {0: first[1]}, rnd2)
    assert not _same_weights(server2["generator"], server["generator"])


def test_fedpa_generator_moves_away_from_the_prototypes():
    _, ctx = _setup()
    protos = torch.randn(4, 8)
    ups = [{"w.head.weight": torch.zeros(4, 8), "w.head.bias": torch.zeros(4), "protos": protos,
            "classes": torch.arange(4), "counts": torch.tensor([3, 3, 3, 3])}]   # zero heads: a constant CE
    y, eps = torch.arange(4).repeat(2), torch.rand(8, 4, generator=torch.Generator().manual_seed(1))
    server = {"generator": None, "gen_opt": None, "protos": protos, "present": torch.ones(4, dtype=torch.bool)}
    gaps = {}
    for beta in (0.0, 1.0):
        algo = make_algorithm({"name": "fedpa", "server_beta": beta, "eta": 0.0, "server_steps": 20,
                               "server_batch_size": 8, "gen_lr": 0.01, **SMALL_GEN})
        with torch.no_grad():
            before = torch.nn.functional.mse_loss(algo.generator(ctx, 8).train()(y, eps), protos[y])
        new, metrics = algo.train_generator(ctx, server, ups, Round(2, 2, 0))
        gen = algo.generator(ctx, 8)
        gen.load_state_dict(new["generator"])
        with torch.no_grad():
            gaps[beta] = float(torch.nn.functional.mse_loss(gen.train()(y, eps), protos[y]) - before)
        assert (metrics["gen_repulsion"] > 0) == (beta > 0)
    assert gaps[1.0] > 0.1 and gaps[1.0] > gaps[0.0] + 0.1                 # repelled, not attracted



def test_fedpa_generator_fidelity_weights_each_head_by_its_class_share():
    _, ctx = _setup()
    algo = make_algorithm({"name": "fedpa", "server_steps": 1, "server_batch_size": 6, "eta": 0.0, **SMALL_GEN})
    g = torch.Generator().manual_seed(5)
    heads = [(torch.randn(4, 8, generator=g), torch.randn(4, generator=g)) for _ in range(2)]
    counts = [torch.tensor([4, 1]), torch.tensor([1, 2])]
    classes = [torch.tensor([0, 2]), torch.tensor([2, 3])]
    ups = [{"w.head.weight": wt, "w.head.bias": b, "protos": torch.zeros(2, 8), "classes": c, "counts": n}
           for (wt, b), c, n in zip(heads, classes, counts, strict=True)]
    server = algo.init_server(ctx)
    rnd = Round(3, 3, 0)
    _, metrics = algo.train_generator(ctx, server, ups, rnd)
    # the step by hand: the same draws, the initial generator, each head's CE weighted by (n_uc + 1) / sum_v (n_vc + 1)
    draw = torch.Generator().manual_seed(derive_seed(rnd.seed, SERVER_DRAW, rnd.index))
    qualified = torch.tensor([0, 2, 3])
    y = qualified[torch.randint(3, (6,), generator=draw)]
    eps = torch.rand(6, 4, generator=draw)
    with torch.no_grad():
        out = algo.generator(ctx, 8).train()(y, eps)
    w = {0: {0: 5 / 6, 2: 1 / 2, 3: 1 / 4}, 1: {0: 1 / 6, 2: 1 / 2, 3: 3 / 4}}
    expected = sum(float(torch.stack([w[u][int(c)] * torch.nn.functional.cross_entropy(out[i:i + 1] @ wt.T + b,
                                                                                        y[i:i + 1])
                                      for i, c in enumerate(y)]).mean())
                   for u, (wt, b) in enumerate(heads))
    assert metrics["gen_fidelity"] == pytest.approx(expected, rel=1e-5)
