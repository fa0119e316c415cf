"""CFL-GP and FedCCFA (FedIC Table 1 baselines): CFL-GP's spectral partition of gradient profiles, its probes of
the criterion model and its averaging within clusters; FedCCFA's per-class classifier clustering (MADD + DBSCAN),
merged rows and clustered anchors, its two-phase local update and its alignment term."""

import math

import numpy as np
import pytest
import torch

from fedlib.algorithms import make_algorithm
from fedlib.algorithms.base import Round
from fedlib.algorithms.cflgp import match_labels, spectral_partition
from fedlib.algorithms.fedccfa import alignment, cluster_classifiers, entropy_weight, last_linear, madd
from fedlib.engine import Simulator
from fedlib.models import build_model
from tests.conftest import make_ctx
from tests.algorithms.test_gfpl import _setup


def _strip(records):
    return [{k: v for k, v in r.items() if "seconds" not in k} for r in records]


def _same_models(a, b):
    return all(torch.equal(a[c]["model"][k], b[c]["model"][k]) for c in a for k in a[c]["model"])


# -- CFL-GP ------------------------------------------------------------------------------------
def test_spectral_partition_separates_groups_of_gradients():
    g = torch.Generator().manual_seed(0)
    dirs = torch.randn(3, 60, generator=g)
    for k in (2, 3):
        groups = np.repeat(np.arange(k), 4)                  # 4 clients per group, 3 profile blocks of 20
        prof = dirs[groups] + 0.2 * torch.randn(len(groups), 60, generator=g)
        labels = spectral_partition(prof, k, seed=7)
        assert len(set(labels.tolist())) == k
        assert all(len(set(labels[groups == j].tolist())) == 1 for j in range(k))
        assert np.array_equal(labels, spectral_partition(prof, k, seed=7))       # seeded
    # renaming keeps as many clients as possible on their old cluster; groups never merge
    assert match_labels(np.array([1, 1, 0, 0]), np.array([0, 0, 1, 1]), 2).tolist() == [0, 0, 1, 1]
    assert match_labels(np.array([0, 0, 1, 1]), np.array([0, 0, 0, 1]), 2).tolist() == [0, 0, 1, 1]
    assert match_labels(np.array([0, 0, 0]), np.array([2, 2, 1]), 3).tolist() == [2, 2, 2]
    assert spectral_partition(torch.ones(1, 5), 3, seed=0).tolist() == [0]


def _cflgp_server():
    return {"models": [{"w.a": torch.tensor([0.0, 0.0])}, {"w.a": torch.tensor([10.0, 10.0])}],
            "assign": torch.tensor([0, 0, 0, 1]), "profile": torch.zeros(4, 2, 2),
            "counts": torch.zeros(4, 2, dtype=torch.int64)}


def _cflgp_uploads(grads):
    trained = [[1.0, 0.0], [3.0, 0.0], [0.0, 4.0], [10.0, 12.0]]     # client 2 trained model 0, client 3 model 1
    return {c: {"w.a": torch.tensor(trained[c]), "num_samples": n, "g.x": torch.tensor(grads[c])}
            for c, n in enumerate([1, 3, 1, 1])}


def test_cflgp_partitions_on_the_profile_and_averages_only_within_a_cluster():
    ctx = make_ctx(num_clients=4)
    algo = make_algorithm({"name": "cflgp", "k": 2})
    grads = [[1.0, 0.1], [0.9, 0.0], [0.0, 1.0], [0.1, 1.1]]          # two obvious groups: {0, 1} and {2, 3}
    new, metrics = algo.aggregate(ctx, _cflgp_server(), _cflgp_uploads(grads), Round(1, 6, 0))
    assert metrics == {"partitioned": 1, "clusters_used": 2}
    assert new["assign"].tolist() == [0, 0, 1, 1]                      # client 2 moves to cluster 1
    assert torch.equal(new["profile"][:, 0], torch.tensor(grads)) and new["counts"][:, 0].tolist() == [1] * 4
    assert new["models"][0]["w.a"].tolist() == [2.0, 0.0]               # 0 + mean(1, 3)
    # cluster 1 moves by the mean update of its members; client 2's update is from its old model 0
    assert new["models"][1]["w.a"].tolist() == [10.0, 13.0]             # 10 + mean((0, 4), (0, 2))
    weighted = make_algorithm({"name": "cflgp", "k": 2, "weighted": True})
    assert weighted.aggregate(ctx, _cflgp_server(), _cflgp_uploads(grads), Round(1, 6, 0))[0]["models"][0][
        "w.a"].tolist() == [2.5, 0.0]                                  # (1 * 1 + 3 * 3) / 4
    # round 2 does not partition (period 2): the assignment and the profile stay
    flipped = [[0.0, 1.0], [0.0, 1.0], [1.0, 0.0], [1.0, 0.0]]
    kept, metrics = algo.aggregate(ctx, {**_cflgp_server(), "assign": new["assign"], "profile": new["profile"],
                                         "counts": new["counts"]}, _cflgp_uploads(flipped), Round(2, 6, 0))
    assert metrics["partitioned"] == 0 and kept["assign"].tolist() == [0, 0, 1, 1]
    assert torch.equal(kept["profile"], new["profile"])
    # round 3 probes model 1 (the next block); round 5 probes model 0 again: the cumulative mean
    third = algo.aggregate(ctx, new, _cflgp_uploads(grads), Round(3, 6, 0))[0]
    assert third["counts"].tolist() == [[1, 1]] * 4 and torch.equal(third["profile"][:, 1], torch.tensor(grads))
    fifth = algo.aggregate(ctx, third, _cflgp_uploads([[3.0, 0.1], [2.9, 0.0], [0.0, 3.0], [0.1, 3.1]]),
                           Round(5, 6, 0))[0]
    assert torch.allclose(fifth["profile"][:, 0], torch.tensor([[2.0, 0.1], [1.9, 0.0], [0.0, 2.0], [0.1, 2.1]]))
    assert fifth["assign"].tolist() == [0, 0, 1, 1]
    # no partition after `stop`
    late = make_algorithm({"name": "cflgp", "k": 2, "stop": 2})
    assert late.aggregate(ctx, new, _cflgp_uploads(flipped), Round(3, 6, 0))[1]["partitioned"] == 0


@pytest.mark.slow
def test_cflgp_probes_the_criterion_model():
    data, ctx = _setup()
    algo = make_algorithm({"name": "cflgp", "k": 2, "period": 2})
    server = algo.init_server(ctx)
    other = {k: v + 0.01 if v.is_floating_point() else v for k, v in server["models"][0].items()}
    server = {**server, "models": [server["models"][0], other], "assign": torch.tensor([1, 0, 0])}
    rnd = Round(1, 3, ctx.seed)                                        # a partition round; criterion model 0
    params = [n for n, _ in ctx.new_model(None).named_parameters()]
    msg0, msg1 = algo.broadcast(ctx, server, 0, rnd), algo.broadcast(ctx, server, 1, rnd)
    assert all(torch.equal(msg0["q." + k[2:]], v) for k, v in server["models"][0].items())
    assert not any(k.startswith("q.") for k in msg1)
    # the criterion is client 1's own model: the probe is its ordinary update
    _, up1, _ = algo.local_update(ctx, 1, algo.init_client(ctx, 1), msg1, data.train[1], rnd)
    assert sorted(k[2:] for k in up1 if k.startswith("g.")) == sorted(params)      # parameters, not BN buffers
    assert all(torch.equal(up1["g." + n], up1["w." + n] - msg1["w." + n]) for n in params)
    # client 0 (cluster 1) probes model 0: the update it would make as a member of cluster 0
    client0 = algo.init_client(ctx, 0)
    _, up0, _ = algo.local_update(ctx, 0, client0, msg0, data.train[0], rnd)
    as_member = {k: v for k, v in msg0.items() if k.startswith("q.")}
    as_member = {"w." + k[2:]: v for k, v in as_member.items()}
    _, ref, _ = make_algorithm({"name": "fedavg"}).local_update(ctx, 0, client0, as_member, data.train[0], rnd)
    assert all(torch.equal(up0["g." + n], ref["w." + n] - as_member["w." + n]) for n in params)
    assert not torch.equal(up0["w.head.weight"], ref["w.head.weight"])             # it trained model 1 itself
    # outside partition rounds nothing is probed; the variants probe the same keys
    _, up, _ = algo.local_update(ctx, 1, algo.init_client(ctx, 1), algo.broadcast(ctx, server, 1, Round(2, 3, 0)),
                                 data.train[1], Round(2, 3, 0))
    assert not any(k.startswith("g.") for k in up) and not any(k.startswith("q.") for k in algo.broadcast(
        ctx, server, 0, Round(2, 3, 0)))
    for hp, keys in (({"profile": "gradient"}, params), ({"profile_layers": "head"}, ["head.weight", "head.bias"])):
        a = make_algorithm({"name": "cflgp", "k": 2, **hp})
        _, up, _ = a.local_update(ctx, 0, client0, msg0, data.train[0], rnd)
        assert sorted(k[2:] for k in up if k.startswith("g.")) == sorted(keys)
        assert all(up["g." + n].abs().sum() > 0 for n in keys)


@pytest.mark.slow
def test_cflgp_with_one_cluster_is_fedavg_with_a_plain_mean_and_runs_are_deterministic():
    data, ctx = _setup()
    sim_c = Simulator(make_algorithm({"name": "cflgp", "k": 1}), ctx, data, rounds=2, progress=False)
    sim_c.run()
    sim_f = Simulator(make_algorithm({"name": "fedavg", "weighted": False}), ctx, data, rounds=2, progress=False)
    sim_f.run()
    got, want = sim_c.server["models"][0], sim_f.server["weights"]
    assert got.keys() == want.keys() and all(torch.allclose(got[k], want[k], atol=1e-6) for k in want)
    runs = []
    for _ in range(2):
        sim = Simulator(make_algorithm({"name": "cflgp", "k": 2, "period": 1}), ctx, data, rounds=3, progress=False)
        runs.append((sim, _strip(sim.run())))
    assert runs[0][1] == runs[1][1] and _same_models(runs[0][0].clients, runs[1][0].clients)
    assert all(r["server"]["partitioned"] == 1 for r in runs[0][1])


# -- FedCCFA -----------------------------------------------------------------------------------
def test_madd_and_the_per_class_classifier_clustering_by_hand():
    v = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    r = 1 / math.sqrt(2)
    # d(i, j) = mean over the other rows z of |cos(i, z) - cos(j, z)|
    assert torch.allclose(madd(v), torch.tensor([[0.0, 0.0, r], [0.0, 0.0, r], [r, r, 0.0]], dtype=torch.float64))
    assert torch.allclose(madd(v[:2]), torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=torch.float64))  # 1 - cos
    rows = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.05, 0.0], [-1.0, 0.0, 0.1], [-1.0, 0.05, 0.1], [0.0, 1.0, 0.0]])
    labels = cluster_classifiers(rows, eps=0.1)
    assert labels[0] == labels[1] and labels[2] == labels[3] and len(set(labels.tolist())) == 3
    assert len(set(cluster_classifiers(rows, eps=1e-3).tolist())) == 5
    assert cluster_classifiers(rows[:1], eps=0.1).tolist() == [0]


def _ccfa_uploads():
    t = torch.tensor
    return {0: {"w.x": t([1.0]), "num_samples": 1, "rows": t([[1.0, 0, 0], [0, 1, 0]]),
                "probe": t([[1.0, 0, 0], [0, 1, 0]]), "protos": t([[1.0, 1.0]]), "classes": t([0]), "counts": t([4])},
            1: {"w.x": t([3.0]), "num_samples": 3, "rows": t([[3.0, 0, 2], [0, 3, 0]]),
                "probe": t([[1.0, 0.01, 0], [0, 1, 0]]), "protos": t([[3.0, 3.0], [5.0, 5.0]]), "classes": t([0, 1]),
                "counts": t([2, 6])},
            2: {"w.x": t([5.0]), "num_samples": 1, "rows": t([[7.0, 7, 7], [9, 9, 9]]),
                "probe": t([[-1.0, 0, 0], [0, -1, 0]]), "protos": t([[9.0, 9.0]]), "classes": t([1]),
                "counts": t([1])}}


def test_fedccfa_merges_rows_and_anchors_within_each_class_cluster():
    ctx = make_ctx(num_classes=2, num_clients=3)
    server = {"weights": {"w.x": torch.tensor([0.0])}, "head": {}, "reply": {}}
    algo = make_algorithm({"name": "fedccfa"})
    new, metrics = algo.aggregate(ctx, server, _ccfa_uploads(), Round(1, 2, 0))
    assert new["weights"]["w.x"].tolist() == [3.0]                     # (1 + 9 + 5) / 5
    assert metrics == {"clusters_per_class": 2.0}                      # per class {0, 1} and {2}
    for cid in (0, 1):                                                 # both get the merged rows (balanced probes)
        msg = algo.reply(ctx, new, cid, Round(1, 2, 0))
        assert msg["row_classes"].tolist() == [0, 1]
        assert msg["rows"].tolist() == [[2.0, 0.0, 1.0], [0.0, 2.0, 0.0]]       # plain means of the trained rows
        assert msg["anchor_classes"].tolist() == [0, 1]
        assert msg["anchors"].tolist() == [[2.0, 2.0], [5.0, 5.0]]     # class 1: only client 1 holds it
    assert algo.reply(ctx, new, 2, Round(1, 2, 0)) == {}               # alone in both classes: keeps its own
    assert algo.reply(ctx, new, 5, Round(1, 2, 0)) is None
    w = make_algorithm({"name": "fedccfa", "class_weighted": True}).aggregate(ctx, server, _ccfa_uploads(),
                                                                             Round(1, 2, 0))[0]["reply"][0]
    assert torch.allclose(w["rows"], torch.tensor([[10 / 6, 0.0, 4 / 6], [0.0, 3.0, 0.0]]))
    assert torch.allclose(w["anchors"], torch.tensor([[10 / 6, 10 / 6], [5.0, 5.0]]))
    glob = make_algorithm({"name": "fedccfa", "clustered_anchors": False}).aggregate(ctx, server, _ccfa_uploads(),
                                                                                    Round(1, 2, 0))[0]["reply"]
    assert glob[2] == {"anchors": glob[2]["anchors"], "anchor_classes": glob[2]["anchor_classes"]}
    assert glob[2]["anchors"].tolist() == [[2.0, 2.0], [7.0, 7.0]] and glob[0]["rows"].shape == (2, 3)
    # without balanced probes the trained rows are clustered: class 0 now groups {0, 2}, class 1 {0, 1}
    no_probe = {c: {k: v for k, v in u.items() if k != "probe"} for c, u in _ccfa_uploads().items()}
    rep = algo.aggregate(ctx, server, no_probe, Round(1, 2, 0))[0]["reply"]
    assert rep[0]["row_classes"].tolist() == [0, 1] and rep[0]["rows"].tolist() == [[4.0, 3.5, 3.5], [0.0, 2.0, 0.0]]
    assert rep[2]["rows"].tolist() == [[4.0, 3.5, 3.5]] and rep[2]["anchors"].tolist() == [[1.0, 1.0]]
    assert rep[1]["row_classes"].tolist() == [1]


def test_fedccfa_receive_writes_the_merged_rows_and_anchors():
    data, ctx = _setup()
    algo = make_algorithm({"name": "fedccfa"})
    client = algo.init_client(ctx, 0)
    d = client["anchors"].shape[1]
    e = client["model"]["head.weight"].shape[1] + 1
    msg = {"rows": torch.arange(e, dtype=torch.float32).unsqueeze(0), "row_classes": torch.tensor([2]),
           "anchors": torch.ones(1, d), "anchor_classes": torch.tensor([3])}
    after, _ = algo.receive(ctx, 0, client, msg, data.train[0], Round(1, 1, 0))
    w, b = after["model"]["head.weight"], after["model"]["head.bias"]
    assert torch.equal(w[2], msg["rows"][0, :-1]) and b[2] == e - 1
    assert torch.equal(w[[0, 1, 3]], client["model"]["head.weight"][[0, 1, 3]])
    assert torch.equal(b[[0, 1, 3]], client["model"]["head.bias"][[0, 1, 3]])
    assert after["present"].tolist() == [False, False, False, True] and torch.equal(after["anchors"][3], torch.ones(d))
    assert not client["present"].any()                                  # the old state is untouched
    assert last_linear(build_model("cnn_cifar", (3, 32, 32), 10)) == ("head.2.weight", "head.2.bias")
    assert last_linear(build_model("cnn_mnist", (1, 28, 28), 10)) == ("head.1.weight", "head.1.bias")


def test_fedccfa_local_update_classifier_then_extractor_and_the_balanced_probe():
    data, ctx = _setup()
    algo = make_algorithm({"name": "fedccfa", "clf_epochs": 0, "balanced_epochs": 2})
    server = algo.init_server(ctx)
    msg = algo.broadcast(ctx, server, 0, Round(1, 1, 0))
    assert {k for k in msg if k.startswith("b.")} == {"b.head.weight", "b.head.bias"}
    client = algo.init_client(ctx, 0)
    client["model"] = {**client["model"], "head.weight": 2 * client["model"]["head.weight"]}   # a personal head
    after, up, metrics = algo.local_update(ctx, 0, client, msg, data.train[0], Round(1, 1, 0))
    # no classifier epochs: the personal head is restored after the balanced phase and frozen for the extractor
    assert torch.equal(after["model"]["head.weight"], client["model"]["head.weight"])
    assert not torch.equal(after["model"]["layer1.0.weight"], client["model"]["layer1.0.weight"])
    assert torch.equal(up["rows"][:, :-1], client["model"]["head.weight"])
    assert not torch.equal(up["probe"][:, :-1], server["head"]["b.head.weight"])     # trained from the server head
    assert all(p.requires_grad for p in algo.module(ctx, 0, after["model"]).parameters())
    held = sorted(data.train[0].y.unique().tolist())
    assert up["classes"].tolist() == held and after["present"].nonzero().flatten().tolist() == held
    assert metrics["align_weight"] == 0.0
    with_clf = make_algorithm({"name": "fedccfa", "balanced_epochs": 0})
    assert not any(k.startswith("b.") for k in with_clf.broadcast(ctx, server, 0, Round(1, 1, 0)))
    after, up, _ = with_clf.local_update(ctx, 0, client, msg, data.train[0], Round(1, 1, 0))
    assert "probe" not in up and not torch.equal(after["model"]["head.weight"], client["model"]["head.weight"])
    # the balanced subset: min(smallest held class, balanced_per_class) samples of every held class
    sub = algo.balanced_subset(data.train[0], torch.Generator().manual_seed(0))
    assert torch.bincount(sub.y).tolist() == [5 if c in held else 0 for c in range(max(held) + 1)]


def test_alignment_and_adaptive_weight_by_hand():
    z = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    y = torch.tensor([0, 1, 2])
    anchors = torch.tensor([[2.0, 0.0], [0.0, 3.0], [0.0, 0.0]])
    present = torch.tensor([True, True, False])
    # cos / tau = (2, 0) and (0, 2); class 2 has no anchor: out of the softmax, its sample adds nothing
    want = 2 * math.log(1 + math.exp(-2)) / 3
    assert math.isclose(float(alignment(z, y, anchors, present, "contrastive", 0.5)), want, rel_tol=1e-6)
    assert math.isclose(float(alignment(z, y, anchors, present, "l2", 0.5)), (1 + 4) / 6, rel_tol=1e-6)
    z.requires_grad_(True)
    alignment(z, y, anchors, present, "contrastive", 0.5).backward()
    assert torch.isfinite(z.grad).all() and z.grad[2].abs().sum() == 0
    assert math.isclose(entropy_weight(torch.tensor([0, 0, 1, 1]), 4, 20.0, 0.0), math.log(2) / 20)
    assert entropy_weight(torch.tensor([3, 3]), 4, 20.0, 0.0) == 0.0
    assert entropy_weight(torch.tensor([0, 1]), 4, 0.0, 0.7) == 0.7


@pytest.mark.slow
def test_fedccfa_weight_zero_is_the_method_without_alignment_and_runs_are_deterministic():
    data, ctx = _setup()

    def run(**hp):
        sim = Simulator(make_algorithm({"name": "fedccfa", **hp}), ctx, data, rounds=3, progress=False)
        return sim, _strip(sim.run())

    zero, without, aligned = run(align_start=1, gamma=0.0, lam=0.0), run(align_start=50), run(align_start=2)
    assert zero[1] == without[1] and _same_models(zero[0].clients, without[0].clients)
    assert not _same_models(aligned[0].clients, without[0].clients)     # the term is live from round 2
    assert [r["local"]["align_weight"] for r in aligned[1]] == pytest.approx([0.0, math.log(2) / 20, math.log(2) / 20])
    again = run(align_start=2)
    assert again[1] == aligned[1] and _same_models(again[0].clients, aligned[0].clients)
