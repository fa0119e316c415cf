"""What an honest-but-curious server holds of a client, read from the method's declared messages.

Every method declares the keys it sends (``UPLOAD``, ``BROADCAST``, ``REPLY`` in
``fedlib/algorithms/*.py``; :func:`fedlib.algorithms.base.check_message` holds the uploads to
them). :func:`what_server_holds` sorts those keys into kinds by a fixed vocabulary (:data:`KINDS`)
and derives which attacks of :mod:`fedlib.privacy` apply, so a new method enters the leakage
table with no new code as long as it reuses the vocabulary; a key outside it is kind
``"unknown"`` and the test over the registry fails until the vocabulary names it.

What the server holds of client i after round r:
- its upload (model weights, prototypes, mixtures, statistics, counts), and
- what it sent to i itself: a broadcast model is the starting point of i's local training, so an
  uploaded model minus the broadcast one is i's local update (gradient inversion), and a broadcast
  extractor is the map from i's images to the features its prototypes average (white-box
  feature inversion) when i trains from it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import pandas as pd

from fedlib.validation import ConfigError

# Key (a ``*`` prefix key, a ``?``-free plain key) -> kind. Model-space tensors: weights of the whole or
# part of a model (w, meme, mentee, their SVD factors, FedCAM's global part g, CFL-GP's gradient probe g,
# IFCA's cluster models c<j>, FedGKD's teacher t, CFL-GP's criterion model q, FedCCFA's balanced head b).
KINDS: dict[str, str] = {
    "w.*": "model", "g.*": "model", "meme.*": "model", "mentee.*": "model", "svd_u.*": "model",
    "svd_s.*": "model", "svd_v.*": "model", "c*": "model", "t.*": "model", "q.*": "model", "b.*": "head",
    "head.*": "head", "rows": "head", "probe": "head",
    "protos": "prototypes", "low": "prototypes", "high": "prototypes", "pool": "prototypes",
    "anchors": "feature_stats", "h": "feature_stats", "v": "feature_stats", "etf": "feature_stats",
    "means": "mixture", "vars": "mixture", "weights": "mixture",
    "logits": "logits", "soft": "logits",
    "classes": "labels", "counts": "labels", "num_samples": "labels", "cluster": "labels",
    "pool_classes": "labels", "row_classes": "labels", "anchor_classes": "labels",
}
FEATURE_KINDS = ("prototypes", "mixture", "feature_stats")

# Attack name -> (what it needs, where it lives).
ATTACKS: dict[str, str] = {
    "gradient_inversion": "uploaded model minus the broadcast one (fedlib.privacy.gradients)",
    "feature_inversion": "feature statistics plus the client's extractor (fedlib.privacy.inversion)",
    "decoder": "feature statistics plus query access and auxiliary data (fedlib.privacy.attack)",
    "imprint": "a crafted broadcast model whose update comes back (fedlib.privacy.active)",
    "label_inference": "head weights or class counts: which labels the client holds",
}


def kind_of(key: str) -> str:
    """The kind of a declared key (``"w.*"``, ``"protos?"``): see :data:`KINDS`; ``"unknown"`` if unnamed."""
    return KINDS.get(key.rstrip("?"), "unknown")


@dataclasses.dataclass(frozen=True)
class ServerView:
    """What the server holds of one client of ``method``.

    upload, broadcast, reply : the method's declarations ``{key: spec}`` (copies)
    upload_kinds : {upload key: kind}
    holds_extractor : the server has the model the client's features come from (uploaded or broadcast)
    attacks : the names of :data:`ATTACKS` that apply, in the order of :data:`ATTACKS`
    """

    method: str
    upload: dict
    broadcast: dict
    reply: dict
    upload_kinds: dict
    holds_extractor: bool
    attacks: tuple[str, ...]

    def summary(self) -> str:
        """One line: the kinds uploaded (sorted), and whether the extractor is known."""
        kinds = sorted({k for k in self.upload_kinds.values() if k != "labels"}) or ["nothing"]
        return "+".join(kinds) + (" (extractor known)" if self.holds_extractor else "")


def _kinds(spec: Mapping[str, str]) -> set[str]:
    return {kind_of(k) for k in spec}


def what_server_holds(method: str) -> ServerView:
    """The :class:`ServerView` of a registered method, from its ``UPLOAD`` / ``BROADCAST`` / ``REPLY``.

    Rules (threat models in docs/privacy.md):
    - ``gradient_inversion``: a model goes up and a model comes down (the server knows where local
      training started, so the difference is the update);
    - ``feature_inversion``: feature statistics go up and the server holds the extractor;
    - ``decoder``: feature statistics go up (the decoder needs query access to the client's model:
      given when the extractor is held, an extra assumption otherwise, as in FedMPS Fig. 11);
    - ``imprint``: the broadcast carries a model the client trains from, and a model comes back (a crafted
      extractor for prototype uploads is not an attack here: docs/privacy.md, "Not covered");
    - ``label_inference``: a head or per-class labels/counts go up.
    """
    from fedlib.algorithms import ALGORITHMS

    if method not in ALGORITHMS:
        raise ConfigError("method", method, "one of " + ", ".join(sorted(ALGORITHMS)))
    cls = ALGORITHMS[method]
    up, down = _kinds(cls.UPLOAD), _kinds(cls.BROADCAST)
    model_up, model_down = "model" in up, "model" in down
    features_up = bool(up & set(FEATURE_KINDS))
    holds_extractor = model_up or model_down
    applies = {
        "gradient_inversion": model_up and model_down,
        "feature_inversion": features_up and holds_extractor,
        "decoder": features_up,
        "imprint": model_up and model_down,
        "label_inference": bool(up & {"head", "labels"}),
    }
    return ServerView(method, dict(cls.UPLOAD), dict(cls.BROADCAST), dict(cls.REPLY),
                      {k: kind_of(k) for k in cls.UPLOAD}, holds_extractor,
                      tuple(a for a in ATTACKS if applies[a]))


def holdings_table(methods: list[str] | None = None) -> pd.DataFrame:
    """One row per method (default: every registered one): what it uploads and which attacks apply."""
    from fedlib.algorithms import ALGORITHMS

    rows = []
    for m in sorted(ALGORITHMS) if methods is None else methods:
        v = what_server_holds(m)
        rows.append({"method": m, "server holds": v.summary(), "upload keys": ", ".join(v.upload) or "—",
                     **{a: a in v.attacks for a in ATTACKS}})
    return pd.DataFrame(rows).set_index("method")
