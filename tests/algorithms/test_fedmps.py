"""FedMPS: its losses against direct computations, the server step by hand, counts, equivalences."""

import math

import pytest
import torch
import torch.nn.functional as F

from fedlib.algorithms import make_algorithm
from fedlib.algorithms.fedmps import FedMPS
from fedlib.engine import Simulator
from fedlib.losses import kl_loss, supcon, supcon_with_prototypes
from tests.conftest import R, make_ctx
from tests.algorithms.test_algorithms import _cifar_shaped, tiny_run


def soft_label_kl(logits, target_probs, tau):
    """FedMPS Eqs. 5-6 as the module computes them."""
    return kl_loss(logits, target_probs, tau)


class LinearHeadFedMPS(FedMPS):
    """FedMPS whose server head is a bare Linear(2, 3), matching the hand-made 2-d high-level uploads."""

    def build(self, ctx, cid, role="model"):
        return torch.nn.Linear(2, 3) if role == "head" else super().build(ctx, cid, role)


def supcon_by_loops(z, y, p, tau):
    """Eq. 3 written out anchor by anchor over V = {z_b} U {p_b}."""
    v = torch.cat([z, p])
    lab = torch.cat([y, y]).tolist()
    total = 0.0
    for i in range(len(lab)):
        others = [a for a in range(len(lab)) if a != i]
        denom = sum(math.exp(float(v[i] @ v[a]) / tau) for a in others)
        pos = [r for r in others if lab[r] == lab[i]]
        total += -sum(math.log(math.exp(float(v[i] @ v[r]) / tau) / denom) for r in pos) / len(pos)
    return total / len(lab)


def test_supcon_matches_equation_3_written_out():
    g = torch.Generator().manual_seed(0)
    z = F.normalize(torch.randn(5, 4, generator=g), dim=1)
    y = torch.tensor([0, 1, 0, 2, 1])
    protos = F.normalize(torch.randn(3, 4, generator=g), dim=1)[y]
    got = supcon_with_prototypes(z, y, protos, tau=0.5)
    assert float(got) == pytest.approx(supcon_by_loops(z, y, protos, 0.5), rel=1e-5)
    # the code's SupContrast factor tau / base_tau
    scaled = supcon_with_prototypes(z, y, protos, tau=0.5, base_tau=0.07)
    assert float(scaled) == pytest.approx(float(got) * 0.5 / 0.07, rel=1e-6)


def test_supcon_two_orthogonal_classes_by_hand():
    # z = prototypes = e1 for class 0 and e2 for class 1, tau = 1: each anchor has one
    # positive (its prototype copy, dot 1) among three others (dots 1, 0, 0):
    # loss = -log(e / (e + 2)).
    z = torch.eye(2)
    y = torch.tensor([0, 1])
    loss = supcon_with_prototypes(z, y, z.clone(), tau=1.0)
    assert float(loss) == pytest.approx(-math.log(math.e / (math.e + 2)), rel=1e-6)


def test_supcon_finite_when_other_vectors_underflow():
    # tau = 0.01 and unnormalised vectors: each anchor's own similarity (1e4 for the long
    # ones) is so far above the others that exp(other - self) underflows to 0 in float32.
    # The loss is still defined: every anchor's positive dominates its denominator (dots
    # 1000 against 0, 0), so log p = -log(1 + 2 e^-1000) = 0 to float precision.
    v = torch.tensor([[10.0, 0.0], [0.0, 10.0], [1.0, 0.0], [0.0, 1.0]], requires_grad=True)
    loss = supcon(v, torch.tensor([0, 1, 0, 1]), tau=0.01)
    loss.backward()
    assert float(loss) == 0.0
    assert torch.isfinite(v.grad).all()
    # float64 gives the same number where float32 underflowed
    assert float(supcon(v.detach().double(), torch.tensor([0, 1, 0, 1]), tau=0.01)) == 0.0


def test_supcon_lone_vector_is_zero_with_finite_gradient():
    v = torch.randn(1, 3, requires_grad=True)
    loss = supcon(v, torch.tensor([0]), tau=0.5)
    loss.backward()
    assert float(loss) == 0.0 and torch.equal(v.grad, torch.zeros(1, 3))


def test_supcon_gradient_reaches_features_not_prototypes():
    z = F.normalize(torch.randn(4, 3), dim=1).requires_grad_()
    p = F.normalize(torch.randn(4, 3), dim=1).requires_grad_()
    supcon_with_prototypes(z, torch.tensor([0, 0, 1, 1]), p, tau=0.5).backward()
    assert z.grad is not None and z.grad.abs().sum() > 0
    assert p.grad is None


def test_soft_label_kl_by_hand():
    logits = torch.tensor([[2.0, 0.0, -1.0]])
    target = torch.tensor([[0.5, 0.3, 0.2]])
    q = torch.softmax(logits / 5.0, dim=1)[0]
    expected = sum(t * math.log(t / float(qi)) for t, qi in zip(target[0].tolist(), q, strict=False))
    assert float(soft_label_kl(logits, target, 5.0)) == pytest.approx(expected, rel=1e-4)  # float32


def _uploads():
    return {0: {"low": torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]), "high": torch.tensor([[1.0, 0.0], [0.0, 1.0]]),
                "classes": torch.tensor([0, 1]), "counts": torch.tensor([4, 2])},
            1: {"low": torch.tensor([[0.0, 0.0, 1.0]]), "high": torch.tensor([[0.0, 1.0]]),
                "classes": torch.tensor([0]), "counts": torch.tensor([3])}}


@pytest.mark.parametrize("variant", ["eq8", "code"])
def test_server_prototypes_and_soft_labels_by_hand(variant):
    # server_epochs=0: the head is left as initialised, so the soft labels follow from its outputs.
    algo = LinearHeadFedMPS(server_epochs=0, soft_label=variant, tau2=2.0)
    ctx = make_ctx(num_classes=3, input_shape=(1, 8, 8))
    server0 = algo.init_server(ctx)
    head = torch.nn.Linear(2, 3)
    server0 = {**server0, "head": head.state_dict()}
    server, _ = algo.aggregate(ctx, server0, _uploads(), R)
    down = algo.broadcast(ctx, server, 0, R)
    assert down["classes"].tolist() == [0, 1]
    assert down["low"].tolist() == [[0.5, 0.0, 0.5], [0.0, 1.0, 0.0]]  # plain mean over owners
    assert down["high"].tolist() == [[0.5, 0.5], [0.0, 1.0]]
    with torch.no_grad():
        out = head(torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]))  # client0 c0, client0 c1, client1 c0
    if variant == "eq8":  # Eq. 8: mean of softened softmaxes
        c0 = (torch.softmax(out[0] / 2, 0) + torch.softmax(out[2] / 2, 0)) / 2
        c1 = torch.softmax(out[1] / 2, 0)
    else:  # the code: softmax of the mean logits
        c0 = torch.softmax((out[0] + out[2]) / 2 / 2, 0)
        c1 = torch.softmax(out[1] / 2, 0)
    assert torch.allclose(down["soft"], torch.stack([c0, c1]), atol=1e-6)
    assert torch.allclose(down["soft"].sum(1), torch.ones(2))


def test_server_head_learns_the_prototypes_and_persists():
    algo = LinearHeadFedMPS(server_epochs=30, server_lr=0.05)
    ctx = make_ctx(num_classes=3, input_shape=(1, 8, 8))
    server = algo.init_server(ctx)
    server = {**server, "head": torch.nn.Linear(2, 3).state_dict()}
    ups = _uploads()
    ups[1]["high"] = torch.tensor([[0.9, 0.1]])  # client 1's class-0 prototype near client 0's
    torch.manual_seed(0)
    server, losses = algo.aggregate(ctx, server, ups, R)
    assert losses["head_loss"] < losses["head_loss_first_epoch"]
    with torch.no_grad():  # the trained head separates the uploaded high-level prototypes
        pred = algo.module(ctx, None, server["head"], role="head")(torch.tensor([[1.0, 0.0], [0.0, 1.0]])).argmax(1)
    assert pred.tolist() == [0, 1]
    _, again = algo.aggregate(ctx, server, ups, R)  # the next round starts from the trained head
    assert again["head_loss_first_epoch"] < losses["head_loss_first_epoch"]


@pytest.mark.slow
def test_soft_label_weight_changes_the_local_update_once_soft_labels_exist():
    # Table VII's soft-label rows differ from the others only if mu > 0 moves the model: from the
    # same state and the same message (global prototypes and soft labels), mu = 1 and mu = 0 differ
    from fedlib.algorithms.base import Round
    from fedlib.data import FederatedData
    from fedlib.data.partition import label_partition
    from tests.conftest import tiny_image_dataset

    ds = tiny_image_dataset()
    part = label_partition("iid", ds.y_train.numpy(), ds.y_test.numpy(), 4, num_clients=2, seed=0, split="official")
    data, ctx = FederatedData(ds, part), make_ctx(num_clients=2)
    trained = {}
    for mu in (0.0, 1.0):
        algo = make_algorithm({"name": "fedmps", "mu": mu})
        server, client = algo.init_server(ctx), algo.init_client(ctx, 0)
        _, up, _ = algo.local_update(ctx, 0, client, {}, data.train[0], Round(1, 2, 0))  # round 1: no soft labels
        server, _ = algo.aggregate(ctx, server, {0: up}, Round(1, 2, 0))
        msg = algo.broadcast(ctx, server, 0, Round(2, 2, 0))
        assert "soft" in msg  # round 2 carries soft labels
        state, _, metrics = algo.local_update(ctx, 0, client, msg, data.train[0], Round(2, 2, 0))
        trained[mu] = (state["model"], metrics)
    assert "l_soft" in trained[1.0][1] and trained[1.0][1]["l_soft"] > 0 and "l_soft" not in trained[0.0][1]
    a, b = trained[0.0][0], trained[1.0][0]
    assert any(not torch.equal(a[k], b[k]) for k in a if a[k].is_floating_point())


def test_all_weights_zero_trains_like_fedproto_without_its_loss():
    # alpha = beta = mu = 0 leaves CE only; the prototypes and the nearest-prototype rule are shared
    sim_m, rec_m = tiny_run("fedmps", rounds=3, alpha=0.0, beta=0.0, mu=0.0)
    sim_p, rec_p = tiny_run("fedproto", rounds=3, lam=0.0)
    for cid in range(4):
        a, b = sim_m.clients[cid]["model"], sim_p.clients[cid]["model"]
        assert all(torch.equal(a[k], b[k]) for k in a)
    for key in ("acc_head", "acc_proto", "acc_proto_own"):
        assert [r["acc"][key] for r in rec_m] == [r["acc"][key] for r in rec_p]


@pytest.mark.slow
def test_first_round_is_cross_entropy_only_then_the_terms_switch_on():
    _, rec = tiny_run("fedmps", rounds=2)
    _, rec_ce = tiny_run("fedmps", rounds=2, alpha=0.0, beta=0.0, mu=0.0)
    assert rec[0]["train_loss"] == rec_ce[0]["train_loss"]
    assert rec[1]["train_loss"] > rec_ce[1]["train_loss"]  # SupCon x 7.14 and the KL are positive


@pytest.mark.slow
def test_communication_counts_table_v_cifar_setting():
    # FedMPS Table V (CIFAR-10, n=3, N=20, CNNCifar): the uplink is 59 (client, class) pairs
    # x (400 + 120) = 30,680; the paper's 30,780 adds one 10 x 10 soft-label table.
    data = _cifar_shaped(shots=2)
    ctx = make_ctx(num_classes=10, input_shape=(3, 32, 32), num_clients=20, model="cnn_cifar")
    recs = Simulator(make_algorithm({"name": "fedmps"}), ctx, data, rounds=2, progress=False).run()
    assert recs[0]["up_params"] == recs[1]["up_params"] == 59 * (400 + 120)
    assert recs[0]["down_params"] == 0
    assert recs[1]["down_params"] == 20 * 10 * (400 + 120 + 10)  # every client: all classes + soft labels


@pytest.mark.parametrize("n,d,batch", [(71, 1568, 4), (12, 5, 4), (3, 2, 4)])  # a short last batch, none, one batch
def test_written_out_head_loop_agrees_with_autograd_and_adam(n, d, batch):
    # Prepare: one Linear head and one round's prototypes, trained both ways from the same weights and RNG state
    from fedlib.algorithms.base import linear_adam_epochs, server_epochs
    from fedlib.counting import OpCounter

    torch.manual_seed(n)
    ref = torch.nn.Linear(d, 10)
    fast = torch.nn.Linear(d, 10)
    fast.load_state_dict(ref.state_dict())
    x, y = F.normalize(torch.randn(n, d), dim=1), torch.randint(0, 10, (n,))
    # Execute
    torch.manual_seed(1)
    opt = torch.optim.Adam(ref.parameters(), lr=1e-2, foreach=True)
    want = server_epochs(ref, opt, x, y, 6, batch, lambda xb, yb: F.cross_entropy(ref(xb), yb))
    after_ref = torch.rand(1)
    torch.manual_seed(1)
    with OpCounter() as c:
        got = linear_adam_epochs(fast, x, y, 6, batch, lr=1e-2)
    # Assert: the same batches (the same draws), weights and losses at rounding level, six ops a step
    assert torch.equal(torch.rand(1), after_ref)
    with torch.no_grad():
        for a, b in zip(ref.parameters(), fast.parameters(), strict=True):
            assert float((a - b).abs().max() / a.abs().max()) < 1e-5
    assert got.dtype == want.dtype == torch.float64 and torch.allclose(got, want, rtol=1e-6, atol=0)
    steps = 6 * math.ceil(n / batch)
    assert c.total_ops <= 6 * steps + 40 and dict(c.syncs) == {"h2d": 1}  # the batch order's one upload


def test_inexact_rounds_train_a_linear_head_written_out_and_agree():
    # Round.exact (the sequential reference) trains with autograd and torch.optim.Adam; an inexact round (the
    # batched executor) takes the written-out loop; the two servers agree at rounding level
    from fedlib.algorithms.base import Round

    algo = LinearHeadFedMPS(server_epochs=30, server_lr=0.05)
    ctx = make_ctx(num_classes=3, input_shape=(1, 8, 8))
    server = {**algo.init_server(ctx), "head": torch.nn.Linear(2, 3).state_dict()}
    out = {}
    for exact in (True, False):
        torch.manual_seed(0)
        out[exact] = algo.aggregate(ctx, server, _uploads(), Round(1, 2, 0, exact=exact))
    (a, la), (b, lb) = out[True], out[False]
    assert not torch.equal(a["head"]["weight"], b["head"]["weight"])  # the other loop ran
    for k in a["head"]:
        assert torch.allclose(a["head"][k], b["head"][k], rtol=1e-5, atol=1e-7)
    assert torch.allclose(a["soft"], b["soft"], atol=1e-6)
    assert la == pytest.approx(lb, rel=1e-5)
