import json
import os
import signal
import subprocess
import sys
import time

import pytest

from fedlib.config import apply_overrides, load_config, run_id, validate
from fedlib.runner import run_experiment
from fedlib.validation import ConfigError
from tests.conftest import DATA, ROOT

CFG = DATA / "spiral_fedproto.yaml"


ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "fedlib", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=ENV)


@pytest.mark.parametrize("override,message", [
    ("algorithm.name=fedpr0to", r"algorithm\.name: got 'fedpr0to'; allowed: one of .*fedproto"),
    ("model.name=resnet9000", r"model\.name: got 'resnet9000'; allowed: one of "),
    ("dataset=imagenet22k", r"dataset\.name: got 'imagenet22k'; allowed: one of .*fmnist"),
    ("train.lr=0", r"train\.lr: got 0; allowed: a number in \(0, inf\)"),
    ("train.lr=-0.1", r"train\.lr: got -0.1; allowed: a number in \(0, inf\)"),
    ("train.batch_size=2.5", r"train\.batch_size: got 2.5; allowed: an integer in \[1, inf\)"),
    ("algorithm.lam=-1", r"algorithm \(fedproto\)\.lam: got -1; allowed: a number in \[0, inf\)"),
    ("algorithm.lamda=1", r"algorithm \(fedproto\): unknown field 'lamda' \(did you mean 'lam'\?\)"),
    ("train.round=3", r"train: unknown field 'round' \(did you mean 'rounds'\?\)"),
    ("seeds=[-1]", r"seeds: got \[-1\]; allowed: a non-empty list"),
])
def test_bad_config_values_name_field_value_and_allowed(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(CFG, [override])


def test_data_dependent_errors_are_raised_before_training(tmp_path):
    cfg = load_config(CFG, {"partition": {"scheme": "nway_kshot", "num_clients": 4, "ways": 7},
                            "results_dir": str(tmp_path)})
    with pytest.raises(ConfigError, match=r"partition\.ways: got 7; allowed: an integer in \[1, 6\]"):
        run_experiment(cfg, progress=False)
    cfg = load_config(CFG, {"partition": {"scheme": "nway_kshot", "num_clients": 10, "ways": 2, "shots": 600,
                                          "stdev": 0}, "results_dir": str(tmp_path)})
    with pytest.raises(ConfigError, match=r"partition\.shots: got 600; allowed: at most what the data holds"):
        run_experiment(cfg, progress=False)
    assert not any(tmp_path.iterdir())  # nothing half-written


@pytest.mark.slow
def test_cli_reports_bad_config_without_traceback():
    out = cli("run", str(CFG), "partition={scheme: nway_kshot, ways: 12}")
    assert out.returncode == 2
    assert "error: partition.ways: got 12" in out.stderr
    assert "Traceback" not in out.stderr
    out = cli("run", "params/does_not_exist.yaml")
    assert out.returncode == 2 and "config file: got 'params/does_not_exist.yaml'" in out.stderr


def test_run_id_ignores_paths_and_name_but_not_hyperparameters():
    base = load_config(CFG)
    assert run_id(base, 1) == run_id(load_config(CFG, ["results_dir=elsewhere", "name=x", "data_root=/d"]), 1)
    assert run_id(base, 1) != run_id(load_config(CFG, ["algorithm.lam=0.5"]), 1)
    assert run_id(base, 1) != run_id(base, 2)
    # defaults are filled in before hashing: writing a default explicitly changes nothing
    assert run_id(base, 1) == run_id(load_config(CFG, ["train.momentum=0.5", "algorithm.weighted=false"]), 1)


@pytest.mark.slow
def test_finished_run_is_a_cache_hit(tmp_path):
    cfg = load_config(CFG, [f"results_dir={tmp_path}", "train.rounds=2"])
    first = run_experiment(cfg, progress=False)[0]
    second = run_experiment(cfg, progress=False)[0]
    assert not first["cache_hit"] and second["cache_hit"]
    assert first["metrics"] == second["metrics"]
    folder = tmp_path / first["run_id"]
    assert {p.name for p in folder.iterdir()} >= {"config.yaml", "partition.json", "rounds.jsonl",
                                                   "checkpoint.pt", "summary.json"}
    assert len((folder / "rounds.jsonl").read_text().splitlines()) == 2


def _accuracies(folder):
    recs = [json.loads(line) for line in (folder / "rounds.jsonl").read_text().splitlines()]
    return [(r["round"], r["acc"], r["clients"], r["up_params"]) for r in recs]


@pytest.mark.slow
def test_kill_mid_round_then_resume_gives_uninterrupted_numbers(tmp_path):
    # Prepare: an uninterrupted reference run
    ref_dir, kill_dir = tmp_path / "ref", tmp_path / "killed"
    assert cli("run", str(CFG), f"results_dir={ref_dir}", "--no-progress").returncode == 0
    # Execute: start the same run elsewhere, kill -9 once two rounds are logged (mid round 3)
    proc = subprocess.Popen([sys.executable, "-m", "fedlib", "run", str(CFG), f"results_dir={kill_dir}",
                             "--no-progress"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    deadline = time.time() + 120
    log = None
    while time.time() < deadline:
        logs = list(kill_dir.glob("*/rounds.jsonl"))
        if logs and len(logs[0].read_text().splitlines()) >= 2:
            log = logs[0]
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert log is not None, "the run never logged two rounds"
    folder = log.parent
    assert not (folder / "summary.json").exists()
    done = len(log.read_text().splitlines())
    assert done < 6
    resumed = cli("run", str(CFG), f"results_dir={kill_dir}", "--no-progress")
    # Assert: same per-round numbers as the uninterrupted run, every round logged once
    assert resumed.returncode == 0, resumed.stderr
    assert _accuracies(folder) == _accuracies(ref_dir / folder.name)


@pytest.mark.slow
def test_sigint_stops_cleanly_then_resume_gives_uninterrupted_numbers(tmp_path):
    # 15 rounds: the interrupted run cannot finish before the signal arrives, even on a loaded machine
    ref_dir, int_dir = tmp_path / "ref", tmp_path / "interrupted"
    assert cli("run", str(CFG), f"results_dir={ref_dir}", "train.rounds=15", "--no-progress").returncode == 0
    proc = subprocess.Popen([sys.executable, "-m", "fedlib", "run", str(CFG), f"results_dir={int_dir}",
                             "train.rounds=15", "--no-progress"], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=ENV)
    deadline = time.time() + 120
    while time.time() < deadline and not any(
            len(p.read_text().splitlines()) >= 2 for p in int_dir.glob("*/rounds.jsonl")):
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "run the same command to resume" in err and "Traceback" not in err
    folder = next(int_dir.glob("*/rounds.jsonl")).parent
    assert not (folder / "summary.json").exists()
    resumed = cli("run", str(CFG), f"results_dir={int_dir}", "train.rounds=15", "--no-progress")
    assert resumed.returncode == 0 and "DamagedRunWarning" not in resumed.stderr, resumed.stderr
    assert _accuracies(folder) == _accuracies(ref_dir / folder.name)


@pytest.mark.slow
def test_a_swallowed_interrupt_still_stops_the_run_after_the_round(tmp_path):
    """The SIGINT handler sets engine.STOP; if its KeyboardInterrupt is lost (raised in a finaliser),
    the round loop stops at the end of the round in progress, and the run resumes from there."""
    from fedlib import engine

    cfg = load_config(CFG, [f"results_dir={tmp_path}", "train.rounds=2"])
    engine.STOP.set()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_experiment(cfg, progress=False)
    finally:
        engine.STOP.clear()
    folder = next(tmp_path.glob("*/rounds.jsonl")).parent
    assert len((folder / "rounds.jsonl").read_text().splitlines()) == 1 and not (folder / "summary.json").exists()
    assert run_experiment(cfg, progress=False)[0]["rounds"] == 2


@pytest.mark.slow
def test_cli_summary_is_one_screen(tmp_path):
    out = cli("run", str(CFG), f"results_dir={tmp_path}", "train.rounds=2", "--no-progress")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) <= 25
    assert lines[0].startswith("spiral_test: fedproto on spiral (synthetic spiral")
    assert any(line.strip().startswith("acc_proto_own") for line in lines)


def test_overrides_accept_shorthand_and_yaml_values():
    raw = apply_overrides({"model": "cnn_fmnist"}, ["model.feature_dim=64", "seeds=[1, 2]"])
    assert raw == {"model": {"name": "cnn_fmnist", "feature_dim": 64}, "seeds": [1, 2]}
    with pytest.raises(ConfigError, match="override: got 'rounds'"):
        apply_overrides({}, ["rounds"])
    full = {"dataset": "spiral", "model": "mlp_spiral", "partition": {"scheme": "iid"}, "algorithm": "fedavg",
            "train": {}}
    assert validate({**full, "seeds": 7})["seeds"] == [7]
