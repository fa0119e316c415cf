"""Values derived from a trained model (fedlib.results.derived): computed once, kept beside the run, archived with
it, served from the archive alone, and never served for another run or another log of the same run."""

import json

import pytest

from fedlib import archive, plateau, results
from fedlib.config import load_config, run_id
from fedlib.runner import run_one
from tests.conftest import DATA


def test_a_derived_value_is_computed_once_archived_and_read_from_the_archive_alone(tmp_path):
    cfg = load_config(DATA / "spiral_fedproto.yaml", {"results_dir": str(tmp_path / "r"), "train.rounds": 2})
    root = tmp_path / "archive"
    calls = []

    def count_classes(state):
        calls.append(state.round)
        return {"classes": int(state.message(0)["classes"].numel()), "round": state.round}

    got = results.derived(cfg, 1, "classes", count_classes)
    assert got == {"classes": 6, "round": 2} and calls == [2]
    assert results.derived(cfg, 1, "classes", count_classes) == got and calls == [2]   # read, not computed again
    assert archive.add(cfg, 1, root)
    path = root / run_id(cfg, 1) / archive.DERIVED / "classes.json"
    assert json.loads(path.read_text())["value"] == got
    with results.archive_only():
        import fedlib.archive as A

        before, A.ARCHIVE = A.ARCHIVE, root
        try:
            assert results.derived(cfg, 1, "classes", count_classes) == got and calls == [2]
            with pytest.raises(results.NotArchived, match="other, derived from a trained model, is not in the run "
                                                          "archive"):
                results.derived(cfg, 1, "other", count_classes)
        finally:
            A.ARCHIVE = before
    # the run extended: its log changed, so the value is computed again, and the archive drops the stale record
    run_one(plateau.extended(cfg, 3), 1, progress=False)
    assert results.derived(cfg, 1, "classes", count_classes) == {"classes": 6, "round": 3} and calls == [2, 3]
    assert archive.add(plateau.extended(cfg, 3), 1, root)
    assert json.loads(path.read_text())["value"]["round"] == 3
    # a record copied to another run is not served there
    other = tmp_path / "r" / run_id(cfg, 2) / archive.DERIVED
    run_one(cfg, 2, progress=False)
    other.mkdir(parents=True)
    derived = tmp_path / "r" / run_id(cfg, 1) / archive.DERIVED
    (other / "classes.json").write_text((derived / "classes.json").read_text())
    assert results.derived(cfg, 2, "classes", count_classes)["round"] == 2 and calls == [2, 3, 2]
