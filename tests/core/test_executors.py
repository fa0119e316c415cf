"""The batched executor (torch.func, clients in lockstep) against the sequential reference."""

import copy

import pytest
import torch
import torch.nn.functional as F

from fedlib.algorithms import make_algorithm
from fedlib.algorithms.base import Round, train_task
from fedlib.data import ClientData, FederatedData
from fedlib.data.partition import label_partition
from fedlib.engine import Simulator
from fedlib.executors import Batched
from fedlib.models import build_model, member
from tests.conftest import make_ctx, tiny_image_dataset


def setup(name, model="cnn_fmnist", shape=(1, 8, 8), clients=5, drop_last=True, **hp):
    # Dirichlet sizes (25-36 samples: 3 or 4 batches of 8) and the last client cut to 5 samples, smaller than
    # one batch: clients differ in their number of steps and in their batch sizes
    ds = tiny_image_dataset(shape=shape)
    part = label_partition("dirichlet", ds.y_train.numpy(), ds.y_test.numpy(), 4, num_clients=clients, alpha=0.5,
                           min_size=5, seed=1, split="official")
    data = FederatedData(ds, part)
    d = data.train[-1]
    data.train[-1] = ClientData(d.cid, d.x[:5], d.y[:5], torch.unique(d.y[:5]))
    ctx = make_ctx(num_clients=clients, model=model, input_shape=shape, seed=3, drop_last=drop_last)
    return make_algorithm({"name": name, **hp}), ctx, data


def rel_diff(a: dict, b: dict) -> float:
    """Largest |a - b| relative to the tensor's scale, over the floating tensors of two state dicts; tensors
    below 0.01 (conv biases in front of BatchNorm, whose gradient is zero up to rounding) at 0.01's scale."""
    return max(float((a[k] - b[k]).abs().max() / a[k].abs().max().clamp(min=1e-2)) for k in a
               if a[k].is_floating_point())


def both(algo, ctx, data, rounds):
    out = {}
    for ex in ("sequential", "batched"):
        sim = Simulator(algo, ctx, data, rounds=rounds, progress=False, executor=ex)
        out[ex] = (sim.run(), sim.clients)
    return out


#: a method's case where its defaults would leave part of its round out of three rounds on tiny data (GFPL's
#: interaction from round 1) or a sharper value (FedProx's mu); every other method at its defaults
CASE_HP = {"fedprox": {"mu": 0.1}, "gfpl": {"start": 1, "every": 1}}
#: further cases of a method whose batched path has a variant of its own (``drop_last`` is the clients' loader's)
VARIANTS = {"fedproto": [{"drop_last": False}], "fedmps": [{"proto_pass": "eval"}],
            "gfpl": [{"start": 1, "every": 1, "dcs": False}], "fedpac": [{"head_epochs": 0}],
            "cflgp": [{"profile": "gradient"}]}


def batched_cases(algorithms=None) -> list[tuple[str, dict]]:
    """``(name, hyperparameters)`` of every registered method (``algorithms``: default
    :data:`fedlib.algorithms.ALGORITHMS`) that the batched executor trains, ``batch_support()`` None, at its
    :data:`CASE_HP` (or its defaults), then each of its :data:`VARIANTS` that batches too: a method added to fedlib is
    checked here with no edit of this file."""
    from fedlib.algorithms import ALGORITHMS

    out = []
    for name in sorted(ALGORITHMS if algorithms is None else algorithms):
        for hp in [CASE_HP.get(name, {}), *VARIANTS.get(name, [])]:
            algo = {"name": name, **{k: v for k, v in hp.items() if k != "drop_last"}}
            if make_algorithm(algo).batch_support() is None:
                out.append((name, hp))
    return out


def case_id(name: str, hp: dict) -> str:
    return "-".join([name, *(f"{k}={v}" for k, v in hp.items())])


#: the cases this test listed by hand before it read the registry (each stays among the derived ones)
HAND_CASES = [("fedproto", {}), ("fedproto", {"drop_last": False}), ("fedmps", {}), ("fedmps", {"proto_pass": "eval"}),
              ("local", {}), ("fedavg", {}), ("fedprox", {"mu": 0.1}), ("moon", {}), ("fedntd", {}), ("fedgkd", {}),
              ("fedtgp", {}), ("protonorm", {}), ("gfpl", {"start": 1, "every": 1}),
              ("gfpl", {"start": 1, "every": 1, "dcs": False}), ("fedproc", {}), ("lgfedavg", {}), ("fedrep", {}),
              ("fedpac", {}), ("fedpac", {"head_epochs": 0}), ("fedpa", {}), ("fedic", {}), ("cflgp", {}),
              ("cflgp", {"profile": "gradient"})]
BATCHED_CASES = batched_cases()


def test_the_equivalence_covers_every_method_that_batches():
    from fedlib.algorithms import ALGORITHMS

    names = {name for name, _ in BATCHED_CASES}
    assert names and all(case in BATCHED_CASES for case in HAND_CASES)
    assert names == {n for n in ALGORITHMS if make_algorithm({"name": n, **CASE_HP.get(n, {})}).batch_support() is None}
    assert {"fml", "fedkd", "feduv"}.isdisjoint(names)   # they train with their own loops (below)


@pytest.mark.slow
@pytest.mark.parametrize("name,hp", BATCHED_CASES, ids=[case_id(*c) for c in BATCHED_CASES])
def test_batched_equals_sequential_after_one_update_and_three_rounds(name, hp):
    algo, ctx, data = setup(name, **hp)
    sizes = [len(d) for d in data.train]
    assert len(set(s // 8 for s in sizes)) > 2 and min(sizes) < 8  # clients really differ in steps and batch sizes
    one = both(algo, ctx, data, 1)
    for cid in range(5):  # after one local update: every client's parameters within 1e-5 relative
        assert rel_diff(one["sequential"][1][cid]["model"], one["batched"][1][cid]["model"]) < 1e-5
    three = both(algo, ctx, data, 3)
    for key in three["sequential"][0][-1]["clients"]:  # after three rounds: every client's accuracy within 0.5
        seq, bat = three["sequential"][0][-1]["clients"][key], three["batched"][0][-1]["clients"][key]
        assert max(abs(a - b) for a, b in zip(seq, bat, strict=True)) <= 0.005, key
    # the uploads and the round log agree too
    assert three["sequential"][0][-1]["up_params"] == three["batched"][0][-1]["up_params"]


@pytest.mark.slow
def test_heterogeneous_protonorm_groups_by_architecture():
    # ht0_lite: resnet4 (clients 0, 4: one group of two), FedAvgCNN, ShuffleNetV2 x0.5, MobileNetV2 x0.25
    algo, ctx, data = setup("protonorm", model="ht0_lite", shape=(1, 16, 16))
    one = both(algo, ctx, data, 1)
    for cid in (0, 1, 4):
        assert rel_diff(one["sequential"][1][cid]["model"], one["batched"][1][cid]["model"]) < 1e-5, member(
            "ht0_lite", cid)
    # ShuffleNetV2 x0.5 and MobileNetV2 x0.25 on 16x16 images are chaotic under SGD: a 1e-7 relative change of the
    # weights changes the parameters by O(1) within a few steps (below), so agreement is checked step by step
    # instead: one step from the same weights on the same batch agrees within 1e-5
    rnd = Round(1, 1, ctx.seed)
    for cid in (2, 3):
        client = algo.init_client(ctx, cid)
        small = copy.copy(data.train[cid])
        small.x, small.y = data.train[cid].x[:8], data.train[cid].y[:8]  # one batch: one step
        task = algo.task(ctx, cid, client, {}, small, rnd)
        torch.manual_seed(0)
        model, *_ = train_task(algo, ctx, cid, task, small, rnd)
        seq = {k: v.clone() for k, v in model.state_dict().items()}
        torch.manual_seed(0)
        bat = Batched()._train_group(algo, ctx, [cid], {cid: task}, {cid: small}, rnd)[cid][0]
        if member("ht0_lite", cid) == "mobilenet_v2_w025":  # its dropout masks come from another stream
            continue  # (one draw per group, not per client): no step-by-step comparison
        assert rel_diff(seq, bat) < 1e-5


@pytest.mark.slow
def test_chaotic_member_is_sensitive_to_rounding_in_sequential_training_too():
    # why the heterogeneous test above compares ShuffleNet step by step: the sequential loop itself
    # amplifies a 1e-7 relative perturbation of the weights to O(1) within a few steps
    torch.manual_seed(0)
    m = build_model("shufflenet_v2_x0_5", (1, 16, 16), 4).train()
    m2 = copy.deepcopy(m)
    with torch.no_grad():
        for p in m2.parameters():
            p.mul_(1 + 1e-7 * torch.randn_like(p))
    opts = [torch.optim.SGD(mm.parameters(), lr=0.05, momentum=0.5) for mm in (m, m2)]
    for _ in range(4):
        x, y = torch.randn(8, 1, 16, 16), torch.randint(0, 4, (8,))
        for mm, o in zip((m, m2), opts, strict=True):
            o.zero_grad()
            F.cross_entropy(mm(x)[0], y).backward()
            o.step()
    assert max(float((a - b).detach().abs().max()) for a, b in zip(m.parameters(), m2.parameters(), strict=True)) > 0.1


@pytest.mark.slow
def test_methods_that_cannot_be_batched_run_sequentially_with_a_note(caplog):
    for name, hp in (("fml", {}), ("fedproc", {"contrast": "prototypes"}), ("feduv", {})):
        algo, ctx, data = setup(name, **hp)
        seq = Simulator(algo, ctx, data, rounds=2, progress=False).run()
        with caplog.at_level("WARNING", logger="fedlib.executors"):
            bat = Simulator(algo, ctx, data, rounds=2, progress=False, executor="batched").run()
        assert [r["acc"] for r in seq] == [r["acc"] for r in bat]
        assert f"batched executor: {name} runs sequentially" in caplog.text
    assert "distance" in make_algorithm({"name": "protonorm", "loss": "distance"}).batch_support()
    assert make_algorithm({"name": "protonorm"}).batch_support() is None
    assert make_algorithm({"name": "gfpl"}).batch_support() is None  # its pseudo-feature retraining stays per client
    assert make_algorithm({"name": "fedproc"}).batch_support() is None  # its round-dependent loss reads the round


def test_rounds_are_exact_unless_the_batched_executor_trains_the_clients():
    # Round.exact tells the server whether its own loops must reproduce the sequential reference bit for bit
    algo, ctx, data = setup("fedmps")
    assert Simulator(algo, ctx, data, rounds=1, progress=False).round_record(1).exact
    assert not Simulator(algo, ctx, data, rounds=1, progress=False, executor="batched").round_record(1).exact
    fml = make_algorithm({"name": "fml"})  # trained sequentially under the batched executor: exact rounds
    assert Simulator(fml, ctx, data, rounds=1, progress=False, executor="batched").round_record(1).exact


def _modes(algo, ctx, data, rounds, modes):
    """``{mode: (records, clients, executor)}`` of ``rounds`` batched rounds per step mode
    (:func:`fedlib.executors.step_mode`)."""
    out = {}
    for mode in modes:
        sim = Simulator(algo, ctx, data, rounds=rounds, progress=False, executor="batched")
        sim.cohort.batched.mode = mode
        out[mode] = (sim.run(), sim.clients, sim.cohort.batched)
    return out


# fedproto and fedmps collect per-class features, fedmps with two levels; fedgkd reads a teacher; fedrep and
# fedpac train in phases with their own trainable parts and learning rates; moon reads extras; fedavg has momentum
FIXED_CASES = [("fedproto", {}), ("fedmps", {}), ("fedavg", {}), ("fedgkd", {}), ("fedrep", {}), ("fedpac", {}),
               ("moon", {}), ("fedproto", {"drop_last": False})]


@pytest.mark.slow
@pytest.mark.parametrize("name,hp", FIXED_CASES)
def test_the_fixed_shape_step_equals_the_step_loop(name, hp):
    # the body a CUDA graph captures, run eagerly on the CPU: every client steps with a device mask and the
    # step's inputs come from a device step counter; the same updates as the host-driven loop, the class sums
    # in another order (rounding only)
    algo, ctx, data = setup(name, **hp)
    out = _modes(algo, ctx, data, 2, ("loop", "fixed"))
    for cid in range(5):
        assert rel_diff(out["loop"][1][cid]["model"], out["fixed"][1][cid]["model"]) < 1e-5, cid
    for key, seq in out["loop"][0][-1]["clients"].items():
        assert max(abs(a - b) for a, b in zip(seq, out["fixed"][0][-1]["clients"][key], strict=True)) <= 0.005, key
    for a, b in zip(out["loop"][0], out["fixed"][0], strict=True):
        assert abs(a["train_loss"] - b["train_loss"]) <= 1e-5 * abs(a["train_loss"])
        assert a["up_params"] == b["up_params"]
    assert out["fixed"][2].captured == 0  # nothing is captured on a CPU


def test_step_modes_resolve_per_device_and_refuse_bad_names(monkeypatch):
    from fedlib.executors import GRAPHS_ENV, step_mode

    monkeypatch.delenv(GRAPHS_ENV, raising=False)
    assert step_mode("cpu") == "loop" and step_mode("cuda") == "loop" and step_mode("cuda", "fixed") == "fixed"
    monkeypatch.setenv(GRAPHS_ENV, "1")  # capture is opt-in until confirmed on a GPU
    assert step_mode("cuda") == "graph" and step_mode("cpu") == "loop"
    with pytest.raises(ValueError, match="step mode: got 'graphs'; allowed: auto, loop, fixed, graph"):
        Batched("graphs")
    with pytest.raises(ValueError, match="got 'graph' on 'cpu'; allowed there: loop or fixed"):
        step_mode("cpu", "graph")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name,hp", FIXED_CASES)
def test_the_captured_step_equals_the_eager_one_on_cuda(name, hp):
    import dataclasses

    from fedlib.device import deterministic_cuda

    deterministic_cuda()  # as runs train
    algo, ctx, data = setup(name, **hp)
    ctx, data = dataclasses.replace(ctx, device="cuda"), data.to("cuda")
    out = _modes(algo, ctx, data, 2, ("loop", "fixed", "graph"))
    assert out["graph"][2].captured > 0, "no epoch ran as a CUDA graph"
    for cid in range(5):  # the captured body replays the eager body's kernels: equal bit for bit
        for k, v in out["fixed"][1][cid]["model"].items():
            assert torch.equal(v, out["graph"][1][cid]["model"][k]), (cid, k)
        assert rel_diff(out["loop"][1][cid]["model"], out["graph"][1][cid]["model"]) < 1e-5, cid
    assert [r["clients"] for r in out["fixed"][0]] == [r["clients"] for r in out["graph"][0]]


def test_the_executor_hooks_live_apart_from_the_method_hooks():
    # a method author reads Algorithm for the hooks that define a method; the batched executor's questions are
    # Batching's, inherited with defaults, and a method that replaces the contract's own loop or scores is seen
    from fedlib.algorithms.base import Algorithm
    from fedlib.algorithms.batching import Batching

    executor_hooks = {"SWEEPABLE", "batch_support", "finish_group", "scores_group"}
    assert executor_hooks <= set(vars(Batching))
    assert not executor_hooks & set(vars(Algorithm))
    assert issubclass(Algorithm, Batching)

    class OwnLoop(Algorithm):
        def local_update(self, ctx, cid, client, msg, data, rnd):
            return super().local_update(ctx, cid, client, msg, data, rnd)

    class OwnScores(Algorithm):
        def scores(self, ctx, cid, client, msg, logits, feats):
            return {"head": -logits}

    logits = torch.zeros(2, 3, 4)
    assert Algorithm().batch_support() is None and OwnScores().batch_support() is None
    assert "its own loop" in OwnLoop().batch_support()   # even one that calls the contract's loop through super()
    assert Algorithm().scores_group(None, [0, 1], [], [], logits, {}) == {"head": logits}
    assert OwnScores().scores_group(None, [0, 1], [], [], logits, {}) is None
