"""IFCA, IFCA-CAM and FeSEM-CAM (FedIC Table 1 baselines): IFCA's cluster identity estimate and per-cluster
averaging by hand, k = 1 IFCA equal to FedAvg, the additive model g + f_k, the global part averaged over all
clients and the cluster parts within clusters, the alternating schedule, determinism."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from fedlib.algorithms import make_algorithm
from fedlib.algorithms.base import Round, load_model_message, model_message, weights
from fedlib.algorithms.ifca import seeded_model
from fedlib.engine import Simulator
from tests.algorithms.test_algorithms import strip_time
from tests.algorithms.test_gfpl import _setup


def _train(ctx, data, epochs=3):
    """A model fitted to ``data`` (a few epochs of FedAvg's local training from the server's init)."""
    algo = make_algorithm({"name": "fedavg"})
    ctx = dataclasses.replace(ctx, train=dataclasses.replace(ctx.train, local_epochs=epochs))
    msg = algo.broadcast(ctx, algo.init_server(ctx), 0, Round(1, 1, ctx.seed))
    state, _, _ = algo.local_update(ctx, 0, algo.init_client(ctx, 0), msg, data, Round(1, 1, ctx.seed))
    return state["model"]


def _loss(ctx, state, data):
    model = ctx.new_model(None)
    model.load_state_dict(state)
    model.eval()
    with torch.no_grad():
        return F.cross_entropy(model(data.x)[0], data.y).item()


@pytest.mark.slow
def test_ifca_picks_the_cluster_whose_model_fits_the_client_best():
    data, ctx = _setup()
    fitted = _train(ctx, data.train[0])
    fresh = weights(seeded_model(ctx, 99, 0))
    assert _loss(ctx, fitted, data.train[0]) < _loss(ctx, fresh, data.train[0])
    frozen = dataclasses.replace(ctx, train=dataclasses.replace(ctx.train, lr=0.0))  # training moves no parameter
    algo = make_algorithm({"name": "ifca", "k": 2})
    for order, best in (((fresh, fitted), 1), ((fitted, fresh), 0)):
        server = {"clusters": [model_message(w) for w in order]}
        client = algo.init_client(ctx, 0)
        msg = algo.broadcast(ctx, server, 0, Round(1, 1, ctx.seed))
        assert sorted({k.split(".")[0] for k in msg}) == ["c0", "c1"]
        state, up, metrics = algo.local_update(frozen, 0, client, msg, data.train[0], Round(1, 1, ctx.seed))
        assert up["cluster"] == best and state["cluster"] == best
        assert metrics["cluster_loss"] == pytest.approx(_loss(ctx, order[best], data.train[0]), rel=1e-5)
        # the uploaded model is the chosen cluster's (lr = 0: its parameters come back unchanged)
        names = [n for n, _ in ctx.new_model(None).named_parameters()]
        assert all(torch.equal(up["w." + n], order[best][n]) for n in names)
        # inference: the model of the cluster chosen last, from the broadcast
        assert all(torch.equal(algo.predict_weights(ctx, 0, state, msg)[n], order[best][n]) for n in names)


def test_ifca_averages_within_each_cluster_and_keeps_an_unchosen_cluster():
    _, ctx = _setup()
    rnd = Round(1, 1, ctx.seed)
    ups = {c: {"w.a": torch.tensor([v]), "cluster": j, "num_samples": n}
           for c, (v, j, n) in enumerate([(0.0, 0, 1), (4.0, 0, 3), (9.0, 2, 1)])}
    server = {"clusters": [{"w.a": torch.tensor([100.0 + j])} for j in range(3)]}
    new, metrics = make_algorithm({"name": "ifca", "k": 3}).aggregate(ctx, server, ups, rnd)
    assert new["clusters"][0]["w.a"].tolist() == [3.0]                  # (0 * 1 + 4 * 3) / 4
    assert new["clusters"][2]["w.a"].tolist() == [9.0]
    assert new["clusters"][1]["w.a"] is server["clusters"][1]["w.a"]     # nobody chose cluster 1: kept
    assert metrics == {"clusters_used": 2}
    plain = make_algorithm({"name": "ifca", "k": 3, "weighted": False}).aggregate(ctx, server, ups, rnd)[0]
    assert plain["clusters"][0]["w.a"].tolist() == [2.0]                # Algorithm 1: the plain mean
    assert server["clusters"][0]["w.a"].tolist() == [100.0]             # the old state is not modified


@pytest.mark.slow
def test_ifca_starts_from_k_different_inits_and_sends_all_k_models():
    data, ctx = _setup()
    algo = make_algorithm({"name": "ifca", "k": 3})
    server = algo.init_server(ctx)
    c = server["clusters"]
    fedavg_init = make_algorithm({"name": "fedavg"}).init_server(ctx)["weights"]
    assert all(torch.equal(c[0][k], v) for k, v in fedavg_init.items())  # cluster 0: the server's initial model
    for i, j in ((0, 1), (0, 2), (1, 2)):
        assert not torch.equal(c[i]["w.head.weight"], c[j]["w.head.weight"])
    again = algo.init_server(ctx)["clusters"]
    assert all(torch.equal(a[k], b[k]) for a, b in zip(c, again, strict=True) for k in a)
    size = sum(v.numel() for v in c[0].values())
    recs = Simulator(algo, ctx, data, rounds=1, progress=False).run()
    assert recs[0]["down_params"] == 3 * 3 * size                        # k models to each of the 3 clients
    assert recs[0]["up_params"] == 3 * size


@pytest.mark.slow
def test_ifca_with_one_cluster_is_fedavg():
    data, ctx = _setup()
    sim_i = Simulator(make_algorithm({"name": "ifca", "k": 1}), ctx, data, rounds=2, progress=False)
    sim_f = Simulator(make_algorithm({"name": "fedavg"}), ctx, data, rounds=2, progress=False)
    rec_i, rec_f = sim_i.run(), sim_f.run()
    got, want = sim_i.server["clusters"][0], sim_f.server["weights"]
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    for a, b in zip(rec_i, rec_f, strict=True):
        assert a["acc"] == b["acc"] and a["train_loss"] == b["train_loss"]
        assert a["down_params"] == b["down_params"] and a["up_params"] == b["up_params"]
        assert a["up_bytes"] == b["up_bytes"] + 8 * a["participants"]     # the cluster id


def _modules(ctx, msg, client, prefix):
    model = ctx.new_model(None)
    model.load_state_dict(client["model"])
    load_model_message(model, msg, prefix)
    model.eval()
    return model


@pytest.mark.slow
@pytest.mark.parametrize("name,schedule", [("ifca_cam", "alternate"), ("fesem_cam", "alternate"),
                                           ("ifca_cam", "joint")])
def test_cam_predicts_with_the_global_plus_the_cluster_logits(name, schedule):
    data, ctx = _setup()
    algo = make_algorithm({"name": name, "k": 2, "schedule": schedule})
    sim = Simulator(algo, ctx, data, rounds=2, progress=False)
    sim.run()
    for r in (3, 4):  # the next round's broadcast: a cluster round (all K parts) or a global round
        for cid in range(3):
            client = sim.clients[cid]
            msg = algo.broadcast(ctx, sim.server, cid, Round(r, 4, ctx.seed))
            x = data.test[cid].x
            with torch.no_grad():
                g = _modules(ctx, msg, client, "g.")(x)[0]
                if "w.head.weight" in msg:
                    f = _modules(ctx, msg, client, "w.")(x)[0]
                else:  # IFCA-CAM cluster round: the cluster the client chose last
                    f = _modules(ctx, msg, client, f"c{client['cluster']}.")(x)[0]
                scores = algo.predict(ctx, cid, client, msg, x)["head"]
            assert torch.equal(scores, g + f)
            assert torch.equal(algo.features(ctx, cid, client, msg, x)["high"],
                               _modules(ctx, msg, client, "g.")(x)[1]["high"])


def _constant(state: dict, prefix: str, bias: list) -> dict:
    """``state`` made to output the constant logits ``bias`` (a zero head weight)."""
    return {**state, prefix + "head.weight": torch.zeros_like(state[prefix + "head.weight"]),
            prefix + "head.bias": torch.tensor(bias)}


def test_ifca_cam_chooses_its_cluster_on_the_sum_of_the_two_parts():
    data, ctx = _setup()
    train = data.train[0]
    a, b = train.y.unique().tolist()  # the client's two classes
    onehot = torch.eye(4)
    # constant logits: g favours b; f_0 favours a, f_1 both a little, f_2 neither
    g, f = 4 * onehot[b], [4 * onehot[a], onehot[a] + onehot[b], torch.zeros(4)]
    alone = [F.cross_entropy(v.expand(len(train), 4), train.y).item() for v in f]
    on_sum = [F.cross_entropy((g + v).expand(len(train), 4), train.y).item() for v in f]
    assert min(range(3), key=alone.__getitem__) == 1 and min(range(3), key=on_sum.__getitem__) == 0
    algo = make_algorithm({"name": "ifca_cam", "k": 3})
    server = algo.init_server(ctx)
    server = {**server, "g": _constant(server["g"], "g.", g.tolist()),
              "clusters": [_constant(c, "w.", v.tolist()) for c, v in zip(server["clusters"], f, strict=True)]}
    rnd = Round(1, 2, ctx.seed)
    state, up, _ = algo.local_update(ctx, 0, algo.init_client(ctx, 0), algo.broadcast(ctx, server, 0, rnd),
                                     train, rnd)
    assert up["cluster"] == 0 and state["cluster"] == 0 and not any(k.startswith("g.") for k in up)


@pytest.mark.slow
def test_cam_alternates_cluster_and_global_rounds():
    data, ctx = _setup()
    algo = make_algorithm({"name": "ifca_cam", "k": 2})
    server = algo.init_server(ctx)
    clients = {c: algo.init_client(ctx, c) for c in range(3)}
    for r, (cluster_round, keys) in enumerate([(True, {"w", "cluster", "num_samples"}), (False, {"g", "num_samples"}),
                                               (True, {"w", "cluster", "num_samples"})], start=1):
        rnd = Round(r, 3, ctx.seed)
        ups = {}
        for cid in range(3):
            msg = algo.broadcast(ctx, server, cid, rnd)
            down = {k.split(".")[0] for k in msg}
            assert down == ({"g", "c0", "c1"} if cluster_round else {"g", "w"})
            clients[cid], ups[cid], _ = algo.local_update(ctx, cid, clients[cid], msg, data.train[cid], rnd)
            assert {k.split(".")[0] for k in ups[cid]} == keys
        new, metrics = algo.aggregate(ctx, server, ups, rnd)
        same_g = all(torch.equal(new["g"][k], server["g"][k]) for k in server["g"])
        same_f = all(torch.equal(a[k], b[k]) for a, b in zip(new["clusters"], server["clusters"], strict=True)
                     for k in a)
        assert same_g == cluster_round and same_f != cluster_round
        assert new["assign"].tolist() == [clients[c]["cluster"] for c in range(3)]
        assert bool(metrics) == cluster_round
        server = new
    # global round: a client receives the cluster part of the cluster it chose
    msg = algo.broadcast(ctx, server, 1, Round(2, 3, ctx.seed))
    j = clients[1]["cluster"]
    assert all(torch.equal(msg["w." + k[2:]], v) for k, v in server["clusters"][j].items())


def test_cam_global_part_over_all_clients_cluster_parts_within_clusters():
    _, ctx = _setup()
    rnd = Round(1, 1, ctx.seed)
    ups = {c: {"g.a": torch.tensor([gv]), "w.a": torch.tensor([fv]), "cluster": j, "num_samples": n}
           for c, (gv, fv, j, n) in enumerate([(0.0, 1.0, 0, 1), (1.0, 3.0, 0, 3), (8.0, 10.0, 1, 1)])}
    server = {"g": {"g.a": torch.tensor([50.0])}, "assign": torch.tensor([2, 2, 2]),
              "clusters": [{"w.a": torch.tensor([100.0 + j])} for j in range(3)]}
    for weighted, g, f0 in ((False, 3.0, 2.0), (True, 2.2, 2.5)):
        algo = make_algorithm({"name": "ifca_cam", "k": 3, "schedule": "joint", "weighted": weighted})
        new, _ = algo.aggregate(ctx, server, ups, rnd)
        assert new["g"]["g.a"].item() == pytest.approx(g)                  # (0 + 1 * 3 + 8) / 5 weighted
        assert new["clusters"][0]["w.a"].item() == pytest.approx(f0)       # (1 + 3 * 3) / 4 weighted
        assert new["clusters"][1]["w.a"].tolist() == [10.0]                # client 2's cluster only
        assert new["clusters"][2]["w.a"].tolist() == [102.0]               # nobody: kept
        assert new["assign"].tolist() == [0, 0, 1]
    # FeSEM-CAM: the same global mean; the cluster parts go through FeSEM's k-means step unchanged
    fesem = {"g": server["g"], "assign": torch.tensor([1, 1, 0]), "init": {},
             "centers": [{"w.a": torch.tensor([2.0])}, {"w.a": torch.tensor([8.0])}]}
    cam = make_algorithm({"name": "fesem_cam", "k": 2, "schedule": "joint"})
    new, metrics = cam.aggregate(ctx, fesem, {c: {k: v for k, v in u.items() if k != "cluster"}
                                              for c, u in ups.items()}, rnd)
    assert new["g"]["g.a"].item() == pytest.approx(3.0)
    want, want_metrics = make_algorithm({"name": "fesem", "k": 2}).aggregate(
        ctx, {"centers": fesem["centers"], "assign": fesem["assign"], "weights": {}},
        {c: {"w.a": u["w.a"], "num_samples": u["num_samples"]} for c, u in ups.items()}, rnd)
    assert new["assign"].tolist() == want["assign"].tolist() == [0, 0, 1] and metrics == want_metrics
    assert [c["w.a"].tolist() for c in new["centers"]] == [c["w.a"].tolist() for c in want["centers"]] == [[2.0],
                                                                                                          [10.0]]


def test_cam_cluster_parts_start_apart_for_ifca_and_common_for_fesem():
    _, ctx = _setup()
    ifca = make_algorithm({"name": "ifca_cam"}).init_server(ctx)
    heads = [c["w.head.weight"] for c in ifca["clusters"]]
    assert len(heads) == 3 and not torch.equal(heads[0], heads[1]) and not torch.equal(heads[1], heads[2])
    assert not torch.equal(ifca["g"]["g.head.weight"], heads[0])
    algo = make_algorithm({"name": "fesem_cam"})
    fesem = algo.init_server(ctx)
    assert torch.equal(fesem["init"]["w.head.weight"], heads[0]) and fesem["centers"] == []
    to0, to2 = (algo.broadcast(ctx, fesem, c, Round(1, 2, ctx.seed)) for c in (0, 2))
    assert all(torch.equal(to0[k], to2[k]) for k in to0)


@pytest.mark.slow
@pytest.mark.parametrize("name,hp", [("ifca", {"k": 2}), ("ifca_cam", {"schedule": "joint"}),
                                     ("fesem_cam", {"schedule": "joint"})])
def test_runs_are_deterministic_and_learn(name, hp):
    data, ctx = _setup()
    recs = [Simulator(make_algorithm({"name": name, **hp}), ctx, data, rounds=2, progress=False).run()
            for _ in range(2)]
    assert strip_time(recs[0]) == strip_time(recs[1])
    assert recs[0][-1]["acc"]["acc_head"]["mean"] > 0.5
