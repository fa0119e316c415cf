"""Several runs trained in one process as one stacked group (runs x clients, fedlib.stacked) against each run
trained alone under the batched executor."""

import json
import logging
from pathlib import Path

import pytest
import torch

from fedlib import store
from fedlib.algorithms import make_algorithm
from fedlib.algorithms.base import Round
from fedlib.config import load_config, run_dir
from fedlib.data import ClientData, FederatedData
from fedlib.data.partition import label_partition
from fedlib.executors import Batched
from fedlib.prototypes import GroupSums
from fedlib.runner import run_one, run_stacked, stacking
from fedlib.stacked import folder_files, stacks, why_not_stacked
from tests.conftest import DATA, make_ctx, tiny_image_dataset

CFG = DATA / "spiral_fedproto.yaml"
SEEDS = (1, 2, 3)


def config(results, **over):
    return load_config(CFG, {"results_dir": str(results), "train.rounds": 3, "executor": "batched",
                             "dataset.fraction": 0.05, "seeds": list(SEEDS), **over})


def rel_diff(a: dict, b: dict) -> float:
    """As in tests/core/test_executors.py: the largest relative difference over the floating tensors."""
    return max(float((a[k] - b[k]).abs().max() / a[k].abs().max().clamp(min=1e-2)) for k in a
               if a[k].is_floating_point())


def close_logs(a: list[dict], b: list[dict]) -> None:
    """Two runs' round logs: the same rounds, messages and participants; every client's accuracy within 0.5
    points (the executor tests' tolerance)."""
    assert [r["round"] for r in a] == [r["round"] for r in b]
    for ra, rb in zip(a, b, strict=True):
        assert (ra["participants"], ra["up_params"], ra["down_params"]) == \
               (rb["participants"], rb["up_params"], rb["down_params"])
        for key in rb.get("clients", {}):
            assert max(abs(x - y) for x, y in zip(ra["clients"][key], rb["clients"][key], strict=True)) <= 0.005


# -- the executor: runs x clients in one group --------------------------------------------------------------

def runs_setup(name, seeds=SEEDS, clients=5, **hp):
    """One run per seed: its own partition (Dirichlet sizes differ per run; the last client smaller than a
    batch), context and algorithm."""
    ds = tiny_image_dataset()
    out = []
    for s in seeds:
        part = label_partition("dirichlet", ds.y_train.numpy(), ds.y_test.numpy(), 4, num_clients=clients,
                               alpha=0.5, min_size=5, seed=s, split="official")
        data = FederatedData(ds, part)
        d = data.train[-1]
        data.train[-1] = ClientData(d.cid, d.x[:5], d.y[:5], torch.unique(d.y[:5]))
        out.append((make_algorithm({"name": name, **hp}), make_ctx(num_clients=clients, seed=s), data))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name,hp", [("fedproto", {}), ("fedmps", {}), ("fedavg", {}), ("fedntd", {}),
                                     ("fedrep", {}), ("fedpa", {})])
def test_runs_stacked_in_one_group_equal_each_run_alone(name, hp):
    runs = runs_setup(name, **hp)
    alone, together = [], []
    for algo, ctx, data in runs:
        rnd = Round(1, 2, ctx.seed)
        clients = {cid: algo.init_client(ctx, cid) for cid in range(data.num_clients)}
        msg = algo.broadcast(ctx, algo.init_server(ctx), 0, rnd)
        jobs = {cid: (clients[cid], msg, data.train[cid]) for cid in clients}
        alone.append(Batched().local_updates(algo, ctx, jobs, rnd))
        together.append((algo, ctx, jobs, rnd))
    stacked = Batched().local_updates_runs(together)
    for k, (a, s) in enumerate(zip(alone, stacked, strict=True)):
        assert list(a) == list(s)
        for cid in a:  # every client of every run within 1e-5 relative after one update; the same upload shapes
            assert rel_diff(a[cid][0]["model"], s[cid][0]["model"]) < 1e-5, (k, cid)
            assert {n: tuple(v.shape) for n, v in a[cid][1].items() if torch.is_tensor(v)} == \
                   {n: tuple(v.shape) for n, v in s[cid][1].items() if torch.is_tensor(v)}
            assert a[cid][2].keys() == s[cid][2].keys()
            assert abs(a[cid][2]["train_loss"] - s[cid][2]["train_loss"]) < 1e-5
    # the evaluation of all runs at once gives each run's accuracies
    ex = Batched()
    evals = [(algo, ctx, {cid: (out[cid][0], jobs[cid][1]) for cid in out}, {c: data.test[c] for c in out})
             for (algo, ctx, data), out, (_, _, jobs, _) in zip(runs, stacked, together, strict=True)]
    both = ex.evaluate_runs(evals)
    for k, ev in enumerate(evals):
        one = Batched().evaluate(*ev)
        for cid in one:
            assert one[cid][1] == both[k][cid][1]
            assert all(abs(one[cid][0][key] - both[k][cid][0][key]) < 1e-6 for key in one[cid][0])


def test_group_sums_part_is_the_clients_own():
    C, d = 3, 2
    counts = torch.tensor([1, 0, 2, 0, 0, 3, 4, 1, 0])
    sums = torch.arange(9 * d, dtype=torch.float32).view(9, d)
    cells = torch.nonzero(counts > 0).flatten()
    whole = GroupSums(sums, counts, cells, [2, 1, 2], C)
    part = whole.part(1, 3)
    for g in (0, 1):
        a, b = whole.client(g + 1), part.client(g)
        assert torch.equal(a.sums, b.sums) and torch.equal(a.counts, b.counts)
    assert [m["classes"].tolist() for m in part.messages()] == [m["classes"].tolist() for m in whole.messages()[1:]]


# -- which runs stack ----------------------------------------------------------------------------------------

def test_seeds_and_sweep_points_of_one_batched_config_stack(tmp_path):
    cfg = config(tmp_path)
    other = config(tmp_path, **{"partition.num_clients": 4})   # another shape: a stack of its own
    jobs = [(cfg, 1), (other, 1), (cfg, 2), (other, 2), (cfg, 3)]
    assert stacks(jobs) == [[0, 2, 4], [1, 3]]
    seq = config(tmp_path, executor="sequential")
    assert "executor 'sequential'" in why_not_stacked(seq)
    assert stacks([(seq, 1), (seq, 2)]) == [[0], [1]]   # the sequential reference never stacks
    fml = config(tmp_path, **{"algorithm": {"name": "fml"}})
    assert "fml" in why_not_stacked(fml) and stacks([(fml, 1), (fml, 2)]) == [[0], [1]]
    assert why_not_stacked(cfg) is None


def test_run_many_stacks_on_cuda_by_default(monkeypatch):
    cpu, cuda = {"device": "cpu"}, {"device": "cuda"}
    monkeypatch.delenv("FEDLIB_STACK", raising=False)
    assert stacking([(cuda, 1), (cuda, 2)]) and not stacking([(cpu, 1), (cpu, 2)])
    assert stacking([(cpu, 1)], stack=True) and not stacking([(cuda, 1)], stack=False)
    monkeypatch.setenv("FEDLIB_STACK", "1")
    assert stacking([(cpu, 1)])


# -- run folders -----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def alone(tmp_path_factory):
    """Each seed trained alone under the batched executor."""
    cfg = config(tmp_path_factory.mktemp("alone"))
    return cfg, [run_one(cfg, s, progress=False) for s in SEEDS]


@pytest.mark.slow
def test_stacked_seeds_equal_each_seed_alone_in_the_same_run_folders(alone, tmp_path, caplog):
    ref_cfg, ref = alone
    cfg = config(tmp_path)
    with caplog.at_level(logging.INFO, logger="fedlib.stacked"):
        got = run_stacked([(cfg, s) for s in SEEDS], progress=False)
    assert "stacked 3 runs" in caplog.text and "3 training calls of [3] runs" in caplog.text
    for s, a, b in zip(SEEDS, got, ref, strict=True):
        assert a["run_id"] == b["run_id"] and a["seed"] == s and not a["cache_hit"]
        assert a["stacked_runs"] == 3 and "stacked_runs" not in b and a["executor"] == b["executor"] == "batched"
        fa, fb = run_dir(cfg, s), run_dir(ref_cfg, s)
        assert folder_files(fa) == folder_files(fb)
        assert (fa / "config.yaml").read_text() == (fb / "config.yaml").read_text().replace(
            str(ref_cfg["results_dir"]), str(cfg["results_dir"]))
        assert (fa / "partition.json").read_text() == (fb / "partition.json").read_text()
        close_logs(store.read_log(fa), store.read_log(fb))
        ca, cb = store.load_checkpoint(fa)[0], store.load_checkpoint(fb)[0]
        assert ca["round"] == cb["round"] == 3 and ca["clients"].keys() == cb["clients"].keys()
        for key in ("best", "last"):
            assert abs(a["metrics"]["acc_proto_own"][key] - b["metrics"]["acc_proto_own"][key]) <= 0.005
    again = run_stacked([(cfg, s) for s in SEEDS], progress=False)   # a second call: every run a cache hit
    assert all(s["cache_hit"] for s in again) and [s["run_id"] for s in again] == [s["run_id"] for s in got]
    assert all(run_one(cfg, s, progress=False)["cache_hit"] for s in SEEDS)   # run_one finds them too


@pytest.mark.slow
def test_interrupted_stacked_runs_resume_at_their_own_rounds(alone, tmp_path):
    _, ref = alone
    cfg = config(tmp_path)
    jobs = [(cfg, s) for s in SEEDS]

    def interrupt(i, r):   # the first run stops after round 1, the second after round 2, the third finishes
        if (i, r) in ((0, 1), (1, 2)):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_stacked(jobs, progress=False, on_round=interrupt)
    assert [len(store.read_log(run_dir(cfg, s))) for s in SEEDS] == [1, 2, 3]
    assert [(run_dir(cfg, s) / store.SUMMARY).exists() for s in SEEDS] == [False, False, True]
    got = run_stacked(jobs, progress=False)   # the first two resume (the first catches up), the third is cached
    assert [s["cache_hit"] for s in got] == [False, False, True]
    for s, a, b in zip(SEEDS, got, ref, strict=True):
        assert a["run_id"] == b["run_id"]
        close_logs(store.read_log(run_dir(cfg, s)), json_log(b, alone[0]))


def json_log(summary, cfg):
    return store.read_log(Path(cfg["results_dir"]) / summary["run_id"])


@pytest.mark.slow
def test_what_cannot_stack_trains_alone_and_says_so(tmp_path, caplog):
    cfg = config(tmp_path, executor="sequential", **{"train.rounds": 2})
    with caplog.at_level(logging.WARNING, logger="fedlib.stacked"):
        got = run_stacked([(cfg, 1), (cfg, 2)], progress=False)
    assert "trains alone, not stacked: executor 'sequential'" in caplog.text
    assert "stacked_runs" not in got[0]
    # under the sequential executor the run is the one run_one makes, byte for byte (timings aside)
    ref_cfg = config(tmp_path / "ref", executor="sequential", **{"train.rounds": 2})
    ref = run_one(ref_cfg, 1, progress=False)
    untimed = [{k: v for k, v in r.items() if not k.endswith("seconds")} for r in store.read_log(run_dir(cfg, 1))]
    assert untimed == [{k: v for k, v in r.items() if not k.endswith("seconds")}
                       for r in store.read_log(run_dir(ref_cfg, 1))]
    assert ref["run_id"] == got[0]["run_id"]
    assert json.loads((run_dir(cfg, 1) / store.SUMMARY).read_text())["metrics"] == ref["metrics"]


@pytest.mark.slow
def test_a_method_that_cannot_batch_trains_each_run_client_by_client_and_says_so(caplog):
    from fedlib.executors import sequential

    runs = runs_setup("feduv", seeds=(1, 2))
    together = []
    for algo, ctx, data in runs:
        rnd = Round(1, 2, ctx.seed)
        server = algo.init_server(ctx)
        jobs = {cid: (algo.init_client(ctx, cid), algo.broadcast(ctx, server, cid, rnd), data.train[cid])
                for cid in range(data.num_clients)}
        together.append((algo, ctx, jobs, rnd))
    with caplog.at_level(logging.WARNING, logger="fedlib.executors"):
        got = Batched().local_updates_runs(together)
    assert "feduv runs sequentially" in caplog.text
    for (algo, ctx, jobs, rnd), out in zip(together, got, strict=True):
        ref = sequential(algo, ctx, jobs, rnd)
        for cid in ref:
            assert all(torch.equal(ref[cid][0]["model"][n], out[cid][0]["model"][n]) for n in ref[cid][0]["model"])


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 1])
def test_run_many_trains_a_stack_as_one_unit_in_process_or_in_a_worker(tmp_path, workers):
    from fedlib.runner import run_many

    cfg = config(tmp_path, **{"train.rounds": 2})
    other = config(tmp_path, **{"train.rounds": 2, "executor": "sequential"})   # never stacked
    jobs = [(cfg, 1), (other, 1), (cfg, 2)]
    got = run_many(jobs, workers=workers, progress=False, stack=True)
    assert [s.get("stacked_runs") for s in got] == [2, None, 2]
    assert [s["seed"] for s in got] == [1, 1, 2] and got[1]["executor"] == "sequential"
    assert all(s["cache_hit"] for s in run_many(jobs, workers=workers, progress=False, stack=True))


# -- sweep points: runs that differ in a hyperparameter, stacked ---------------------------------------------

def _round_two_jobs(algo, ctx, data):
    """A run's round-2 jobs (a server that aggregated round 1's uploads: prototype tables, soft labels and
    global weights exist, so every loss term is live)."""
    r1, r2 = Round(1, 2, ctx.seed), Round(2, 2, ctx.seed)
    clients = {cid: algo.init_client(ctx, cid) for cid in range(data.num_clients)}
    server = algo.init_server(ctx)
    first = Batched().local_updates(algo, ctx, {cid: (clients[cid], algo.broadcast(ctx, server, cid, r1),
                                                      data.train[cid]) for cid in clients}, r1)
    server, _ = algo.aggregate(ctx, server, {cid: up for cid, (_, up, _) in first.items()}, r1)
    states = {cid: st for cid, (st, _, _) in first.items()}
    return {cid: (states[cid], algo.broadcast(ctx, server, cid, r2), data.train[cid]) for cid in states}, r2


SWEEPS = [(name, field) for name, cls in sorted(__import__("fedlib.algorithms", fromlist=["ALGORITHMS"])
                                                 .ALGORITHMS.items()) for field in cls.SWEEPABLE] + [("fedavg", "lr")]


@pytest.mark.slow
@pytest.mark.parametrize("name,field", SWEEPS)
def test_sweep_points_stacked_in_one_group_equal_each_alone(name, field):
    # two runs of one partition that differ in one declared sweepable hyperparameter (or the learning rate):
    # one stacked group gives each run its own value, as if it had trained alone
    (algo, ctx, data), = runs_setup(name, seeds=(1,))
    if field == "lr":
        runs = [(algo, ctx), (algo, make_ctx(num_clients=5, seed=1, lr=0.02))]
    else:
        value = getattr(algo, field)
        other = value * 2 if value else 0.5
        runs = [(algo, ctx), (make_algorithm({"name": name, field: other}), ctx)]
    alone, together = [], []
    for a, c in runs:
        jobs, rnd = _round_two_jobs(a, c, data)
        alone.append(Batched().local_updates(a, c, jobs, rnd))
        together.append((a, c, jobs, rnd))
    from fedlib.stacked import stack_key

    base = {"seeds": [1], "train": {"lr": ctx.train.lr, "rounds": 2}, "algorithm": {"name": name}}
    swept = {**base, "train": {"lr": runs[1][1].train.lr, "rounds": 2},
             "algorithm": {"name": name, **({} if field == "lr" else {field: getattr(runs[1][0], field)})}}
    assert stack_key(base) == stack_key(swept)  # the runner stacks them
    stacked = Batched().local_updates_runs(together)
    for k in range(2):
        for cid in alone[k]:
            assert rel_diff(alone[k][cid][0]["model"], stacked[k][cid][0]["model"]) < 1e-5, (k, cid)
            assert abs(alone[k][cid][2]["train_loss"] - stacked[k][cid][2]["train_loss"]) < 1e-5
    # the value mattered: the two runs' clients differ
    assert max(rel_diff(alone[0][cid][0]["model"], alone[1][cid][0]["model"]) for cid in alone[0]) > 1e-4


def test_configs_that_differ_beyond_the_sweepable_fields_do_not_stack():
    from fedlib.stacked import stack_key

    base = {"seeds": [1], "train": {"lr": 0.01, "rounds": 2}, "algorithm": {"name": "fedproto", "lam": 1.0}}
    assert stack_key(base) == stack_key({**base, "seeds": [2], "algorithm": {"name": "fedproto", "lam": 3.0}})
    assert stack_key(base) != stack_key({**base, "algorithm": {"name": "fedproto", "level": "low"}})
    assert stack_key(base) != stack_key({**base, "train": {"lr": 0.01, "rounds": 3}})
    assert stack_key(base) != stack_key({**base, "algorithm": {"name": "fedtgp", "lam": 1.0}})


@pytest.mark.slow
def test_sweep_points_stacked_by_the_runner_equal_each_alone_in_their_run_folders(tmp_path):
    a = config(tmp_path / "stacked", **{"train.rounds": 2})
    b = config(tmp_path / "stacked", **{"train.rounds": 2, "algorithm.lam": 3.0, "train.lr": 0.02})
    assert stacks([(a, 1), (b, 1)]) == [[0, 1]]
    got = run_stacked([(a, 1), (b, 1)], progress=False)
    assert [s["stacked_runs"] for s in got] == [2, 2]
    for cfg, summary in zip((a, b), got, strict=True):
        ref_cfg = {**cfg, "results_dir": str(tmp_path / "alone")}
        ref = run_one(ref_cfg, 1, progress=False)
        assert summary["run_id"] == ref["run_id"] and "stacked_runs" not in ref
        close_logs(store.read_log(run_dir(cfg, 1)), store.read_log(run_dir(ref_cfg, 1)))
    assert got[0]["run_id"] != got[1]["run_id"]
