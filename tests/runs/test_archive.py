"""The run archive: a fresh clone (no results folder) reads the same finished runs the committed report
quotes, and a damaged or misplaced entry is never served."""

import gzip
import json
import shutil
import warnings

import pytest

from fedlib import archive, results, store, study
from fedlib.papers import catalog
from fedlib.config import load_config
from fedlib.runner import load_rounds, run_one
from fedlib.store import DamagedRunWarning
from tests.conftest import DATA

CFG = DATA / "spiral_fedproto.yaml"


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """Two seeds of a 3-round run, archived; then a config pointing at an empty results folder
    (what a fresh clone has)."""
    cfg = load_config(CFG, {"results_dir": str(tmp_path_factory.mktemp("results")), "train.rounds": 3})
    root = tmp_path_factory.mktemp("archive")
    summaries = [run_one(cfg, s, progress=False) for s in (1, 2)]
    assert [archive.add(cfg, s, root) for s in (1, 2)] == [True, True]
    fresh = {**cfg, "results_dir": str(tmp_path_factory.mktemp("fresh"))}
    return cfg, fresh, root, summaries


@pytest.mark.slow
def test_a_fresh_clone_reads_the_archived_runs(finished):
    cfg, fresh, root, summaries = finished
    done, found = results.cached({"m": fresh}, [1, 2], archive_root=root)
    assert found == 2 and list(done) == ["m"]
    for got, want in zip(done["m"], summaries, strict=True):
        assert got["archived"] is True
        assert got["metrics"] == want["metrics"] and got["run_id"] == want["run_id"]
    assert results.rounds(fresh, 1, archive_root=root) == load_rounds(cfg, 1)
    assert len(results.rounds(fresh, 1, archive_root=root)) == 3
    assert "2 of 2 runs read from the run archive" in study.made_by(done["m"])


@pytest.mark.slow
def test_the_results_folder_wins_and_is_not_labelled_archived(finished):
    cfg, _, root, _ = finished
    done, _ = results.cached({"m": cfg}, [1, 2], archive_root=root)
    assert not any(s.get("archived") for s in done["m"])
    assert "archive" not in study.made_by(done["m"])


@pytest.mark.slow
def test_a_missing_seed_is_counted_not_served(finished):
    _, fresh, root, _ = finished
    done, found = results.cached({"m": fresh}, [1, 2, 3], archive_root=root)
    assert (done, found) == ({}, 2)


@pytest.mark.slow
def test_an_unfinished_run_is_not_archived(finished, tmp_path):
    cfg, _, _, _ = finished
    assert archive.add({**cfg, "train": {**cfg["train"], "rounds": 4}}, 1, tmp_path) is False
    assert not list(tmp_path.iterdir())


def _copy(root, tmp_path):
    dest = tmp_path / "archive"
    shutil.copytree(root, dest)
    return dest


def _log(entry):
    return gzip.decompress((entry / archive.LOG_GZ).read_bytes()).decode()


@pytest.mark.slow
@pytest.mark.parametrize("damage, name", [
    (lambda e: (e / archive.LOG_GZ).write_bytes(gzip.compress(_log(e).replace('"round": 3', '"round": 4').encode())),
     "rounds.jsonl.gz"),
    (lambda e: (e / archive.LOG_GZ).write_bytes((e / archive.LOG_GZ).read_bytes()[:40]), "rounds.jsonl.gz"),
    (lambda e: (e / archive.LOG_GZ).unlink(), "rounds.jsonl.gz"),
    (lambda e: (e / "summary.json").write_text("{"), "summary.json"),
    (lambda e: (e / "summary.json").write_text(json.dumps({**json.loads((e / "summary.json").read_text()),
                                                           "rounds": 2})), "summary.json"),
])
def test_a_damaged_entry_is_named_and_not_served(finished, tmp_path, damage, name):
    _, fresh, root, _ = finished
    dest = _copy(root, tmp_path)
    damage(archive.entry(fresh, 1, dest))
    with pytest.warns(DamagedRunWarning, match=name):
        assert archive.summary(fresh, 1, dest) is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DamagedRunWarning)
        assert results.cached({"m": fresh}, [1, 2], archive_root=dest) == ({}, 1)
        assert results.rounds(fresh, 1, archive_root=dest) == []


@pytest.mark.slow
def test_an_entry_under_another_runs_id_is_not_served(finished, tmp_path):
    """Seed 2's record copied into seed 1's folder: the numbers of another run are refused."""
    _, fresh, root, _ = finished
    dest = _copy(root, tmp_path)
    one, two = archive.entry(fresh, 1, dest), archive.entry(fresh, 2, dest)
    shutil.rmtree(one)
    shutil.copytree(two, one)
    with pytest.warns(DamagedRunWarning, match="not of run"):
        assert archive.summary(fresh, 1, dest) is None


@pytest.mark.slow
def test_the_command_archives_and_checks(monkeypatch, finished, tmp_path, capsys):
    cfg, fresh, _, _ = finished
    monkeypatch.setattr(catalog, "archived_tables", lambda: [("toy table", {"m": cfg}, [1, 2, 3])])
    from fedlib.__main__ import main

    assert main(["archive", "--root", str(tmp_path)]) == 0
    assert main(["archive", "--check", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == ["toy table: 2 of 3 runs in the archive (2 added, 0 already there and kept)",
                   "toy table: 2 of 3 runs in the archive pass their checks; 2 finished in the results folder"]
    assert sorted(p.name for p in archive.entry(fresh, 1, tmp_path).iterdir()) == [
        "config.yaml", "rounds.jsonl.gz", "summary.json"]


@pytest.mark.slow
def test_an_archived_entry_is_kept_when_its_run_is_made_again_unless_replaced(finished, tmp_path):
    # a rerun has the same numbers but another timing, commit and finish time: the committed record stays
    cfg, _, root, _ = finished
    dest = _copy(root, tmp_path)
    entry = archive.entry(cfg, 1, dest)
    before = {p.name: p.read_bytes() for p in entry.iterdir()}
    from fedlib.runner import run_dir

    summary_file = run_dir(cfg, 1) / "summary.json"
    rerun = json.loads(summary_file.read_text())
    original = summary_file.read_text()
    try:
        rerun["finished_utc"] = "2099-01-01 00:00"
        summary_file.write_text(json.dumps(store.with_hash(rerun)))
        assert archive.add(cfg, 1, dest) is True
        assert {p.name: p.read_bytes() for p in entry.iterdir()} == before
        assert archive.add(cfg, 1, dest, replace=True) is True
        assert json.loads((entry / "summary.json").read_text())["finished_utc"] == "2099-01-01 00:00"
        (entry / "summary.json").write_text("{")  # a damaged entry is replaced without being asked
        with pytest.warns(DamagedRunWarning, match="summary.json"):
            assert archive.add(cfg, 1, dest) is True
        assert json.loads((entry / "summary.json").read_text())["finished_utc"] == "2099-01-01 00:00"
    finally:
        summary_file.write_text(original)


@pytest.mark.slow
def test_a_notebook_reads_archived_runs_instead_of_training_them(monkeypatch, finished, tmp_path, capsys):
    # the "All runs" cell of a long profile on a fresh clone: the archive holds seeds 1 and 2, seed 3 trains
    _, fresh, root, _ = finished
    monkeypatch.setattr(archive, "ARCHIVE", root)
    fresh = {**fresh, "results_dir": str(tmp_path)}
    from fedlib.study.notebook import Notebook

    Notebook(plan=None, section=None, paper={}, workers=1).run_all([(fresh, 1), (fresh, 2), (fresh, 3)], "toy")
    assert "3 runs (9 rounds in all); 2 finished elsewhere (the run archive or another device) are read, not " \
           "trained" in capsys.readouterr().out
    from fedlib.runner import run_dir

    assert [s for s in (1, 2, 3) if run_dir(fresh, s).exists()] == [3]


@pytest.mark.slow
def test_the_state_of_an_archived_run_is_trained_here_and_equals_its_record(monkeypatch, finished, tmp_path, capsys):
    # the archive keeps no model: a figure that needs one trains the run, and the retrained run is the archived one
    _, fresh, root, summaries = finished
    monkeypatch.setattr(archive, "ARCHIVE", root)
    fresh = {**fresh, "results_dir": str(tmp_path)}
    state = results.state(fresh, 2)
    assert "seed 2: the run archive keeps no model, so this figure trains the run here (3 rounds; an interrupted " \
        "attempt resumes)" in capsys.readouterr().out
    assert state.round == 3
    from fedlib.runner import cached_summary

    assert cached_summary(fresh, 2)["metrics"] == summaries[1]["metrics"]
    results.state(fresh, 2)   # now in the results folder: read, not trained again
    assert "trains the run here" not in capsys.readouterr().out


@pytest.mark.slow
def test_an_interrupted_state_run_is_resumed_not_served_half_trained(monkeypatch, finished, tmp_path):
    _, fresh, root, summaries = finished
    monkeypatch.setattr(archive, "ARCHIVE", root)
    fresh = {**fresh, "results_dir": str(tmp_path)}

    def stop(r):   # an attempt killed after round 2: its checkpoint stays, no summary
        if r == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_one(fresh, 1, progress=False, on_round=stop)
    from fedlib.runner import run_dir

    assert (run_dir(fresh, 1) / store.CHECKPOINT).exists() and not (run_dir(fresh, 1) / store.SUMMARY).exists()
    state = results.state(fresh, 1)
    assert state.round == 3
    from fedlib.runner import cached_summary

    assert cached_summary(fresh, 1)["metrics"] == summaries[0]["metrics"]
