"""fedlib methods on Flower nodes (fedlib.flower): the same numbers as the simulator, in one process and
on a real localhost deployment (a SuperLink and SuperNodes started and stopped here)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fedlib import flower, store
from fedlib.config import load_config, run_dir
from fedlib.engine import message_size
from fedlib.runner import load_rounds, load_state, run_one
from tests.conftest import ROOT

# the notebooks' smoke partition (params/fedmps/experiments.yaml), 6 clients, 3 rounds
SMOKE = ["partition.shots=10", "partition.block=12", "partition.test_shots=5", "train.rounds=3"]
METHODS = {"fedproto": ("params/fedproto_fmnist.yaml", []), "fedmps": ("params/fedmps_fmnist.yaml", []),
           # GFPL's interaction (the second half of a round) in rounds 2 and 3, not in round 1
           "gfpl": ("params/gfpl_fmnist.yaml", ["algorithm.start=2", "algorithm.every=1"])}


def config(method: str, results: Path, clients: int = 6) -> dict:
    path, extra = METHODS[method]
    return load_config(ROOT / path, SMOKE + extra + [f"partition.num_clients={clients}", f"results_dir={results}"])


def numbers(records: list[dict]) -> list[dict]:
    """Everything a round logs except its timings."""
    return [{k: v for k, v in r.items() if not k.endswith("seconds")} for r in records]


def test_messages_cross_as_records_unchanged_and_counted_alike():
    msg = {"w.conv": torch.randn(4, 3, generator=torch.Generator().manual_seed(0)), "classes": torch.tensor([7, 2]),
           "scale": torch.tensor(2.5, dtype=torch.float64), "num_samples": 30, "tau": 0.1}
    content = flower.encode(msg)
    back = flower.decode(content)
    assert list(back) == list(msg)  # key order kept (tensors and numbers travel in separate records)
    for k, v in msg.items():
        if isinstance(v, torch.Tensor):
            assert back[k].dtype == v.dtype and back[k].shape == v.shape and torch.equal(back[k], v)
        else:
            assert type(back[k]) is type(v) and back[k] == v
    # 12 + 1 float elements; 12*4 + 2*8 + 8 tensor bytes + 2 numbers * 8
    assert flower.record_size(content) == message_size(msg) == (13, 88)
    content.config_records["numbers"]["extra"] = 1
    with pytest.raises(RuntimeError, match="encoding lost or added something"):
        flower.decode(content)


@pytest.mark.slow
@pytest.mark.parametrize("method", sorted(METHODS))
def test_in_process_nodes_give_the_simulators_numbers(method, tmp_path):
    """A run on Flower nodes (an in-process Grid calling the ClientApp) logs the simulated run's per-round
    and per-client accuracies, losses and bytes exactly, and ends with the same client and server states."""
    sim_cfg, fl_cfg = config(method, tmp_path / "sim"), config(method, tmp_path / "flower")
    seed = sim_cfg["seeds"][0]
    run_one(sim_cfg, seed, progress=False)
    grid = flower.InProcessGrid(flower.client_app, 6)
    summary = flower.run_on_grid(grid, fl_cfg, seed)
    assert summary["executor"] == "flower" and summary["run_id"] == run_dir(sim_cfg, seed).name
    sim, dep = load_rounds(sim_cfg, seed), load_rounds(fl_cfg, seed)
    assert len(dep) == 3 and numbers(dep) == numbers(sim)
    assert dep[-1]["up_bytes"] > 0 and dep[-1]["down_bytes"] > 0  # (round 1 broadcasts nothing: no prototypes yet)
    assert ("train.receive" in grid.sent) == (method == "gfpl")
    assert grid.sent.count("train.receive") == (12 if method == "gfpl" else 0)  # rounds 2 and 3, 6 clients
    a, b = load_state(sim_cfg, seed), load_state(fl_cfg, seed)
    assert sorted(a.clients) == sorted(b.clients) == list(range(6))
    for cid in range(6):
        ma, mb = a.clients[cid]["model"], b.clients[cid]["model"]
        assert all(torch.equal(ma[k], mb[k]) for k in ma)


@pytest.mark.slow
def test_node_config_and_partition_errors_name_the_field(tmp_path):
    cfg = config("fedproto", tmp_path, clients=3)
    grid = flower.InProcessGrid(flower.client_app, 2)  # two nodes, three clients
    with pytest.raises(ValueError, match="node .* has num-partitions=2; the run's partition.num_clients is 3"):
        flower.run_on_grid(grid, cfg, 1234)
    grid = flower.InProcessGrid(flower.client_app, 3)
    for ctx in grid.contexts.values():
        ctx.node_config = {"partition-id": 0, "num-partitions": 3}
    with pytest.raises(ValueError, match="both have partition-id=0"):
        flower.run_on_grid(grid, cfg, 1234)
    next(iter(grid.contexts.values())).node_config = {"num-partitions": 3}
    with pytest.raises(ValueError, match="node config lacks partition-id: start the SuperNode with --node-config"):
        flower.run_on_grid(grid, cfg, 1234)


# -- a real deployment on 127.0.0.1 --------------------------------------------------------------------

DEPLOY_NODES = 2
# Seconds a SuperNode's ClientApp process (and the SuperLink's ServerApp process) may take from its task claim to
# its first call. Flower allows 30 s; a new process that imports flwr takes ~4 s on an idle core but over a minute
# on 2 cores shared with other jobs (measured: `flwr-clientapp --help` 57 s wall, 3.5 s CPU, load average 21), and
# then the task expires ("Runtime task-token authentication failed"). Only this start-up window is widened.
APP_START_PATIENCE = 600


def flower_command(entry: str) -> list[str]:
    """The console script ``entry`` ("module:function") run by this Python with :data:`APP_START_PATIENCE`."""
    module, func = entry.split(":")
    code = ("import sys\n"
            "import flwr.supercore.corestate.in_memory_corestate as a, flwr.supercore.corestate.sql_corestate as b\n"
            f"a.HEARTBEAT_DEFAULT_INTERVAL = b.HEARTBEAT_DEFAULT_INTERVAL = {APP_START_PATIENCE}\n"
            f"from {module} import {func}\nsys.exit({func}())")
    return [sys.executable, "-c", code]


def free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def wait_for_port(port: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.5)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")


@contextlib.contextmanager
def local_federation(tmp: Path, nodes: int, env: dict):
    """A SuperLink and ``nodes`` SuperNodes (``--insecure``, 127.0.0.1, free ports), each in its own process
    group so that stopping it also stops the ServerApp/ClientApp processes it started. Yields the SuperLink's
    port (its Fleet, Control and Runtime APIs share it) and the log files."""
    link, *node_ports = free_ports(1 + nodes)
    logs, procs = [], []

    def start(name, args):
        log = tmp / f"{name}.log"
        logs.append(log)
        procs.append(subprocess.Popen(args, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env, cwd=tmp,
                                      start_new_session=True))

    try:
        start("superlink", [*flower_command("flwr.superlink.cli:flower_superlink"), "--insecure",
                            "--disable-runtime-dependency-installation", "--host=127.0.0.1", f"--port={link}"])
        for i, port in enumerate(node_ports):
            start(f"supernode{i}", [*flower_command("flwr.supernode.cli:flower_supernode"), "--insecure",
                                    f"--superlink=127.0.0.1:{link}",
                                    "--node-config", f"partition-id={i} num-partitions={nodes}",
                                    "--host=127.0.0.1", f"--port={port}"])
        yield link, logs
    finally:
        for p in reversed(procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=15)


def tails(logs: list[Path]) -> str:
    return "\n".join(f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:]) for p in logs)


@pytest.mark.slow
def test_deployed_fedmps_on_localhost_matches_the_simulator_and_reads_like_it(tmp_path):
    """FedMPS on a SuperLink and two SuperNodes started here (``flwr run``): its run folder holds the simulated
    run's numbers and the FedMPS study's readers read it like a simulated one."""
    from fedlib import plots
    from fedlib.papers import fedmps as S

    t_start = time.monotonic()
    deadline = t_start + 900  # a stuck deployment fails here; ~2 minutes on 2 idle cores
    sim_cfg = config("fedmps", tmp_path / "sim", DEPLOY_NODES)
    dep_cfg = config("fedmps", tmp_path / "dep", DEPLOY_NODES)
    seed = sim_cfg["seeds"][0]
    home = tmp_path / "flwr_home"
    home.mkdir()
    env = {**os.environ, "FLWR_HOME": str(home),
           # this Python's scripts first: the nodes start flwr-clientapp by name (no pyenv-style shim on the way)
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
           "PYTHONPATH": os.pathsep.join([str(ROOT)]
                                         + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))}
    with local_federation(tmp_path, DEPLOY_NODES, env) as (link, logs):
        (home / "config.toml").write_text(f'[superlink]\ndefault = "local"\n\n[superlink.local]\n'
                                          f'address = "127.0.0.1:{link}"\ninsecure = true\n')
        overrides = " ".join(SMOKE + [f"partition.num_clients={DEPLOY_NODES}"])
        (tmp_path / "run.toml").write_text(f'config = "{ROOT / METHODS["fedmps"][0]}"\noverrides = "{overrides}"\n'
                                           f'results-dir = "{tmp_path / "dep"}"\n')
        wait_for_port(link, deadline)
        flwr = shutil.which("flwr", path=env["PATH"]) or "flwr"
        submit = subprocess.run([flwr, "run", str(ROOT / "deploy" / "flower"), "local",
                                 "--run-config", str(tmp_path / "run.toml")], env=env, cwd=tmp_path,
                                capture_output=True, text=True, timeout=max(1, deadline - time.monotonic()))
        assert submit.returncode == 0, submit.stdout + submit.stderr
        summary_file = run_dir(dep_cfg, seed) / store.SUMMARY
        while not summary_file.exists() and time.monotonic() < deadline:
            time.sleep(1)
        assert summary_file.exists(), "the deployed run did not finish in time\n" + tails(logs)
    deployed_seconds = time.monotonic() - t_start
    run_one(sim_cfg, seed, progress=False)
    sim, dep = load_rounds(sim_cfg, seed), load_rounds(dep_cfg, seed)
    assert numbers(dep) == numbers(sim)
    # the FedMPS notebook's readers on the deployed folder
    summary = json.loads(summary_file.read_text())
    assert summary["executor"] == "flower"
    assert S.accuracy(summary, "acc_proto_own", "last") == 100 * sim[-1]["acc"]["acc_proto_own"]["mean"]
    assert S.seconds_per_round(dep) > 0 and S.time_to_target(dep, "acc_head", 0.0)["round"] == 1
    state = load_state(dep_cfg, seed)
    classes, protos = S.global_prototypes(state)
    sim_classes, sim_protos = S.global_prototypes(load_state(sim_cfg, seed))
    assert (classes == sim_classes).all() and (protos == sim_protos).all()
    plots.accuracy_curves({"simulated": sim, "deployed": dep}, "acc_proto_own")
    print(f"deployed FedMPS ({DEPLOY_NODES} nodes, 3 rounds): {deployed_seconds:.0f} s; per-round acc_proto_own "
          f"simulated {[r['acc']['acc_proto_own']['mean'] for r in sim]}, deployed "
          f"{[r['acc']['acc_proto_own']['mean'] for r in dep]}")
