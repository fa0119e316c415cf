"""Runs made on another device or executor (e.g. paper-profile runs from a GPU box copied into a CPU
machine's results folder) answer the same config: the paper-table readers and the headless study
commands read them where the table's own placement has no run, and say so."""


import pytest
import torch

from fedlib import archive, results, store, study
from fedlib.papers import catalog
from fedlib.algorithms import make_algorithm
from fedlib.__main__ import main as fedlib_main
from fedlib.config import load_config, run_id
from fedlib.runner import cached_summary, load_rounds, run_one
from tests.conftest import DATA

CFG = DATA / "spiral_fedproto.yaml"


def _configs(tmp_path):
    cfg = load_config(CFG, {"results_dir": str(tmp_path / "results"), "train.rounds": 2})
    other = load_config(CFG, {"results_dir": str(tmp_path / "results"), "train.rounds": 2, "executor": "batched"})
    assert (cfg["device"], cfg["executor"], other["executor"]) == ("cpu", "sequential", "batched")
    return cfg, other


def test_placements_list_the_own_first_then_every_other_once(tmp_path):
    cfg, other = _configs(tmp_path)
    got = [(c["device"], c["executor"]) for c in results.placements(cfg)]
    assert got == [("cpu", "sequential"), ("cpu", "batched"), ("cuda", "batched"), ("cuda", "sequential")]
    assert results.placements(cfg)[0] is cfg
    assert [(c["device"], c["executor"]) for c in results.placements(other)][:2] == [("cpu", "batched"),
                                                                                    ("cpu", "sequential")]
    as_cuda = {**cfg, "device": "cuda", "executor": "batched"}   # a GPU's table reads a GPU's runs first
    assert [(c["device"], c["executor"]) for c in results.placements(as_cuda)] == [
        ("cuda", "batched"), ("cuda", "sequential"), ("cpu", "sequential"), ("cpu", "batched")]
    assert len({run_id(c, 1) for c in results.placements(cfg)}) == 4   # four different runs


@pytest.mark.slow
def test_a_run_on_another_placement_is_read_where_the_own_is_missing(tmp_path, capsys):
    cfg, other = _configs(tmp_path)
    assert results.find(cfg, 1) == (None, None) and results.rounds(cfg, 1) == []
    made = run_one(other, 1, progress=False)
    c, summary = results.find(cfg, 1)
    assert c["executor"] == "batched" and summary["run_id"] == made["run_id"] != run_id(cfg, 1)
    done, found = results.cached({"m": cfg}, [1])
    assert found == 1 and done["m"][0]["run_id"] == made["run_id"]
    assert ", batched clients" in study.made_by(done["m"])
    assert results.rounds(cfg, 1) == load_rounds(other, 1) and len(results.rounds(cfg, 1)) == 2
    # the headless commands read it and train only what no placement has
    got = results.run_or_read({"m": cfg}, seeds=[1, 2], workers=1, progress=False, desc="Toy")
    assert capsys.readouterr().out == "Toy: 1 runs finished on another placement (cpu/batched): read, not retrained\n"
    assert [s["run_id"] for s in got["m"]] == [made["run_id"], run_id(cfg, 2)]
    assert cached_summary(cfg, 1) is None and cached_summary(cfg, 2) is not None
    # the table's own placement wins once it has the run
    own = run_one(cfg, 1, progress=False)
    assert results.find(cfg, 1)[1]["run_id"] == own["run_id"]
    assert "batched" not in study.made_by(results.cached({"m": cfg}, [1])[0]["m"])


@pytest.mark.slow
def test_the_archive_keeps_the_other_placements_run(tmp_path, monkeypatch, capsys):
    cfg, other = _configs(tmp_path)
    made = run_one(other, 1, progress=False)
    monkeypatch.setattr(catalog, "archived_tables", lambda: [("toy table", {"m": cfg}, [1, 2])])
    root = tmp_path / "archive"
    assert fedlib_main(["archive", "--root", str(root)]) == 0
    assert fedlib_main(["archive", "--check", "--root", str(root)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "toy table: 1 of 2 runs in the archive (1 added, 0 already there and kept)",
        "toy table: 1 of 2 runs in the archive pass their checks; 1 finished in the results folder"]
    assert sorted(p.name for p in root.iterdir()) == sorted([made["run_id"], archive.INDEX])   # the entry, its index
    fresh = {**cfg, "results_dir": str(tmp_path / "fresh")}   # a fresh clone: no results folder
    assert results.find(fresh, 1, root)[1]["archived"] is True
    assert results.rounds(fresh, 1, root) == archive.rounds(other, 1, root) == load_rounds(other, 1)


@pytest.mark.slow
def test_a_batched_run_resumed_from_its_checkpoint_equals_the_uninterrupted_run(tmp_path):
    # long batched CPU runs (GFPL's Fashion-MNIST paper runs) are resumed across sessions
    full = load_config(CFG, {"results_dir": str(tmp_path / "full"), "train.rounds": 3, "executor": "batched"})
    ref = run_one(full, 1, progress=False)
    short = {**full, "results_dir": str(tmp_path / "short"), "train": {**full["train"], "rounds": 2}}
    run_one(short, 1, progress=False)
    src, folder = tmp_path / "short" / run_id(short, 1), tmp_path / "run" / ref["run_id"]
    folder.mkdir(parents=True)
    log2 = (src / "rounds.jsonl").read_text()
    (folder / "rounds.jsonl").write_text(log2)
    ckpt = torch.load(src / "checkpoint.pt", weights_only=True)
    store.save_checkpoint(folder, 2, ckpt["clients"], ckpt["server"], log2)
    resumed = run_one({**full, "results_dir": str(tmp_path / "run")}, 1, progress=False)
    assert resumed["rounds"] == 3 and resumed["metrics"] == ref["metrics"]


@pytest.mark.slow
def test_a_method_the_batched_executor_cannot_batch_is_recorded_as_trained_sequentially(tmp_path):
    cfg, other = _configs(tmp_path)
    proc = {**other, "algorithm": {"name": "feduv"}}   # its loss keeps pair distances by value
    assert make_algorithm(proc["algorithm"]).batch_support()
    s = run_one(proc, 1, progress=False)
    assert s["executor"] == "sequential"
    assert s["run_id"] == run_id(proc, 1) != run_id({**proc, "executor": "sequential"}, 1)   # identity unchanged
    assert "batched" not in study.made_by([s])
    assert run_one(other, 1, progress=False)["executor"] == "batched"


@pytest.mark.slow
def test_the_headless_commands_read_archived_runs_and_train_them_again_on_request(tmp_path, monkeypatch, capsys):
    # a paper-profile job on a fresh clone goes on where the committed archive ends
    cfg, other = _configs(tmp_path)
    made = {s: run_one(c, s, progress=False) for c, s in ((cfg, 1), (other, 2))}
    monkeypatch.setattr(catalog, "archived_tables", lambda: [("toy table", {"m": cfg}, [1, 2])])
    root = tmp_path / "archive"
    assert fedlib_main(["archive", "--root", str(root)]) == 0
    capsys.readouterr()
    fresh = {**cfg, "results_dir": str(tmp_path / "fresh")}
    got = results.run_or_read({"m": fresh}, seeds=[1, 2, 3], workers=1, progress=False, desc="Toy", archive_root=root)
    assert capsys.readouterr().out == ("Toy: 2 runs read from the run archive (cpu/batched, cpu/sequential): read, "
                                       "not retrained (--retrain-archived trains them again)\n")
    assert [s["run_id"] for s in got["m"]] == [made[1]["run_id"], made[2]["run_id"], run_id(fresh, 3)]
    assert [s.get("archived", False) for s in got["m"]] == [True, True, False]
    assert cached_summary(fresh, 1) is None and cached_summary(fresh, 3) is not None   # only seed 3 trained
    # --retrain-archived: the table's own placement trains them again; the same machine gives the same record
    again = results.run_or_read({"m": fresh}, seeds=[1, 2], workers=1, progress=False, archive_root=root,
                               retrain_archived=True)
    assert capsys.readouterr().out == ""
    assert [s["run_id"] for s in again["m"]] == [run_id(fresh, 1), run_id(fresh, 2)]
    assert again["m"][0]["metrics"] == made[1]["metrics"] and again["m"][0]["run_id"] == made[1]["run_id"]
    assert again["m"][1]["executor"] == "sequential" and again["m"][1]["run_id"] != made[2]["run_id"]


def test_the_study_commands_take_retrain_archived(capsys):
    from fedlib.papers import fedmps, gfpl, mpfedcl

    cli = study.add_retrain_archived(study.cli("x", ""))
    assert cli.parse_args(["--retrain-archived"]).retrain_archived is True and not cli.parse_args([]).retrain_archived
    for mod in (fedmps, gfpl, mpfedcl):   # the option parses; the bad profile then ends with its one-line error
        assert mod.main(["--retrain-archived", "--profile", "nope"]) == 2
        assert capsys.readouterr().out.startswith("error: ")


def test_mpfedcl_reads_its_archived_table_under_the_paper_profile(monkeypatch):
    # Table VI's 18 paper-profile runs are archived: read (results.run_or_read), not trained again; the notebook's
    # own quick runs still train on the machine at hand
    from fedlib.papers import mpfedcl

    monkeypatch.setattr(results, "run_or_read", lambda configs, **kw: ("read", kw["retrain_archived"]))
    monkeypatch.setattr(results, "train", lambda configs, **kw: "trained")
    for profile, got in (("paper", ("read", False)), ("quick", "trained")):
        plan = mpfedcl.load_plan(profile)
        assert results.for_profile(plan.profile, mpfedcl.configs(plan, "table6")) == got
