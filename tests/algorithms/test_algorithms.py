"""Contract suite over every registered algorithm, plus hand-checked math and equivalences."""

import copy
import dataclasses

import pytest
import torch

from fedlib.algorithms import ALGORITHMS, make_algorithm
from fedlib.algorithms.base import Round, check_message
from fedlib.algorithms.checks import same_state
from fedlib.data import FederatedData
from fedlib.data.partition import label_partition, nway_kshot
from fedlib.data.sources import Dataset
from fedlib.engine import Simulator, message_size
from fedlib.validation import ConfigError
from tests.conftest import R, label_blocks, make_ctx, tiny_image_dataset


def tiny_run(name, seed=0, rounds=2, **hp):
    ds = tiny_image_dataset()
    part = label_partition("pathological", ds.y_train.numpy(), ds.y_test.numpy(), 4, num_clients=4,
                           classes_per_client=2, balance=True, seed=1, split="official")
    data = FederatedData(ds, part)
    algo = make_algorithm({"name": name, **hp})
    sim = Simulator(algo, make_ctx(seed=seed), data, rounds=rounds, progress=False)
    return sim, sim.run()


def strip_time(records):
    return [{k: v for k, v in r.items() if "seconds" not in k} for r in records]


def slow_except(*keep):
    """Every registered name, those outside ``keep`` marked slow: a contract check that trains takes 0.2-11 s per
    method on 2 cores, so the fast loop (``make test-fast``) runs it on ``keep`` and ``make test`` on all."""
    return [name if name in keep else pytest.param(name, marks=pytest.mark.slow) for name in sorted(ALGORITHMS)]


@pytest.mark.parametrize("name", slow_except("fedproto"))
def test_contract_two_rounds_deterministic_and_rules(name):
    sim, recs = tiny_run(name)
    assert [r["round"] for r in recs] == [1, 2]
    rules = ALGORITHMS[name].RULES
    for rule in rules:
        assert f"acc_{rule}" in recs[-1]["acc"] and f"acc_{rule}_own" in recs[-1]["acc"]
        assert len(recs[-1]["clients"][f"acc_{rule}"]) == 4
    # same config and seed -> identical numbers
    _, again = tiny_run(name)
    assert strip_time(again) == strip_time(recs)


@pytest.mark.parametrize("name", slow_except("fedproto", "gfpl"))
def test_contract_messages_hold_only_tensors_and_numbers(name):
    algo = make_algorithm({"name": name, **SHORT_SCHEDULE.get(name, {})})
    ds = tiny_image_dataset()
    part = label_partition("iid", ds.y_train.numpy(), ds.y_test.numpy(), 4, num_clients=2, seed=0,
                           split="official")
    data = FederatedData(ds, part)
    ctx = make_ctx(num_clients=2)
    server = algo.init_server(ctx)
    client = algo.init_client(ctx, 0)
    msg = algo.broadcast(ctx, server, 0, R)
    client, up, _ = algo.local_update(ctx, 0, client, msg, data.train[0], R)
    for m in (msg, up):
        for k, v in m.items():
            assert isinstance(k, str) and k == k.lower()
            assert isinstance(v, (torch.Tensor, int, float)) and not isinstance(v, bool)
    params, nbytes = message_size(up)
    tensors = [v for v in up.values() if isinstance(v, torch.Tensor)]
    assert nbytes == sum(t.numel() * t.element_size() for t in tensors) + 8 * (len(up) - len(tensors))
    assert params == sum(t.numel() for t in tensors if t.is_floating_point())


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_contract_invalid_hyperparameters_are_rejected(name):
    cls = ALGORITHMS[name]
    for field, rule in cls.CONSTRAINTS.items():
        bad = rule.invalid_example()
        with pytest.raises(ConfigError, match=rf"algorithm \({name}\)\.{field}: got"):
            make_algorithm({"name": name, field: bad})
    with pytest.raises(ConfigError, match="unknown field"):
        make_algorithm({"name": name, "not_a_field": 1})


def _assert_plain(obj, where="state"):
    """State is plain data: containers of tensors, numbers, strings and None (no modules, no objects)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            assert isinstance(k, (str, int)), f"{where}: key {k!r}"
            _assert_plain(v, f"{where}[{k!r}]")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _assert_plain(v, f"{where}[{i}]")
    else:
        assert obj is None or isinstance(obj, (torch.Tensor, int, float, str, bool)), f"{where}: {type(obj)}"


# methods whose messages change from a later round on, made to reach it within the test's 3 rounds
SHORT_SCHEDULE = {"gfpl": {"start": 2, "every": 1}}


# FedProto, and GFPL for the second half of a round (reply / receive)
@pytest.mark.parametrize("name", slow_except("fedproto", "gfpl"))
def test_contract_v2_declared_messages_plain_state_and_pure_predict(name, tmp_path):
    # Prepare: 3 clients of 2 classes each, a hand-driven loop with the round record
    algo = make_algorithm({"name": name, **SHORT_SCHEDULE.get(name, {})})
    ds = tiny_image_dataset()
    part = label_partition("pathological", ds.y_train.numpy(), ds.y_test.numpy(), 4, num_clients=3,
                           classes_per_client=2, balance=True, seed=1, split="official")
    data = FederatedData(ds, part)
    ctx = make_ctx(num_clients=3)
    clients = {c: algo.init_client(ctx, c) for c in range(3)}
    server = algo.init_server(ctx)
    replies = 0
    for r in (1, 2, 3):
        rnd = Round(r, 3, ctx.seed)
        uploads = {}
        for cid in range(3):
            # Execute + Assert: every broadcast and upload matches the module's declaration
            msg = algo.broadcast(ctx, server, cid, rnd)
            check_message(msg, algo.BROADCAST, ctx.num_classes, f"{name} broadcast round {r}")
            clients[cid], up, metrics = algo.local_update(ctx, cid, clients[cid], msg, data.train[cid], rnd)
            check_message(up, algo.UPLOAD, ctx.num_classes, f"{name} upload round {r}")
            assert all(isinstance(v, (int, float)) for v in metrics.values()) and "train_loss" in metrics
            uploads[cid] = up
        server, server_metrics = algo.aggregate(ctx, server, uploads, rnd)
        assert all(isinstance(v, (int, float)) for v in server_metrics.values())
        for cid in range(3):  # the optional second half of the round
            msg = algo.reply(ctx, server, cid, rnd)
            if msg is not None:
                replies += 1
                check_message(msg, algo.REPLY, ctx.num_classes, f"{name} reply round {r}")
                clients[cid], metrics = algo.receive(ctx, cid, clients[cid], msg, data.train[cid], rnd)
                assert all(isinstance(v, (int, float)) for v in metrics.values())
    assert (replies > 0) == bool(algo.REPLY), "a method that declares a reply sends one (see SHORT_SCHEDULE)"
    # state is plain data and survives a weights_only checkpoint bit for bit
    _assert_plain(clients, "clients")
    _assert_plain(server, "server")
    torch.save({"clients": clients, "server": server}, tmp_path / "ckpt.pt")
    back = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    assert same_state(back["clients"], clients) and same_state(back["server"], server)
    # predict (and features) never change client or server state
    before = copy.deepcopy((clients, server))
    for cid in range(3):
        msg = algo.broadcast(ctx, server, cid, Round(4, 3, ctx.seed))
        scores = algo.predict(ctx, cid, clients[cid], msg, data.test[cid].x)
        assert set(scores) == set(algo.RULES)
        assert all(s.shape == (len(data.test[cid]), 4) for s in scores.values())
        algo.features(ctx, cid, clients[cid], msg, data.test[cid].x)
    assert same_state(clients, before[0]) and same_state(server, before[1])


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_contract_every_hyperparameter_has_a_constraint(name):
    cls = ALGORITHMS[name]
    fields = {f.name for f in dataclasses.fields(cls)}
    missing = sorted(fields - set(cls.CONSTRAINTS))
    assert fields == set(cls.CONSTRAINTS), f"{name}: fields without a constraint {missing}"


def test_register_refuses_a_duplicate_or_missing_name():
    from fedlib.algorithms import register
    from fedlib.algorithms.fedavg import FedAvg

    @dataclasses.dataclass(frozen=True)
    class Copy(FedAvg):
        name = "fedavg"

    with pytest.raises(TypeError, match="'fedavg' of Copy is already registered by fedlib.algorithms.fedavg.FedAvg"):
        register(Copy)

    @dataclasses.dataclass(frozen=True)
    class Nameless(FedAvg):
        pass

    with pytest.raises(TypeError, match="Nameless has no 'name' of its own"):
        register(Nameless)
    assert ALGORITHMS["fedavg"] is FedAvg


def test_check_message_names_the_bad_key():
    spec = {"protos": "float[k, d]", "classes": "int[k]", "soft?": "float[k, C]"}
    ok = {"protos": torch.zeros(2, 5), "classes": torch.tensor([0, 3])}
    check_message(ok, spec, 4)
    check_message({**ok, "soft": torch.zeros(2, 4)}, spec, 4)
    for bad, match in (({**ok, "classes": torch.tensor([0, 1, 2])},
                        "'classes' has shape \\(3,\\); declared \\[k\\] with k = 2"),
                       ({**ok, "soft": torch.zeros(2, 3)}, "with C = 4"),
                       ({**ok, "classes": torch.zeros(2)}, "'classes' must be a int tensor"),
                       ({"classes": ok["classes"]}, "declared key 'protos' is missing"),
                       ({**ok, "train_loss": 0.5}, "undeclared keys \\['train_loss'\\]")):
        with pytest.raises(ValueError, match=match):
            check_message(bad, spec, 4)


def test_fedproto_aggregate_by_hand():
    algo = make_algorithm({"name": "fedproto"})
    ctx = make_ctx(num_classes=3)
    server = algo.init_server(ctx)
    ups = {0: {"protos": torch.tensor([[1.0, 0.0], [0.0, 2.0]]), "classes": torch.tensor([0, 1]),
               "counts": torch.tensor([5, 1])},
           1: {"protos": torch.tensor([[3.0, 4.0]]), "classes": torch.tensor([0]), "counts": torch.tensor([1])}}
    server, _ = algo.aggregate(ctx, server, ups, R)
    down = algo.broadcast(ctx, server, 0, R)
    assert down["classes"].tolist() == [0, 1]
    assert down["protos"].tolist() == [[2.0, 2.0], [0.0, 2.0]]  # unweighted mean over owners
    # a later round where class 1 is not uploaded keeps its previous prototype
    server, _ = algo.aggregate(ctx, server, {0: {"protos": torch.tensor([[0.0, 0.0]]), "classes": torch.tensor([0]),
                                                 "counts": torch.tensor([2])}}, R)
    assert algo.broadcast(ctx, server, 0, R)["protos"].tolist() == [[0.0, 0.0], [0.0, 2.0]]


def test_fedproto_with_lam_zero_equals_local_training():
    sim_p, rec_p = tiny_run("fedproto", lam=0.0, rounds=3)
    sim_l, rec_l = tiny_run("local", rounds=3)
    for cid in range(4):
        a, b = sim_p.clients[cid]["model"], sim_l.clients[cid]["model"]
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert [r["acc"]["acc_head"] for r in rec_p] == [r["acc"]["acc_head"] for r in rec_l]


def test_fedavg_one_client_equals_local_sgd():
    ds = tiny_image_dataset()
    part = label_partition("iid", ds.y_train.numpy(), ds.y_test.numpy(), 4, num_clients=1, seed=0, split="official")
    data = FederatedData(ds, part)
    ctx = make_ctx(num_clients=1)
    sim = Simulator(make_algorithm({"name": "fedavg"}), ctx, data, rounds=2, progress=False)
    sim.run()
    # the same two epochs by hand: server init, then the engine's derived seeds
    from fedlib.algorithms.base import derive_seed, sgd_epochs
    import torch.nn.functional as F

    model = ctx.new_model(None)
    for r in (1, 2):
        s = derive_seed(ctx.seed, 1, r, 0)
        torch.manual_seed(s)
        sgd_epochs(ctx, model, data.train[0], torch.Generator().manual_seed(s),
                   lambda xb, yb, e: F.cross_entropy(model(xb)[0], yb))
    got = sim.server["weights"]
    assert all(torch.allclose(got["w." + k], v) for k, v in model.state_dict().items() if v.is_floating_point())


@pytest.mark.slow
def test_no_shuffle_takes_batches_in_data_order_and_leaves_run_ids_alone():
    import dataclasses

    import torch.nn.functional as F

    from fedlib.algorithms.base import sgd_epochs
    from fedlib.config import run_id, validate

    ds = tiny_image_dataset()
    part = label_partition("iid", ds.y_train.numpy(), ds.y_test.numpy(), 4, num_clients=1, seed=0, split="official")
    data = FederatedData(ds, part).train[0]
    ctx = make_ctx(num_clients=1, batch_size=5, momentum=0.0)
    fixed = dataclasses.replace(ctx, train=dataclasses.replace(ctx.train, shuffle=False, local_epochs=2))
    seen = []

    def loss_fn(xb, yb, e):
        seen.append(yb.clone())
        return F.cross_entropy(model(xb)[0], yb)

    model = ctx.new_model(None)
    sgd_epochs(fixed, model, data, torch.Generator().manual_seed(0), loss_fn)
    steps = len(data) // 5
    order = data.y[:steps * 5].view(steps, 5)
    assert len(seen) == 2 * steps and all(torch.equal(b, order[i % steps]) for i, b in enumerate(seen))
    seen.clear()
    sgd_epochs(ctx, model, data, torch.Generator().manual_seed(0), loss_fn)
    assert not all(torch.equal(b, order[i]) for i, b in enumerate(seen))      # the default shuffles
    raw = {"dataset": "fmnist", "model": "fedavg_cnn", "algorithm": {"name": "fedavg"},
           "partition": {"scheme": "iid", "num_clients": 2}, "train": {"rounds": 1}}
    base = run_id(validate(raw), 0)
    assert run_id(validate({**raw, "train": {"rounds": 1, "shuffle": True}}), 0) == base
    assert run_id(validate({**raw, "train": {"rounds": 1, "shuffle": False}}), 0) != base


def _cifar_shaped(shots):
    """CIFAR-10 labels (5000/1000 per class) with constant images: enough for exact counts."""
    y_tr, y_te = torch.from_numpy(label_blocks(5000, 10)), torch.from_numpy(label_blocks(1000, 10))
    zero = torch.zeros(1, 3, 32, 32)
    ds = Dataset("cifar_shaped", zero.expand(len(y_tr), -1, -1, -1), y_tr, zero.expand(len(y_te), -1, -1, -1),
                 y_te, 10, "constant images")
    part = nway_kshot(y_tr.numpy(), y_te.numpy(), 10, num_clients=20, ways=3, shots=shots, stdev=1,
                      block=shots + 1, test_shots=1, seed=1234)
    return FederatedData(ds, part)


@pytest.mark.slow
@pytest.mark.parametrize("name,expected", [("fedavg", 20 * 62_006), ("fedproto", 59 * 120)])
def test_communication_counts_match_fedmps_table_v(name, expected):
    # FedMPS Table V (CIFAR-10, n=3, N=20, CNNCifar): FedAvg 1,240,120; FedProto 7,080 = 59 x 120.
    data = _cifar_shaped(shots=2)  # shots do not change the counts; keep the round cheap
    ctx = dataclasses.replace(make_ctx(num_classes=10, input_shape=(3, 32, 32), num_clients=20, model="cnn_cifar"))
    sim = Simulator(make_algorithm({"name": name}), ctx, data, rounds=2, progress=False)
    recs = sim.run()
    assert recs[0]["up_params"] == expected
    assert recs[1]["up_params"] == expected
    if name == "fedavg":
        assert recs[0]["down_params"] == expected
        assert recs[0]["up_bytes"] == expected * 4 + 20 * 1 * 8  # float32 + num_samples (the loss is a metric)
    else:
        assert recs[0]["down_params"] == 0  # no global prototypes exist before round 1
        assert recs[1]["down_params"] == 20 * 10 * 120  # every client receives all 10 global prototypes
