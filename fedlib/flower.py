"""Any fedlib method on Flower nodes: one ``ClientApp`` and one ``ServerApp`` (Flower 1.42's Message API).

The ServerApp runs the simulator's own round loop (:class:`fedlib.engine.Simulator`) with
:class:`Nodes` in place of the in-process clients: each round the server sends every sampled
node the method's declared broadcast (``train``), the node runs ``local_update`` on its own
partition and answers with the declared upload and, apart, its metrics; the server aggregates;
a method with a second half of the round (``reply`` / ``receive``, GFPL) sends the reply as a
second exchange (``train.receive``); then every node scores its test set with what the server
would broadcast next (``evaluate``). Client state stays on the node, in its ``context.state``,
between rounds. At the end the nodes send their states once (``query.state``) so that the run
folder's checkpoint holds them, as a simulated run's does (``keep-states = false`` turns that off;
the checkpoint then holds the server's state and no client's).

A node learns its client id from its node config (``partition-id``, ``num-partitions``) and keeps
only that client's train and test data (it loads the dataset files it holds and cuts its own
partition with the run's seed, as the simulator does). The fedlib config travels in every message,
so nodes need fedlib and their data, not the YAML file.

On the wire a fedlib message is a ``RecordDict``: tensors in an ``ArrayRecord`` (dtype and shape
kept), plain numbers in a ``ConfigRecord`` (ints stay ints; floats are Python floats, float64, as
in the simulator), the key order in a ``ConfigRecord`` beside them. Every message's size is counted
from its records (array elements times item size, 8 bytes per number) and checked against
:func:`fedlib.engine.message_size` of the message it decodes to, so the round log's bytes are what
crossed the network. Numbers are the simulator's bit for bit on a CPU (``tests/runs/test_flower.py``):
same derived seeds, same client order in aggregation, one torch thread on every party.
Differences, all outside the numbers: a deployed run does not resume (a killed run starts again
from round 1), evaluation traffic is not counted (nor is it in the simulator), the ``*_seconds``
fields time the network too, and the summary says ``executor: flower``.

See docs/flower.md for starting a SuperLink and SuperNodes and running a config on them.
"""

from __future__ import annotations

import functools
import io
import json
import shlex
import time
from pathlib import Path

import numpy as np
import torch
from flwr.app import DEFAULT_TTL, Array, ArrayRecord, ConfigRecord, Context, Message, Metadata, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from fedlib.algorithms import make_algorithm
from fedlib.algorithms.base import Round
from fedlib.config import load_config, run_dir, target_rounds
from fedlib.data.federated import client_data
from fedlib.engine import Simulator, client_evaluation, client_receive, message_size
from fedlib.executors import sequential
from fedlib.runner import cached_summary, finish_folder, make_context, one_thread, run_lock, split, start_folder

# -- fedlib messages as records ------------------------------------------------------------------


def encode(msg: dict, rnd: Round | None = None) -> RecordDict:
    """A fedlib message (and the round record, when given) as records; its size is checked (module docstring)."""
    tensors, numbers = ArrayRecord(), ConfigRecord()
    for k, v in msg.items():
        if isinstance(v, torch.Tensor):
            tensors[k] = Array(v.detach().cpu().numpy())
        else:
            numbers[k] = v
    keys = ConfigRecord({"order": json.dumps(list(msg))})
    content = RecordDict({"tensors": tensors, "numbers": numbers, "keys": keys})
    if rnd is not None:
        content["round"] = ConfigRecord({"index": rnd.index, "total": rnd.total, "seed": rnd.seed})
    check_size(content, msg)
    return content


def decode(content: RecordDict) -> dict:
    """The fedlib message :func:`encode` made, keys in their order; its size is checked."""
    tensors, numbers = content.array_records["tensors"], content.config_records["numbers"]
    msg = {}
    for k in json.loads(content.config_records["keys"]["order"]):
        msg[k] = torch.from_numpy(np.array(tensors[k].numpy())) if k in tensors else numbers[k]
    check_size(content, msg)
    return msg


def record_size(content: RecordDict) -> tuple[int, int]:
    """``(params, bytes)`` of a message's records: elements of floating-point arrays, and array
    elements times their item size plus 8 bytes per number (the engine's count)."""
    params = nbytes = 0
    for arr in content.array_records["tensors"].values():
        n, dtype = int(np.prod(arr.shape, dtype=np.int64)), np.dtype(arr.dtype)
        nbytes += n * dtype.itemsize
        params += n if dtype.kind == "f" else 0
    return params, nbytes + 8 * len(content.config_records["numbers"])


def check_size(content: RecordDict, msg: dict) -> None:
    if record_size(content) != message_size(msg):
        raise RuntimeError(f"records of {sorted(msg)} count {record_size(content)} (params, bytes); the message "
                           f"{message_size(msg)}: the encoding lost or added something")


def round_of(content: RecordDict) -> Round:
    r = content.config_records["round"]
    return Round(index=int(r["index"]), total=int(r["total"]), seed=int(r["seed"]))


def _state_bytes(state) -> bytes:
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def _state_of(data: bytes):
    return torch.load(io.BytesIO(data), weights_only=True)


# -- the node ---------------------------------------------------------------------------------------

client_app = ClientApp()


@functools.lru_cache(maxsize=2)
def _split(config: str, seed: int):
    """The dataset and partition of a run (cached: in one process, nodes of one run load the files once)."""
    return split(json.loads(config), seed)


@functools.lru_cache(maxsize=4)
def _node(config: str, seed: int, cid: int, num: int):
    """``(ctx, algorithm, train data, test data)`` of client ``cid`` of the run (``config``: its JSON)."""
    cfg = json.loads(config)
    ds, partition = _split(config, seed)
    if num != partition.num_clients:
        raise ValueError(f"node config num-partitions={num}; the run's partition.num_clients is "
                         f"{partition.num_clients}: start one node per client with matching num-partitions")
    if not 0 <= cid < num:
        raise ValueError(f"node config partition-id={cid}; allowed: 0 to {num - 1}")
    ctx = make_context(cfg, ds, partition, seed)
    train, test = client_data(ds, partition, cid)
    return ctx, make_algorithm(cfg["algorithm"]), train.to(ctx.device), test.to(ctx.device)


def partition_id(context: Context) -> tuple[int, int]:
    """``(partition-id, num-partitions)`` from the node config, with a one-line error when missing."""
    cfg = context.node_config
    missing = [k for k in ("partition-id", "num-partitions") if k not in cfg]
    if missing:
        raise ValueError(f"node config lacks {', '.join(missing)}: start the SuperNode with "
                         "--node-config \"partition-id=<i> num-partitions=<N>\"")
    return int(cfg["partition-id"]), int(cfg["num-partitions"])


def _setup(message: Message, context: Context):
    """This node's client id, run pieces and state (a fresh ``init_client`` in its first round)."""
    run = message.content.config_records["run"]
    config = run["config"]
    data_root = context.node_config.get("data-root")
    if data_root:  # where this node keeps its data (data_root does not change a number)
        config = json.dumps({**json.loads(config), "data_root": str(data_root)}, sort_keys=True)
    cid, num = partition_id(context)
    ctx, algo, train, test = _node(config, int(run["seed"]), cid, num)
    kept = context.state.config_records.get("fedlib")
    client = _state_of(kept["client"]) if kept is not None else algo.init_client(ctx, cid)
    return cid, ctx, algo, train, test, client


def _keep(context: Context, client) -> None:
    context.state["fedlib"] = ConfigRecord({"client": _state_bytes(client)})


def _metrics(metrics: dict) -> MetricRecord:
    return MetricRecord({k: float(v) for k, v in metrics.items()})


@client_app.query()
def _partition(message: Message, context: Context) -> Message:
    cid, num = partition_id(context)
    return Message(RecordDict({"partition": ConfigRecord({"partition-id": cid, "num-partitions": num})}),
                   reply_to=message)


@client_app.train()
def _train(message: Message, context: Context) -> Message:
    """``local_update`` on this node's partition (the simulator's sequential executor, one client)."""
    with one_thread():
        cid, ctx, algo, train, _, client = _setup(message, context)
        msg, rnd = decode(message.content), round_of(message.content)
        client, up, metrics = sequential(algo, ctx, {cid: (client, msg, train)}, rnd)[cid]
        _keep(context, client)
        reply = encode(up)
        reply["metrics"] = _metrics(metrics)
    return Message(reply, reply_to=message)


@client_app.train("receive")
def _receive(message: Message, context: Context) -> Message:
    """The second half of a round (``receive``)."""
    with one_thread():
        cid, ctx, algo, train, _, client = _setup(message, context)
        client, metrics = client_receive(algo, ctx, cid, client, decode(message.content), train,
                                         round_of(message.content))
        _keep(context, client)
    return Message(RecordDict({"metrics": _metrics(metrics)}), reply_to=message)


@client_app.evaluate()
def _evaluate(message: Message, context: Context) -> Message:
    """Accuracies on this node's test set under every rule."""
    with one_thread(), torch.no_grad():
        cid, ctx, algo, _, test, client = _setup(message, context)
        accs, n = client_evaluation(algo, ctx, cid, client, decode(message.content), test)
    return Message(RecordDict({"metrics": MetricRecord({**accs, "num-examples": n})}), reply_to=message)


@client_app.query("state")
def _state(message: Message, context: Context) -> Message:
    """This node's client state (once, for the run folder's checkpoint)."""
    kept = context.state.config_records.get("fedlib")
    if kept is None:
        raise RuntimeError("this node has no client state yet: it took part in no round of the run")
    return Message(RecordDict({"state": ConfigRecord({"client": kept["client"]})}), reply_to=message)


# -- the server -------------------------------------------------------------------------------------


class Nodes:
    """The clients of a run as Flower nodes behind ``grid``: the cohort the engine's round loop talks to
    (the interface of :class:`fedlib.engine.LocalClients`). ``keep_states``: fetch the clients' states for
    the checkpoint; ``timeout``: seconds to wait for every node's reply (``None``: no limit)."""

    def __init__(self, grid: Grid, cfg: dict, seed: int, num_clients: int, keep_states: bool = True,
                 timeout: float | None = None):
        self.grid, self.keep_states, self.timeout = grid, keep_states, timeout
        self.run = ConfigRecord({"config": json.dumps(cfg, sort_keys=True), "seed": seed})
        self.seconds: dict = {}
        self.round = 0  # the round in progress, or the last one (Flower's group id: logs show it)
        self.node_of = self._discover(num_clients)

    @property
    def num_clients(self) -> int:
        return len(self.node_of)

    def _discover(self, num_clients: int) -> dict[int, int]:
        """``{client id: node id}`` from every connected node's node config; one node per client."""
        nodes = list(self.grid.get_node_ids())
        replies = self._send("query", {n: RecordDict() for n in nodes}, by_node=True)
        node_of: dict[int, int] = {}
        for node, content in replies.items():
            p = content.config_records["partition"]
            if int(p["num-partitions"]) != num_clients:
                raise ValueError(f"node {node} has num-partitions={p['num-partitions']}; the run's "
                                 f"partition.num_clients is {num_clients}")
            cid = int(p["partition-id"])
            if cid in node_of:
                raise ValueError(f"nodes {node_of[cid]} and {node} both have partition-id={cid}")
            node_of[cid] = node
        missing = sorted(set(range(num_clients)) - set(node_of))
        if missing:
            raise ValueError(f"no node has partition-id {', '.join(map(str, missing))} ({len(nodes)} nodes "
                             f"connected, {num_clients} clients): start one node per client")
        return dict(sorted(node_of.items()))

    def _send(self, kind: str, contents: dict, by_node: bool = False) -> dict:
        """Send ``contents[cid]`` (``[node]`` with ``by_node``) as ``kind`` messages; the replies' contents."""
        node = (lambda k: k) if by_node else self.node_of.__getitem__
        sent = {node(k): k for k in contents}
        msgs = []
        for k, content in contents.items():
            content["run"] = self.run
            msgs.append(self.grid.create_message(content, kind, node(k), group_id=str(self.round)))
        out = {}
        for reply in self.grid.send_and_receive(msgs, timeout=self.timeout):
            src = reply.metadata.src_node_id
            if reply.has_error():
                raise RuntimeError(f"node {src} (client {sent[src]}) failed on {kind}: {reply.error.reason}")
            out[sent[src]] = reply.content
        missing = [k for k in contents if k not in out]
        if missing:
            raise TimeoutError(f"no {kind} reply from client(s) {missing} within {self.timeout} s")
        return {k: out[k] for k in contents}

    def init_states(self) -> dict:
        return {}  # each node starts its own client (init_client) in its first round

    def states(self, clients: dict) -> dict:
        if not self.keep_states:
            return {}
        replies = self._send("query.state", {cid: RecordDict() for cid in self.node_of})
        return {cid: _state_of(c.config_records["state"]["client"]) for cid, c in replies.items()}

    def train(self, clients: dict, msgs: dict, rnd: Round) -> dict:
        self.round = rnd.index
        replies = self._send("train", {cid: encode(m, rnd) for cid, m in msgs.items()})
        return {cid: (decode(c), dict(c.metric_records["metrics"])) for cid, c in replies.items()}

    def receive(self, clients: dict, msgs: dict, rnd: Round) -> dict:
        replies = self._send("train.receive", {cid: encode(m, rnd) for cid, m in msgs.items()})
        return {cid: dict(c.metric_records["metrics"]) for cid, c in replies.items()}

    def evaluate(self, clients: dict, msgs: dict) -> dict:
        replies = self._send("evaluate", {cid: encode(m) for cid, m in msgs.items()})
        out = {}
        for cid, c in replies.items():
            accs = dict(c.metric_records["metrics"])
            out[cid] = (accs, int(accs.pop("num-examples")))
        return out


def run_on_grid(grid: Grid, cfg: dict, seed: int, keep_states: bool = True, timeout: float | None = None,
                progress: bool = False) -> dict:
    """Run seed ``seed`` of the validated config ``cfg`` on the nodes behind ``grid`` into its run folder
    (:func:`fedlib.config.run_dir`: the simulator's layout and run id); return its summary. A finished run
    is a cache hit, as with ``python -m fedlib run``."""
    cached = cached_summary(cfg, seed)
    if cached is not None:
        return cached
    folder = run_dir(cfg, seed)
    with one_thread():
        ds, partition = split(cfg, seed)
        ctx = make_context(cfg, ds, partition, seed)
        algo = make_algorithm(cfg["algorithm"])
        with run_lock(folder):
            start_folder(cfg, seed, folder, partition)
            nodes = Nodes(grid, cfg, seed, ctx.num_clients, keep_states, timeout)
            from fedlib.privacy.defense import upload_defense

            if upload_defense(cfg.get("defense")):  # the simulator's clip + noise, applied as each upload arrives
                from fedlib.privacy.defense import DefendedClients

                nodes = DefendedClients(nodes, cfg["defense"], seed)
            t = cfg["train"]
            sim = Simulator(algo, ctx, None, target_rounds(cfg), t["participation"], t["eval_every"],
                            run_dir=folder, checkpoint_every=target_rounds(cfg), progress=progress,
                            desc=f"{cfg['name']} seed {seed} (Flower)", clients=nodes, total=t["rounds"])
            t0 = time.perf_counter()
            records = sim.run()
            return finish_folder(cfg, seed, folder, algo, ctx, ds, partition, records, t0, "flower")


server_app = ServerApp()


@server_app.main()
def _main(grid: Grid, context: Context) -> None:
    """Every seed of the run config's fedlib ``config`` (with ``overrides``) on the connected nodes, into
    ``results-dir`` (default: the config's results folder + ``/flower``)."""
    rc = context.run_config
    overrides = shlex.split(str(rc.get("overrides", "")))
    cfg = load_config(rc["config"], overrides)
    results = str(rc.get("results-dir", "")) or str(Path(cfg["results_dir"]) / "flower")
    cfg = load_config(rc["config"], overrides + [f"results_dir={results}"])
    timeout = float(rc.get("timeout", 0)) or None
    for seed in cfg["seeds"]:
        summary = run_on_grid(grid, cfg, seed, keep_states=bool(rc.get("keep-states", True)), timeout=timeout)
        print(f"fedlib: {cfg['name']} seed {seed}: {run_dir(cfg, seed)} ({summary['rounds']} rounds)", flush=True)


# -- in one process -----------------------------------------------------------------------------------


class InProcessGrid(Grid):
    """A Grid whose ``num_nodes`` nodes are ``app`` called in this process (no network, no SuperLink):
    node ``i`` has node config ``partition-id=i num-partitions=num_nodes`` and its own ``Context``. Node
    ids are scattered (``node_ids``), so nothing may assume they follow the partition ids."""

    def __init__(self, app: ClientApp, num_nodes: int, node_ids: list[int] | None = None):
        self.app = app
        ids = node_ids or [1_000_003 * (num_nodes - i) + 17 for i in range(num_nodes)]
        self.contexts = {nid: Context(run_id=1, node_id=nid, state=RecordDict(), run_config={},
                                      node_config={"partition-id": i, "num-partitions": num_nodes})
                         for i, nid in enumerate(ids)}
        self._run = None
        self._replies: dict = {}
        self.sent: list[str] = []  # message types in the order sent

    def set_run(self, run) -> None:
        self._run = run

    @property
    def run(self):
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None) -> Message:
        meta = Metadata(run_id=1, message_id=str(len(self.sent)), src_node_id=0, dst_node_id=dst_node_id,
                        reply_to_message_id="", group_id=group_id, created_at=time.time(), ttl=ttl or DEFAULT_TTL,
                        message_type=message_type)
        return Message(content=content, metadata=meta)

    def get_node_ids(self):
        return list(self.contexts)

    def push_messages(self, messages):
        ids = []
        for m in messages:
            self.sent.append(m.metadata.message_type)
            reply = self.app(m, self.contexts[m.metadata.dst_node_id])
            key = str(len(self._replies))
            self._replies[key] = reply
            ids.append(key)
        return ids

    def pull_messages(self, message_ids):
        return [self._replies.pop(i) for i in message_ids]

    def send_and_receive(self, messages, *, timeout=None):
        return self.pull_messages(self.push_messages(messages))
