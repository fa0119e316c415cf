"""``eval_model`` of the FedAvg family: score the aggregated model or each client's own model after
its last local update (docs/mpfedcl.md, decisions 14 and 33), without changing training or the run
ids of runs made before the switch existed."""

import pytest
import torch

from fedlib.algorithms import make_algorithm
from fedlib.config import run_id
from fedlib.data import FederatedData
from fedlib.data.partition import fedpcl
from fedlib.engine import Simulator
from fedlib.papers import fedmps, mpfedcl
from fedlib.validation import ConfigError
from tests.conftest import make_ctx, tiny_image_dataset


def _run(name, rounds=2, **hp):
    # MP-FedCL's MNIST protocol in small: Dir(0.05) training shares, label-IID test blocks
    ds = tiny_image_dataset()
    part = fedpcl(ds.y_train.numpy(), ds.y_test.numpy(), 4, 4, 0.05, 160, 5, 10, 0)
    data, ctx = FederatedData(ds, part), make_ctx(seed=0)
    sim = Simulator(make_algorithm({"name": name, **hp}), ctx, data, rounds=rounds, progress=False)
    return sim, sim.run(), data, ctx


def _head_accuracy(sim, ctx, data, cid, state):
    model = sim.algo.module(ctx, cid, state, fresh=True).eval()
    with torch.no_grad():
        logits = model(data.test[cid].x)[0]
    return float((logits.argmax(1) == data.test[cid].y).float().mean())


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fedavg", "fedprox", "mpfedcl"])
def test_global_scores_the_average_and_local_each_clients_own_model(name):
    # Prepare / Execute: the same run scored both ways
    sim_g, rec_g, data, ctx = _run(name, eval_model="global")
    sim_l, rec_l, _, _ = _run(name, eval_model="local")
    # Assert: training is untouched by the switch
    assert [r["train_loss"] for r in rec_g] == [r["train_loss"] for r in rec_l]
    for k, v in sim_g.server["weights"].items():
        assert torch.equal(v, sim_l.server["weights"][k])
    glob = {k[2:]: v for k, v in sim_g.server["weights"].items() if k.startswith("w.")}
    for cid in range(4):
        own = sim_l.clients[cid]["model"]
        assert rec_l[-1]["clients"]["acc_head"][cid] == _head_accuracy(sim_l, ctx, data, cid, own)
        assert rec_g[-1]["clients"]["acc_head"][cid] == _head_accuracy(sim_g, ctx, data, cid, {**own, **glob})
    # clients of one or two classes drift from the average: the two rules disagree on IID test blocks
    assert rec_g[-1]["clients"]["acc_head"] != rec_l[-1]["clients"]["acc_head"]


def test_defaults_are_left_out_of_run_ids():
    # the FedMPS paper-profile FedAvg run of seed 1234 in archive/ keeps its id
    fp = fedmps.load_plan("paper", results_dir="/tmp/unused")
    assert run_id(fedmps.config(fp, "fedavg"), 1234) == "c00e552646f6"
    assert run_id(fedmps.config(fp, "fedavg", **{"algorithm.eval_model": "global"}), 1234) == "c00e552646f6"
    assert run_id(fedmps.config(fp, "fedavg", **{"algorithm.eval_model": "local"}), 1234) != "c00e552646f6"
    # MP-FedCL's default is the local model (the runs made before the switch scored it)
    mp = mpfedcl.load_plan("paper", results_dir="/tmp/unused")
    default = run_id(mpfedcl.config(mp, "mpfedcl"), 0)
    assert mpfedcl.config(mp, "mpfedcl")["algorithm"]["eval_model"] == "local"
    assert run_id(mpfedcl.config(mp, "mpfedcl", **{"algorithm.eval_model": "local"}), 0) == default
    assert run_id(mpfedcl.config(mp, "mpfedcl", **{"algorithm.eval_model": "global"}), 0) != default
    assert mpfedcl.config(mp, "fedavg")["algorithm"]["eval_model"] == "global"


def test_bad_values_name_the_field_and_what_is_allowed():
    with pytest.raises(ConfigError, match=r"algorithm \(fedavg\)\.eval_model: got 'personal'; "
                                          r"allowed: one of 'global', 'local'"):
        make_algorithm({"name": "fedavg", "eval_model": "personal"})
    # IFCA scores with its cluster's model: the switch would do nothing there, so it is refused
    with pytest.raises(ConfigError, match=r"algorithm \(ifca\)\.eval_model: got 'local'; allowed: 'global' "
                                          r"\(ifca scores with a model of its own\)"):
        make_algorithm({"name": "ifca", "eval_model": "local"})
