"""ProtoNorm's model-heterogeneous baselines (Table 1): LG-FedAvg, FedDistill, FML, FedKD.

Hand-computed losses and aggregations, FedKD's SVD compression and threshold schedule, and
one 2-round run per method on the heterogeneous family ``ht0`` with the engine's byte counts.
"""

import math

import pytest
import torch
import torch.nn as nn

from fedlib.algorithms import make_algorithm
from fedlib.algorithms.base import Round, head_message, load_head_message
from fedlib.algorithms.fedkd import compress_params, recover_params, svd_compress
from fedlib.algorithms.fml import fml_losses
from fedlib.data import FederatedData
from fedlib.data.partition import label_partition
from fedlib.engine import Simulator, message_size
from fedlib.losses import kl_loss
from fedlib.prototypes import proto_regulariser
from tests.conftest import R, make_ctx, tiny_image_dataset


def logit_regulariser(logits, y, table, has, kind):
    """FedDistill's R as the module computes it: the shared prototype regulariser on logits."""
    return proto_regulariser(logits, y, table, has, kind)


def kl_to(logits, target_logits, reduction):
    """KL(softmax(target) || softmax(logits)) as FML and FedKD compute it."""
    return kl_loss(logits, target_logits, 1.0, reduction, target_logits=True)

# -- LG-FedAvg -------------------------------------------------------------------------------


class _Net(nn.Module):
    def __init__(self, head):
        super().__init__()
        self.base = nn.Linear(2, 3)
        self.head = head


def test_lgfedavg_head_names_do_not_depend_on_the_head_wrapper():
    torch.manual_seed(0)
    plain, wrapped = _Net(nn.Linear(3, 2)), _Net(nn.Sequential(nn.Dropout(0.2), nn.Linear(3, 2)))
    msg = head_message(plain)
    assert sorted(msg) == ["head.0.bias", "head.0.weight"] and sorted(head_message(wrapped)) == sorted(msg)
    load_head_message(wrapped, msg)
    assert torch.equal(wrapped.head[1].weight, plain.head.weight) and torch.equal(wrapped.head[1].bias, plain.head.bias)
    assert not torch.equal(wrapped.base.weight, plain.base.weight)  # the extractor stays private


@pytest.mark.parametrize("weighted,expected", [(True, 2.5), (False, 2.0)])
def test_lgfedavg_aggregate_by_hand(weighted, expected):
    algo = make_algorithm({"name": "lgfedavg", "weighted": weighted})
    ctx = make_ctx(num_classes=2)
    server = algo.init_server(ctx)
    assert algo.broadcast(ctx, server, 0, R) == {}  # round 1: every client trains its own head
    ups = {0: {"head.0.weight": torch.full((2, 3), 1.0), "head.0.bias": torch.zeros(2), "num_samples": 1},
           1: {"head.0.weight": torch.full((2, 3), 3.0), "head.0.bias": torch.ones(2), "num_samples": 3}}
    down = algo.broadcast(ctx, algo.aggregate(ctx, server, ups, R)[0], 1, R)
    assert sorted(down) == ["head.0.bias", "head.0.weight"]
    assert torch.allclose(down["head.0.weight"], torch.full((2, 3), expected))
    assert torch.allclose(down["head.0.bias"], torch.full((2,), 0.75 if weighted else 0.5))


# -- FedDistill ------------------------------------------------------------------------------


def test_feddistill_regulariser_by_hand():
    logits = torch.tensor([[1.0, 2.0], [0.0, 0.0]], requires_grad=True)
    y = torch.tensor([0, 1])
    table, has = torch.tensor([[3.0, 0.0], [9.0, 9.0]]), torch.tensor([True, False])
    reg = logit_regulariser(logits, y, table, has, "mse")
    assert reg.item() == pytest.approx(((1 - 3) ** 2 + (2 - 0) ** 2) / 4)  # class 1 has no global logits
    reg.backward()
    assert torch.equal(logits.grad[1], torch.zeros(2))
    soft = logit_regulariser(logits.detach(), y, table, has, "soft_ce").item()
    p = [math.exp(3) / (math.exp(3) + 1), 1 / (math.exp(3) + 1)]
    lse = math.log(math.exp(1) + math.exp(2))
    assert soft == pytest.approx((-(p[0] * (1 - lse) + p[1] * (2 - lse)) + math.log(2)) / 2)


def test_feddistill_server_averages_logits_per_class():
    algo = make_algorithm({"name": "feddistill"})
    ctx = make_ctx(num_classes=3)
    server = algo.init_server(ctx)
    ups = {0: {"logits": torch.tensor([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]]), "classes": torch.tensor([0, 1])},
           1: {"logits": torch.tensor([[3.0, 4.0, 2.0]]), "classes": torch.tensor([0])}}
    server, _ = algo.aggregate(ctx, server, ups, R)
    down = algo.broadcast(ctx, server, 0, R)
    assert down["classes"].tolist() == [0, 1]
    assert down["logits"].tolist() == [[2.0, 2.0, 1.0], [0.0, 2.0, 0.0]]  # plain mean over clients


# -- FML -------------------------------------------------------------------------------------


def test_fml_losses_by_hand():
    out = torch.tensor([[0.0, math.log(3.0)]], requires_grad=True)  # p = (1/4, 3/4)
    meme = torch.tensor([[0.0, 0.0]], requires_grad=True)           # q = (1/2, 1/2)
    y = torch.tensor([0])
    kl_qp = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)   # KL(q || p)
    kl_pq = 0.25 * math.log(0.25 / 0.5) + 0.75 * math.log(0.75 / 0.5)  # KL(p || q)
    assert kl_to(out, meme, "batchmean").item() == pytest.approx(kl_qp)
    loss, loss_meme = fml_losses(out, meme, y, alpha=0.5, beta=0.5, reduction="mean")
    # HtFLlib: alpha * CE + (1 - alpha) * nn.KLDivLoss() (mean over the B x C = 2 elements)
    assert loss.item() == pytest.approx(0.5 * math.log(4) + 0.5 * kl_qp / 2)
    assert loss_meme.item() == pytest.approx(0.5 * math.log(2) + 0.5 * kl_pq / 2)
    # joint backward (HtFLlib): the private loss also moves the meme; detached (DML): it does not
    assert torch.autograd.grad(loss, meme)[0].abs().sum() > 0
    loss, _ = fml_losses(out, meme, y, 0.5, 0.5, "mean", joint=False)
    assert torch.autograd.grad(loss, meme, allow_unused=True)[0] is None


def test_fml_server_averages_memes():
    algo = make_algorithm({"name": "fml"})
    ctx = make_ctx()
    server = algo.init_server(ctx)
    assert algo.broadcast(ctx, server, 0, R) == {}
    ups = {c: {"meme.w": torch.full((2, 2), float(c)), "meme.b": torch.tensor([c * 2.0])} for c in range(3)}
    down = algo.broadcast(ctx, algo.aggregate(ctx, server, ups, R)[0], 0, R)
    assert sorted(down) == ["meme.b", "meme.w"]
    assert down["meme.w"].tolist() == [[1.0, 1.0], [1.0, 1.0]] and down["meme.b"].tolist() == [2.0]


# -- FedKD -----------------------------------------------------------------------------------

W = torch.tensor([[3.0, 0.0, 0.0, 0.0], [0.0, 2.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]])  # energies 9, 4, 1


@pytest.mark.parametrize("energy,rank", [(0.5, 1), (0.9, 2), (0.95, 3), (1.0, 3)])
def test_fedkd_svd_keeps_smallest_rank_reaching_the_energy(energy, rank):
    u, s, v = svd_compress(W, energy)
    assert u.shape == (3, rank) and s.shape == (rank,) and v.shape == (rank, 4)
    kept = W.clone()
    kept[rank:] = 0  # W's rows are its singular directions
    assert torch.allclose((u * s) @ v, kept, atol=1e-6)


def test_fedkd_htfllib_rank_rule_drops_a_tensor_needing_full_rank():
    assert svd_compress(W, 0.9, rule="htfllib")[1].shape == (2,)  # 13/14 > 0.9
    assert svd_compress(W, 0.95, rule="htfllib")[1].shape == (0,)  # full rank needed -> nothing sent
    msg = compress_params({"w": W}, 0.95, rule="htfllib")
    assert torch.equal(recover_params(msg, {"w": W.shape})["w"], torch.zeros(3, 4))


def test_fedkd_message_sends_factors_and_small_tensors():
    conv = torch.zeros(2, 1, 2, 2)
    conv[0, 0] = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
    conv[1, 0] = torch.tensor([[1.0, 0.0], [0.0, 0.0]])  # pooled energies per rank: 5, 1
    params = {"lin": W, "bias": torch.ones(3), "conv": conv}
    msg = compress_params(params, 0.8)
    assert sorted(msg) == ["mentee.bias", "svd_s.conv", "svd_s.lin", "svd_u.conv", "svd_u.lin",
                           "svd_v.conv", "svd_v.lin"]
    assert msg["svd_u.conv"].shape == (2, 1, 2, 1)  # kernel mode: one rank for every 2x2 kernel
    assert message_size(msg)[0] == (3 * 2 + 2 + 2 * 4) + 3 + (2 * 2 + 2 + 2 * 2)
    back = recover_params(msg, {k: v.shape for k, v in params.items()})
    assert torch.allclose(back["conv"][0, 0], torch.tensor([[2.0, 0.0], [0.0, 0.0]]), atol=1e-6)
    assert torch.equal(back["bias"], torch.ones(3))
    assert compress_params({"conv": conv}, 0.8, mode="matrix")["svd_u.conv"].shape == (2, 1)


def test_fedkd_threshold_schedule():
    algo = make_algorithm({"name": "fedkd", "schedule_rounds": 4})
    got = [algo.energy(Round(done + 1, 6, 0)) for done in range(6)]
    assert got == pytest.approx([0.95, 0.9575, 0.965, 0.9725, 0.98, 0.98])
    # by default the schedule spans the run's rounds (the round record's total)
    default = make_algorithm({"name": "fedkd"})
    assert [default.energy(Round(r, 5, 0)) for r in (1, 5)] == pytest.approx([0.95, 0.95 + 0.8 * 0.03])


# -- 2-round runs on the heterogeneous family ------------------------------------------------


@pytest.fixture(scope="module")
def ht0():
    ds = tiny_image_dataset(per_class_train=16, per_class_test=4)  # 16 samples a client: one batch
    part = label_partition("pathological", ds.y_train.numpy(), ds.y_test.numpy(), 4, num_clients=4,
                           classes_per_client=2, balance=True, seed=1, split="official")
    ctx = make_ctx(model="ht0", num_classes=4, input_shape=(1, 8, 8), batch_size=16)
    return ctx, FederatedData(ds, part), int((part.counts > 0).sum())


def run(ht0, spec):
    ctx, data, _ = ht0
    sim = Simulator(make_algorithm(spec), ctx, data, rounds=2, progress=False)
    recs = sim.run()
    assert all(math.isfinite(r["train_loss"]) for r in recs)
    assert len(recs[-1]["clients"]["acc_head"]) == 4
    return sim, recs


def n_params(model):
    return sum(p.numel() for p in model.parameters())


@pytest.mark.slow
def test_lgfedavg_ht0_sends_exactly_the_head(ht0):
    sim, recs = run(ht0, {"name": "lgfedavg"})
    head = 512 * 4 + 4
    assert recs[0]["up_params"] == recs[1]["up_params"] == 4 * head
    assert recs[0]["up_bytes"] == 4 * (head * 4 + 1 * 8)  # float32 head + num_samples (the loss is a metric)
    assert recs[0]["down_params"] == 0 and recs[1]["down_params"] == 4 * head
    server = sim.server["head"]
    algo, ctx = sim.algo, sim.ctx
    for cid in range(4):  # every client evaluates its own extractor with the global head
        model = algo.predict_model(ctx, cid, sim.clients[cid], algo.broadcast(ctx, sim.server, cid, R))
        mine = head_message(model)
        assert all(torch.equal(mine[k], server[k]) for k in server)


@pytest.mark.slow
def test_feddistill_ht0_sends_class_logits_only(ht0):
    _, recs = run(ht0, {"name": "feddistill"})
    pairs = ht0[2]
    assert recs[0]["up_params"] == recs[1]["up_params"] == pairs * 4 <= 4 * 4 * 4  # at most C x C per client
    assert recs[0]["down_params"] == 0 and recs[1]["down_params"] == 4 * 4 * 4


@pytest.mark.slow
def test_fml_ht0_shares_the_first_member_as_meme(ht0):
    sim, recs = run(ht0, {"name": "fml"})
    algo, ctx = sim.algo, sim.ctx
    memes = [algo.module(ctx, c, sim.clients[c]["meme"], role="meme", fresh=True) for c in range(4)]
    private = [algo.module(ctx, c, sim.clients[c]["model"], fresh=True) for c in range(4)]
    resnet8 = [n for n, _ in private[0].named_parameters()]  # client 0 runs the first member
    assert all([n for n, _ in m.named_parameters()] == resnet8 for m in memes)
    assert type(private[2].base).__name__ == "ShuffleNetV2"  # private models stay heterogeneous
    size = n_params(memes[0])
    assert recs[0]["up_params"] == recs[1]["up_params"] == 4 * size
    assert recs[0]["down_params"] == 0 and recs[1]["down_params"] == 4 * size
    for name, _ in memes[0].named_parameters():  # the server's meme is the mean of the uploads
        mean = sum(m.get_parameter(name) for m in memes) / 4
        assert torch.allclose(sim.server["weights"]["meme." + name], mean, atol=1e-6)


@pytest.mark.slow
def test_fedkd_ht0_counts_the_compressed_factors(ht0):
    # "matrix" keeps the run fast; the default "kernel" mode is checked by hand above
    spec = {"name": "fedkd", "schedule_rounds": 2, "svd_mode": "matrix"}
    algo = make_algorithm(spec)
    sim, recs = run(ht0, spec)
    mentees = [algo.module(sim.ctx, c, sim.clients[c]["mentee"], role="mentee", fresh=True) for c in range(4)]
    # the engine counted exactly the factors each client sent in round 2 (T = 0.965)
    ups = [compress_params(dict(m.named_parameters()), algo.energy(Round(2, 2, 0)), "matrix") for m in mentees]
    assert recs[1]["up_params"] == sum(message_size(u)[0] for u in ups)
    assert recs[1]["up_params"] != 4 * n_params(mentees[0])
    matrices = [n for n, p in mentees[0].named_parameters() if p.dim() >= 2]
    assert all("svd_u." + n in ups[0] and "mentee." + n not in ups[0] for n in matrices)
    assert recs[0]["down_params"] == 0 and recs[0]["down_bytes"] == 0  # round 1: nothing travels (T is not sent)
    assert recs[1]["down_params"] > 0 and recs[1]["down_params"] % 4 == 0
    down = algo.broadcast(ht0[0], sim.server, 0, Round(3, 2, 0))
    assert algo.energy(Round(3, 2, 0)) == pytest.approx(0.98) and "energy" not in down
    assert all("mentee." + n not in down for n in matrices)
