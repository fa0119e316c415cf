"""FedIC and FedPAC: Eqs. 6-8 by hand, the head-weight QP against a brute-force grid, K = 1 gives the
global prototype, the collaboration sets, equivalences and the communication counts."""

import itertools
import types

import numpy as np
import pytest
import torch

from fedlib.algorithms import make_algorithm
from fedlib.algorithms.base import Round
from fedlib.algorithms.fedic import cosine_clusters
from fedlib.algorithms.fedpac import feature_statistics, head_qp_matrix, simplex_qp
from fedlib.engine import Simulator
from fedlib.models import count_parameters
from tests.algorithms.test_gfpl import _setup

CTX = types.SimpleNamespace(num_clients=4, num_classes=2)


def _uploads(protos: dict, counts: dict) -> dict:
    """Hand-made uploads of 4 clients over 2 classes in 2-d: ``protos[i] = {class: (x, y)}``."""
    ups = {}
    for i in range(4):
        cls = sorted(protos[i])
        ups[i] = {"w.a": torch.tensor([float(i)]), "w.head.weight": torch.full((2, 2), float(i)),
                  "w.head.bias": torch.full((2,), float(i)), "num_samples": sum(counts[i].values()),
                  "protos": torch.tensor([protos[i][c] for c in cls]), "classes": torch.tensor(cls),
                  "counts": torch.tensor([counts[i][c] for c in cls]), "v": 1.0}
    return ups


def _server():
    return {"base": {"w.a": torch.zeros(1)}, "heads": [{"w.head.weight": torch.zeros(2, 2),
                                                        "w.head.bias": torch.zeros(2)}] * 4,
            "anchors": torch.zeros(4, 2, 0), "present": torch.zeros(2, dtype=torch.bool),
            "beta": torch.zeros(4, 4), "labels": torch.full((2, 4), -1),
            "history": torch.zeros(0, 2, 4, dtype=torch.int8)}


# class 0: clients 0, 1 point along x (different lengths), clients 2, 3 along y; class 1: clients 0, 2 only
PROTOS = {0: {0: (1.0, 0.0), 1: (0.0, 2.0)}, 1: {0: (3.0, 0.3)}, 2: {0: (0.1, 1.0), 1: (0.0, 4.0)},
          3: {0: (0.0, 2.0)}}
COUNTS = {0: {0: 1, 1: 3}, 1: {0: 3}, 2: {0: 2, 1: 1}, 3: {0: 2}}


def test_eqs_6_to_8_by_hand():
    algo = make_algorithm({"name": "fedic", "K": 2})
    server, metrics = algo.aggregate(CTX, _server(), _uploads(PROTOS, COUNTS), Round(1, 5, 0))
    # Eq. 6: cosine groups of class 0 are {0, 1} (along x) and {2, 3} (along y), whatever the lengths
    assert server["labels"][0].tolist() == [0, 0, 1, 1]
    assert server["labels"][1].tolist() == [0, -1, 1, -1]    # two holders, K_c = min(2, 2): singletons
    A = server["anchors"]
    # Eq. 7: count-weighted mean inside the group
    assert torch.allclose(A[0, 0], (1 * torch.tensor([1.0, 0.0]) + 3 * torch.tensor([3.0, 0.3])) / 4)
    assert torch.allclose(A[1, 0], A[0, 0])
    assert torch.allclose(A[2, 0], (2 * torch.tensor([0.1, 1.0]) + 2 * torch.tensor([0.0, 2.0])) / 4)
    assert torch.allclose(A[0, 1], torch.tensor([0.0, 2.0])) and torch.allclose(A[2, 1], torch.tensor([0.0, 4.0]))
    # Eq. 8: clients 1 and 3 hold no class 1: the count-weighted global prototype (Eq. 3)
    glob1 = (3 * torch.tensor([0.0, 2.0]) + 1 * torch.tensor([0.0, 4.0])) / 4
    assert torch.allclose(A[1, 1], glob1) and torch.allclose(A[3, 1], glob1)
    # the broadcast carries the client's own anchors
    msg = algo.broadcast(CTX, server, 1, Round(2, 5, 0))
    assert msg["classes"].tolist() == [0, 1] and torch.allclose(msg["protos"], A[1])
    assert metrics["bias_cluster"] < metrics["bias_global"]
    # collaboration sets: client 0 shares class 0 with 1 and nobody else (class 1 is a singleton)
    assert algo.supports(server["labels"], [0, 1, 2, 3]) == {0: [0, 1], 1: [0, 1], 2: [2, 3], 3: [2, 3]}
    assert (server["beta"][0, 2:] == 0).all() and (server["beta"][2, :2] == 0).all()


def test_k1_anchors_are_the_global_prototype():
    algo = make_algorithm({"name": "fedic", "K": 1})
    server, metrics = algo.aggregate(CTX, _server(), _uploads(PROTOS, COUNTS), Round(1, 5, 0))
    glob0 = (1 * torch.tensor([1.0, 0.0]) + 3 * torch.tensor([3.0, 0.3]) + 2 * torch.tensor([0.1, 1.0])
             + 2 * torch.tensor([0.0, 2.0])) / 8
    glob1 = (3 * torch.tensor([0.0, 2.0]) + 1 * torch.tensor([0.0, 4.0])) / 4
    for i in range(4):
        assert torch.allclose(server["anchors"][i, 0], glob0) and torch.allclose(server["anchors"][i, 1], glob1)
    assert metrics["bias_cluster"] == pytest.approx(metrics["bias_global"])
    # FedPAC's anchors are the same global prototypes
    pac, _ = make_algorithm({"name": "fedpac"}).aggregate(CTX, _server(), _uploads(PROTOS, COUNTS), Round(1, 5, 0))
    assert torch.allclose(pac["anchors"], server["anchors"])


def test_cosine_clusters_ignore_length_and_number_groups_by_first_appearance():
    p = torch.tensor([[0.0, 5.0], [1.0, 0.0], [10.0, 0.5], [0.2, 5.0], [0.0, 0.0]])
    for method in ("agglomerative", "kmeans"):
        lab = cosine_clusters(p[:4], 2, method).tolist()
        assert lab == [0, 1, 1, 0]
    assert cosine_clusters(p, 9).tolist() == [0, 1, 2, 3, 4]        # K > m: every prototype alone
    assert cosine_clusters(p[:1], 3).tolist() == [0]


def _objective(Q, b):
    return float(b @ Q @ b)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_qp_matches_a_brute_force_grid_on_three_clients(seed):
    rng = np.random.default_rng(seed)
    v = rng.uniform(0.05, 1.0, 3)
    h = rng.normal(size=(3, 4, 5))
    Q = head_qp_matrix(v, h, 0, [0, 1, 2])
    b = simplex_qp(Q, cutoff=0.0)
    assert b.sum() == pytest.approx(1.0, abs=1e-6) and (b >= 0).all()
    grid = [np.array([a, c, 1 - a - c]) for a, c in itertools.product(np.linspace(0, 1, 201), repeat=2)
            if a + c <= 1 + 1e-12]
    best = min(grid, key=lambda g: _objective(Q, g))
    assert _objective(Q, b) <= _objective(Q, best) + 1e-9
    assert np.abs(b - best).max() < 0.01
    # the objective is FedPAC's: sum_j b_j^2 V_j + sum_c ||h_0^c - sum_j b_j h_j^c||^2 on the simplex
    direct = (b ** 2 * v).sum() + ((h[0] - np.tensordot(b, h, axes=1)) ** 2).sum()
    assert _objective(Q, b) == pytest.approx(direct)


def test_qp_cutoff_and_repair():
    Q = np.diag([1.0, 1.0, 100.0])
    b = simplex_qp(Q, cutoff=0.02)
    # optimum proportional to 1 / diag: (1, 1, 0.01) / 2.01; 0.005 < 0.02 is cut and the rest not renormalised
    assert b[:2] == pytest.approx([1 / 2.01, 1 / 2.01], abs=1e-5) and b[2] == 0.0 and b.sum() < 0.996
    b = simplex_qp(np.array([[1.0, 2.0], [2.0, 1.0]]))   # indefinite: rebuilt from the eigenpairs >= 0.01
    assert b == pytest.approx([0.5, 0.5], abs=1e-4)


def test_feature_statistics_by_hand():
    z = torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0]])

    class M(torch.nn.Module):
        feature_dims = {"high": 2}

        def forward(self, x):
            return x, {"high": x}

    data = type("D", (), {"x": z, "y": torch.tensor([0, 0, 1]), "__len__": lambda self: 3})()
    s = feature_statistics(M(), data, 3)
    assert torch.allclose(s["means"], torch.tensor([[2.0, 0.0], [0.0, 2.0], [0.0, 0.0]]))
    assert s["counts"].tolist() == [2, 1, 0]
    # V = 1/3 * [2/3 * (1 + 9)/2 - (2/3)^2 * 4 + 1/3 * 4 - (1/3)^2 * 4]
    assert s["v"] == pytest.approx((2 / 3 * 5 - 4 / 9 * 4 + 4 / 3 - 4 / 9) / 3)


def _run(spec, rounds=2, **kw):
    data, ctx = _setup(num_clients=4, classes_per_client=2)
    return Simulator(make_algorithm(spec), ctx, data, rounds=rounds, progress=False, **kw).run(), ctx


@pytest.mark.slow
def test_fedic_k1_all_received_equals_fedpac():
    a, _ = _run({"name": "fedic", "K": 1, "collab": "all", "stats": "received"})
    b, _ = _run({"name": "fedpac"})
    for ra, rb in zip(a, b, strict=True):
        assert ra["acc"] == rb["acc"] and ra["train_loss"] == rb["train_loss"]


@pytest.mark.slow
def test_fedic_is_deterministic_and_no_collaboration_keeps_own_heads():
    a, _ = _run({"name": "fedic"})
    b, _ = _run({"name": "fedic"})
    assert [r["acc"] for r in a] == [r["acc"] for r in b]
    data, ctx = _setup(num_clients=4, classes_per_client=2)
    algo = make_algorithm({"name": "fedic", "collab": "none"})
    server = algo.init_server(ctx)
    rnd = Round(1, 2, ctx.seed)
    ups = {c: algo.local_update(ctx, c, algo.init_client(ctx, c), algo.broadcast(ctx, server, c, rnd),
                                data.train[c], rnd)[1] for c in range(4)}
    server, _ = algo.aggregate(ctx, server, ups, rnd)
    for c in range(4):
        assert torch.equal(server["heads"][c]["w.head.weight"], ups[c]["w.head.weight"])
    assert torch.equal(server["beta"], torch.eye(4))


def test_classwise_collaboration_leaves_rows_of_classes_not_held():
    algo = make_algorithm({"name": "fedic", "K": 1, "collab": "class"})
    server, _ = algo.aggregate(CTX, _server(), _uploads(PROTOS, COUNTS), Round(1, 5, 0))
    # client 1 holds only class 0: its class-1 row is its own head's (all 1.0)
    assert torch.equal(server["heads"][1]["w.head.weight"][1], torch.full((2,), 1.0))
    assert server["heads"][1]["w.head.bias"][1] == 1.0
    # its class-0 row combines the class-0 rows of the holders 0..3 (convex: within [0, 3])
    row = server["heads"][1]["w.head.weight"][0]
    assert (row >= 0).all() and (row <= 3).all()
    assert server["beta"][1].sum() == pytest.approx(1.0, abs=1e-3)


@pytest.mark.slow
def test_communication_counts():
    recs_ic, ctx = _run({"name": "fedic"}, rounds=1)
    recs_pac, _ = _run({"name": "fedpac"}, rounds=1)
    data, _ = _setup(num_clients=4, classes_per_client=2)
    model = ctx.new_model(None)
    P = sum(v.numel() for v in model.state_dict().values() if v.is_floating_point())
    d, C = model.feature_dims["high"], ctx.num_classes
    held = sum(len(np.unique(data.train[c].y.numpy())) for c in range(4))
    # up: model + (k, d) prototypes per client; FedPAC adds its (C, d) h statistics
    assert recs_ic[0]["up_params"] == 4 * P + held * d
    assert recs_pac[0]["up_params"] == 4 * P + held * d + 4 * C * d
    # down in round 1: extractor + initial head, no anchors yet
    assert recs_ic[0]["down_params"] == 4 * P
    assert count_parameters(model) <= P


def test_study_configs_follow_pfllib_and_the_profile():
    from fedlib.config import run_id
    from fedlib.papers import fedic as I
    from fedlib.validation import ConfigError

    plan = I.load_plan("quick")
    t1 = I.table1_configs(plan)
    assert len(t1) == 2 * 9
    cfg = t1[("pat", "fedic")]
    assert cfg["train"]["lr"] == 0.005 and cfg["train"]["batch_size"] == 10 and cfg["train"]["momentum"] == 0.0
    assert cfg["train"]["rounds"] == 15 and cfg["dataset"]["fraction"] == 0.05 and cfg["model"]["name"] == "fedavg_cnn"
    assert cfg["partition"]["classes_per_client"] == 2 and cfg["partition"]["split"] == "merge"
    assert t1[("pra", "fedccfa")]["algorithm"]["align_start"] == 2
    assert I.config(I.load_plan("paper"), "fedccfa")["algorithm"]["align_start"] == 21
    # K = 3 and the full ablation variant are Table 1's FedIC run, K = 1 is "+ collaboration"; every job once
    ids = [run_id(c, s) for c, s in I.all_jobs(plan)]
    assert len(ids) == len(set(ids)) == 18 + 4 + 2 + 2 + 4
    assert run_id(I.k_configs(plan)[1], 0) == run_id(I.ablation_configs(plan)["collaboration"], 0)
    assert run_id(I.k_configs(plan)[3], 0) == run_id(t1[("pra", "fedic")], 0)
    assert run_id(I.ablation_configs(plan)["fedic"], 0) == run_id(t1[("pra", "fedic")], 0)
    assert I.alpha_configs(plan)[(0.05, "fedic")]["partition"]["alpha"] == 0.05
    assert I.scale_configs(plan)[(40, "fedpac")]["partition"]["num_clients"] == 40
    with pytest.raises(ConfigError, match="method"):
        I.config(plan, "fedxyz")


def test_ledger_verdicts_follow_the_numbers():
    from fedlib.claims import BY_CONSTRUCTION, INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED
    from fedlib.papers import fedic as I

    quick, conv = I.load_plan("quick"), I.load_plan("converged")

    def cell(*seeds, **kw):
        return {"best": float(np.mean(seeds)), "last": float(np.mean(seeds)), "n": len(seeds),
                "best_std": float(np.std(seeds)), "per_seed": list(seeds), "best_round": 1, **kw}

    t1 = {("pra", "fedic"): cell(90.0, seconds=2.0, megabytes=10.0), ("pra", "fedpac"): cell(91.0, seconds=2.5,
                                                                                              megabytes=11.0)}
    ks = {1: cell(88.0), 3: cell(90.0), 5: cell(89.0)}
    ab = {"baseline": cell(1.0), "clustering": cell(2.0), "collaboration": cell(3.0), "fedic": cell(4.0)}
    got = {c.claim: c for c in I.ledger(quick, {"table1": t1, "k": ks, "ablation": ab,
                                                 "bias": {"global": 2.0, "cluster": 1.0}})}
    # one seed of the quick profile: every accuracy claim is inconclusive, whichever way it points
    assert got["FedIC beats every baseline on Fashion-MNIST Pra (Dir 0.1)"].verdict == INCONCLUSIVE
    assert got["An intermediate K is best (K = 3 on Fashion-MNIST)"].verdict == INCONCLUSIVE
    assert got["baseline < + clustering < + collaboration < both"].verdict == INCONCLUSIVE
    bias = got["Clustering reduces the prototype aggregation bias"]
    assert bias.verdict == BY_CONSTRUCTION and "true by construction: for K > 1" in bias.note
    # the converged profile, three seeds: the margins against the seed spread decide
    t1 = {("pra", "fedic"): cell(82.0, 82.5, 81.9), ("pra", "fedpac"): cell(81.6, 81.4, 82.4)}   # +0.33, std 0.43
    ks = {1: cell(80.0, 80.2, 79.8), 3: cell(85.0, 85.1, 84.9), 5: cell(82.0, 82.1, 81.9)}
    ab = {"baseline": cell(1.0, 1.1, 0.9), "clustering": cell(2.0, 2.1, 1.9), "collaboration": cell(3.0, 3.1, 2.9),
          "fedic": cell(2.5, 2.6, 2.4)}
    got = {c.claim: c for c in I.ledger(conv, {"table1": t1, "k": ks, "ablation": ab})}
    pra = got["FedIC beats every baseline on Fashion-MNIST Pra (Dir 0.1)"]
    assert pra.verdict == INCONCLUSIVE and "margin within the seed spread: FedIC - FedPAC +0.33" in pra.note
    assert got["An intermediate K is best (K = 3 on Fashion-MNIST)"].verdict == SUPPORTED  # K 3 - K 5 +3.00
    order = got["baseline < + clustering < + collaboration < both"]
    assert order.verdict == NOT_SUPPORTED and "FedIC - + collaboration -0.50" in order.note


def test_sweep_claims_and_the_written_ledger():
    from fedlib import claims as C
    from fedlib.papers import fedic as I

    plan = I.load_plan("converged")

    def cell(*seeds):
        return {"best": float(np.mean(seeds)), "last": float(np.mean(seeds)), "n": len(seeds),
                "best_std": float(np.std(seeds)), "per_seed": list(seeds), "best_round": 1}

    scale = {(20, "fedic"): cell(90.0, 90.5, 89.5), (20, "fedpac"): cell(88.0, 88.5, 87.5),
             (40, "fedic"): cell(80.0, 80.5, 79.5), (40, "fedpac"): cell(82.0, 82.5, 81.5)}
    alphas = {(0.1, "fedic"): cell(90.0, 90.0, 90.0)}
    got = {c.claim: c for c in I.ledger(plan, {"scale": scale, "alphas": alphas})}
    assert got["FedIC stays best with 40 and 60 clients"].verdict == C.NOT_SUPPORTED      # 2 points behind at 40
    assert "40 clients: FedIC 80.00, FedPAC 82.00" in got["FedIC stays best with 40 and 60 clients"].evidence
    assert got["FedIC is best at every Dirichlet concentration"].verdict == C.NOT_TESTED  # nobody to beat
    texts, values = [], {}
    frame = C.write(types.SimpleNamespace(text=texts.append, record=values.update), list(got.values()))
    assert len(frame) == len(got) and "Where ours contradict the paper" in texts[1]
    assert "FedIC stays best with 40 and 60 clients (Table 3)" in texts[1]
    assert values["verdicts"]["not supported"] == 1 and values["verdict_protocols"] == "converged"


def test_other_datasets_take_their_classes_per_client_and_k():
    from fedlib.config import run_id
    from fedlib.papers import fedic as I

    plan = I.load_plan("quick")
    c100 = I.table1_configs(plan, "cifar100")
    assert c100[("pat", "fedic")]["dataset"]["name"] == "cifar100"
    assert c100[("pat", "fedic")]["partition"]["classes_per_client"] == 10
    assert c100[("pra", "fedic")]["algorithm"]["K"] == 5
    assert I.config(plan, "baseline", variant=True, dataset="cifar100")["algorithm"]["K"] == 1
    assert I.config(plan, "clustering", variant=True, dataset="cifar100")["algorithm"]["K"] == 5
    assert c100[("pat", "fedic")]["name"] == "fedic-study/cifar100/pat/fedic"
    # Fashion-MNIST configs are what they were (the same run ids as the cached runs)
    assert run_id(I.config(plan, "fedic", "pra"), 0) == run_id(I.config(plan, "fedic", "pra", dataset="fmnist"), 0)
    assert I.config(plan, "fedic", "pra")["algorithm"]["K"] == 3
    assert I.main(["--dataset", "mnist"]) == 2


def test_cells_label_a_run_that_has_not_plateaued():
    from fedlib.papers import fedic as I

    plan = I.load_plan("converged")

    def recs(curve):
        return [{"round": r + 1, "acc": {"acc_head": {"weighted": a / 100}}, "train_seconds": 1.0, "up_params": 1,
                 "down_params": 1} for r, a in enumerate(curve)]

    summary = {"metrics": {"acc_head": {"best_weighted": 0.9, "last_weighted": 0.9, "best_weighted_round": 10}}}
    flat = [50, 80, 89, 90, 90, 90, 90, 90, 90, 90]
    rising = [50, 60, 70, 75, 80, 82, 84, 86, 88, 90]  # the last 2 of 10 rounds add 90 - 86 = 4 points
    got = I.cells(plan, {"baseline": [summary], "clustering": [summary]},
                  {"baseline": recs(flat), "clustering": recs(rising)})
    assert got["baseline"]["plateau"] == ""
    assert got["clustering"]["plateau"] == "not plateaued (+4.00 in the last 20% of rounds)"
    note = I.plateau_note(plan, got)
    assert note.endswith(f"{plan.label('clustering')}: not plateaued (+4.00 in the last 20% of rounds).")
    assert plan.label("baseline") not in note
    assert I.plateau_note(plan, {"x": {"best": 1.0}}) == ""


def test_every_seeds_records_judge_the_plateau_on_their_mean_and_cost_on_the_first():
    from fedlib.papers import fedic as I

    plan = I.load_plan("converged")

    def recs(curve, secs):
        return [{"round": r + 1, "acc": {"acc_head": {"weighted": a / 100}}, "train_seconds": secs, "up_params": 1,
                 "down_params": 1} for r, a in enumerate(curve)]

    summary = {"metrics": {"acc_head": {"best_weighted": 0.9, "last_weighted": 0.9, "best_weighted_round": 10}}}
    flat = [50, 80, 89, 90, 90, 90, 90, 90, 90, 90]
    late = [50, 60, 70, 75, 80, 82, 84, 86, 86, 96]   # best-so-far +10 in the last 2 rounds
    got = I.cells(plan, {"fedic": [summary, summary]}, {"fedic": [recs(flat, 1.0), recs(late, 5.0)]})["fedic"]
    # the seed-mean curve ends 86.0, 88.0, 93.0: +5.00 over its last 20%, though the first seed is flat
    assert got["plateau"] == "not plateaued (+5.00 in the last 20% of rounds)"
    assert got["seconds"] == 1.0 and got["n"] == 2


def test_a_short_profiles_sweeps_beside_converged_table_1_keep_their_own_profile():
    from fedlib.claims import INCONCLUSIVE, SUPPORTED
    from fedlib.papers import fedic as I

    quick, conv = I.load_plan("quick"), I.load_plan("converged")

    def cell(*seeds):
        return {"best": float(np.mean(seeds)), "last": float(np.mean(seeds)), "n": len(seeds),
                "best_std": float(np.std(seeds)), "per_seed": list(seeds), "best_round": 1}

    t1 = {("pra", "fedic"): cell(92.0, 92.1, 91.9), ("pra", "fedpac"): cell(90.0, 90.1, 89.9)}
    scale = {(20, "fedic"): cell(90.0), (20, "fedpac"): cell(80.0), (40, "fedic"): cell(90.0),
             (40, "fedpac"): cell(80.0)}
    got = {c.claim: c for c in I.ledger(conv, {"table1": t1, "scale": scale, "sweeps_plan": quick})}
    beats = got["FedIC beats every baseline on Fashion-MNIST Pra (Dir 0.1)"]
    assert beats.verdict == SUPPORTED and beats.profile == "converged"
    sweep = got["FedIC stays best with 40 and 60 clients"]
    assert sweep.verdict == INCONCLUSIVE and sweep.profile == "quick" and "profile quick" in sweep.note


def test_converged_claims_judge_each_comparison_on_the_trend_of_the_side_behind():
    from fedlib import claims as C
    from fedlib.papers import fedic as I

    conv = I.load_plan("converged")

    def cell(*seeds, curve=None):   # curve: the seeds' accuracy curve (%, 100 rounds), None: flat at the mean
        t = C.trend("x", [curve or [float(np.mean(seeds))] * 100] * len(seeds))
        return {"best": float(np.mean(seeds)), "last": float(np.mean(seeds)), "n": len(seeds),
                "best_std": C.sample_std(seeds), "per_seed": list(seeds), "best_round": 1,
                "plateau": t.plateau_text(), "trend": t}

    steep = list(np.linspace(80.0, 90.0, 100))     # +5 over the last doubling: up to +10 more by 400 rounds
    slow = list(np.linspace(84.0, 85.0, 100))      # still rising (+0.2 in its last 20 rounds): at most ~+6 by 400
    t1 = {("pra", "fedic"): cell(92.0, 92.1, 91.9, curve=steep), ("pra", "fedpac"): cell(90.0, 90.1, 89.9)}
    ks = {1: cell(80.0, 80.1, 79.9), 3: cell(92.0, 92.1, 91.9), 5: cell(85.0, 85.1, 84.9, curve=slow)}
    steps = ("baseline", "clustering", "collaboration", "fedic")
    ab = {v: cell(80.0 + 3 * i, 80.1 + 3 * i, 79.9 + 3 * i) for i, v in enumerate(steps)}
    got = {c.claim: c for c in I.ledger(conv, {"table1": t1, "k": ks, "ablation": ab})}
    # FedIC is ahead and still rising, FedPAC behind has plateaued: nothing can close the margin
    beats = got["FedIC beats every baseline on Fashion-MNIST Pra (Dir 0.1)"]
    assert beats.verdict == C.SUPPORTED and beats.tests[0].label == "FedIC - FedPAC"
    # K 5 is behind and still rising, but its projected gain (+6.06) leaves K 3's +7 beyond the spread: decided early
    k = got["An intermediate K is best (K = 3 on Fashion-MNIST)"]
    assert k.verdict == C.SUPPORTED and "decided before the curves plateaued (early decision): K 3 - K 5" in k.note
    assert got["baseline < + clustering < + collaboration < both"].verdict == C.SUPPORTED
    # the side behind rising steeply: the comparison stays open, and the note says what it would be
    t1[("pra", "fedpac")] = cell(90.0, 90.1, 89.9, curve=steep)
    beats = {c.claim: c for c in I.ledger(conv, {"table1": t1})}[
        "FedIC beats every baseline on Fashion-MNIST Pra (Dir 0.1)"]
    assert beats.verdict == C.INCONCLUSIVE
    assert C.NOT_PLATEAUED in beats.note and "(would be supported were they plateaued)" in beats.note
