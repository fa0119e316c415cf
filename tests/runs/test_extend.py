"""Runs extended towards their plateau (train.extend_to, fedlib.plateau): the same run id, the first rounds those of
the run without the extension, resumed from the checkpoint (no round trained twice), the archive holding the
extended record, and the extension loop stopping at a plateau or the cap."""

import json
import warnings

import pytest

from fedlib import archive, plateau, store
from fedlib.config import load_config, run_id
from fedlib.runner import cached_summary, load_rounds, run_one
from fedlib.store import DamagedRunWarning
from fedlib.validation import ConfigError
from tests.conftest import DATA

CFG = DATA / "spiral_fedproto.yaml"


def scores(records):
    return [(r["round"], r["acc"], r["clients"], r["train_loss"]) for r in records]


def config(tmp_path, name="a", rounds=3):
    return load_config(CFG, {"results_dir": str(tmp_path / name), "train.rounds": rounds})


def test_extend_to_keeps_the_run_id_and_is_checked(tmp_path):
    cfg = config(tmp_path)
    assert run_id(plateau.extended(cfg, 9), 1) == run_id(cfg, 1)
    assert plateau.extended(cfg, 3)["train"]["extend_to"] is None   # not past the run's own rounds: no extension
    with pytest.raises(ConfigError, match=r"train.extend_to: got 2; allowed: null or an integer of at least "
                                          r"train.rounds \(3\)"):
        load_config(CFG, ["train.rounds=3", "train.extend_to=2"])


def test_an_extension_resumes_from_the_checkpoint_and_equals_a_run_made_long_at_once(tmp_path):
    cfg = config(tmp_path)
    short = run_one(cfg, 1, progress=False)
    first = load_rounds(cfg, 1)
    trained = []
    longer = run_one(plateau.extended(cfg, 5), 1, progress=False, on_round=trained.append)
    assert trained == [4, 5]                        # rounds 1-3 were not trained again
    assert longer["run_id"] == short["run_id"] and longer["rounds"] == 5 and longer["extended_from"] == 3
    records = load_rounds(cfg, 1)
    assert scores(records[:3]) == scores(first)     # the first rounds are the run without the extension
    # the same extension made from nothing in another folder: the same numbers, round for round
    other = config(tmp_path, "b")
    run_one(plateau.extended(other, 5), 1, progress=False)
    assert scores(load_rounds(other, 1)) == scores(records)
    # the extended run serves every request up to its length, silently; a longer one is not served (it extends)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DamagedRunWarning)
        assert cached_summary(cfg, 1)["rounds"] == 5
        assert cached_summary(plateau.extended(cfg, 4), 1)["rounds"] == 5
        assert cached_summary(plateau.extended(cfg, 8), 1) is None
        assert cached_summary(plateau.extended(cfg, 8), 1, repair=True) is None
    assert (tmp_path / "a" / short["run_id"] / store.SUMMARY).exists()   # a short run is not damaged: kept


def test_a_summary_claiming_an_extension_it_lacks_is_not_served(tmp_path):
    cfg = config(tmp_path)
    run_one(plateau.extended(cfg, 4), 1, progress=False)
    path = tmp_path / "a" / run_id(cfg, 1) / store.SUMMARY
    summary = json.loads(path.read_text())
    summary["extended_from"] = 2          # not this config's rounds; its own hash made again, so only the length lies
    path.write_text(json.dumps(store.with_hash(summary)))
    with pytest.warns(DamagedRunWarning, match="extended from 2 rounds, the config has 3"):
        assert cached_summary(cfg, 1, repair=True) is None


def test_the_archive_takes_the_extended_record_in_place_of_the_shorter(tmp_path):
    cfg, root = config(tmp_path), tmp_path / "archive"
    run_one(cfg, 1, progress=False)
    assert archive.add(cfg, 1, root)
    assert archive.summary(cfg, 1, root)["rounds"] == 3
    run_one(plateau.extended(cfg, 5), 1, progress=False)
    assert archive.add(plateau.extended(cfg, 5), 1, root)
    assert archive.summary(cfg, 1, root)["rounds"] == 5 and len(archive.rounds(cfg, 1, root)) == 5
    assert archive.summary(plateau.extended(cfg, 5), 1, root)["rounds"] == 5
    assert archive.summary(plateau.extended(cfg, 6), 1, root) is None        # shorter than asked: not served
    assert archive.add(cfg, 1, root)        # the shorter request keeps the longer record
    assert archive.summary(cfg, 1, root)["rounds"] == 5


def test_the_extension_loop_stops_at_a_plateau_or_the_cap(tmp_path, monkeypatch):
    cfg = config(tmp_path, rounds=2)
    group = plateau.Group("spiral", cfg, (1, 2), "acc_proto")
    st = plateau.status(group)
    assert st.missing == (1, 2) and not st.done and st.rounds == 0
    # a curve that never plateaus (the criterion is made impossible) goes to the cap, step by step
    monkeypatch.setattr(plateau, "status", _never_plateaus(plateau.status))
    kept = []
    final = plateau.run([group], cap=6, step=2, workers=0, keep=lambda c, s: kept.append((c["train"]["extend_to"], s)),
                        progress=False)
    assert [(s.rounds, s.capped, s.done) for s in final] == [(6, True, True)]
    assert kept == [(None, 1), (None, 2), (4, 1), (4, 2), (6, 1), (6, 2)]
    assert all(len(load_rounds(cfg, s)) == 6 for s in (1, 2))


def _never_plateaus(status):
    def wrapped(group, cap=plateau.CAP, archive_root=None):
        import dataclasses

        st = status(group, cap, archive_root)
        return dataclasses.replace(st, plateaued=False, plateau_round=None, capped=st.rounds >= cap)
    return wrapped


def test_a_plateaued_group_is_not_extended(tmp_path):
    cfg = config(tmp_path, rounds=2)
    done = plateau.Status(plateau.Group("g", cfg, (1,), "acc_proto"), 100, True, 0.0, 60, False)
    rising = plateau.Status(plateau.Group("h", cfg, (1, 2), "acc_proto"), 100, False, 1.0, None, False)
    capped = plateau.Status(plateau.Group("i", cfg, (1,), "acc_proto"), 400, False, 1.0, None, True)
    missing = plateau.Status(plateau.Group("j", cfg, (1, 2), "acc_proto"), 150, False, 1.0, None, False, (2,))
    jobs = plateau.next_jobs([done, rising, capped, missing], cap=400, step=50)
    assert [(c["train"]["extend_to"], s) for c, s in jobs] == [(150, 1), (150, 2), (150, 1), (150, 2)]


def test_plateau_round_is_where_the_criterion_starts_to_hold_for_good():
    import numpy as np

    curve = np.concatenate([np.linspace(50, 90, 40), np.full(60, 90.0)])
    r = plateau.plateau_round(curve)
    from fedlib.claims import plateau as criterion

    assert criterion(curve[:r])[0] and not criterion(curve[:r - 1])[0]
    assert all(criterion(curve[:k])[0] for k in range(r, 101))
    assert plateau.plateau_round(np.linspace(50, 90, 100)) is None


def test_reach_check_counts_the_curves_the_projection_bounds():
    import numpy as np

    climb = list(np.linspace(50, 90, 100))                       # steady: the projection from round 25 bounds it
    late = [50.0] * 30 + list(np.linspace(50, 90, 70))          # flat, then a late climb: plateaued at 25, rose later
    jump = list(np.linspace(50, 52, 25)) + [80.0] * 75          # a slow start, then a jump far beyond any projection
    got = plateau.reach_check({"climb": [climb], "late": [late], "jump": [jump]}, cut=25, end=100)
    assert (got["groups"], got["rising"], got["covered"]) == (3, 2, 1)
    assert set(got["misses"]) == {"jump"} and got["plateau_misses"] == {"late": pytest.approx(40.0)}


def test_a_longer_extension_made_on_another_placement_is_read_in_place_of_the_shorter(tmp_path):
    from fedlib import results

    cfg = config(tmp_path)
    other = {**cfg, "executor": "batched"}     # another placement: its own run id (a GPU's runs in the same way)
    assert run_id(other, 1) != run_id(cfg, 1)
    run_one(cfg, 1, progress=False)
    run_one(plateau.extended(other, 5), 1, progress=False)
    found, summary = results.find(cfg, 1, archived=False)
    assert found["executor"] == "batched" and summary["rounds"] == 5 and summary["extended_from"] == 3
    assert len(results.rounds(cfg, 1)) == 5
    out = results.run_or_read({"k": cfg}, seeds=[1], progress=False)
    assert out["k"][0]["rounds"] == 5 and out["k"][0]["executor"] == "batched"
    # a table at a fixed protocol keeps the placement order: its own 3-round run
    found, summary = results.find(cfg, 1, archived=False, longest=False)
    assert found is cfg and summary["rounds"] == 3
    assert results.run_or_read({"k": cfg}, seeds=[1], progress=False, longest=False)["k"][0]["rounds"] == 3
    # the same length elsewhere does not displace the placement's own run
    run_one(plateau.extended(cfg, 5), 1, progress=False)
    found, summary = results.find(cfg, 1, archived=False)
    assert found is cfg and summary["rounds"] == 5


def test_a_table_at_a_fixed_protocol_reads_an_extended_run_at_its_own_rounds(tmp_path):
    """FedMPS's Table III (the paper's 100 rounds) shares its runs with the benchmark, which extends them: read with
    ``protocol=True`` an extended run gives the numbers of its first ``train.rounds`` rounds, the short run's own."""
    from fedlib import results

    cfg = config(tmp_path)
    short = run_one(cfg, 1, progress=False)
    first = load_rounds(cfg, 1)
    run_one(plateau.extended(cfg, 5), 1, progress=False)
    assert results.find(cfg, 1, archived=False)[1]["rounds"] == 5                 # the longest record, by default
    _, cut = results.find(cfg, 1, archived=False, protocol=True)
    assert cut["extended_to"] == 5
    for key in ("rounds", "metrics", "comm_per_round"):
        assert cut[key] == short[key], key
    assert scores(results.rounds(cfg, 1, protocol=True)) == scores(first) and len(results.rounds(cfg, 1)) == 5
    assert results.cached({"k": cfg}, [1], protocol=True)[0]["k"][0]["metrics"] == short["metrics"]
    assert results.run_or_read({"k": cfg}, seeds=[1], progress=False, protocol=True)["k"][0]["metrics"] == \
        short["metrics"]
    assert results.train({"k": cfg}, seeds=[1], progress=False, protocol=True)["k"][0]["metrics"] == short["metrics"]
    assert results.cut_back(cfg, 1, short) is short                              # a run not extended: as it is


def test_a_diverged_run_is_never_passed_over_for_a_longer_one():
    from fedlib.results import longer

    assert longer({"rounds": 9, "extended_from": 3}, {"rounds": 3})
    assert not longer({"rounds": 9}, {"rounds": 3})                                   # not an extension
    assert not longer({"rounds": 9, "extended_from": 3}, {"rounds": 2, "diverged_at": 2})
    assert not longer({"rounds": 2, "extended_from": 3, "diverged_at": 2}, {"rounds": 1})
    assert not longer({"rounds": 5, "extended_from": 3}, {"rounds": 5})


def test_a_pool_hands_each_run_it_trains_to_on_done_in_this_process_once(tmp_path):
    """The pool under plateau.fill's one queue: ``on_done(i)`` runs in the calling process (where the archive is
    written) once per run trained, after its summary is on disk; a cached run is not handed over again."""
    import os

    from fedlib import grid

    cfg = config(tmp_path, rounds=2)
    run_one(cfg, 1, progress=False)
    got = []
    grid.run_many([(cfg, 1), (cfg, 2), (cfg, 3)], workers=2, progress=False,
                  on_done=lambda i: got.append((i, os.getpid(), cached_summary(cfg, i + 1) is not None)))
    assert sorted(got) == [(1, os.getpid(), True), (2, os.getpid(), True)]


def test_added_seeds_train_to_the_groups_length_and_no_finished_seed_trains_again(tmp_path):
    cfg = config(tmp_path, rounds=2)
    run_one(cfg, 1, progress=False)
    run_one(plateau.extended(cfg, 4), 1, progress=False)        # seed 1 extended to 4 rounds
    before = load_rounds(cfg, 1)
    grown, kept = plateau.Group("spiral", cfg, (1, 2, 3), "acc_proto", more=True), []

    def keep(c, s):   # each run is kept as it ends: seed 3 has not started when seed 2 is kept
        assert load_rounds(cfg, 3) == [] or s == 3
        kept.append((c["train"]["extend_to"], s))
    (st,) = plateau.fill([grown], workers=0, keep=keep, progress=False)
    assert kept == [(4, 2), (4, 3)]                             # only the added seeds, to the group's 4 rounds
    assert (st.rounds, st.missing) == (4, ()) and load_rounds(cfg, 1) == before
    assert [len(load_rounds(cfg, s)) for s in (2, 3)] == [4, 4]
    assert plateau.fill([grown], workers=0, keep=lambda c, s: kept.append(s), progress=False)[0].missing == ()
    assert len(kept) == 2                                       # nothing was missing: nothing trained or kept
    # a table read at its config's own rounds (a fixed protocol) asks for those: seed 4 trains 2 rounds, not 4
    plateau.fill([plateau.Group("spiral", cfg, (1, 2, 3, 4), "acc_proto", more=True)], workers=0, rounds=[2],
                 keep=lambda c, s: kept.append((c["train"]["extend_to"], s)), progress=False)
    assert kept[2:] == [(None, 4)] and len(load_rounds(cfg, 4)) == 2


def test_a_cell_reads_the_seeds_added_after_the_profiles_up_to_the_first_gap(tmp_path):
    from fedlib import results

    cfg = config(tmp_path, rounds=2)
    for s in (0, 1, 2, 4):
        run_one(cfg, s, progress=False)
    assert results.more_seeds(cfg, [0, 1]) == [2]               # 3 is missing: 4 is not read
    plain, found = results.cached({"a": cfg}, [0, 1])
    more, found_more = results.cached({"a": cfg}, [0, 1], more=True)
    assert [s["seed"] for s in plain["a"]] == [0, 1] and [s["seed"] for s in more["a"]] == [0, 1, 2]
    assert found == found_more == 2                             # the profile's runs: the count of its table
    read = results.with_more_seeds({"a": cfg}, plain)          # what a notebook read, with the added seeds
    assert [s["seed"] for s in read["a"]] == [0, 1, 2] and read["a"][:2] == plain["a"]
    assert results.cached({"a": cfg}, [5], more=True) == ({}, 0)


DERIVED_CALLS = []


def classes_held(tag, cfg, seed):
    """A :attr:`fedlib.plateau.Group.derive` target: a value derived from the trained model of ``(cfg, seed)``; it
    fails once where ``tag`` asks (an interruption between keeping a run and making its value)."""
    from fedlib import results

    DERIVED_CALLS.append(seed)
    if tag == "fail once" and DERIVED_CALLS.count(seed) == 1 and seed == 2:
        raise KeyboardInterrupt
    results.derived(cfg, seed, "classes", lambda state: int(state.message(0)["classes"].numel()))


@pytest.mark.parametrize("tag", ["", "fail once"])
def test_added_seeds_get_what_their_cells_derive_made_and_archived_even_after_an_interruption(tmp_path, tag):
    from fedlib import results

    cfg = config(tmp_path, rounds=2)
    run_one(cfg, 1, progress=False)
    assert archive.add(cfg, 1)
    group = plateau.Group("spiral", cfg, (1, 2), "acc_proto", more=True, derive=(f"{__name__}:classes_held", tag))
    DERIVED_CALLS.clear()
    try:
        plateau.fill([group], workers=0, keep=archive.add, progress=False)
    except KeyboardInterrupt:
        assert tag and archive.summary(cfg, 2) is not None      # seed 2 kept, its value not made
        plateau.fill([group], workers=0, keep=archive.add, progress=False)   # the rerun trains nothing: makes it
    assert DERIVED_CALLS == ([2, 1] if not tag else [2, 1, 2])
    assert len(load_rounds(cfg, 2)) == 2
    # a seed another command trained (results folder only): not trained again, but kept and given its value
    run_one(cfg, 3, progress=False)
    plateau.fill([plateau.Group("spiral", cfg, (1, 2, 3), "acc_proto", more=True, derive=group.derive)], workers=0,
                 keep=archive.add, progress=False)
    assert archive.summary(cfg, 3) is not None and DERIVED_CALLS[-3:] == [1, 2, 3]
    with results.archive_only():
        for s in (1, 2, 3):   # read from the archive alone, not made again
            assert results.derived(cfg, s, "classes", lambda state: pytest.fail("made again")) == 6


def test_a_seed_another_study_made_shorter_is_trained_on_to_the_groups_length(tmp_path):
    """A converged group's seeds went on to 4 rounds; its seed 2 was made at a study's fixed 2 rounds (the same
    config): adding seed 2 to the group trains it on to 4 (the same run id, its first rounds kept), not skipped as
    finished; a seed already as long is not trained again."""
    cfg = config(tmp_path, rounds=2)
    run_one(plateau.extended(cfg, 4), 1, progress=False)
    run_one(cfg, 2, progress=False)
    first = scores(load_rounds(cfg, 2))
    kept = []
    plateau.fill([plateau.Group("spiral", cfg, (1, 2), "acc_proto", more=True)], workers=0, rounds=[4],
                 keep=lambda c, s: kept.append((c["train"]["extend_to"], s)), progress=False)
    assert kept == [(4, 2)] and len(load_rounds(cfg, 2)) == 4 and scores(load_rounds(cfg, 2))[:2] == first


def test_the_verdict_rules_judgements_of_a_curve_hold_on_the_archives_extended_runs():
    """The early decision's reach bounds what every curve of the archive's extended runs still rising at 100-300
    rounds really gained by its last round (projected to the 400-round cap), and no curve the plateau criterion called
    plateaued there gained more than claims.PLATEAU_SLACK after it, on the rules the ledgers compare: the two numbers
    the verdict rule leans on beyond the runs' own length (docs/runs.md, "Runs to a plateau"). A new extension that
    breaks either fails here, before a verdict rests on it."""
    from fedlib import claims, paths

    checks = plateau.extended_check(paths.ARCHIVE)
    assert checks[100]["groups"] >= 20   # the archive holds the extended groups this is about
    for cut, got in checks.items():
        assert got["covered"] == got["rising"] and not got["misses"], (cut, got["misses"])
        assert all(gain <= claims.PLATEAU_SLACK for gain in got["plateau_misses"].values()), (cut, got)


def test_the_extended_curves_group_an_archives_seeds_and_cut_at_each_groups_own_length(tmp_path):
    cfg, root = config(tmp_path, rounds=3), tmp_path / "archive"
    for seed in (1, 2):
        run_one(plateau.extended(cfg, 5), seed, progress=False)
        assert archive.add(plateau.extended(cfg, 5), seed, root)
    run_one(config(tmp_path, name="b"), 1, progress=False)          # not extended: left out
    assert archive.add(config(tmp_path, name="b"), 1, root)
    got = plateau.extended_curves(root, rules=None)
    assert sorted(got) == sorted(f"{cfg['name']} {r}" for r in load_rounds(cfg, 1)[0]["acc"])
    assert all(len(curves) == 2 and all(len(c) == 5 for c in curves) for curves in got.values())
    one = next(iter(got.values()))
    check = plateau.reach_check({"x": one}, cut=3, end=None, cap=8)
    assert check["groups"] == 1 and check["rising"] + len(check["plateau_misses"]) <= 1
    assert plateau.reach_check({"x": one}, cut=5, end=None)["groups"] == 0   # not longer than the cut: left out
