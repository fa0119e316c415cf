"""Parallel runs, run states and the FedMPS study's bookkeeping (no Fashion-MNIST training)."""

import json

import numpy as np
import pytest
import torch

from fedlib.data import FederatedData
from fedlib.data.partition import nway_kshot
from fedlib.config import load_config, run_id
from fedlib.runner import CUDA_WORKERS, RunState, default_workers, load_state, run_many, run_one
from fedlib import plots, results, study
from fedlib.papers import fedmps as S
from tests.conftest import DATA, tiny_image_dataset

CFG = DATA / "spiral_fedproto.yaml"


def strip(summary):
    return {k: v for k, v in summary.items() if k not in ("wall_seconds_this_call", "cache_hit",
                                                          "seconds_per_round_median", "finished_utc")}


@pytest.mark.slow
def test_run_many_in_processes_equals_run_one_here_and_caches(tmp_path):
    a = load_config(CFG, {"results_dir": str(tmp_path / "a"), "train.rounds": 3})
    b = load_config(CFG, {"results_dir": str(tmp_path / "a"), "train.rounds": 3, "algorithm.lam": 0.5})
    got = run_many([(a, 1), (b, 1)], workers=2, progress=False)
    assert [s["run_id"] for s in got] == [run_id(a, 1), run_id(b, 1)]
    assert got[0]["metrics"] != got[1]["metrics"]
    # the same run in this process (fresh folder) gives identical numbers
    here = run_one(load_config(CFG, {"results_dir": str(tmp_path / "b"), "train.rounds": 3}), 1, progress=False)
    assert strip(here)["metrics"] == strip(got[0])["metrics"]
    again = run_many([(a, 1), (b, 1)], workers=2, progress=False)
    assert all(s["cache_hit"] for s in again)


def test_runs_share_a_gpu_four_at_a_time_and_a_cpu_one_per_core(monkeypatch):
    # one process per core on a CPU; runs on CUDA share the one GPU, so a handful at once, not 16
    def job(device, rounds=100, clients=20):
        return {"device": device, "train": {"rounds": rounds}, "partition": {"num_clients": clients}}, 0

    cpu, cuda = job("cpu"), job("cuda")
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert default_workers([cpu, cpu]) == 16
    assert default_workers([cpu, cuda]) == CUDA_WORKERS == 4
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert default_workers([cuda]) == 2
    monkeypatch.setattr("os.cpu_count", lambda: None)
    assert default_workers([cpu]) == 1
    # a grid of at most 1,000 client-rounds (every smoke grid) trains in the calling process: 0 workers
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert default_workers([job("cpu", 10, 20)] * 5) == 0                 # 1,000 client-rounds
    assert default_workers([job("cpu", 10, 20)] * 5 + [job("cpu", 1, 1)]) == 2
    assert default_workers([job(None, 2, 10)]) == 0 and default_workers([job("cuda", 2, 10)]) == 2


@pytest.mark.slow
def test_a_small_grid_in_this_process_gives_the_pools_numbers(tmp_path):
    grid = [{"algorithm.lam": 1.0}, {"algorithm.lam": 0.5}]
    here = [(load_config(CFG, {"results_dir": str(tmp_path / "here"), "train.rounds": 3, **g}), s)
            for g in grid for s in (1, 2)]
    pool = [({**cfg, "results_dir": str(tmp_path / "pool")}, s) for cfg, s in here]
    assert default_workers(here) == 0      # 4 runs x 3 rounds x 6 clients
    got_here, got_pool = run_many(here, progress=False), run_many(pool, workers=2, progress=False)
    assert [strip(s)["metrics"] for s in got_here] == [strip(s)["metrics"] for s in got_pool]
    for (cfg, seed), (other, _) in zip(here, pool, strict=True):
        strip_t = lambda rows: [{k: v for k, v in r.items() if "seconds" not in k} for r in rows]  # noqa: E731
        assert strip_t(results.rounds(cfg, seed)) == strip_t(results.rounds(other, seed))
    with pytest.raises(study.ConfigError, match=r"^workers: got -1; allowed: an integer in \[0, inf\)$"):
        run_many(here, workers=-1, progress=False)


def test_an_in_process_grid_reports_progress_every_round(tmp_path, monkeypatch):
    # the bar a notebook cell shows moves from the first round, not once per finished run
    import fedlib.runner as R

    seen = []

    class Recorder(R.Progress):
        def write(self, finished, rounds_done):
            seen.append((finished, rounds_done))

    monkeypatch.setattr(R, "Progress", Recorder)
    grid = [(load_config(CFG, {"results_dir": str(tmp_path), "train.rounds": 3, "algorithm.lam": lam}), 1)
            for lam in (1.0, 0.5)]
    run_many(grid, workers=0, progress=False)
    assert seen == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 3), (1, 4), (1, 5), (1, 6), (2, 6), (2, 6)]
    seen.clear()
    run_many(grid, workers=0, progress=False)   # all cached: nothing trains
    assert seen == [(0, 0), (0, 0)]


@pytest.mark.slow
def test_the_same_run_in_two_processes_trains_once(tmp_path):
    # two workers asked for one run at the same time: the second waits on the run's lock and
    # then reads the first one's result, instead of training it again into the same log
    cfg = load_config(CFG, {"results_dir": str(tmp_path), "train.rounds": 3})
    first, second = run_many([(cfg, 1), (cfg, 1)], workers=2, progress=False)
    assert [first["cache_hit"], second["cache_hit"]].count(True) == 1
    assert strip(first) == strip(second)
    log = (tmp_path / run_id(cfg, 1) / "rounds.jsonl").read_text().splitlines()
    assert [json.loads(line)["round"] for line in log] == [1, 2, 3]


@pytest.mark.slow
def test_run_many_reports_failures_after_finishing_the_others(tmp_path):
    good = load_config(CFG, {"results_dir": str(tmp_path), "train.rounds": 2})
    # valid, but its data are not on this machine: the run raises in its worker
    bad = load_config(CFG, {"results_dir": str(tmp_path), "train.rounds": 2, "dataset.name": "digit5"})
    with pytest.raises(RuntimeError, match=r"1 of 2 runs failed \(finished runs are cached\)") as err:
        run_many([(bad, 1), (good, 1)], workers=1, progress=False)
    assert "spiral_test seed 1" in str(err.value)
    assert (tmp_path / run_id(good, 1) / "summary.json").exists()


@pytest.mark.slow
def test_run_many_writes_runs_done_and_an_eta_for_a_watcher(tmp_path, monkeypatch):
    from fedlib.reproduce import progress_line

    monkeypatch.setenv("FEDLIB_PROGRESS", str(tmp_path / "progress.json"))
    a = load_config(CFG, {"results_dir": str(tmp_path / "r"), "train.rounds": 2})
    run_many([(a, 1), (a, 2)], workers=1, progress=False, desc="grid")
    state = json.loads((tmp_path / "progress.json").read_text())
    assert (state["runs_done"], state["runs_total"], state["rounds_done"], state["rounds_total"]) == (2, 2, 4, 4)
    assert progress_line(state, "nb").startswith("nb: grid: runs 2/2, rounds 4/4, ")
    run_many([(a, 1), (a, 2)], workers=1, progress=False, desc="grid")  # all cached: done at once
    assert json.loads((tmp_path / "progress.json").read_text())["runs_done"] == 2


@pytest.mark.slow
def test_load_state_brings_back_the_final_models(tmp_path):
    cfg = load_config(CFG, {"results_dir": str(tmp_path), "train.rounds": 2})
    summary = run_one(cfg, 1, progress=False)
    state = load_state(cfg, 1)
    assert state.round == 2 and len(state.clients) == 6
    # predicting with the restored states reproduces the logged accuracy of the last round
    accs = []
    for cid in range(6):
        test = state.data.test[cid]
        scores = state.predict(cid, test.x)
        accs.append(float((scores["proto"].argmax(1) == test.y).float().mean()))
    assert np.mean(accs) == pytest.approx(summary["metrics"]["acc_proto"]["last"], abs=1e-9)
    # collect stacks each client's features under its own model, in client order
    z, y = state.collect("high", "train", clients=[3, 1])
    for part, (cid, n) in zip(np.split(np.arange(len(y)), [len(state.data.train[3].y)]),
                              ((3, len(state.data.train[3].y)), (1, len(state.data.train[1].y))), strict=True):
        assert len(part) == n and np.array_equal(y[part], state.data.train[cid].y.numpy())
        assert np.array_equal(z[part], state.features(cid, state.data.train[cid].x)["high"].detach().numpy())
    assert len(state.collect("high")[1]) == sum(len(state.data.test[c].y) for c in range(6))
    with pytest.raises(FileNotFoundError, match="run it first"):
        load_state(load_config(CFG, {"results_dir": str(tmp_path / "none")}), 1)


def test_study_configs_share_the_cache_with_the_params_files():
    plan = S.load_plan("paper")
    for method, path in (("fedmps", "params/fedmps_fmnist.yaml"), ("fedproto", "params/fedproto_fmnist.yaml"),
                         ("fedavg", "params/fedavg_fmnist.yaml")):
        assert run_id(S.config(plan, method), 1234) == run_id(load_config(path), 1234)


def test_study_grids_vary_exactly_one_thing():
    plan = S.load_plan("quick")
    base = S.config(plan, "fedmps")
    assert base["train"]["rounds"] == plan.settings["rounds"]["main"]
    ntd = S.config(plan, "fedntd")
    assert ntd["train"]["local_epochs"] == 5 and S.config(plan, "fedgkd")["train"]["lr"] == 0.05
    ways = S.ways_configs(plan)
    assert sorted(n for (_, n) in ways) == sorted([3, 4, 5] * 2)
    assert ways[("fedmps", 4)]["partition"] == {**base["partition"], "ways": 4}
    abl = S.ablation_configs(plan)
    flags = [(c["algorithm"]["alpha"], c["algorithm"]["beta"], c["algorithm"]["mu"]) for c in abl.values()]
    assert flags == [(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1), (1, 1, 0), (1, 1, 1)]
    tau2 = S.grid_configs(plan, "tau2")[("fedmps", 10.0)]
    assert tau2["algorithm"] == {**S.config(plan, "fedmps", rounds="sweep")["algorithm"], "tau2": 10.0}
    with pytest.raises(Exception, match="method: got 'fedx'"):
        S.config(plan, "fedx")
    with pytest.raises(Exception, match="profile: got 'slow'"):
        S.load_plan("slow")


def _summary(acc):
    return {"metrics": {"acc_proto_own": {"best": acc}, "acc_head": {"best": acc - 0.1}}}


def test_table3_wilcoxon_rank_sum_complete_separation():
    plan = S.load_plan("paper")
    rows = S.table3(plan, {"fedmps": [_summary(x) for x in (0.93, 0.94, 0.95)],
                           "fedavg": [_summary(x) for x in (0.80, 0.81, 0.82)]})
    assert rows["fedmps"]["metric"] == "acc_proto_own" and rows["fedavg"]["metric"] == "acc_head"
    assert rows["fedmps"]["mean"] == pytest.approx(94.0)
    assert rows["fedavg"]["mean"] == pytest.approx(71.0)  # head = proto_own - 10 points
    assert rows["fedavg"]["std"] == pytest.approx(np.std([70, 71, 72], ddof=1))   # the sample std over seeds
    # 3 vs 3 with complete separation: the exact test's floor, 0.10 (the normal approximation's 0.0495 is what
    # lets the paper print p < 0.05 with 3 vs 3 runs)
    assert rows["fedavg"]["p_vs_fedmps"] == pytest.approx(0.1)
    assert rows["fedmps"]["p_vs_fedmps"] is None
    single = S.table3(plan, {"fedmps": [_summary(0.9)], "fedavg": [_summary(0.8)]})
    assert single["fedavg"]["p_vs_fedmps"] is None


def test_time_to_target():
    recs = [{"round": r, "seconds": 2.0, "acc": {"m": {"mean": a}}} for r, a in ((1, 0.5), (2, 0.84), (3, 0.86))]
    assert S.time_to_target(recs, "m", 0.85) == {"round": 3, "seconds": 6.0}
    assert S.time_to_target(recs, "m", 0.9) == {"round": None, "seconds": None}


def test_fedmps_figs_4_and_5_read_every_seed():
    """Fig. 4's seed-mean curve over the rounds every seed evaluated, with the sample std per round; Fig. 5's rounds to
    the target as mean ± sample std (n), a seed that never reached it counted as rounds + 1 and marked as a bound."""
    def recs(values):
        return [{"round": r, "acc": {"m": {"mean": v}}} for r, v in enumerate(values, 1)]
    rounds, mean, std = plots.mean_curve([recs([0.5, 0.7, 0.9]), recs([0.7, 0.9, 0.9]), recs([0.6, 0.8])], "m")
    assert rounds == [1, 2] and mean == pytest.approx([60.0, 80.0]) and std == pytest.approx([10.0, 10.0])
    assert np.isnan(plots.mean_curve([recs([0.5, 0.7])], "m")[2]).all()   # one seed: no band
    assert S._rounds_cell([{"round": 2}, {"round": 8}, {"round": 3}], 101) == "4.33 ± 3.21 (n = 3)"
    assert S._rounds_cell([{"round": 89}, {"round": None}, {"round": None}], 101) == "≥ 97.00 ± 6.93 (n = 3)"
    assert S._rounds_cell([{"round": None}] * 3, 101) == "never (n = 3)"
    assert S.mean_std_n([92.0]) == "92.00 (n = 1)" and S.mean_std_n([float("nan")]) == "—"


def test_attacker_aux_never_holds_the_target_clients_images():
    ds = tiny_image_dataset(per_class_train=40, per_class_test=10)
    part = nway_kshot(ds.y_train.numpy(), ds.y_test.numpy(), 4, num_clients=2, ways=2, shots=5, stdev=0,
                      block=5, test_shots=4, seed=0)
    state = RunState(None, 0, FederatedData(ds, part), None, None, {}, None, 0)
    x, y = S.attacker_aux(state, target=0, n=1000)
    own = state.data.test[0].x
    assert len(x) == len(ds.y_test) - len(own)  # everything except the target's test images
    assert not any(torch.equal(a, b) for a in x for b in own)
    assert y.tolist() == [int(ds.y_test[i]) for i in range(len(ds.y_test)) if not any(
        torch.equal(ds.x_test[i], b) for b in own)]


def test_cifar10_setting_partition_has_the_papers_59_pairs():
    data = S.cifar10_shaped()
    assert int((data.partition.counts > 0).sum()) == 59


def test_notebook_parameters_override_the_profile():
    plan = S.load_plan("quick", methods=["fedavg", "fedproto", "fedmps"], seeds=[7], rounds=3)
    assert list(S.table3_configs(plan)) == ["fedavg", "fedproto", "fedmps"]
    assert plan.seeds == [7] and S.config(plan, "fedmps")["seeds"] == [7]
    assert {c["train"]["rounds"] for c in S.ablation_configs(plan).values()} == {3}
    assert S.load_plan("quick").settings["rounds"]["main"] == 10  # the file's settings are untouched
    for bad, match in (({"methods": ["fedavg"]}, "methods: got"), ({"methods": ["fedmps", "fedproto", "x"]}, "x"),
                       ({"seeds": []}, "seeds: got"), ({"rounds": 0}, "rounds: got 0")):
        with pytest.raises(Exception, match=match):
            S.load_plan("quick", **bad)


def test_all_jobs_are_unique_and_longest_first():
    plan = S.load_plan("quick")
    js = S.all_jobs(plan)
    ids = [run_id(c, s) for c, s in js]
    assert len(ids) == len(set(ids)) == 34  # 31 + the three code-faithful variants
    assert js[0][0]["algorithm"]["name"] == "fedntd"  # 5 local epochs
    # the Table III run of FedMPS is also Table VI's n = 3 entry: one run, not two
    assert ids.count(run_id(S.config(plan, "fedmps"), 1234)) == 1


def test_local_prototypes_by_class_groups_uploads():
    ups = {0: {"high": torch.tensor([[1.0], [2.0]]), "classes": torch.tensor([3, 5])},
           1: {"protos": torch.tensor([[4.0]]), "classes": torch.tensor([5])}}
    owners = S.local_prototypes_by_class(ups)
    assert sorted(owners) == [3, 5]
    assert [(cid, p.tolist()) for cid, p in owners[5]] == [(0, [2.0]), (1, [4.0])]


@pytest.mark.slow
def test_cached_reads_finished_runs_only_and_counts_them(tmp_path):
    from fedlib import study

    cfg = load_config(CFG, {"results_dir": str(tmp_path), "train.rounds": 2})
    other = load_config(CFG, {"results_dir": str(tmp_path), "train.rounds": 2, "algorithm.lam": 0.5})
    assert results.cached({"a": cfg, "b": other}, [1, 2]) == ({}, 0)
    made = run_many([(cfg, 1), (cfg, 2), (other, 1)], workers=1, progress=False)
    done, found = results.cached({"a": cfg, "b": other}, [1, 2])
    assert found == 3 and list(done) == ["a"]  # "b" lacks seed 2: left out, not half shown
    assert [s["run_id"] for s in done["a"]] == [made[0]["run_id"], made[1]["run_id"]]
    assert results.cached({"a": cfg, "b": other}, [1, 2]) == (done, found)  # reading trains nothing
    assert len(list(tmp_path.iterdir())) == 3
    text = study.made_by(done["a"])
    assert text.startswith(f"commit {made[0]['code']}") and made[0]["machine"]["cpu_capability"] in text
    older = [{**done["a"][0], "code": "abc1234"}, {k: v for k, v in done["a"][1].items() if k != "code"}]
    assert study.made_by(older).startswith("commit abc1234, 1 of 2 runs made before runs recorded their commit · ")
    assert study.made_by([older[1]]).startswith("1 of 1 runs made before runs recorded their commit · CPU ")
    timed = [{"code": "abc1234", "machine": {"cpu": "X", "cpu_capability": "AVX2"}, "rounds": 100,
              "seconds_per_round_median": sec} for sec in (36.0, 72.0)]
    assert study.made_by(timed) == "commit abc1234 · CPU X (AVX2) · run time 3.0 h summed over 2 runs"
    assert study.made_by([{**timed[0], "rounds": 50}]).endswith(" · run time 30 min summed over 1 run")
    assert study.made_by([{**timed[0], "rounds": 1}]).endswith(" · run time 36 s summed over 1 run")


def test_paper_table3_in_a_short_profile_trains_nothing(tmp_path):
    plan = S.load_plan("smoke", results_dir=str(tmp_path))
    got = S.paper_table3(plan)
    assert got["plan"].profile == "paper" and got["plan"].settings["rounds"]["main"] == 100
    assert (got["found"], got["total"], got["rows"]) == (0, 9, None)   # smoke's 3 methods x the paper's 3 seeds
    assert not any(tmp_path.iterdir())
    only = S.load_plan("smoke", results_dir=str(tmp_path), methods=["fedproto", "fedmps"])
    assert S.paper_table3(only)["total"] == 6


def test_paper_tables_6_and_7_in_a_short_profile_train_nothing(tmp_path):
    plan = S.load_plan("smoke", results_dir=str(tmp_path))
    six, seven = S.paper_table6(plan), S.paper_table7(plan)
    assert (six["found"], six["total"], six["rows"]) == (0, 9, None)  # smoke's 3 methods x n = 3, 4, 5, first seed
    assert (seven["found"], seven["total"], seven["rows"]) == (0, 18, None)   # 6 rows x the paper's ablation_seeds
    assert seven["plan"].settings["rounds"]["ablation"] == 100
    assert not any(tmp_path.iterdir())
    # Table VI's n = 3 and Table VII's row 6 are Table III's first-seed runs, not new ones
    paper = six["plan"]
    t3 = {run_id(c, 1234) for c in S.table3_configs(paper).values()}
    assert {run_id(c, 1234) for (m, n), c in S.ways_configs(paper).items() if n == 3} == t3
    assert run_id(S.ablation_configs(paper)[6], 1234) == run_id(S.table3_configs(paper)["fedmps"], 1234)
    only = S.load_plan("smoke", results_dir=str(tmp_path), methods=["fedproto", "fedmps"])
    assert S.paper_table6(only)["total"] == 6


def test_paper_table6_shows_the_methods_finished_so_far_and_names_the_rest(tmp_path, monkeypatch):
    # Table VI takes hours a column on a CPU: each n shows the methods that have finished, and the report
    # names those that have not (the ledger still waits for the whole table)
    plan = S.load_plan("smoke", results_dir=str(tmp_path))

    def fake_cached(configs, seeds, archive_root=None, protocol=False, more=False):
        done = {}
        for (m, n) in configs:
            if (m, n) in {("fedmps", 3), ("fedavg", 3), ("fedmps", 4)}:
                acc = {"fedmps": 0.9, "fedavg": 0.7}[m] + n / 1000
                done[(m, n)] = [{"seed": seeds[0], "metrics": {key: {"best": acc, "best_std": 0.05} for key in (
                                 "acc_proto_own", "acc_head", "acc_head_own", "acc_proto")}, "code": "abc1234",
                                 "machine": {"cpu": "X", "cpu_capability": "AVX2"}}]
        return done, len(done)

    monkeypatch.setattr(results, "cached", fake_cached)
    six = S.paper_table6(plan)
    assert (six["found"], six["total"]) == (3, 9)   # smoke's 3 methods x n = 3, 4, 5
    assert set(six["rows"]) == {3, 4}
    assert set(six["rows"][3]) == {"fedmps", "fedavg"} and set(six["rows"][4]) == {"fedmps"}
    assert six["rows"][4]["fedmps"] == pytest.approx((90.4, 5.0))
    assert six["missing"][5] == ["fedavg", "fedproto", "fedmps"]
    assert six["missing"][4] == ["fedavg", "fedproto"] and six["missing"][3] == ["fedproto"]
    assert six["made_by"].startswith("commit abc1234 · CPU X (AVX2)")


def _abl_row(best, last, head):
    return {"proto_own_best": best, "proto_own_last": last, "head_last": head}


def test_ledger_adds_paper_protocol_claims_of_tables_6_and_7():
    quick, paper = S.load_plan("quick"), S.load_plan("paper")
    ways_paper = {"plan": paper, "rows": {3: {"fedmps": (93.0, 1.0), "fedproto": (91.0, 2.0)},
                                          4: {"fedmps": (88.0, 1.0), "fedproto": (89.5, 2.0)}}}
    abl = {1: _abl_row(90, 89, 88), 2: _abl_row(91, 90, 89), 3: _abl_row(92, 91, 90), 4: _abl_row(89, 90, 88),
           5: _abl_row(93, 92, 91), 6: _abl_row(93, 92.5, 91.5)}
    got = S.ledger(quick, {"ways": {3: {"fedmps": 80.0, "fedproto": 70.0}}, "ways_paper": ways_paper,
                           "ablation_paper": {"plan": paper, "rows": abl}})
    by = {(c.source, c.claim): c for c in got}
    best_n = "FedMPS is the best method for every average number of classes n"
    assert by[("Table VI", best_n)].verdict == "inconclusive"  # quick profile
    assert "quick-profile evidence only" in by[("Table VI", best_n)].note
    paper_n = by[("Table VI, paper protocol", best_n)]
    assert paper_n.verdict == "inconclusive"  # n = 4: FedProto 89.50 above FedMPS 88.00, but one seed
    assert "n = 4: best FedProto 89.50, FedMPS 88.00" in paper_n.evidence and "seed 1234" in paper_n.evidence
    assert "one seed" in paper_n.note
    alone = by[("Table VII, paper protocol", "Each loss term alone adds accuracy over cross-entropy (rows 2-4 above "
                                             "row 1)")]
    assert alone.verdict == "inconclusive"  # row 4 (89) is below row 1 (90) on one seed
    soft = by[("Table VII, paper protocol", "Soft labels add accuracy on top of both contrastive terms (row 6 above "
                                            "row 5)")]
    assert soft.verdict == "inconclusive"  # best rounds tie, last round 92.5 > 92, one seed
    assert "100 rounds" in soft.note
    assert not [c for c in S.ledger(paper, {"ways_paper": ways_paper, "ablation_paper": {"plan": paper, "rows": abl}})
                if c.source.endswith("paper protocol")]


def test_ledger_adds_the_paper_protocol_claims_beside_the_short_ones():
    quick, paper = S.load_plan("quick"), S.load_plan("paper")
    short = S.table3(quick, {"fedmps": [_summary(0.80)], "fedavg": [_summary(0.99)]})
    full = S.table3(paper, {"fedmps": [_summary(x) for x in (0.93, 0.94, 0.95)],
                            "fedavg": [_summary(x) for x in (0.80, 0.81, 0.82)]})
    got = S.ledger(quick, {"table3": short, "table3_paper": {"plan": paper, "rows": full, "head": None}})
    by = {(c.source, c.claim): c for c in got}
    best = "FedMPS has the highest accuracy of the eight methods on Fashion-MNIST"
    assert by[("Table III", best)].verdict == "inconclusive"  # 80 vs 89 in a one-seed quick run decides nothing
    paper_best = by[("Table III, paper protocol", best)]
    assert paper_best.verdict == "supported"  # 94 vs 71 over 3 seeds, std 1.00
    assert "FedMPS 94.00 ± 1.00 vs best other FedAvg 71.00 ± 1.00" in paper_best.evidence
    assert "paper profile, 100 rounds, seeds [1234, 1235, 1236]" in paper_best.evidence
    assert "FedMPS - FedAvg +23.00 (seed std 1.00, paired exact p 0.25" in paper_best.note
    sig = by[("Table III, paper protocol", "FedMPS is significantly better than every baseline (Wilcoxon rank-sum, "
                                           "p < 0.05)")]
    assert sig.verdict == "inconclusive" and "largest 0.100" in sig.evidence
    assert "cannot go below p = 0.10" in sig.note
    # under the paper profile itself the table above is the paper protocol: no second copy
    assert not [c for c in S.ledger(paper, {"table3": full, "table3_paper": {"plan": paper, "rows": full,
                                                                              "head": None}})
                if c.source == "Table III, paper protocol"]


def test_table5_claim_is_judged_where_the_paper_made_it():
    quick = S.load_plan("quick")
    cifar = {"fedavg": {"up": 1_240_120}, "fedproto": {"up": 7_080}, "fedmps": {"up": 30_680}}
    fmnist = {"fedavg": 582_600, "fedproto": 111_328, "fedmps": 333_984}
    by = {c.source: c for c in S.ledger(quick, {"comm_cifar10": cifar, "comm": fmnist})}
    # 30,680 < 124,012: exact counts, any profile; true by construction (prototypes, not the model, go up)
    assert by["Table V (CIFAR-10 setting)"].verdict == "by construction"
    assert "exact counts" in by["Table V (CIFAR-10 setting)"].note
    assert "FedMPS uplink 30,680 floats per round vs at least 1,240,120" in by["Table V (CIFAR-10 setting)"].evidence
    assert by["Table V, Fashion-MNIST runs"].verdict == "not supported"  # 333,984 > 58,260
    assert by["Table V, Fashion-MNIST runs"].claim.startswith("(our check)")


def test_a_short_runs_diff_column_says_so():
    from fedlib import report

    df = report.compare({"rows": {"a": {"x": 90.0}}}, {"a": {"x": 80.0}})
    assert "diff (quick: not converged)" in report.short_run(df, "quick").columns
    assert list(report.short_run(df, "paper").columns) == list(df.columns)


@pytest.mark.slow
def test_headless_command_runs_tables_6_and_7(tmp_path, monkeypatch, capsys):
    """``python -m fedlib.papers.fedmps --table VI|VII``: one table headless, first seed only."""
    monkeypatch.setenv("FEDLIB_ROOT", str(tmp_path))
    assert S.main(["--profile", "smoke", "--table", "VII", "--rounds", "2", "--workers", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("FedMPS Table VII (Fashion-MNIST; the paper's is CIFAR-10), profile smoke: 2 rounds, seed "
                             "1234")
    assert "| our gain over (1) |" in out[1]
    rows = [line for line in out if line.startswith("| (")]
    assert [r[2:5] for r in rows] == ["(1)", "(2)", "(3)", "(4)", "(5)", "(6)"]
    assert rows[0].split(" | ")[4] == "+0.00"  # row (1)'s gain over itself
    soft = {r[3]: not r.endswith("| — |") for r in rows}  # rows 4 and 6 switch the soft labels on
    assert soft == {"1": False, "2": False, "3": False, "4": True, "5": False, "6": True}
    assert S.main(["--profile", "smoke", "--table", "VI", "--methods", "fedproto", "fedmps", "--rounds", "2",
                   "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count("FedMPS Table VI, n = ") == 1 and "| FedProto |" in out and "| FedAvg |" in out  # smoke: n = 3
    assert len(list((tmp_path / "results").iterdir())) == 6 + 2 - 1  # n = 3 FedMPS is ablation row 6's run


def test_not_run_text_counts_the_runs_and_names_the_command():
    from fedlib import study

    assert study.not_run_text("Table VI", 1, 24, "python -m fedlib.papers.fedmps --profile paper --table VI") == (
        "**Table VI under the paper protocol: not run here** (1 of 24 runs finished in this results folder or the "
        "run archive). `python -m fedlib.papers.fedmps --profile paper --table VI` makes them; this cell then shows "
        "them without training.")
    assert study.not_run_text("Table 1", 0, 81, "c", "the converged profile").startswith(
        "**Table 1 under the converged profile: not run here** (0 of 81 runs")
