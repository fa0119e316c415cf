"""FedMPS Table III baselines (MOON, FedNTD, FedGKD, FedProc): hand-checked losses,
communication measured from the messages, and equivalences with FedAvg."""

import math

import pytest
import torch

from fedlib.algorithms import make_algorithm
from fedlib.algorithms.base import Round, model_message
from fedlib.algorithms.fedntd import not_true_logits, ntd_loss
from fedlib.algorithms.fedproc import ce_weight, proto_infonce
from fedlib.losses import kl_loss, supcon
from fedlib.algorithms.moon import moon_contrastive_loss
from fedlib.data import FederatedData
from fedlib.data.partition import label_partition
from fedlib.engine import Simulator, message_size
from tests.conftest import R, make_ctx, tiny_image_dataset
from tests.algorithms.test_algorithms import _cifar_shaped, strip_time, tiny_run


def kd_divergence(s, t, T, scale):
    """FedGKD's distillation term as the module computes it: scale * KL(softmax(t/T) || softmax(s/T))."""
    return scale * kl_loss(s, t, T, target_logits=True)


def supcon_two_views(fi, fj, li, lj, t, bt):
    """FedProc's SupContrast over the union of two labelled sets, as the module calls it."""
    return supcon(torch.cat([fi, fj]), torch.cat([li, lj]), t, t / bt)


def model_params(ctx):
    return message_size(model_message(ctx.new_model(None)))[0]


def server_weights_close(a, b, atol=0.0):
    assert a.keys() == b.keys()
    return all(torch.allclose(a[k], b[k], rtol=0, atol=atol) for k in a)


def accs(records, rule="acc_head"):
    return [r["acc"][rule]["mean"] for r in records]


# -- MOON ---------------------------------------------------------------------------------

def test_moon_loss_by_hand():
    # Prepare: sample 0 has cosines 1/sqrt(2) (positive), 0 and -1 (negatives); sample 1 has 1, 1/sqrt(2), 0
    z = torch.tensor([[2.0, 0.0], [0.0, 3.0]])
    z_glob = torch.tensor([[1.0, 1.0], [0.0, 1.0]])
    z_prev = [torch.tensor([[0.0, 5.0], [1.0, 1.0]]), torch.tensor([[-1.0, 0.0], [1.0, 0.0]])]
    t = 0.5
    # Execute
    got = moon_contrastive_loss(z, z_glob, z_prev, t)
    one = moon_contrastive_loss(z, z_glob, z_prev[:1], t)
    # Assert
    s = 1 / math.sqrt(2)
    l0 = -math.log(math.exp(s / t) / (math.exp(s / t) + math.exp(0 / t) + math.exp(-1 / t)))
    l1 = -math.log(math.exp(1 / t) / (math.exp(1 / t) + math.exp(s / t) + math.exp(0 / t)))
    assert got.item() == pytest.approx((l0 + l1) / 2, rel=1e-6)
    l0 = -math.log(math.exp(s / t) / (math.exp(s / t) + math.exp(0 / t)))
    l1 = -math.log(math.exp(1 / t) / (math.exp(1 / t) + math.exp(s / t)))
    assert one.item() == pytest.approx((l0 + l1) / 2, rel=1e-6)


def test_moon_mu_zero_equals_weighted_fedavg():
    _, rec_m = tiny_run("moon", mu=0.0, rounds=2)
    _, rec_a = tiny_run("fedavg", weighted=True, rounds=2)
    assert strip_time(rec_m) == strip_time(rec_a)


@pytest.mark.slow
def test_moon_first_round_is_fedavg_then_contrastive_term_acts():
    sim_m, rec_m = tiny_run("moon", mu=1.0, rounds=2)
    sim_a, rec_a = tiny_run("fedavg", weighted=True, rounds=2)
    # no previous model in round 1 -> no negative -> CE only
    assert strip_time(rec_m)[0] == strip_time(rec_a)[0]
    assert rec_m[1]["train_loss"] != rec_a[1]["train_loss"]
    assert not server_weights_close(sim_m.server["weights"], sim_a.server["weights"], atol=1e-6)


@pytest.mark.slow
def test_moon_previous_global_reproduces_code_zero_gradient():
    # FedMPS code: the "previous" model equals the global model -> the term is mu*log 2 with no gradient
    sim_g, rec_g = tiny_run("moon", mu=1.0, previous="global", rounds=3)
    sim_a, rec_a = tiny_run("fedavg", weighted=True, rounds=3)
    assert server_weights_close(sim_g.server["weights"], sim_a.server["weights"], atol=1e-5)
    assert accs(rec_g) == accs(rec_a)
    assert rec_g[1]["train_loss"] == pytest.approx(rec_a[1]["train_loss"] + math.log(2), abs=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("buffer_size", [1, 2])
def test_moon_previous_local_buffer_holds_last_trained_models(buffer_size):
    algo = make_algorithm({"name": "moon", "buffer_size": buffer_size})
    ds = tiny_image_dataset()
    part = label_partition("iid", ds.y_train.numpy(), ds.y_test.numpy(), 4, num_clients=2, seed=0, split="official")
    data = FederatedData(ds, part)
    ctx = make_ctx(num_clients=2)
    server, client = algo.init_server(ctx), algo.init_client(ctx, 0)
    ups = []
    for r in range(3):
        rnd = Round(r + 1, 3, 0)
        msg = algo.broadcast(ctx, server, 0, rnd)
        client, up, _ = algo.local_update(ctx, 0, client, msg, data.train[0], rnd)
        ups.append(up)
        server, _ = algo.aggregate(ctx, server, {0: up}, rnd)
    assert len(client["prev"]) == buffer_size
    for prev, up in zip(client["prev"], ups[-buffer_size:], strict=True):
        assert all(torch.equal(prev[k], up[k]) for k in prev)


# -- FedNTD -------------------------------------------------------------------------------

def test_not_true_logits_drop_the_true_class():
    logits = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert not_true_logits(logits, torch.tensor([2, 0])).tolist() == [[1.0, 2.0], [5.0, 6.0]]


@pytest.mark.parametrize("tau", [1.0, 2.0])
def test_ntd_loss_by_hand(tau):
    # Prepare: one sample, true class 2; not-true logits local [1, 2], global [3, 1]
    logits = torch.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    glob = torch.tensor([[3.0, 1.0, 0.0]])
    y = torch.tensor([2])
    # Execute
    got = ntd_loss(logits, glob, y, tau)
    got.backward()
    # Assert
    def softmax(v):
        e = [math.exp(x / tau) for x in v]
        return [x / sum(e) for x in e]
    q, p = softmax([3.0, 1.0]), softmax([1.0, 2.0])
    kl = sum(qi * (math.log(qi) - math.log(pi)) for qi, pi in zip(q, p, strict=True))
    assert got.item() == pytest.approx(tau ** 2 * kl, rel=1e-6)
    assert logits.grad[0, 2] == 0  # the true-class logit takes no part
    moved = ntd_loss(torch.tensor([[1.0, 2.0, -7.0]]), torch.tensor([[3.0, 1.0, 9.0]]), y, tau)
    assert moved.item() == pytest.approx(got.item(), rel=1e-6)


def test_fedntd_beta_zero_equals_unweighted_fedavg():
    _, rec_n = tiny_run("fedntd", beta=0.0, rounds=2)
    _, rec_a = tiny_run("fedavg", weighted=False, rounds=2)
    assert strip_time(rec_n) == strip_time(rec_a)
    _, rec_d = tiny_run("fedntd", rounds=2)
    assert rec_d[0]["train_loss"] != rec_a[0]["train_loss"]


# -- FedGKD -------------------------------------------------------------------------------

def test_kd_divergence_by_hand():
    s, t = torch.tensor([[0.0, 1.0]]), torch.tensor([[2.0, 0.0]])
    T = 2.0
    p = [1 / (1 + math.exp(-1.0)), 1 / (1 + math.exp(1.0))]  # softmax(t / T) = softmax([1, 0])
    q = [1 / (1 + math.exp(0.5)), 1 / (1 + math.exp(-0.5))]  # softmax(s / T) = softmax([0, 0.5])
    kl = sum(pi * math.log(pi / qi) for pi, qi in zip(p, q, strict=True))
    assert kd_divergence(s, t, T, T ** 2).item() == pytest.approx(4 * kl, rel=1e-6)
    assert kd_divergence(s, t, T, 0.25).item() == pytest.approx(0.25 * kl, rel=1e-6)


@pytest.mark.slow
def test_fedgkd_teacher_is_mean_of_last_five_global_models():
    ds = tiny_image_dataset()
    part = label_partition("pathological", ds.y_train.numpy(), ds.y_test.numpy(), 4, num_clients=4,
                           classes_per_client=2, balance=True, seed=1, split="official")
    data = FederatedData(ds, part)
    algo = make_algorithm({"name": "fedgkd"})
    sim = Simulator(algo, make_ctx(), data, rounds=7, eval_every=100, progress=False)
    _, clients, server, _ = sim._fresh_state()
    averages = []
    for r in range(1, 8):
        clients, server, _ = sim.step(r, clients, server)
        averages.append(server["weights"])
    assert len(server["buffer"]) == 5
    msg = algo.broadcast(sim.ctx, server, 0, R)
    for k in server["weights"]:
        expected = sum(w[k] for w in averages[2:]) / 5  # rounds 3..7
        assert torch.allclose(msg["t." + k[2:]], expected, atol=1e-7)
        assert torch.equal(msg[k], averages[-1][k])


@pytest.mark.slow
def test_fedgkd_downlink_is_twice_the_model_after_round_one():
    sim, recs = tiny_run("fedgkd", rounds=2)
    m = model_params(sim.ctx)
    assert recs[0]["down_params"] == 4 * m  # no teacher before the first average exists
    assert recs[1]["down_params"] == 4 * 2 * m
    assert recs[1]["up_params"] == 4 * m


def test_fedgkd_without_distillation_equals_unweighted_fedavg():
    _, rec_g = tiny_run("fedgkd", kd_coefficient=0.0, rounds=2)
    _, rec_a = tiny_run("fedavg", weighted=False, rounds=2)
    assert accs(rec_g) == accs(rec_a)
    assert [r["train_loss"] for r in rec_g] == [r["train_loss"] for r in rec_a]


@pytest.mark.slow
def test_fedgkd_code_kd_scale_is_a_quarter():
    # with T = 1, the code's 0.25 factor and coefficient 0.4 equal no factor and coefficient 0.1
    sim_c, rec_c = tiny_run("fedgkd", code_kd_scale=True, kd_coefficient=0.4, rounds=2)
    sim_p, rec_p = tiny_run("fedgkd", kd_coefficient=0.1, rounds=2)
    assert server_weights_close(sim_c.server["weights"], sim_p.server["weights"], atol=1e-6)
    _, rec_q = tiny_run("fedgkd", code_kd_scale=True, rounds=2)
    assert rec_q[1]["train_loss"] != rec_p[1]["train_loss"]


# -- FedProc ------------------------------------------------------------------------------

def test_fedproc_ce_weight_schedule():
    assert [ce_weight(r, 100) for r in (0, 1, 50, 99, 100, 150)] == [1.0, 0.01, 0.5, 0.99, 1.0, 1.0]
    assert ce_weight(5, 10) == 0.5


def _supcon_reference(fi, fj, li, lj, t, bt):
    """Straight loops over anchors, as the FedMPS code's MySupConLoss defines the loss."""
    f, lab = torch.cat([fi, fj]).tolist(), torch.cat([li, lj]).tolist()
    terms = []
    for a in range(len(f)):
        dots = {o: sum(x * y for x, y in zip(f[a], f[o], strict=True)) / t for o in range(len(f)) if o != a}
        pos = [o for o in dots if lab[o] == lab[a]]
        if not pos:
            continue
        log_den = math.log(sum(math.exp(v) for v in dots.values()))
        terms.append(sum(dots[o] - log_den for o in pos) / len(pos))
    return -(t / bt) * sum(terms) / len(terms)


def test_supcon_two_views_by_hand():
    # Prepare: one local feature of class 0, global prototypes of classes 0 and 1
    t, bt = 0.5, 0.07
    fi, li = torch.tensor([[1.0, 0.0]]), torch.tensor([0])
    fj, lj = torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([0, 1])
    # Execute
    got = supcon_two_views(fi, fj, li, lj, t, bt)
    # Assert: two anchors (the feature and prototype 0), each with the other as positive; prototype 1 has none
    per_anchor = 1 / t - math.log(math.exp(1 / t) + math.exp(0.0))
    assert got.item() == pytest.approx(-(t / bt) * per_anchor, rel=1e-6)
    # a richer case against the loop reference, with finite gradients
    g = torch.Generator().manual_seed(0)
    fi = torch.nn.functional.normalize(torch.randn(5, 3, generator=g), dim=1).requires_grad_(True)
    li = torch.tensor([0, 1, 1, 2, 3])
    fj = torch.nn.functional.normalize(torch.randn(3, 3, generator=g), dim=1)
    lj = torch.tensor([0, 1, 2])
    got = supcon_two_views(fi, fj, li, lj, t, bt)
    assert got.item() == pytest.approx(_supcon_reference(fi.detach(), fj, li, lj, t, bt), rel=1e-5)
    got.backward()
    assert torch.isfinite(fi.grad).all()


def test_proto_infonce_by_hand():
    z = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    y = torch.tensor([0, 2, 1])  # class 1 has no prototype: skipped
    protos, classes = torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([0, 2])
    t = 0.5
    l0 = -math.log(math.exp(1 / t) / (math.exp(1 / t) + 1))
    assert proto_infonce(z, y, protos, classes, t).item() == pytest.approx(l0, rel=1e-6)  # both kept samples alike


def test_fedproc_normalize_contrasts_the_normalised_features_and_keeps_run_ids():
    # Prepare: raw 512-d ReLU features of the size PFLlib's CNN gives, two classes, their global prototypes
    g = torch.Generator().manual_seed(0)
    z = (torch.randn(8, 512, generator=g).relu() * 3).requires_grad_(True)
    y, classes = torch.tensor([0, 1] * 4), torch.tensor([0, 1])
    protos = torch.randn(2, 512, generator=g).relu() * 3
    raw, cos = make_algorithm({"name": "fedproc"}), make_algorithm({"name": "fedproc", "normalize": True})
    # Execute
    got = cos.contrastive(z, y, protos, classes)
    got.backward()
    # Assert: as-is, the dot products over 0.5 are in the thousands and so is the loss (finite: the log-sum-exp
    # denominator does not underflow as SupContrast's exp-then-sum did, NaN in the benchmark's pat runs, round 2);
    # normalised, it is the loss of the unit vectors, by the loop reference, with finite gradients
    as_is = raw.contrastive(z.detach(), y, protos, classes).item()
    assert math.isfinite(as_is) and as_is > 1000
    zn, pn = torch.nn.functional.normalize(z.detach(), dim=1), torch.nn.functional.normalize(protos, dim=1)
    assert got.item() == pytest.approx(_supcon_reference(zn, pn, y, classes, 0.5, 0.07), rel=1e-5)
    assert got.item() == pytest.approx(raw.contrastive(zn, y, pn, classes).item(), rel=1e-6)
    assert torch.isfinite(z.grad).all() and z.grad.abs().sum() > 0
    # normalize false is the method as it was: the runs made before the option keep their ids
    from fedlib import config
    base = config.validate({"name": "t", "dataset": {"name": "fmnist"}, "model": {"name": "cnn_fmnist"},
                            "partition": {"scheme": "iid", "num_clients": 2}, "algorithm": {"name": "fedproc"},
                            "train": {"rounds": 1}})
    same = {**base, "algorithm": {**base["algorithm"], "normalize": False}}
    other = {**base, "algorithm": {**base["algorithm"], "normalize": True}}
    assert config.run_id(same, 0) == config.run_id(base, 0) != config.run_id(other, 0)


def test_fedproc_aggregation_by_hand_and_no_round_in_messages():
    algo = make_algorithm({"name": "fedproc"})
    ctx = make_ctx(num_classes=3)
    server = algo.init_server(ctx)
    msg = algo.broadcast(ctx, server, 0, R)
    assert "round" not in msg and "protos" not in msg  # the schedule reads the round record
    w = {k: torch.zeros_like(v) for k, v in server["weights"].items()}
    ups = {0: {**{k: v + 1 for k, v in w.items()}, "num_samples": 1, "protos": torch.tensor([[1.0, 0.0], [0.0, 2.0]]),
               "classes": torch.tensor([0, 1]), "counts": torch.tensor([5, 1])},
           1: {**{k: v + 4 for k, v in w.items()}, "num_samples": 3, "protos": torch.tensor([[3.0, 4.0]]),
               "classes": torch.tensor([0]), "counts": torch.tensor([1])}}
    server, _ = algo.aggregate(ctx, server, ups, R)
    msg = algo.broadcast(ctx, server, 1, R)
    assert "round" not in msg
    assert all(torch.allclose(msg[k], torch.full_like(v, 1 * 0.25 + 4 * 0.75)) for k, v in w.items())  # by data size
    assert msg["classes"].tolist() == [0, 1]
    assert msg["protos"].tolist() == [[2.0, 2.0], [0.0, 2.0]]  # plain mean over the clients holding the class


@pytest.mark.slow
def test_fedproc_first_round_is_weighted_fedavg_and_uplink_is_model_plus_protos():
    sim_p, rec_p = tiny_run("fedproc", rounds=2)
    sim_a, rec_a = tiny_run("fedavg", weighted=True, rounds=2)
    # round 0 (code index) trains on CE alone: the same models as FedAvg
    assert rec_p[0]["train_loss"] == rec_a[0]["train_loss"]
    assert rec_p[0]["acc"]["acc_head"] == rec_a[0]["acc"]["acc_head"]
    assert rec_p[1]["train_loss"] != rec_a[1]["train_loss"]
    m, d = model_params(sim_p.ctx), sim_p.ctx.new_model(0).feature_dims["high"]
    assert rec_p[0]["up_params"] == 4 * m + 4 * 2 * d  # 4 clients x (model + 2 class prototypes)
    assert rec_p[1]["down_params"] == 4 * (m + 4 * d)  # model + all 4 global prototypes


@pytest.mark.slow
def test_fedproc_paper_contrast_option_trains():
    _, rec_s = tiny_run("fedproc", rounds=2)
    _, rec_p = tiny_run("fedproc", contrast="prototypes", rounds=2)
    assert rec_p[0]["train_loss"] == rec_s[0]["train_loss"]  # round 0: CE only under either loss
    assert math.isfinite(rec_p[1]["train_loss"]) and rec_p[1]["train_loss"] != rec_s[1]["train_loss"]


@pytest.mark.slow
@pytest.mark.parametrize("name,direction,expected", [("fedgkd", "down_params", 2_480_240),
                                                      ("fedproc", "up_params", 1_247_200),
                                                      ("moon", "up_params", 1_240_120),
                                                      ("fedntd", "up_params", 1_240_120)])
def test_communication_counts_match_fedmps_table_v(name, direction, expected):
    # FedMPS Table V (CIFAR-10, n=3, N=20, CNNCifar): FedGKD sends two models, FedProc adds 59 x 120 prototypes
    data = _cifar_shaped(shots=2)
    ctx = make_ctx(num_classes=10, input_shape=(3, 32, 32), num_clients=20, model="cnn_cifar")
    recs = Simulator(make_algorithm({"name": name}), ctx, data, rounds=2, eval_every=100, progress=False).run()
    assert recs[1][direction] == expected
