"""The algorithm contract as a check: what ``tests/algorithms/test_algorithms.py`` asks of every registered method,
as one library function that the test suite and the method loader (:mod:`fedlib.algorithms.loader`) both call.

:func:`check_method` takes a method class (or a registered name) and raises :class:`ContractViolation` at the
first thing that breaks the contract, one line naming the hook and what was expected::

    regulariser: not implemented; a PrototypeMethod implements regulariser(self, z, y, table, present) -> ...
    local_update: upload (round 1, client 0): 'protos' has shape (3,); declared [k, d]
    regulariser: the training loss is nan in round 2 (client 0); expected a finite number

In this order, cheapest first, before any real training: the class and its declarations (a frozen dataclass,
``RULES``, ``UPLOAD`` / ``BROADCAST`` / ``REPLY`` in the declaration language of
:func:`~fedlib.algorithms.base.check_message`); the hooks a method must implement, and every hook its own code
overrides taking the arguments the library calls it with; the hyperparameters (each with
a default and a constraint that refuses a bad value); three hand-driven rounds on tiny synthetic data (3 clients,
2 classes each) in which every broadcast, upload and reply matches its declaration and holds only tensors and
numbers, every metric is a finite number, every loss term the method's own code adds is a number (a one-element
float tensor), every floating tensor an upload holds that the server's aggregate fails on is named if its dtype is
not the models'; the state is plain data that survives a ``weights_only`` checkpoint bit
for bit; ``predict`` returns every rule's ``(n, C)`` scores and changes no state; and two runs of two rounds
(the engine's :class:`~fedlib.engine.Simulator`) with the same seed give the same records.

:func:`architecture_keys` reads a method's declarations for the keys whose tensors are weights of the client's own
model: a method that sends any cannot run where clients have different architectures (the benchmark's ``hetero``
setting; :func:`refusal`); :func:`feature_levels` the feature levels its features are read
from (a setting whose model does not expose one of them refuses it).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import json
import math

import torch

from fedlib.algorithms.base import Algorithm, Context, Round, TrainSettings, check_message
from fedlib.algorithms.contract import _SPEC
from fedlib.validation import ConfigError

#: Weight keys (declared ``float[...]``, any shape) of modules whose architecture is the same for every client
#: whatever its own model: FML's meme model, FedKD's mentee and its SVD factors (one architecture the method
#: fixes), and a classifier head (``feature_dim`` x C, which every member of a model family shares). Any other
#: ``float[...]`` key is taken for weights of the client's own model (a whole model or a part of it: ``w.*``,
#: ``g.*``, ``c*``, ``t.*``, ...), whose shapes follow its architecture.
SHARED_ARCHITECTURE_KEYS = ("meme.*", "mentee.*", "svd_u.*", "svd_s.*", "svd_v.*", "head.*")

#: how the hooks a method must have are spelled (what the one line says is expected)
HOOKS = {
    "init_server": "init_server(self, ctx) -> server state",
    "broadcast": "broadcast(self, ctx, server, cid, rnd) -> Message",
    "aggregate": "aggregate(self, ctx, server, uploads, rnd) -> (server state, metrics)",
    "local_update": "local_update(self, ctx, cid, client, msg, data, rnd) -> (client state, upload, metrics), or "
                    "task / batch_loss / finish for the shared SGD loop",
    "task": "task(self, ctx, cid, client, msg, data, rnd) -> LocalTask",
    "batch_loss": "batch_loss(self, out, y, epoch, extras, teachers, params, rnd) -> (loss, parts)",
    "finish": "finish(self, ctx, cid, client, msg, data, rnd, task, model, sums, metrics) -> (state, upload, metrics)",
    "regulariser": "regulariser(self, z, y, table, present) -> the weighted prototype term added to cross-entropy",
    "reply": "reply(self, ctx, server, cid, rnd) -> Message or None (REPLY is declared)",
    "receive": "receive(self, ctx, cid, client, msg, data, rnd) -> (client state, metrics) (REPLY is declared)",
}


class ContractViolation(ConfigError):
    """One break of the algorithm contract: ``hook`` (the method or part of the contract), ``what`` (what was found
    and what was expected). A :class:`~fedlib.validation.ConfigError`, so every command prints it as its one line
    and exits with status 2."""

    def __init__(self, hook: str, what: str, where: str = ""):
        self.hook, self.what = hook, what
        text = f"{where}{': ' if where else ''}{hook}: {what}"
        super().__init__(hook, None, what, message=" ".join(text.split()))

    def __reduce__(self):
        return (_violation, (self.hook, self.what, str(self)))


def _violation(hook, what, text):
    out = ContractViolation(hook, what)
    ConfigError.__init__(out, hook, None, what, message=text)
    return out


def architecture_keys(cls: type) -> list[str]:
    """The keys ``cls`` declares (``UPLOAD``, ``BROADCAST``, ``REPLY``) whose tensors are weights of the client's
    own model (``float[...]``, not one of :data:`SHARED_ARCHITECTURE_KEYS`): ``[]`` where the method's messages
    have the same shapes whatever architecture a client runs."""
    out: list[str] = []
    for spec in (cls.UPLOAD, cls.BROADCAST, cls.REPLY):
        for key, rule in spec.items():
            name = key.rstrip("?")
            if rule.replace(" ", "") == "float[...]" and name not in SHARED_ARCHITECTURE_KEYS and name not in out:
                out.append(name)
    return out


#: the feature levels a model may expose (``model.feature_dims``, :mod:`fedlib.models`)
FEATURE_LEVELS = ("low", "high")


def feature_levels(cls: type, level: str | None = None) -> list[str]:
    """The feature levels ``cls`` reads from a client's model: its ``level`` hyperparameter (``level`` where given,
    else its default; ``"high"`` for a method without one), and every level one of its declared message keys names
    (FedMPS sends ``low`` and ``high`` prototypes), in :data:`FEATURE_LEVELS` order."""
    own = level if level is not None else getattr(cls, "level", "high")
    named = {key.rstrip("?") for spec in (cls.UPLOAD, cls.BROADCAST, cls.REPLY) for key in spec}
    out = [lv for lv in FEATURE_LEVELS if lv == own or lv in named]
    return out + ([own] if isinstance(own, str) and own not in out else [])


# -- the tiny problem every check runs on ------------------------------------------------------------------------
def scored_by_prototype(cls) -> bool:
    """Whether ``cls`` is scored by the nearest global prototype: its reported rule (last of ``RULES``) is ``proto``."""
    return cls.RULES[-1] == "proto"


def refusal(cls, algorithm: dict, model: dict) -> tuple[str, str, str] | None:
    """None where clients of ``model`` can run ``cls``, else ``(rule, what, reason)`` (docs/benchmark.md, section 3)."""
    from fedlib.models import FAMILIES

    if model["name"] in FAMILIES:
        keys = architecture_keys(cls)
        if keys:
            return ("architecture", ", ".join(keys), f"sends {', '.join(keys)} (weights of the client's own model, "
                    "whose shapes follow its architecture); the clients' models differ here")
    have = set(_levels(json.dumps(model, sort_keys=True)))
    for level in feature_levels(cls, algorithm.get("level")):
        if level not in have:
            return ("level", level, f"its prototypes live on the {level!r} feature level, which {model['name']} does "
                    "not expose")
    return None


@functools.lru_cache(maxsize=32)
def _levels(model_json: str, input_shape: tuple = (1, 28, 28), num_classes: int = 10) -> tuple:
    """The feature levels every member of a config's model section (as JSON) exposes."""
    from fedlib.models import FAMILIES, build_model

    model = json.loads(model_json)
    args = {k: v for k, v in model.items() if k != "name"}
    levels = None
    for m in FAMILIES.get(model["name"], (model["name"],)):
        have = set(build_model(m, input_shape, num_classes, **args).feature_dims)
        levels = have if levels is None else levels & have
    return tuple(sorted(levels or ()))


def tiny_dataset(per_class_train: int = 40, per_class_test: int = 10, num_classes: int = 4, shape=(1, 8, 8),
                 seed: int = 0, description: str = "synthetic contract-check images"):
    """Separable synthetic images (class c: a bright row at c plus noise), ``num_classes`` classes; the same
    data as the test suite's ``tiny_image_dataset``."""
    import numpy as np

    from fedlib.data.sources import Dataset

    g = torch.Generator().manual_seed(seed)

    def draw(per_class):
        y = torch.from_numpy(np.tile(np.arange(num_classes), per_class)).long()
        x = 0.3 * torch.randn(len(y), *shape, generator=g)
        for c in range(num_classes):
            x[y == c, :, c % shape[1], :] += 2.0
        return x, y

    xtr, ytr = draw(per_class_train)
    xte, yte = draw(per_class_test)
    return Dataset("tiny", xtr, ytr, xte, yte, num_classes, description)


def tiny_context(num_clients: int, seed: int = 0, num_classes: int = 4) -> Context:
    """The context of the tiny problem: FedProto's Fashion CNN (it exposes low- and high-level features) on
    8x8 images, SGD lr 0.05, momentum 0.5, batch 8, one local epoch."""
    return Context(num_classes=num_classes, input_shape=(1, 8, 8), num_clients=num_clients, model_name="cnn_fmnist",
                   model_args={}, train=TrainSettings(lr=0.05, momentum=0.5, batch_size=8), seed=seed)


def tiny_data(num_clients: int):
    """The tiny problem split pathologically, 2 classes per client (``FederatedData``)."""
    from fedlib.data import FederatedData
    from fedlib.data.partition import label_partition

    ds = tiny_dataset()
    part = label_partition("pathological", ds.y_train.numpy(), ds.y_test.numpy(), ds.num_classes,
                           num_clients=num_clients, classes_per_client=2, balance=True, seed=1, split="official")
    return FederatedData(ds, part)


# -- the check ---------------------------------------------------------------------------------------------------
def _defined_by(cls: type, hook: str) -> type | None:
    """The class of ``cls``'s MRO whose own namespace defines ``hook``."""
    return next((k for k in cls.__mro__ if hook in k.__dict__), None)


def _implemented(cls: type, hook: str, base: type) -> bool:
    owner = _defined_by(cls, hook)
    return owner is not None and owner is not base and not issubclass(base, owner)


def loss_hook(cls: type) -> str:
    """The hook a non-finite training loss is laid at: the most specific loss hook the method itself defines
    (``regulariser``, ``batch_loss``, ``local_update``)."""
    from fedlib.algorithms.prototype_method import PrototypeMethod

    for hook in ("regulariser", "batch_loss", "local_update"):
        owner = _defined_by(cls, hook)
        if owner is not None and not owner.__module__.startswith("fedlib.algorithms.") \
                and owner not in (Algorithm, PrototypeMethod):
            return hook
    for hook in ("regulariser", "batch_loss"):
        if _implemented(cls, hook, Algorithm) and hasattr(cls, hook):
            return hook
    return "local_update"


def upload_hook(cls: type) -> str:
    """The hook an upload off its declaration is laid at: ``finish`` where the method's own code defines it (it
    makes the upload of the shared SGD loop), else ``local_update``."""
    owner = _defined_by(cls, "finish")
    if owner is not None and not owner.__module__.startswith("fedlib.") \
            and _defined_by(cls, "local_update").__module__.startswith("fedlib."):
        return "finish"
    return "local_update"


def check_declarations(cls) -> None:
    """The class is an :class:`Algorithm`, a frozen dataclass with rules and well-formed message declarations."""
    if not isinstance(cls, type) or not issubclass(cls, Algorithm):
        raise ContractViolation("class", f"{cls!r} is not a subclass of fedlib.algorithms.base.Algorithm "
                                "(start from PrototypeMethod, FedAvg or Algorithm)")
    params = cls.__dict__.get("__dataclass_params__")
    if params is None or not params.frozen:
        raise ContractViolation("class", f"{cls.__name__} is not a frozen dataclass; expected "
                                "@dataclasses.dataclass(frozen=True) on it (hyperparameters are its fields, state "
                                "is never kept on self)")
    rules = cls.RULES
    if not isinstance(rules, tuple) or not rules or not all(isinstance(r, str) and r for r in rules):
        raise ContractViolation("RULES", f"got {rules!r}; expected a non-empty tuple of inference rule names "
                                "(e.g. ('head', 'proto'))")
    for decl in ("UPLOAD", "BROADCAST", "REPLY"):
        spec = getattr(cls, decl)
        if not isinstance(spec, dict):
            raise ContractViolation(decl, f"got {type(spec).__name__}; expected a dict of key -> declaration")
        for key, rule in spec.items():
            if not isinstance(key, str) or not key or key.rstrip("?") != key.rstrip("?").lower():
                raise ContractViolation(decl, f"key {key!r}; expected a lower-case name")
            if not isinstance(rule, str) or _SPEC.match(rule.replace(" ", "")) is None:
                raise ContractViolation(decl, f"{key!r}: {rule!r}; expected 'float[k, d]', 'int[k]', 'float[...]', "
                                        "'int' or 'float'")


def check_hooks(cls) -> None:
    """Every hook the contract needs is implemented (a class whose hook is the base's ``NotImplementedError``
    fails here, before anything runs)."""
    from fedlib.algorithms.prototype_method import PrototypeMethod

    def need(hook, base=Algorithm):
        if not _implemented(cls, hook, base):
            raise ContractViolation(hook, f"not implemented; a {base.__name__} subclass implements {HOOKS[hook]}")

    for hook in ("init_server", "broadcast", "aggregate"):
        need(hook)
    if not _implemented(cls, "local_update", Algorithm):
        for hook in ("task", "batch_loss", "finish"):
            need(hook)
    if issubclass(cls, PrototypeMethod):
        need("regulariser", PrototypeMethod)
    if cls.REPLY:
        need("reply")
        need("receive")
    check_signatures(cls)


def _spelled(sig: inspect.Signature) -> str:
    """``(self, z, y)``: a signature without its annotations."""
    return str(sig.replace(parameters=[p.replace(annotation=p.empty) for p in sig.parameters.values()],
                           return_annotation=sig.empty))


def check_signatures(cls) -> None:
    """Every public hook the method's own code (a class outside fedlib) overrides takes the required arguments of
    the library's hook it overrides, positionally: a wrong signature is one line naming the hook, before anything
    runs (else a ``TypeError`` deep in a round, laid at the library hook that called it)."""
    mro = cls.__mro__
    for i, own in enumerate(mro):
        if own.__module__.startswith("fedlib.") or own.__module__ == "builtins":
            continue
        for name, fn in vars(own).items():
            if name.startswith("_") or not inspect.isfunction(fn):
                continue
            base = next((b.__dict__[name] for b in mro[i + 1:]
                         if name in b.__dict__ and b.__module__.startswith("fedlib.")), None)
            if not inspect.isfunction(base):
                continue
            want = inspect.signature(base)
            params = list(want.parameters.values())[1:]
            args = [None for p in params
                    if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
            kwargs = {p.name: None for p in params if p.kind is p.KEYWORD_ONLY and p.default is p.empty}
            try:
                inspect.signature(fn).bind(None, *args, **kwargs)
            except TypeError:
                spelled = HOOKS[name] if name in HOOKS else name + _spelled(want)
                raise ContractViolation(name, f"takes {_spelled(inspect.signature(fn))}; expected {spelled}, "
                                        "as the library calls it") from None


def check_hyperparameters(cls, hyperparameters: dict | None = None) -> Algorithm:
    """Every field has a default and a constraint, a constraint refuses its invalid example, and the method builds
    with ``hyperparameters`` (default: its defaults); returns that instance."""
    from fedlib.validation import from_dict

    fields = dataclasses.fields(cls)
    for f in fields:
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ContractViolation("hyperparameters", f"field {f.name!r} has no default; expected every "
                                    "hyperparameter to have one (the paper's)")
        if f.name not in cls.CONSTRAINTS:
            raise ContractViolation("hyperparameters", f"field {f.name!r} has no constraint; expected one in "
                                    "CONSTRAINTS (Interval, Options or BOOL from fedlib.validation)")
    owner = f"algorithm ({cls.name})"
    try:
        algo = from_dict(cls, hyperparameters or {}, owner=owner)
    except ConfigError as exc:
        raise ContractViolation("hyperparameters", f"{exc}") from None
    for name, rule in cls.CONSTRAINTS.items():
        bad = rule.invalid_example()
        try:
            from_dict(cls, {**(hyperparameters or {}), name: bad}, owner=owner)
        except ConfigError:
            continue
        raise ContractViolation("hyperparameters", f"{name}={bad!r} was accepted; expected its constraint to refuse "
                                "it (a __post_init__ of your own must call super().__post_init__())")
    return algo


def _plain(obj, where: str) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not isinstance(k, (str, int)):
                raise ContractViolation("state", f"{where}: key {k!r}; expected plain data (str or int keys)")
            _plain(v, f"{where}[{k!r}]")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _plain(v, f"{where}[{i}]")
    elif not (obj is None or isinstance(obj, (torch.Tensor, int, float, str, bool))):
        raise ContractViolation("state", f"{where} is a {type(obj).__name__}; expected plain data (dicts and lists "
                                "of tensors, numbers, strings: a model as weights(module), never the module)")


def same_state(a, b) -> bool:
    """Bitwise equality of two plain-data states."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same_state(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _message(hook: str, msg, spec: dict, num_classes: int, where: str, decl: str = "") -> None:
    if not isinstance(msg, dict):
        raise ContractViolation(hook, f"{where}: got a {type(msg).__name__}; expected a Message (a flat dict of "
                                "tensors and numbers)")
    for k, v in msg.items():
        if not isinstance(k, str) or k != k.lower():
            raise ContractViolation(hook, f"{where}: key {k!r}; expected a lower-case name")
        if not isinstance(v, (torch.Tensor, int, float)) or isinstance(v, bool):
            raise ContractViolation(hook, f"{where}: {k!r} is a {type(v).__name__}; expected a tensor or a number")
    try:
        check_message(msg, spec, num_classes, where)
    except ValueError as exc:
        raise ContractViolation(hook, str(exc) + (f" (in {decl}; expected the message it declares)" if decl else "")) \
            from None


def _metrics(hook: str, metrics, where: str, need_loss: bool = False, loss_at: str | None = None) -> None:
    if not isinstance(metrics, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                for v in metrics.values()):
        raise ContractViolation(hook, f"{where}: metrics {metrics!r}; expected a dict of numbers")
    if need_loss and "train_loss" not in metrics:
        raise ContractViolation(hook, f"{where}: no train_loss in the metrics; expected the mean training loss")
    for k, v in metrics.items():
        if not math.isfinite(v):
            at = loss_at if (k == "train_loss" or k.endswith("_loss")) and loss_at else hook
            what = "the training loss" if k == "train_loss" else f"metric {k!r}"
            raise ContractViolation(at, f"{what} is {v} in {where}; expected a finite number")


def _call(hook: str, where: str, fn, *args):
    """``fn(*args)``, an exception raised inside it made one line naming ``hook``."""
    try:
        return fn(*args)
    except ContractViolation:
        raise
    except NotImplementedError as exc:
        raise ContractViolation(hook, f"not implemented ({where}){': ' + str(exc) if str(exc) else ''}; expected "
                                f"{HOOKS.get(hook, 'an implementation')}") from None
    except Exception as exc:  # noqa: BLE001 - any error in a hook is the method's, named in one line
        raise ContractViolation(hook, f"raised {type(exc).__name__} ({where}): {' '.join(str(exc).split())[:300]}") \
            from None


#: the hooks whose value the library adds to the training loss (checked as they are called, :func:`_loss_probe`)
LOSS_HOOKS = ("regulariser", "local_loss")


def _loss_probe(algo: Algorithm) -> Algorithm:
    """A copy of ``algo`` whose loss hooks (:data:`LOSS_HOOKS`) that the method's own code defines check what they
    return: a number or a one-element float tensor (else one line naming the hook, not ``backward``'s error)."""
    probe = copy.copy(algo)
    for hook in LOSS_HOOKS:
        owner = _defined_by(type(algo), hook)
        if owner is not None and not owner.__module__.startswith("fedlib."):
            object.__setattr__(probe, hook, _loss_checked(getattr(algo, hook), hook))
    return probe


def _loss_checked(fn, hook: str):
    """``fn`` (a bound loss hook) raising :class:`_LossValue` where its value is not a loss term."""
    def checked(*args, **kwargs):
        value = fn(*args, **kwargs)
        if isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel() == 1:
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
        raise _LossValue(hook, f"a tensor of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor)
                         and value.is_floating_point() else f"a {value.dtype} tensor"
                         if isinstance(value, torch.Tensor) else "None" if value is None
                         else f"a {type(value).__name__}")
    return checked


class _LossValue(ContractViolation):
    """A loss hook's value of the wrong kind (``what``: what it returned), made a line where the round knows where."""

    def line(self, where: str) -> ContractViolation:
        return ContractViolation(self.hook, f"returned {self.what} ({where}); expected a number or a one-element "
                                 "float tensor (the term added to the training loss)")


def _off_dtype(uploads: dict, r: int) -> str | None:
    """The first floating tensor of ``uploads`` (``{cid: message}``) whose dtype is not the models', as a line."""
    want = torch.get_default_dtype()
    for cid, up in uploads.items():
        for k, v in up.items():
            if isinstance(v, torch.Tensor) and v.is_floating_point() and v.dtype != want:
                return f"upload (round {r}, client {cid}): {k!r} is {v.dtype}; expected {want}, the models' dtype"
    return None


def check_rounds(algo: Algorithm, rounds: int = 3, clients: int = 3) -> None:
    """``rounds`` hand-driven rounds of ``clients`` clients: declared messages, finite metrics, plain state that a
    ``weights_only`` checkpoint keeps bit for bit, and a pure ``predict`` of every rule."""
    import io

    cls = type(algo)
    data = tiny_data(clients)
    ctx = tiny_context(clients)
    C = ctx.num_classes
    at_loss = loss_hook(cls)
    algo = _loss_probe(algo)
    state = {c: _call("init_client", f"client {c}", algo.init_client, ctx, c) for c in range(clients)}
    server = _call("init_server", "before round 1", algo.init_server, ctx)
    for r in range(1, rounds + 1):
        rnd = Round(r, rounds, ctx.seed)
        uploads = {}
        for cid in range(clients):
            where = f"round {r}, client {cid}"
            msg = _call("broadcast", where, algo.broadcast, ctx, server, cid, rnd)
            _message("broadcast", msg, cls.BROADCAST, C, f"broadcast ({where})", "BROADCAST")
            try:
                out = _call("local_update", where, algo.local_update, ctx, cid, state[cid], msg, data.train[cid], rnd)
            except _LossValue as exc:
                raise exc.line(where) from None
            if not isinstance(out, tuple) or len(out) != 3:
                raise ContractViolation("local_update", f"returned {type(out).__name__}; expected (client state, "
                                        "upload, metrics)")
            state[cid], up, metrics = out
            _metrics("local_update", metrics, where, need_loss=True, loss_at=at_loss)
            _message(upload_hook(cls), up, cls.UPLOAD, C, f"upload ({where})", "UPLOAD")
            bad = [k for k, v in up.items() if isinstance(v, torch.Tensor) and v.is_floating_point()
                   and not bool(torch.isfinite(v).all())]
            if bad:
                raise ContractViolation(at_loss, f"upload {bad[0]!r} holds nan or inf ({where}); expected finite "
                                        "values")
            uploads[cid] = up
        try:
            out = _call("aggregate", f"round {r}", algo.aggregate, ctx, server, uploads, rnd)
        except ContractViolation as exc:
            off = _off_dtype(uploads, r) if exc.hook == "aggregate" else None
            if off is None:
                raise
            raise ContractViolation(upload_hook(cls), f"{off} (aggregate failed on it: {exc.what})") from None
        if not isinstance(out, tuple) or len(out) != 2:
            raise ContractViolation("aggregate", f"returned {type(out).__name__}; expected (server state, metrics)")
        server, server_metrics = out
        _metrics("aggregate", server_metrics, f"round {r}")
        for cid in range(clients):
            where = f"round {r}, client {cid}"
            msg = _call("reply", where, algo.reply, ctx, server, cid, rnd)
            if msg is None:
                continue
            _message("reply", msg, cls.REPLY, C, f"reply ({where})", "REPLY")
            out = _call("receive", where, algo.receive, ctx, cid, state[cid], msg, data.train[cid], rnd)
            if not isinstance(out, tuple) or len(out) != 2:
                raise ContractViolation("receive", f"returned {type(out).__name__}; expected (client state, metrics)")
            state[cid], metrics = out
            _metrics("receive", metrics, where)
    _plain(state, "client state")
    _plain(server, "server state")
    buf = io.BytesIO()
    try:
        torch.save({"clients": state, "server": server}, buf)
        buf.seek(0)
        back = torch.load(buf, weights_only=True)
    except Exception as exc:  # noqa: BLE001
        raise ContractViolation("state", f"does not survive a weights_only checkpoint ({type(exc).__name__}: "
                                f"{' '.join(str(exc).split())[:200]}); expected plain data") from None
    if not (same_state(back["clients"], state) and same_state(back["server"], server)):
        raise ContractViolation("state", "changed through a weights_only checkpoint; expected plain data kept bit "
                                "for bit")
    before = copy.deepcopy((state, server))
    for cid in range(clients):
        where = f"client {cid}, after round {rounds}"
        msg = _call("broadcast", where, algo.broadcast, ctx, server, cid, Round(rounds + 1, rounds, ctx.seed))
        scores = _call("predict", where, algo.predict, ctx, cid, state[cid], msg, data.test[cid].x)
        if not isinstance(scores, dict) or set(scores) != set(cls.RULES):
            got = sorted(scores) if isinstance(scores, dict) else repr(scores)
            raise ContractViolation("predict", f"returned rules {got} ({where}); expected exactly RULES "
                                    f"{list(cls.RULES)}")
        n = len(data.test[cid])
        for rule, s in scores.items():
            if not isinstance(s, torch.Tensor) or tuple(s.shape) != (n, C):
                shape = tuple(s.shape) if isinstance(s, torch.Tensor) else type(s).__name__
                raise ContractViolation("predict", f"rule {rule!r} gave {shape} ({where}); expected scores of shape "
                                        f"({n}, {C}) (test samples, classes)")
        _call("features", where, algo.features, ctx, cid, state[cid], msg, data.test[cid].x)
    if not (same_state(state, before[0]) and same_state(server, before[1])):
        raise ContractViolation("predict", "changed the client or server state; expected a pure predict (no update, "
                                "no state kept on self)")


def _first_difference(a, b, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in a:
            if k not in b:
                return f"{path}{k}"
            if a[k] != b[k]:
                return _first_difference(a[k], b[k], f"{path}{k}.")
        return path.rstrip(".")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return _first_difference(x, y, f"{path}{i}.")
    return path.rstrip(".") or "the records"


def check_deterministic(algo: Algorithm, rounds: int = 2, clients: int = 4) -> None:
    """Two runs of the engine with the same config and seed give the same round records (times aside)."""
    from fedlib.engine import Simulator

    def run():
        sim = Simulator(algo, tiny_context(clients), tiny_data(clients), rounds=rounds, progress=False)
        recs = _call("run", "the engine's round loop", sim.run)
        return [{k: v for k, v in r.items() if "seconds" not in k} for r in recs]

    first, again = run(), run()
    if first != again:
        i = next(i for i, (a, b) in enumerate(zip(first, again, strict=True)) if a != b)
        raise ContractViolation("determinism", f"two runs with the same seed differ in round {i + 1} "
                                f"({_first_difference(first[i], again[i])}); expected the same numbers (draw random "
                                "numbers from torch's generator, which the engine seeds, or rnd.generator(cid))")


def check_method(method, hyperparameters: dict | None = None, rounds: int = 3, deterministic: bool = True) -> Algorithm:
    """The whole contract check of ``method`` (a class, or the name of a registered one) with ``hyperparameters``
    (default: its defaults): :class:`ContractViolation` at the first break, one line naming the hook and what was
    expected. Returns the checked instance. About a second for a prototype method on 2 cores."""
    from fedlib.algorithms.registry import ALGORITHMS

    cls = ALGORITHMS[method] if isinstance(method, str) else method
    check_declarations(cls)
    check_hooks(cls)
    algo = check_hyperparameters(cls, hyperparameters)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # as every run trains (fedlib.runner.one_thread); tiny models gain nothing from more
    try:
        with torch.random.fork_rng(devices=[]):
            check_rounds(algo, rounds)
            if deterministic:
                check_deterministic(algo)
    finally:
        torch.set_num_threads(threads)
    return algo
