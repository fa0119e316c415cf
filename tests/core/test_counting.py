"""The op and host-sync counter that judges the engine's GPU cost on a CPU (fedlib.counting)."""

import pytest
import torch
from torch.func import grad, vmap

from fedlib.counting import OpCounter, phase


def test_a_small_graph_forward_and_backward_counts_exactly():
    # Prepare: a leaf parameter and data made before counting (device tensors)
    w = torch.randn(3, 2, requires_grad=True)
    x = torch.randn(4, 3)
    # Execute
    with OpCounter() as c:
        with phase("fwd"):
            loss = (x @ w).sum()
        with phase("bwd"):
            loss.backward()
    # Assert: mm, sum | ones_like (seed), expand (sum'), t, mm (mm'), detach (accumulate into .grad)
    assert c.ops == {"fwd": 2, "bwd": 5}
    assert c.launches == {"fwd": 2, "bwd": 2}  # expand, t and detach launch no kernel
    assert c.total_syncs == 0 and c.entries == {"fwd": 1, "bwd": 1}


def test_item_is_one_sync_and_counts_no_kernel():
    with OpCounter() as c:
        y = (torch.ones(3, device="cpu") * 2).sum()
        assert y.item() == 6.0
    assert (c.total_ops, c.total_launches) == (4, 3)  # ones, mul, sum, _local_scalar_dense
    assert dict(c.syncs) == {"item": 1}


def test_host_tensors_cost_nothing_until_a_device_op_reads_them():
    x = torch.randn(10, 4)
    with OpCounter() as c:
        perm = torch.randperm(10, generator=torch.Generator().manual_seed(0))  # host: no device named
        idx = perm[2:6]              # host op
        assert c.total_ops == 0 and c.host_ops == 2
        xb = x[idx]                  # a device op reading a host index: a blocking copy
        torch.tensor([0, 1], device="cpu")  # Python data to the device
        torch.nonzero(x[:, 0] > 0)   # output size depends on device values
        perm.tolist()                # host: free
        xb.tolist()                  # device to host
        dev_idx = idx.to("cpu")      # an upload (a no-op on this CPU run, counted as on a GPU)
        x[dev_idx]                   # reads a device index: no copy
    assert dict(c.syncs) == {"h2d": 3, "shape": 1, "d2h": 1}


def test_vmapped_gradient_is_counted_below_vmap_and_phases_nest():
    W = torch.randn(3, 4, 2)
    X = torch.randn(3, 5, 4)

    def f(w, x):
        return (x @ w).pow(2).sum()

    with OpCounter() as c:
        with phase("train"):
            vmap(grad(f))(W, X)
            with phase("inner"):
                torch.zeros(2, device="cpu")
    # one batched kernel per op for all three clients, never one per client
    with OpCounter() as one:
        grad(f)(W[0], X[0])
    assert c.ops["train"] > 0 and c.ops["inner"] == 1 and c.entries == {"train": 1, "inner": 1}
    assert c.launches["train"] == one.total_launches


def test_only_one_counter_at_a_time():
    with OpCounter():
        with pytest.raises(RuntimeError, match="already counting"):
            OpCounter().__enter__()


@pytest.mark.parametrize("name,syncs", [("fedproto", {"h2d": 2, "d2h": 2, "item": 1}),
                                        ("fedmps", {"h2d": 3, "d2h": 3})])
def test_a_batched_round_reads_the_device_a_handful_of_times(name, syncs):
    # Prepare: five clients, the last one smaller than a batch (its step runs alone: one of the uploads)
    from fedlib.engine import Simulator
    from tests.core.test_executors import setup

    algo, ctx, data = setup(name)
    sim = Simulator(algo, ctx, data, rounds=3, progress=False, executor="batched")
    _, clients, server, _ = sim._fresh_state()
    clients, server, _ = sim.step(1, clients, server)
    # Execute: round 2, with prototypes travelling both ways
    with OpCounter() as c:
        sim.step(2, clients, server)
    # Assert: h2d = the epoch's batch order (+ the small client's index; FedMPS: + the server head's order),
    # d2h = the losses and seen classes, the evaluation (FedMPS: + the head losses, read with what the next broadcast
    # sends), item = FedProto's broadcast's number of classes; nothing at all inside the training steps
    assert dict(c.syncs) == syncs
    assert c.sync_where["train.fwdbwd"] == 0


def test_a_shared_broadcast_ignores_the_client():
    from fedlib.algorithms import ALGORITHMS
    from fedlib.engine import Simulator
    from tests.core.test_executors import setup

    shared = [n for n, cls in ALGORITHMS.items() if cls.SHARED_BROADCAST]
    assert {"fedproto", "fedmps", "protonorm"} <= set(shared)
    for name in shared:
        algo, ctx, data = setup(name)
        sim = Simulator(algo, ctx, data, rounds=1, progress=False)
        _, clients, server, _ = sim._fresh_state()
        clients, server, _ = sim.step(1, clients, server)
        rnd = sim.round_record(2)
        a, b = algo.broadcast(ctx, server, 0, rnd), algo.broadcast(ctx, server, None, rnd)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
