"""What a round would cost a GPU, counted on any device: ATen ops, kernel launches and host syncs.

A GPU round of a small model is launch-bound: its time follows the number of ATen ops
dispatched (each one kernel launch) and the number of times the host waits for the device.
Both are counted here without a GPU, by :class:`OpCounter`:

- a ``TorchDispatchMode`` (below autograd and ``torch.func.vmap``, so a backward pass and a
  vmapped call are counted as the kernels they run) counts every ATen op, and as a *kernel
  launch* every op that is not a view or metadata change (``view``, ``slice``, ``expand``,
  ``detach``, ... ; :data:`NO_KERNEL`);
- a ``TorchFunctionMode`` marks *host* tensors: those a factory makes without an explicit
  ``device`` (``torch.randperm(n, generator=g)``, ``torch.arange(n)``, ``torch.tensor(list)``)
  live in host memory on a GPU run whatever the run's device. Host-ness follows data flow
  (an op on host tensors only gives a host tensor).

Host syncs, by kind:

- ``item``: a scalar read of a device tensor (``.item()``, ``float(t)``, ``bool(t)``,
  ``if t.any():``);
- ``shape``: an op whose output size depends on device values (``nonzero``, ``bincount``,
  ``unique``, ``masked_select``, boolean indexing, ...);
- ``h2d``: a device op that reads a host tensor (a CPU index into device data: a pageable,
  blocking copy), ``torch.tensor(data, device=...)``, ``host.to(device)``;
- ``d2h``: ``.cpu()``, ``.tolist()`` or ``.numpy()`` of a device tensor.

Ops are booked under the innermost :func:`phase` that is open (``"other"`` outside any), so
the engine can say where a round's ops go; :func:`phase` costs one global read when no
counter runs. ``python -m fedlib.bench --count`` prints the split per round.
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakIdKeyDictionary

_ACTIVE: list = []  # the counter in use (at most one)

# ops that change metadata only: no kernel on a GPU
NO_KERNEL = frozenset({
    "view", "_unsafe_view", "reshape", "slice", "select", "expand", "unsqueeze", "squeeze", "t", "transpose",
    "permute", "as_strided", "detach", "alias", "lift_fresh", "unbind", "split", "split_with_sizes", "chunk",
    "narrow", "view_as", "expand_as", "flatten", "unflatten", "diagonal", "_reshape_alias", "movedim",
    "_local_scalar_dense", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "is_same_size",
})
# ops whose output shape depends on device values
SHAPE_SYNC = frozenset({"nonzero", "bincount", "unique", "_unique", "_unique2", "unique_dim", "unique_consecutive",
                        "masked_select", "repeat_interleave", "nonzero_static_unknown", "histc_sync"})
# factories that make a host tensor when called without an explicit device
FACTORIES = frozenset({"randperm", "arange", "zeros", "ones", "empty", "full", "randn", "rand", "randint", "eye",
                       "linspace", "tensor", "as_tensor", "from_numpy"})
SYNC_KINDS = ("item", "shape", "h2d", "d2h")


def _caller() -> str:
    """The innermost fedlib frame outside this module (``file:line``)."""
    import traceback

    for fr in reversed(traceback.extract_stack()):
        if "fedlib" in fr.filename and not fr.filename.endswith("counting.py"):
            return f"{fr.filename.split('fedlib/')[-1]}:{fr.lineno}"
    return "?"


def _name(func) -> str:
    return func.__name__.split(".")[0]


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _tensors(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors(o)


@contextlib.contextmanager
def phase(name: str):
    """Book the ops run inside under ``name`` (nested phases: the innermost wins)."""
    if not _ACTIVE:
        yield
        return
    counter = _ACTIVE[0]
    counter._phases.append(name)
    counter.entries[name] += 1
    try:
        yield
    finally:
        counter._phases.pop()


class _Functions(TorchFunctionMode):
    def __init__(self, owner: OpCounter):
        super().__init__()
        self.owner = owner

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        own = self.owner
        name = getattr(func, "__name__", "")
        if name in ("cpu", "tolist", "numpy") and args and isinstance(args[0], torch.Tensor) \
                and not own.is_host(args[0]):
            own.sync("d2h")
        factory = name in FACTORIES and getattr(func, "__module__", "") in ("torch", "torch._C._VariableFunctions")
        # torch.optim keeps its step counts on the host, naming device "cpu" (a GPU run's Adam included)
        host_factory = factory and (kwargs.get("device") is None or (str(kwargs["device"]) == "cpu" and (
            sys._getframe(1).f_globals.get("__name__", "").startswith("torch.optim"))))
        own._host_factory += host_factory
        try:
            out = func(*args, **kwargs)
        finally:
            own._host_factory -= host_factory
        if factory and isinstance(out, torch.Tensor):
            if host_factory:
                own.host[out] = True
            else:
                own.host.pop(out, None)
                if name in ("tensor", "as_tensor", "from_numpy"):
                    own.sync("h2d")  # Python or NumPy data copied to the device
        elif name in ("to", "cuda") and args and isinstance(args[0], torch.Tensor) and own.is_host(args[0]) \
                and (name == "cuda" or _to_device(args[1:], kwargs)):
            own.sync("h2d")
            if out is args[0]:  # a no-op on a CPU run: give the device copy an identity of its own
                with own.paused():
                    out = out.view(out.shape)
            own.host.pop(out, None)
        return out


def _to_device(args, kwargs) -> bool:
    return kwargs.get("device") is not None or any(isinstance(a, (str, torch.device)) for a in args)


class _Dispatch(TorchDispatchMode):
    def __init__(self, owner: OpCounter):
        super().__init__()
        self.owner = owner

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        own = self.owner
        if own._paused:
            return out
        name = _name(func)
        ins = list(_tensors(args)) + list(_tensors(kwargs))
        host_in = [own.is_host(t) for t in ins]
        # a host scalar (a Python number wrapped by lift_fresh) is a kernel argument on a GPU, not a copy
        big = [h for t, h in zip(ins, host_in, strict=True) if not (h and t.dim() == 0)]
        if name == "lift_fresh":
            all_host = True
        elif big:
            all_host = all(big)
        else:
            all_host = bool(ins) or own._host_factory > 0
        host_in = big
        if all_host:
            for t in _tensors(out):
                own.host[t] = True
            own.host_ops += 1
            return out
        where = own._phases[-1] if own._phases else "other"
        own.ops[where] += 1
        if name not in NO_KERNEL:
            own.launches[where] += 1
        if any(host_in):
            own.sync("h2d")
        if name == "_local_scalar_dense":
            own.sync("item")
        elif name in SHAPE_SYNC or (name == "index" and any(t.dtype == torch.bool for t in ins[1:])):
            own.sync("shape")
        return out


class OpCounter:
    """Counts ATen ops, kernel launches and host syncs per phase while open (module docstring).

    >>> with OpCounter() as c:
    ...     y = (torch.ones(3, device="cpu") * 2).sum()
    ...     v = y.item()
    >>> c.total_ops, c.total_syncs
    (4, 1)
    """

    def __init__(self, sites: bool = False):
        self.sites: Counter | None = Counter() if sites else None  # (kind, fedlib file:line) of each sync
        self.ops: Counter = Counter()
        self.launches: Counter = Counter()
        self.syncs: Counter = Counter()
        self.sync_where: Counter = Counter()
        self.entries: Counter = Counter()  # how often each phase was opened
        self.host = WeakIdKeyDictionary()
        self.host_ops = 0
        self._phases: list[str] = []
        self._paused = False
        self._host_factory = 0  # > 0 inside a factory call that names no device
        self._modes = (_Functions(self), _Dispatch(self))

    def is_host(self, t: torch.Tensor) -> bool:
        return t in self.host

    def sync(self, kind: str) -> None:
        if not self._paused:
            self.syncs[kind] += 1
            self.sync_where[self._phases[-1] if self._phases else "other"] += 1
            if self.sites is not None:
                self.sites[kind, _caller()] += 1

    @contextlib.contextmanager
    def paused(self):
        was, self._paused = self._paused, True
        try:
            yield
        finally:
            self._paused = was

    @property
    def total_ops(self) -> int:
        return sum(self.ops.values())

    @property
    def total_launches(self) -> int:
        return sum(self.launches.values())

    @property
    def total_syncs(self) -> int:
        return sum(self.syncs.values())

    def __enter__(self):
        if _ACTIVE:
            raise RuntimeError("an OpCounter is already counting")
        _ACTIVE.append(self)
        for m in self._modes:
            m.__enter__()
        return self

    def __exit__(self, *exc):
        for m in reversed(self._modes):
            m.__exit__(*exc)
        _ACTIVE.clear()
        return False
