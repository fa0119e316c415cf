"""Devices: the device kind is part of a run's identity, every run records its machine, the
headless commands need none of the notebook packages; on CUDA (when present) runs repeat bit
for bit and the batched executor agrees with the sequential one."""

import subprocess
import sys

import pytest
import torch

from fedlib.config import load_config, run_id
from fedlib.runner import load_rounds, run_one
from fedlib.validation import ConfigError
from tests.conftest import DATA, ROOT

CFG = DATA / "spiral_fedproto.yaml"
CUDA = torch.cuda.is_available()


def test_device_and_executor_are_part_of_the_run_identity():
    assert load_config(CFG)["device"] == ("cuda" if CUDA else "cpu")  # auto resolves per machine
    plain = load_config(CFG, ["device=cpu"])
    assert plain["device"] == "cpu" and plain["executor"] == "sequential"  # auto executor on a CPU
    batched = load_config(CFG, ["device=cpu", "executor=batched"])
    as_cuda = {**plain, "device": "cuda", "executor": "batched"}  # what a CUDA machine validates to
    ids = {run_id(plain, 1), run_id(batched, 1), run_id(as_cuda, 1)}
    assert len(ids) == 3  # a CPU result is never served for a CUDA (or batched) request
    # the reference placement (cpu, sequential) leaves the id of runs made before devices existed
    legacy = {k: v for k, v in plain.items() if k not in ("device", "executor")}
    assert run_id(plain, 1) == run_id(legacy, 1)


@pytest.mark.skipif(CUDA, reason="checks the refusal on a machine without CUDA")
def test_cuda_without_a_gpu_is_a_one_line_error():
    with pytest.raises(ConfigError, match="device: got 'cuda'; allowed: cpu or auto: this machine has no CUDA"):
        load_config(CFG, ["device=cuda"])


@pytest.mark.slow
def test_every_run_records_its_machine(tmp_path, monkeypatch):
    summary = run_one(load_config(CFG, [f"results_dir={tmp_path}", "train.rounds=1", "device=cpu"]), 1,
                      progress=False)
    machine = summary["machine"]
    assert machine["device"] == "cpu" and machine["torch"] == torch.__version__ and machine["threads"] == 1
    assert machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability() and machine["cpu"]
    assert summary["executor"] == "sequential"
    from fedlib import runner
    from fedlib.report import git_commit

    assert summary["code"] == git_commit() and len(summary["code"].split()[0]) >= 7  # the code that made it
    # read once per process, before the first run trains: a checkout that moves on later does not relabel runs
    monkeypatch.setattr(runner, "_LOADED_CODE", "abc1234")
    later = run_one(load_config(CFG, [f"results_dir={tmp_path}", "train.rounds=1", "device=cpu", "seeds=[2]"]), 2,
                    progress=False)
    assert later["code"] == "abc1234"
    assert len(summary["finished_utc"]) == len("2026-01-01 00:00")


@pytest.mark.slow
def test_headless_run_needs_no_notebook_packages(tmp_path):
    # a GPU machine has torch but none of papermill, nbval, umap-learn, mlxtend: hide them
    blocked = tmp_path / "blocked"
    for name in ("papermill", "nbval", "umap", "mlxtend", "nbformat"):
        (blocked / name).mkdir(parents=True)
        (blocked / name / "__init__.py").write_text(f"raise ImportError('{name} is not installed here')\n")
    env = {"PYTHONPATH": f"{blocked}:{ROOT}", "PATH": "/usr/bin:/bin"}
    code = ("import fedlib.papers.fedmps, fedlib.papers.protonorm, fedlib.bench, fedlib.runner, fedlib.executors;"
            "from fedlib.__main__ import main;"
            f"raise SystemExit(main(['run', '{CFG}', 'train.rounds=1', 'results_dir={tmp_path / 'r'}', "
            "'--no-progress']))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "spiral_test: fedproto on spiral" in out.stdout


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_cuda_runs_repeat_bit_for_bit_and_batched_agrees(tmp_path):
    a = load_config(CFG, [f"results_dir={tmp_path / 'a'}", "train.rounds=3", "device=cuda", "executor=sequential"])
    b = {**a, "results_dir": str(tmp_path / "b")}
    run_one(a, 1, progress=False)
    run_one(b, 1, progress=False)
    strip = lambda recs: [{k: v for k, v in r.items() if "seconds" not in k} for r in recs]  # noqa: E731
    assert strip(load_rounds(a, 1)) == strip(load_rounds(b, 1))
    c = load_config(CFG, [f"results_dir={tmp_path / 'c'}", "train.rounds=3", "device=cuda", "executor=batched"])
    run_one(c, 1, progress=False)
    for ra, rc in zip(load_rounds(a, 1), load_rounds(c, 1), strict=True):
        for key, vals in ra["clients"].items():
            assert max(abs(x - y) for x, y in zip(vals, rc["clients"][key], strict=True)) <= 0.005



def _gfpl_repeats_and_batched_agrees(tmp_path, device):
    """GFPL's smoke run (MNIST-5k, w-bar 4, 4 rounds, two of them interaction rounds: components up,
    fusion, pseudo-feature retraining) twice per executor on ``device``. Each executor repeats bit for
    bit; the two agree on what travels and, as far as CNNMnist's dropout allows (the batched engine
    draws its masks per group, so its trajectory is another sample), on the training loss."""
    from fedlib.papers import gfpl as G

    plan = G.load_plan("smoke")
    recs = {}
    for ex in ("sequential", "batched"):
        cfg = G.config(plan, "gfpl", "mnist5k", 4, device=device, executor=ex, results_dir=str(tmp_path / ex),
                       **{"train.rounds": 4})
        again = {**cfg, "results_dir": str(tmp_path / f"{ex}-again")}
        for c in (cfg, again):
            run_one(c, 0, progress=False)
        strip = lambda rs: [{k: v for k, v in r.items() if "seconds" not in k} for r in rs]  # noqa: E731
        recs[ex] = load_rounds(cfg, 0)
        assert strip(recs[ex]) == strip(load_rounds(again, 0)), ex
    seq, bat = recs["sequential"], recs["batched"]
    assert [r["up_params"] > 0 for r in seq] == [False, True, False, True]
    assert [r["up_params"] for r in seq] == [r["up_params"] for r in bat]
    assert [r.get("server", {}).get("components", 0) > 0 for r in bat] == [False, True, False, True]
    assert abs(seq[0]["train_loss"] - bat[0]["train_loss"]) < 0.02 * seq[0]["train_loss"]
    assert seq[-1]["train_loss"] < seq[0]["train_loss"] and bat[-1]["train_loss"] < bat[0]["train_loss"]


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_gfpl_on_cuda_repeats_bit_for_bit_and_executors_agree(tmp_path):
    _gfpl_repeats_and_batched_agrees(tmp_path, "cuda")
