"""Run folders that never serve wrong numbers: each kind of damage is named in one warning and
the final numbers equal an undamaged run's; configs fail in one line before any work."""

import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from fedlib import store
from fedlib.config import load_config, run_id
from fedlib.runner import load_rounds, load_state, run_one
from fedlib.store import DamagedRunWarning
from fedlib.validation import ConfigError
from tests.conftest import DATA, ROOT

CFG = DATA / "spiral_fedproto.yaml"


def scores(records):
    return [(r["round"], r["acc"], r["clients"]) for r in records]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An undamaged 3-round run, kept as the template every damaged copy starts from."""
    cfg = load_config(CFG, {"results_dir": str(tmp_path_factory.mktemp("ref")), "train.rounds": 3})
    summary = run_one(cfg, 1, progress=False)
    folder = Path(cfg["results_dir"]) / summary["run_id"]
    return cfg, summary, folder


def damaged(reference, tmp_path, damage):
    """A copy of the reference run folder with ``damage(folder)`` applied, and its config."""
    cfg, _, src = reference
    cfg = {**cfg, "results_dir": str(tmp_path)}
    folder = tmp_path / src.name
    shutil.copytree(src, folder)
    damage(folder)
    return cfg, folder


def cut(path, keep):
    data = path.read_bytes()
    path.write_bytes(data[:keep] if keep >= 0 else data[:len(data) + keep])


DAMAGE = {
    # the cases of the issue, then a few more
    "log cut to one line, summary deleted": (lambda f: (f.joinpath("rounds.jsonl").write_text(
        f.joinpath("rounds.jsonl").read_text().splitlines(keepends=True)[0]), f.joinpath("summary.json").unlink()),
        "rounds.jsonl"),
    "checkpoint and summary deleted": (
        lambda f: (f.joinpath("checkpoint.pt").unlink(), f.joinpath("summary.json").unlink()), "rounds.jsonl"),
    "checkpoint truncated, summary deleted": (
        lambda f: (cut(f / "checkpoint.pt", 300), f.joinpath("summary.json").unlink()), "checkpoint.pt"),
    "checkpoint truncated, summary kept": (lambda f: cut(f / "checkpoint.pt", -200), "checkpoint.pt"),
    "garbage appended to the log, summary kept": (lambda f: f.joinpath("rounds.jsonl").open("a").write("{garbage\n"),
                                                  "rounds.jsonl"),
    "summary truncated": (lambda f: cut(f / "summary.json", 40), "summary.json"),
    "a number changed in the log, summary kept": (lambda f: f.joinpath("rounds.jsonl").write_text(
        f.joinpath("rounds.jsonl").read_text().replace('"participants": 6', '"participants": 5', 1)), "rounds.jsonl"),
    "log deleted, summary kept": (lambda f: f.joinpath("rounds.jsonl").unlink(), "rounds.jsonl"),
    "summary of another length": (lambda f: f.joinpath("summary.json").write_text(json.dumps(
        {**json.loads(f.joinpath("summary.json").read_text()), "rounds": 2})), "summary.json"),
    "summary without integrity record (an older fedlib)": (lambda f: f.joinpath("summary.json").write_text(json.dumps(
        {k: v for k, v in json.loads(f.joinpath("summary.json").read_text()).items() if k != "integrity"})),
        "summary.json"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(DAMAGE))
def test_damaged_run_folder_is_named_and_recomputed_to_the_same_numbers(reference, tmp_path, case):
    # Prepare
    _, ref_summary, ref_folder = reference
    damage, culprit = DAMAGE[case]
    cfg, folder = damaged(reference, tmp_path, damage)
    # Execute: the same run again
    with pytest.warns(DamagedRunWarning) as caught:
        summary = run_one(cfg, 1, progress=False)
    # Assert: one-line warnings, the first names the damaged file; the numbers are the undamaged run's
    lines = [str(w.message) for w in caught if w.category is DamagedRunWarning]
    assert lines[0].startswith(str(folder / culprit)) and all("\n" not in m for m in lines)
    assert summary["metrics"] == ref_summary["metrics"] and summary["rounds"] == 3
    assert scores(load_rounds(cfg, 1)) == scores(store.read_log(ref_folder))
    assert [r["round"] for r in store.read_log(folder)] == [1, 2, 3]
    # and it is whole again: a cache hit without any warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", DamagedRunWarning)
        assert run_one(cfg, 1, progress=False)["cache_hit"]


@pytest.mark.slow
def test_interrupted_run_resumes_silently_from_its_checkpoint(reference, tmp_path):
    # a kill between writing round 3's log and its checkpoint: round 3 is logged, the checkpoint holds round 2
    cfg, summary, ref_folder = reference
    short = {**cfg, "results_dir": str(tmp_path / "short"), "train": {**cfg["train"], "rounds": 2}}
    run_one(short, 1, progress=False)
    folder = tmp_path / "run" / summary["run_id"]
    folder.mkdir(parents=True)
    shutil.copy(Path(short["results_dir"]) / run_id(short, 1) / "rounds.jsonl", folder)
    log2 = (folder / "rounds.jsonl").read_text()
    ckpt = torch.load(Path(short["results_dir"]) / run_id(short, 1) / "checkpoint.pt", weights_only=True)
    store.save_checkpoint(folder, 2, ckpt["clients"], ckpt["server"], log2)
    (folder / "rounds.jsonl").write_text(log2 + json.dumps(store.read_log(ref_folder)[2]) + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DamagedRunWarning)
        resumed = run_one({**cfg, "results_dir": str(tmp_path / "run")}, 1, progress=False)
    assert resumed["metrics"] == summary["metrics"]


def test_the_checkpoint_stacks_its_tensors_into_one_buffer_per_dtype(reference):
    # Prepare: the reference run's checkpoint, every tensor of its state
    _, _, folder = reference
    ckpt = torch.load(folder / "checkpoint.pt", weights_only=True)

    def tensors(obj):
        if isinstance(obj, torch.Tensor):
            return [obj]
        items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else []
        return [t for v in items for t in tensors(v)]

    found = tensors([ckpt["clients"], ckpt["server"]])
    # Assert: many tensors, as few stored buffers as dtypes (each one device-to-host copy on a GPU)
    assert len(found) > 20
    assert len({t.untyped_storage().data_ptr() for t in found}) == len({t.dtype for t in found})


@pytest.mark.slow
def test_load_state_checks_a_finished_run_first(reference, tmp_path):
    cfg, _, _ = reference
    cfg, folder = damaged(reference, tmp_path, lambda f: cut(f / "checkpoint.pt", -200))
    with pytest.warns(DamagedRunWarning, match="checkpoint.pt"):
        state = load_state(cfg, 1)
    assert state.round == 3


@pytest.mark.slow
def test_run_folder_config_reruns_exactly_that_run(reference, capsys):
    cfg, summary, folder = reference
    again = load_config(folder / "config.yaml")
    assert run_id(again, 1) == summary["run_id"] and again["seeds"] == [1]
    assert run_one(again, 1, progress=False)["cache_hit"]


@pytest.mark.slow
def test_divergence_is_a_result(tmp_path):
    cfg = load_config(CFG, {"results_dir": str(tmp_path), "train.rounds": 4, "train.lr": 1e6})
    summary = run_one(cfg, 1, progress=False)
    assert summary["diverged_at"] == 1 and summary["rounds"] == 1 and summary["metrics"] == {}
    records = load_rounds(cfg, 1)
    assert records[-1]["diverged"] and "acc" not in records[-1]  # no NaN model is scored
    assert run_one(cfg, 1, progress=False)["cache_hit"]  # a finished result, not an error


# -- configs: one line, exit code 2, before any work ----------------------------------------------

@pytest.mark.parametrize("override,message", [
    ("seeds=[1,2", r"override 'seeds=\[1,2':1:11: YAML error: expected ',' or '\]'"),
    ("train.lr={", r"override 'train.lr=\{':1:11: YAML error"),
    ("train=5", r"train: got 5; allowed: a mapping of rounds, participation"),
    ("train.rounds.x=1", r"override train.rounds.x=1: train.rounds is a single value \(6\) and has no sub-keys"),
    ("partition=dirichlet", r"partition: got 'dirichlet'; allowed: a mapping of scheme"),
    ("train.lr=.inf", r"train\.lr: got inf; allowed: a number in \(0, inf\)"),
    ("algorithm.lam=.nan", r"algorithm \(fedproto\)\.lam: got nan"),
])
def test_malformed_values_give_one_line(override, message):
    with pytest.raises(ConfigError, match=message) as err:
        load_config(CFG, [override])
    assert "\n" not in str(err.value)


def test_exponent_floats_are_numbers():
    cfg = load_config(CFG, ["train.lr=1e-3", "algorithm.lam=1e9"])
    assert cfg["train"]["lr"] == 0.001 and cfg["algorithm"]["lam"] == 1e9


@pytest.mark.parametrize("text,message", [
    ("", r"missing 'dataset', 'model', 'partition', 'algorithm', 'train'"),
    ("dataset: spiral\nmodel: mlp_spiral\npartition: {num_clients: 2}\nalgorithm: fedavg\ntrain: {}\n",
     r"partition\.scheme: got None; allowed: one of nway_kshot"),
    ("dataset: spiral\nmodel: mlp_spiral\n", r"missing 'partition', 'algorithm', 'train'"),
    ("dataset: spiral\ntrain: {rounds: [1,\n", r":3:1: YAML error"),
    ("- 1\n", r"holds a list, not a mapping"),
])
def test_config_files_need_their_sections_and_valid_yaml(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as err:
        load_config(path)
    assert "\n" not in str(err.value) and (str(path) in str(err.value) or "scheme" in message)


@pytest.mark.parametrize("overrides,message", [
    (["dataset.fraction=0.0012", "partition.num_clients=50"], r"partition\.num_clients: got 50; allowed: at most 36"),
    (["partition.num_clients=100000"], r"partition\.num_clients: got 100000; allowed: at most 30000"),
    (["dataset.fraction=0.0012", "partition.num_clients=30"], r"clients 0, 1, .* get none of one"),
    (["model=cnn_fmnist"], r"model: got 'cnn_fmnist'; allowed: a model for spiral inputs of shape \(2,\) .*"
                           r"models that fit: mlp_head, mlp_mnist, mlp_spiral"),
])
def test_infeasible_runs_fail_before_anything_is_written(tmp_path, overrides, message):
    cfg = load_config(CFG, [f"results_dir={tmp_path / 'r'}", *overrides])
    with pytest.raises(ConfigError, match=message):
        run_one(cfg, 1, progress=False)
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_a_model_that_does_not_fit_the_data_fails_before_anything_is_written(tmp_path):
    cfg = load_config(ROOT / "params" / "fedproto_fmnist.yaml", [f"results_dir={tmp_path / 'r'}", "model=mlp_spiral"])
    with pytest.raises(ConfigError, match=r"a model for fmnist inputs of shape \(1, 28, 28\) \(mlp_spiral failed on "
                                          r"one sample: .*\); models that fit: .*cnn_fmnist"):
        run_one(cfg, 1234, progress=False)
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_cli_errors_are_one_line_with_exit_code_2(tmp_path):
    out = subprocess.run([sys.executable, "-m", "fedlib", "run", str(CFG), "seeds=[1,2", f"results_dir={tmp_path}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0 and "Traceback" not in out.stderr
    assert "override 'seeds=[1,2':1:11: YAML error" in out.stderr
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    out = subprocess.run([sys.executable, "-m", "fedlib", "run", str(empty)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2 and f"{empty}: missing 'dataset'" in out.stderr
    assert not any(tmp_path.glob("*/summary.json"))


def test_the_results_and_data_folders_are_ignored_as_links_too():
    # a checkout's results/ may be a symbolic link (a second work tree sharing the first's runs); a pattern that
    # matched only directories let `git add -A` commit the link, and checking that commit out replaced the other
    # tree's results folder (ignored files are expendable to git) with a link to itself
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    for name in ("results", "data", "results/x/summary.json"):
        rc = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", "--no-index", name]).returncode
        assert rc == 0, f"{name} is not ignored by .gitignore"


def test_git_commit_marks_code_changes_but_not_the_runs_outputs(tmp_path, monkeypatch):
    """A record's `code` says "(with uncommitted changes)" when tracked code changed, not when the archive, results,
    figures or REPORT.md did (the evidence planner extends archived records while later runs start)."""
    import subprocess

    from fedlib import paths

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    for rel in ("fedlib/x.py", "archive/abc/summary.json", "results/r.json", "figures/f.svg", "REPORT.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("0\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    monkeypatch.setattr(paths, "CHECKOUT", tmp_path)
    clean = paths.git_commit()
    assert len(clean) >= 7 and " " not in clean
    for rel in ("archive/abc/summary.json", "results/r.json", "figures/f.svg", "REPORT.md"):
        (tmp_path / rel).write_text("1\n")
    assert paths.git_commit() == clean
    (tmp_path / "fedlib/x.py").write_text("1\n")
    assert paths.git_commit() == clean + " (with uncommitted changes)"
