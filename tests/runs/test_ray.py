"""``--backend ray`` on a local Ray instance of 2 CPUs: the same numbers as the local pool, a killed worker
retried and resumed, a raising run reported while the others finish, both result modes, packing, errors."""

import argparse
import os
import signal
import sys
import threading
import time

import pytest

from fedlib import backends, ray_backend, store
from fedlib.config import load_config, run_dir, run_id
from fedlib.papers import fedmps
from fedlib.grid import run_many
from fedlib.runner import RunsFailed, load_state, run_one
from tests.conftest import DATA, ROOT

CFG = DATA / "spiral_fedproto.yaml"
TIMING = ("seconds", "train_seconds", "eval_seconds")


def spiral(root, **overrides):
    """The spiral test config on 5% of its points (a round in a fraction of a second)."""
    return load_config(CFG, {"results_dir": str(root), "train.rounds": 3,
                             "dataset": {"name": "spiral", "fraction": 0.05}, **overrides})


def grid(root):
    """2 methods x 2 seeds."""
    return [(spiral(root, **method), seed) for method in ({}, {"algorithm": {"name": "fedavg"}}) for seed in (1, 2)]


def numbers(cfg, seed):
    """The per-round records of a finished run, without the timings."""
    return [{k: v for k, v in r.items() if k not in TIMING} for r in store.read_log(run_dir(cfg, seed))]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in backends.ENV.values():
        monkeypatch.setenv(name, "")  # unset for the code (empty), removed again after the test


@pytest.fixture(scope="module")
def cluster():
    """Ray on this machine with 2 CPUs; ``$FEDLIB_TEST_RAY_ADDRESS`` names one started beforehand instead
    (``ray start --head --num-cpus 2``: on a busy machine Ray's 30 s for starting a node can run out)."""
    address = os.environ.get("FEDLIB_TEST_RAY_ADDRESS")
    ray = ray_backend.connect(address) if address else ray_backend.init_local(num_cpus=2)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def local_grid(tmp_path_factory):
    jobs = grid(tmp_path_factory.mktemp("local"))
    run_many(jobs, workers=2, progress=False, backend="local")
    return jobs


@pytest.mark.slow
def test_a_grid_on_ray_gives_the_local_pools_numbers_round_by_round(cluster, local_grid, tmp_path, monkeypatch,
                                                                     capsys):
    monkeypatch.setenv("FEDLIB_BACKEND", "ray")  # how a notebook or `reproduce` picks the backend
    jobs = grid(tmp_path)
    got = run_many(jobs, progress=False)
    assert "ray: 1 node, 2 CPUs, 0 GPUs; results folder" in capsys.readouterr().out
    assert [s["run_id"] for s in got] == [run_id(c, s) for c, s in jobs]
    for (cfg, seed), (here, _), summary in zip(jobs, local_grid, got, strict=True):
        assert numbers(cfg, seed) == numbers(here, seed) and len(numbers(cfg, seed)) == 3
        assert summary["metrics"] == run_one(here, seed)["metrics"] and not summary["cache_hit"]
        assert summary["ray"]["resumed_from_round"] == 0
        assert (run_dir(cfg, seed) / store.CHECKPOINT).exists()  # shared folder: the task wrote it all
    assert got[0]["metrics"] != got[2]["metrics"]  # FedProto and FedAvg differ
    assert all(s["cache_hit"] for s in run_many(jobs, progress=False))


@pytest.mark.slow
def test_a_killed_worker_is_retried_and_resumes_to_the_uninterrupted_numbers(cluster, tmp_path):
    cfg = spiral(tmp_path / "ray", **{"train.rounds": 12})
    folder = run_dir(cfg, 1)
    out = {}
    runner = threading.Thread(target=lambda: out.update(s=run_many([(cfg, 1)], progress=False, backend="ray")))
    runner.start()
    deadline = time.time() + 300  # a loaded 2-core machine can take minutes to start a worker and its torch
    while len(store.read_log(folder)) < 3 and time.time() < deadline:
        time.sleep(0.02)
    assert len(store.read_log(folder)) >= 3, "the Ray worker logged fewer than 3 rounds in 300 s"
    pid = int((folder / ".lock").read_text())  # the worker process holding the run's lock
    os.kill(pid, signal.SIGKILL)
    runner.join(300)
    assert "s" in out, "the retried Ray task did not finish in 300 s"
    (summary,) = out["s"]
    assert summary["ray"]["resumed_from_round"] >= 3  # the retry went on from the checkpoint
    uninterrupted = spiral(tmp_path / "here", **{"train.rounds": 12})
    run_one(uninterrupted, 1, progress=False)
    assert numbers(cfg, 1) == numbers(uninterrupted, 1) and len(numbers(cfg, 1)) == 12


@pytest.mark.slow
def test_a_raising_run_is_reported_with_its_config_while_the_others_finish(cluster, tmp_path):
    good = spiral(tmp_path)
    bad = spiral(tmp_path, **{"dataset.name": "digit5"})   # valid, but its data are not here: the run raises
    with pytest.raises(RunsFailed, match=r"^1 of 2 runs failed \(finished runs are kept\):\n") as err:
        run_many([(bad, 1), (good, 1)], progress=False, backend="ray")
    line = str(err.value).splitlines()[1]
    assert line.startswith(f"  spiral_test seed 1 (run {run_id(bad, 1)}, algorithm {{'name': 'fedproto'")
    assert "DatasetUnavailable: Digit-5 not found" in line
    assert store.verify_finished(run_dir(good, 1), 3) is not None


@pytest.mark.slow
def test_returned_files_are_written_through_the_store(cluster, local_grid, tmp_path, capsys):
    jobs = grid(tmp_path)[:2]
    got = ray_backend.run_many(jobs, progress=False, results="returned")
    assert "not written by the tasks: each task returns its run's files and this process writes them" \
        in capsys.readouterr().out
    for (cfg, seed), (here, _), summary in zip(jobs, local_grid[:2], got, strict=True):
        folder = run_dir(cfg, seed)
        assert numbers(cfg, seed) == numbers(here, seed)
        assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == \
            ["config.yaml", "partition.json", "rounds.jsonl", "summary.json"]
        assert summary["integrity"]["checkpoint"] is None and summary["ray"]["node"]
        # config.yaml reruns the run here: this results folder, not the node's scratch folder
        assert load_config(folder / "config.yaml")["results_dir"] == str(tmp_path)
        assert not (ray_backend.scratch_root() / run_id(cfg, seed)).exists()
    assert all(s["cache_hit"] for s in run_many(jobs, progress=False))
    # a notebook asking for the final models gets them: the checkpoint is made again, same numbers
    state = load_state(*jobs[0])
    assert state.round == 3 and numbers(*jobs[0]) == numbers(*local_grid[0])


@pytest.mark.slow
def test_returned_files_that_disagree_are_not_written(tmp_path):
    cfg = spiral(tmp_path / "a")
    run_one(cfg, 1, progress=False)
    files = {name: (run_dir(cfg, 1) / name).read_text() for name in ray_backend.FILES}
    files[store.LOG] = files[store.LOG].replace('"round": 3', '"round": 3 ')
    with pytest.raises(ValueError, match="the returned rounds.jsonl differs from the log its summary was written"):
        store.write_returned(tmp_path / "b" / "x", files)
    assert not (tmp_path / "b").exists()


@pytest.mark.slow
def test_probing_the_results_folder_on_every_node(cluster, tmp_path):
    nodes = [n for n in cluster.nodes() if n["Alive"]]
    assert ray_backend._nodes_not_seeing(cluster, nodes, [str(tmp_path)]) == []
    assert list(tmp_path.iterdir()) == []  # the token is removed


def test_runs_are_packed_on_a_gpu_by_measured_peak_memory(monkeypatch):
    cfg = {"name": "x", "device": "cuda", "train": {}, "algorithm": {"name": "fedproto"}}
    gib = 1 << 30
    assert ray_backend.gpu_share(cfg, {}) == 0.25  # nothing measured yet: 4 runs a GPU, as the local pool
    measured = {ray_backend.shape_key(cfg): {"peak": 3 * gib, "total": 80 * gib}}
    # (3 GiB x 1.25 + 0.59 GiB context) / 80 GiB = 0.054 -> 0.10: ten such runs share the GPU
    assert ray_backend.gpu_share(cfg, measured) == pytest.approx(0.10)
    measured[ray_backend.shape_key(cfg)]["peak"] = 70 * gib
    assert ray_backend.gpu_share(cfg, measured) == 1.0
    assert ray_backend.gpu_share({**cfg, "device": "cpu"}, measured) == 0.0
    monkeypatch.setenv("FEDLIB_GPUS_PER_RUN", "0.5")
    assert ray_backend.gpu_share(cfg, measured) == 0.5


def test_backend_options_fail_in_one_line(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # Ray not installed
    for argv, message in (
            (["--backend", "ray"], "error: --backend ray: Ray is not installed; `pip install -r requirements-ray.txt` "
                                   "(ray==2.55.1) or use --backend local\n"),
            (["--backend", "spark"], "error: --backend: got 'spark'; allowed: local or ray\n"),
            (["--gpus-per-run", "1.5"], "error: --gpus-per-run: got 1.5; allowed: a positive number: a fraction up "
                                        "to 1 or whole GPUs\n"),
            (["--ray-results", "maybe"], "error: --ray-results: got 'maybe'; allowed: auto, shared, returned\n"),
            (["--address", "auto"], "error: --address: got 'auto'; allowed: a value only with --backend ray\n")):
        monkeypatch.setenv("FEDLIB_BACKEND", "")  # each command line on its own
        with pytest.raises(SystemExit) as stop:
            fedmps.main(argv)
        assert stop.value.code == 2 and capsys.readouterr().err == message
    with pytest.raises(backends.ConfigError, match="^--backend ray: Ray is not installed"):
        backends.use("ray")


def test_the_command_line_puts_the_backend_in_the_environment(monkeypatch):
    parser = backends.add_options(argparse.ArgumentParser())
    backends.apply(parser.parse_args(["--backend", "ray", "--address", "auto", "--cpus-per-run", "2"]))
    assert (os.environ["FEDLIB_BACKEND"], os.environ["FEDLIB_RAY_ADDRESS"], os.environ["FEDLIB_CPUS_PER_RUN"]) == \
        ("ray", "auto", "2.0")
    assert backends.resolve() == "ray" and backends.resolve("local") == "local"


def test_a_study_command_exits_1_and_counts_the_failed_runs(capsys):
    from fedlib import study

    @study.command
    def main(argv=None):
        raise RunsFailed("2 of 8 runs failed (finished runs are kept):\n  a seed 1: ValueError: x")

    assert main([]) == 1
    assert capsys.readouterr().err.startswith("error: 2 of 8 runs failed (finished runs are kept):\n")


CTRL_C = """
import pickle
import signal
import sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal or a Jupyter kernel has it
from fedlib import ray_backend
from fedlib.grid import run_many

ray_backend.connect({address!r})
run_many(pickle.loads(open({jobs!r}, "rb").read()), progress=False, backend="ray")
"""


@pytest.mark.slow
def test_ctrl_c_stops_the_grid_and_keeps_every_finished_run(cluster, tmp_path):
    """A grid driven from another process (connected to this test's Ray instance) gets SIGINT, as from a
    terminal, once its short run has finished and both long runs have a checkpoint: the running tasks are
    cancelled, the finished run is served, the stopped runs keep their checkpoints (shared folder), no
    temporary file is left, and the interrupt reaches the caller."""
    import pickle
    import subprocess

    short = spiral(tmp_path)
    long = [spiral(tmp_path, **{"train.rounds": 400}) for _ in range(2)]
    jobs = [(long[0], 1), (short, 1), (long[1], 2)]
    (tmp_path / "jobs.pkl").write_bytes(pickle.dumps(jobs))
    script = CTRL_C.format(address=cluster.get_runtime_context().gcs_address, jobs=str(tmp_path / "jobs.pkl"))
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.time() + 240
    while time.time() < deadline and not (store.verify_finished(run_dir(short, 1), 3) is not None and all(
            (run_dir(c, s) / store.CHECKPOINT).exists() for c, s in (jobs[0], jobs[2]))):
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode != 0 and "KeyboardInterrupt" in err, err[-2000:]
    assert "runs: interrupted; 1 of 3 runs finished and are kept, 2 stopped (their checkpoints stay: the same " \
           "command goes on from there)" in out, out + err[-2000:]
    assert store.verify_finished(run_dir(short, 1), 3) is not None
    time.sleep(3)  # the cancelled tasks' processes are gone: their logs no longer grow
    sizes = [len(store.read_log(run_dir(c, s))) for c, s in (jobs[0], jobs[2])]
    time.sleep(3)
    assert [len(store.read_log(run_dir(c, s))) for c, s in (jobs[0], jobs[2])] == sizes
    for cfg, seed in (jobs[0], jobs[2]):
        folder = run_dir(cfg, seed)
        assert not (folder / store.SUMMARY).exists() and store.resume_point(folder, 400).done >= 1
    assert not list(tmp_path.rglob("*.tmp"))
