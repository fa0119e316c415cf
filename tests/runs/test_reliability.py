"""Nothing wrong is served and no input reaches a traceback: summary integrity, interrupts of a grid,
and the type / finiteness / range of everything a user types (one line, exit status 2)."""

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest
import yaml

from fedlib import archive, results, store, study
from fedlib.__main__ import main as fedlib_main
from fedlib.algorithms import ALGORITHMS
from fedlib.config import MODEL_RULES, TRAIN_RULES, TrainConfig, load_config
from fedlib.data.partition import RULES as PARTITION_RULES
from fedlib.papers import fedic, fedmps, gfpl, mpfedcl, privacy, protonorm
from fedlib.runner import run_one
from fedlib.store import DamagedRunWarning
from fedlib.validation import BOOL, Interval
from tests.conftest import DATA, ROOT

CFG = DATA / "spiral_fedproto.yaml"
STUDIES = (fedic, fedmps, gfpl, mpfedcl, privacy, protonorm)


@pytest.fixture(autouse=True)
def keep_signal_handlers():
    """``python -m fedlib`` installs its SIGINT/SIGTERM handlers; the test process gets its own back."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, h in before.items():
        signal.signal(s, h)


def one_line_error(capsys, *fields) -> str:
    """The whole output of a refused command: one line, naming every one of ``fields``."""
    cap = capsys.readouterr()
    text = (cap.out + cap.err).strip()
    assert len(text.splitlines()) == 1 and "Traceback" not in text, text
    assert all(f in text for f in fields), text
    return text


# -- 1. a summary is checked like a log ------------------------------------------------------------

@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    cfg = load_config(CFG, {"results_dir": str(tmp_path_factory.mktemp("results")), "train.rounds": 3})
    summary = run_one(cfg, 1, progress=False)
    root = tmp_path_factory.mktemp("archive")
    assert archive.add(cfg, 1, root)
    return cfg, summary, root


def _edit(path: Path, change) -> None:
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record, indent=1))


def _set_last(value):
    def change(record):
        record["metrics"]["acc_proto_own"]["last"] = value
    return change


@pytest.mark.slow
def test_an_edited_results_summary_is_reported_in_one_line_and_recomputed(finished):
    cfg, made, _ = finished
    path = store.Path(cfg["results_dir"]) / made["run_id"] / store.SUMMARY
    _edit(path, _set_last(0.9999))
    with pytest.warns(DamagedRunWarning, match=r"summary\.json: was changed after it was written") as caught:
        again = run_one(cfg, 1, progress=False)
    assert len(caught) == 1
    assert again["metrics"] == made["metrics"] and again["metrics"]["acc_proto_own"]["last"] != 0.9999
    assert json.loads(path.read_text())["metrics"] == made["metrics"]     # rewritten from the log
    assert run_one(cfg, 1, progress=False)["cache_hit"] is True


@pytest.mark.slow
def test_a_summary_without_a_hash_is_checked_against_its_log(finished):
    """Summaries written before the hash existed: served when their numbers are the log's, else recomputed."""
    cfg, made, _ = finished
    path = store.Path(cfg["results_dir"]) / made["run_id"] / store.SUMMARY
    _edit(path, lambda r: r["integrity"].pop(store.SUMMARY_HASH))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert run_one(cfg, 1, progress=False)["metrics"] == made["metrics"]
    _edit(path, _set_last(0.5))
    with pytest.warns(DamagedRunWarning, match=r"summary\.json: metrics differ from what its log gives"):
        assert run_one(cfg, 1, progress=False)["metrics"] == made["metrics"]
    assert store.SUMMARY_HASH in json.loads(path.read_text())["integrity"]


@pytest.mark.slow
@pytest.mark.parametrize("change, why", [
    (lambda r: r["metrics"]["acc_proto"].update(best=0.9999), "was changed after it was written"),
    (lambda r: r["machine"].update(cpu="elsewhere"), "was changed after it was written"),
    (lambda r: r["integrity"].pop(store.SUMMARY_HASH), "has no hash of its own content"),
    (lambda r: (r["metrics"]["acc_proto"].update(best=0.9999),
                r["integrity"].update({store.SUMMARY_HASH: store.summary_hash(r)})), "metrics differ from"),
])
def test_an_edited_archive_entry_is_refused(finished, tmp_path, change, why):
    cfg, _, root = finished
    dest = shutil.copytree(root, tmp_path / "archive")
    fresh = {**cfg, "results_dir": str(tmp_path / "fresh")}
    assert archive.summary(fresh, 1, dest)["archived"] is True
    _edit(archive.entry(cfg, 1, dest) / store.SUMMARY, change)
    with pytest.warns(DamagedRunWarning, match=why):
        assert archive.summary(fresh, 1, dest) is None
    assert results.cached({"m": fresh}, [1], archive_root=dest) == ({}, 0)


@pytest.mark.slow
def test_archive_check_exits_1_when_an_entry_fails(tmp_path, capsys):
    """A copy of one committed entry of FedMPS Table VII, its ``best`` changed, fails ``--check``."""
    plan = fedmps.load_plan("paper")
    cfg = next(iter(fedmps.ablation_configs(plan).values()))
    src = next(e for c in results.placements(cfg) if (e := archive.entry(c, plan.seeds[0], ROOT / "archive")).exists())
    dest = tmp_path / "archive" / src.name
    shutil.copytree(src, dest)
    # the copy has no index (what the archive holds): --check says so; --index records the entry, which passes
    assert fedlib_main(["archive", "--check", "--root", str(tmp_path / "archive")]) == 1
    assert "INDEX.json: missing" in capsys.readouterr().out
    assert fedlib_main(["archive", "--index", "--root", str(tmp_path / "archive")]) == 0
    assert fedlib_main(["archive", "--check", "--root", str(tmp_path / "archive")]) == 0
    assert re.search(r"FedMPS Table VII \(paper profile\): 1 of \d+ runs in the archive pass", capsys.readouterr().out)
    _edit(dest / store.SUMMARY, lambda r: r["metrics"]["acc_head"].update(best=0.9999))
    assert fedlib_main(["archive", "--check", "--root", str(tmp_path / "archive")]) == 1
    out = capsys.readouterr().out
    assert f"{dest / store.SUMMARY}: was changed after it was written" in out
    assert "archive check: 1 entry failed" in out


@pytest.mark.slow
def test_the_committed_archive_entries_carry_their_hash_and_their_logs_numbers():
    from fedlib.metrics import run_numbers

    entries = sorted(p for p in (ROOT / "archive").iterdir() if p.is_dir())  # the committed one (conftest hides it)
    assert len(entries) >= 260
    for e in entries:
        record = json.loads((e / store.SUMMARY).read_text())
        records = store.parse_log(archive._log_bytes(e).decode())[0]
        assert store.check_summary(record, records, require_hash=True) is None, e
        assert {k: record[k] for k in run_numbers(records)} == run_numbers(records)


# -- 4. warnings on one line ----------------------------------------------------------------------

def test_a_damaged_run_warning_prints_as_one_line(tmp_path):
    text = warnings.formatwarning("results/x/summary.json: unreadable; not served", DamagedRunWarning,
                                  "/somewhere/store.py", 42, "    warn(...)")
    assert text == "warning: results/x/summary.json: unreadable; not served\n"
    assert warnings.formatwarning("m", UserWarning, "f.py", 1, "x").startswith("f.py:1: UserWarning: m")


@pytest.mark.slow
def test_the_run_command_prints_a_damaged_summary_as_one_line(finished):
    cfg, made, _ = finished
    _edit(Path(cfg["results_dir"]) / made["run_id"] / store.SUMMARY, _set_last(0.1))
    out = subprocess.run([sys.executable, "-m", "fedlib", "run", str(CFG), f"results_dir={cfg['results_dir']}",
                          "train.rounds=3", "--no-progress"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip().splitlines() == [
        f"warning: {Path(cfg['results_dir']) / made['run_id'] / store.SUMMARY}: was changed after it was written "
        "(its content differs from its hash); not served; checking the run from its checkpoint"]


# -- 2. interrupts --------------------------------------------------------------------------------

GRID = """
import signal
import sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal or a Jupyter kernel has it
from fedlib import study
from fedlib.config import load_config
from fedlib.runner import run_many

def grid(argv=None):
    cfg = load_config({cfg!r}, {{"results_dir": {results!r}, "train.rounds": 400}})
    run_many([(cfg, s) for s in (1, 2, 3)], workers=1, progress=False)
    return 0

sys.exit(study.command(grid)() if {command} else grid())
"""


@pytest.mark.slow
@pytest.mark.parametrize("sig, command", [(signal.SIGINT, False), (signal.SIGINT, True), (signal.SIGTERM, True)])
def test_an_interrupt_stops_a_grid_within_seconds(tmp_path, sig, command):
    """A grid of three long runs on one worker, interrupted in its first run: back within 10 s, the queued
    runs never started, the started one resumable (log and checkpoint, no summary), no temporary file.
    Without ``study.command`` the interrupt reaches the caller (a notebook's cell) as KeyboardInterrupt."""
    results = tmp_path / "results"
    script = GRID.format(cfg=str(CFG), results=str(results), command=command)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.time() + 240
    while time.time() < deadline and not any(
            len(p.read_text().splitlines()) >= 2 for p in results.glob("*/rounds.jsonl")):
        time.sleep(0.05)
    lines = []   # (when, line) of stderr: the interpreter's own exit after it (unloading torch) is not timed
    reader = threading.Thread(target=lambda: lines.extend((time.time(), ln) for ln in proc.stderr), daemon=True)
    reader.start()
    t0 = time.time()
    proc.send_signal(sig)
    proc.wait(timeout=120)
    reader.join(10)
    err = "".join(ln for _, ln in lines)
    assert lines and lines[0][0] - t0 < 10, err       # workers stopped, the line printed
    folders = [p for p in results.iterdir() if p.is_dir()]
    assert len(folders) == 1                         # the two queued runs were cancelled
    folder = folders[0]
    assert (folder / store.CHECKPOINT).exists() and not (folder / store.SUMMARY).exists()
    assert not list(results.rglob("*.tmp"))
    assert store.resume_point(folder, 400).done >= 1    # its checkpoint (the log may be one round ahead)
    if command:
        # first line ours; multiprocessing's resource tracker may add its "leaked semaphore" warning at exit
        assert proc.returncode == 130 and err.splitlines()[0] == study.INTERRUPTED, err
    else:
        # the traceback ends in KeyboardInterrupt (the resource tracker's warning may follow it at exit)
        assert proc.returncode != 0 and "KeyboardInterrupt" in err.splitlines(), err


@pytest.mark.parametrize("write", [
    lambda folder: store.atomic_write(folder / "x.json", "{}"),
    lambda folder: store.save_checkpoint(folder, 1, {}, {}, ""),
])
def test_an_interrupted_write_leaves_no_temporary_file(tmp_path, monkeypatch, write):
    def interrupted(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(store.os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_only_the_stopped_workers_temporary_files_are_removed(tmp_path):
    mine, other = tmp_path / ".checkpoint.pt.111.tmp", tmp_path / ".checkpoint.pt.222.tmp"
    mine.write_text("x")
    other.write_text("y")
    assert store.remove_temporary(tmp_path, {111}) == 1
    assert not mine.exists() and other.exists()


# -- 3. one validation path: the class test over every numeric field ---------------------------------

def _numeric_fields():
    """``(section, owner, field, rule)`` for every numeric field of every registered algorithm, of the
    train section, of the partition schemes and of the models."""
    out = [("algorithm", name, field, rule) for name, cls in sorted(ALGORITHMS.items())
           for field, rule in cls.CONSTRAINTS.items() if isinstance(rule, Interval)]
    out += [("train", "train", f, r) for f, r in TRAIN_RULES.items() if isinstance(r, Interval)]
    out += [("partition", _scheme_for(f), f, r) for f, r in PARTITION_RULES.items() if isinstance(r, Interval)]
    out += [("model", "fedavg_cnn", f, r) for f, r in MODEL_RULES.items()]
    return out


def _scheme_for(field: str) -> str:
    import inspect

    from fedlib.data.partition import _scheme_fn

    return next(s for s in ("dirichlet", "nway_kshot", "pathological", "fedpcl", "domains")
                if field in inspect.signature(_scheme_fn(s)).parameters)


def _bad_values(rule):
    values = [("bool", True), ("inf", math.inf), ("-inf", -math.inf), ("nan", math.nan)]
    if rule.low is not None:
        values.append(("below", rule.invalid_example()))
    if rule.high is not None:
        values.append(("above", rule.high + 1 if rule.integer else rule.high * 2 + 1))
    if rule.integer:
        values.append(("float", float(rule.low or 0) + 2.5))
    return values


# the fast loop (`make test-fast`) runs the train and model fields' cases; the algorithm and partition fields'
# (nine in ten) are marked slow, and the contract suite checks every algorithm's rules there through make_algorithm
CASES = [pytest.param(section, owner, field, value, id=f"{section}-{owner}-{field}-{kind}",
                      marks=pytest.mark.slow if section in ("algorithm", "partition") else ())
         for section, owner, field, rule in _numeric_fields() for kind, value in _bad_values(rule)]


def _override(section, owner, field, value) -> str:
    v = yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()
    if section == "algorithm":
        return f"algorithm={{name: {owner}, {field}: {v}}}"
    if section == "partition":
        return f"partition={{scheme: {owner}, {field}: {v}}}"
    if section == "model":
        return f"model={{name: {owner}, {field}: {v}}}"
    return f"train.{field}={v}"


@pytest.mark.parametrize("section, owner, field, value", CASES)
def test_every_numeric_field_refuses_bool_inf_nan_and_out_of_range(section, owner, field, value, capsys,
                                                                   monkeypatch):
    import fedlib.runner

    monkeypatch.setattr(fedlib.runner, "load_dataset", lambda *a: pytest.fail("data loaded"))
    assert fedlib_main(["run", str(CFG), _override(section, owner, field, value), "--no-progress"]) == 2
    one_line_error(capsys, f"{field}: got", "allowed:")


def test_the_class_test_covers_every_algorithm_and_every_train_field():
    import dataclasses

    covered = {(s, o) for s, o, _, _ in _numeric_fields()}
    numeric = [n for n, cls in ALGORITHMS.items() if any(isinstance(r, Interval) for r in cls.CONSTRAINTS.values())]
    assert {("algorithm", n) for n in numeric} <= covered and len(numeric) >= 25
    assert set(TRAIN_RULES) == {f.name for f in dataclasses.fields(TrainConfig)}
    for name, cls in ALGORITHMS.items():   # every hyperparameter has a rule
        assert {f.name for f in dataclasses.fields(cls) if f.init} == set(cls.CONSTRAINTS), name


@pytest.mark.parametrize("override, fields", [
    ("partition={scheme: dirichlet, num_clients: 6, alpha: .inf}", ("partition.alpha", "(0, inf)")),
    ("seeds=[4294967296]", ("seeds", "[0, 4294967295]")),
    ("seeds=[-1]", ("seeds",)),
    ("seeds=[true]", ("seeds",)),
    ("partition.seed=4294967296", ("partition.seed", "[0, 4294967295]")),
    ("train.drop_last=1", ("train.drop_last", "true or false")),
    ("dataset={name: spiral, fraction: .nan}", ("dataset.fraction",)),
    ("model={name: mlp_spiral, feature_dim: true}", ("model.feature_dim",)),
    ("model={name: cnn_fmnist, feature_dim: 8}", ("unknown field 'feature_dim'",)),
    ("executor=fast", ("executor",)),
    ("results_dir=[1]", ("results_dir",)),
])
def test_config_values_give_one_line_and_exit_2_before_any_data(override, fields, capsys, monkeypatch):
    import fedlib.runner

    monkeypatch.setattr(fedlib.runner, "load_dataset", lambda *a: pytest.fail("data loaded"))
    assert fedlib_main(["run", str(CFG), override, "--no-progress"]) == 2
    one_line_error(capsys, *fields)


def test_a_results_location_that_cannot_be_created_is_refused_before_any_data(tmp_path, capsys, monkeypatch):
    import fedlib.runner

    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setattr(fedlib.runner, "load_dataset", lambda *a: pytest.fail("data loaded"))
    assert fedlib_main(["run", str(CFG), f"results_dir={blocker / 'results'}", "--no-progress"]) == 2
    one_line_error(capsys, "results_dir", "is a file")
    assert fedlib_main(["run", str(CFG), f"results_dir={blocker}", "--no-progress"]) == 2
    one_line_error(capsys, "results_dir", "a folder (this is a file)")


def test_an_unwritable_results_location_is_refused(tmp_path, monkeypatch):
    from fedlib.validation import ConfigError, check_writable

    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != tmp_path)
    with pytest.raises(ConfigError, match=r"is not writable"):
        check_writable(tmp_path / "results")


# -- 3. study commands ----------------------------------------------------------------------------

@pytest.mark.parametrize("module", STUDIES, ids=lambda m: m.__name__.rsplit(".", 1)[1])
@pytest.mark.parametrize("argv, fields", [
    (["--workers", "0"], ("--workers", "got 0", "[1, inf)")),
    (["--workers", "two"], ("--workers", "got 'two'")),
    (["--device", "cuda"], ("--device", "no CUDA device")),
    (["--device", "tpu"], ("--device",)),
    (["--seeds", "4294967296"], ("--seeds", "[0, 4294967295]")),
    (["--seeds", "-1"], ("--seeds",)),
    (["--seeds", "1.5"], ("--seeds",)),
    (["--rounds", "0"], ("--rounds",)),
    (["--executor", "fast"], ("--executor",)),
])
def test_study_flags_give_one_line_and_exit_2(module, argv, fields, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as stop:
        module.main(argv)
    assert stop.value.code == 2
    one_line_error(capsys, *fields)


@pytest.mark.parametrize("module, profile", [(fedmps, "extended"), (gfpl, "converged"), (protonorm, "nonsense")])
def test_a_study_command_refuses_a_profile_it_has_not(module, profile, capsys):
    assert module.main(["--profile", profile]) == 2
    one_line_error(capsys, "profile", repr(profile))


def test_a_study_takes_only_profiles_listed_in_profiles_yaml(tmp_path):
    from fedlib.validation import ConfigError

    spec = yaml.safe_load(protonorm.Plan.params_file().read_text())
    spec["profiles"]["unlisted"] = spec["profiles"]["smoke"]
    path = tmp_path / "protonorm" / "experiments.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    assert protonorm.Plan.load("extended", path=path).profile == "extended"
    with pytest.raises(ConfigError, match=r"^profile: got 'unlisted'; allowed: one of smoke, quick, extended, "
                                          r"converged, paper \(see params/profiles.yaml\)$"):
        protonorm.Plan.load("unlisted", path=path)


def test_every_study_profile_is_listed_in_profiles_yaml():
    listed = yaml.safe_load((ROOT / "params" / "profiles.yaml").read_text())
    for module in STUDIES:
        spec = yaml.safe_load(module.Plan.params_file().read_text())
        assert set(spec["profiles"]) <= set(listed), module.__name__
    assert "ProtoNorm" in listed["extended"]["description"]


@pytest.mark.parametrize("change, field", [
    (lambda p: p.update(seeds=[2**32]), "profiles.smoke.seeds"),
    (lambda p: p.update(seeds=[True]), "profiles.smoke.seeds"),
    (lambda p: p["rounds"].update(main=0), "profiles.smoke.rounds.main"),
    (lambda p: p["rounds"].update(main=2.5), "profiles.smoke.rounds.main"),
])
def test_a_study_plan_is_checked_when_loaded(tmp_path, change, field):
    from fedlib.validation import ConfigError

    spec = yaml.safe_load(fedmps.Plan.params_file().read_text())
    change(spec["profiles"]["smoke"])
    path = tmp_path / "fedmps" / "experiments.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    with pytest.raises(ConfigError) as err:
        fedmps.Plan.load("smoke", path=path)
    assert str(err.value).startswith(f"fedmps/experiments.yaml: {field}: got") and "\n" not in str(err.value)


def test_a_notebook_parameter_out_of_range_is_one_line(capsys):
    from fedlib.validation import ConfigError

    with pytest.raises(ConfigError, match=r"^seeds: got \[4294967296\]; allowed: a non-empty list of integers in "
                                          r"\[0, 4294967295\]$"):
        fedmps.load_plan("smoke", seeds=[2**32])
    with pytest.raises(ConfigError, match=r"^rounds: got True; allowed: an integer in \[1, inf\)$"):
        fedmps.load_plan("smoke", rounds=True)


def test_reproduce_flags_give_one_line_and_exit_2(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as stop:
        fedlib_main(["reproduce", "--device", "cuda"])
    assert stop.value.code == 2
    one_line_error(capsys, "--device", "no CUDA device")
    assert fedlib_main(["reproduce", "--profile", "nonsense"]) == 2
    one_line_error(capsys, "profile", "'nonsense'")


def test_one_interval_notation_everywhere():
    """Open ends are written ``inf)``: never ``inf]`` in any message the library can print."""
    hits = [p for p in (ROOT / "fedlib").rglob("*.py") if "inf]" in p.read_text()]
    assert hits == []
    assert Interval(1, None, integer=True).describe() == "an integer in [1, inf)"
    assert Interval(0, 2**32 - 1, integer=True).describe() == "an integer in [0, 4294967295]"
    assert BOOL.describe() == "true or false"
