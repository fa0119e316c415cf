"""A defence with its price: clipping + Gaussian noise on uploads, and the (epsilon, delta) it buys.

Two mechanisms, one per kind of upload that leaks:
- :func:`private_prototypes`: per-sample features clipped to L2 norm ``clip`` before the class
  sums, Gaussian noise N(0, (sigma clip)^2) added to each class sum, then divided by the class
  count. Adding or removing one sample changes one class sum by at most ``clip`` (L2), so each
  upload is the sampled Gaussian mechanism with noise multiplier sigma on that sum. The counts are
  sent in the clear (as the methods' ``counts`` key declares) and are not protected.
- :func:`private_update`: the client's whole update w_0 - w_E clipped to L2 norm ``clip`` and
  N(0, (sigma clip)^2) added per coordinate: DP-FedAvg's client-level mechanism (McMahan, Ramage,
  Talwar, Zhang, ICLR 2018, Alg. 1), where the unit of privacy is the client's whole data. Sample-level
  DP-SGD on the local steps is :mod:`fedlib.privacy.dpsgd` (``defense: {mechanism: dp_sgd, ...}``).

Accounting: :func:`epsilon` composes ``steps`` releases of the sampled Gaussian mechanism with
Poisson sampling rate q through Opacus's RDP accountant (Mironov, CSF 2017; Mironov, Talwar, Zhang,
arXiv:1908.10530 for the sampled case) and converts to (epsilon, delta). For prototypes a release is
one upload (q = the client's participation rate if clients are sampled, else 1; steps = rounds); for
client-level DP-FedAvg q = clients per round / clients and steps = rounds.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from fedlib.prototypes import class_means
from fedlib.privacy.inversion import check_positive
from fedlib.validation import ConfigError


def _check_nonnegative(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigError(name, value, "a number in [0, inf)")


def clip_rows(x: torch.Tensor, clip: float) -> torch.Tensor:
    """Each row of ``x`` (n, d) scaled down to L2 norm at most ``clip`` (rows inside are unchanged)."""
    check_positive("clip", clip, integer=False)
    norms = x.norm(dim=1, keepdim=True)
    return x * (clip / norms.clamp_min(clip))


def private_prototypes(features: torch.Tensor, labels: torch.Tensor, num_classes: int, clip: float,
                       noise_multiplier: float, generator: torch.Generator | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Noisy class means ``(means (C, d), counts (C,))`` of per-sample clipped ``features`` (module docstring).

    Classes without samples get zero rows (their noise is not released: ``counts`` is 0).
    """
    _check_nonnegative("noise_multiplier", noise_multiplier)
    clipped = clip_rows(features.float(), clip)
    means, counts = class_means(clipped, labels, num_classes)
    sums = means * counts[:, None]
    noise = torch.randn(sums.shape, generator=generator) * (noise_multiplier * clip)
    present = counts > 0
    noisy = torch.where(present[:, None], (sums + noise) / counts.clamp_min(1)[:, None], torch.zeros_like(sums))
    return noisy, counts


def private_update(broadcast: Mapping[str, torch.Tensor], upload: Mapping[str, torch.Tensor], clip: float,
                   noise_multiplier: float, generator: torch.Generator | None = None,
                   prefix: str = "w.") -> dict:
    """The upload with its model part replaced by ``w_0 - clip_C(w_0 - w_E) - N(0, (sigma C)^2)`` (DP-FedAvg).

    The clipping norm is over every float tensor under ``prefix`` together; other keys pass unchanged.
    """
    check_positive("clip", clip, integer=False)
    _check_nonnegative("noise_multiplier", noise_multiplier)
    names = [k for k in upload if k.startswith(prefix) and upload[k].is_floating_point()]
    delta = {k: broadcast[k] - upload[k] for k in names}
    norm = torch.sqrt(sum(d.double().pow(2).sum() for d in delta.values()))
    scale = float(min(1.0, clip / max(float(norm), 1e-30)))
    out = dict(upload)
    for k in names:
        noise = torch.randn(delta[k].shape, generator=generator) * (noise_multiplier * clip)
        out[k] = broadcast[k] - (delta[k] * scale + noise.to(delta[k].dtype))
    return out


def epsilon(noise_multiplier: float, steps: int, sample_rate: float, delta: float) -> float:
    """(epsilon, delta)-DP of ``steps`` sampled Gaussian releases: Opacus's RDP accountant.

    Opacus's own check (its accountants test): noise 1.5, rate 0.04, 2,250 steps, delta 1e-5 ->
    epsilon 7.3291. ``noise_multiplier = 0`` gives ``inf``.
    """
    from opacus.accountants import RDPAccountant

    _check_nonnegative("noise_multiplier", noise_multiplier)
    check_positive("steps", steps)
    if not 0 < sample_rate <= 1:
        raise ConfigError("sample_rate", sample_rate, "a number in (0, 1]")
    if not 0 < delta < 1:
        raise ConfigError("delta", delta, "a number in (0, 1)")
    if noise_multiplier == 0:
        return float("inf")
    acc = RDPAccountant()
    for _ in range(steps):  # the accountant merges identical consecutive steps into one history entry
        acc.step(noise_multiplier=float(noise_multiplier), sample_rate=float(sample_rate))
    return float(acc.get_epsilon(delta=delta))


def sample_level_epsilon(noise_multiplier: float, samples: int, batch_size: int, steps_per_round: int,
                         rounds: int, delta: float) -> float:
    """(epsilon, delta) of one client's data after ``rounds`` rounds of DP-SGD (:mod:`fedlib.privacy.dpsgd`):
    ``rounds x steps_per_round`` sampled Gaussian steps at rate ``min(1, batch_size / samples)``, Opacus's RDP
    accountant (:func:`epsilon`)."""
    return epsilon(noise_multiplier, rounds * steps_per_round, min(1.0, batch_size / samples), delta)


def noise_for_epsilon(target_epsilon: float, steps: int, sample_rate: float, delta: float) -> float:
    """The smallest noise multiplier whose :func:`epsilon` is at most ``target_epsilon`` (Opacus's search)."""
    from opacus.accountants.utils import get_noise_multiplier

    check_positive("target_epsilon", target_epsilon, integer=False)
    check_positive("steps", steps)
    return float(get_noise_multiplier(target_epsilon=target_epsilon, target_delta=delta, sample_rate=sample_rate,
                                      steps=steps, accountant="rdp"))


# -- the defence inside a run: every upload of a method, by kind ----------------------------------------------
DEFENSE_FIELDS = ("clip_update", "clip_features", "noise_multiplier")


def check_defense(spec) -> dict:
    """A run config's ``defense`` block: the upload defence ``{clip_update, clip_features, noise_multiplier}``,
    each a number (the clips in (0, inf), the noise multiplier in [0, inf)), or DP-SGD
    ``{mechanism: dp_sgd, clip_sample, noise_multiplier}`` (:func:`fedlib.privacy.dpsgd.check_dp_sgd`); a
    one-line :class:`ConfigError` otherwise."""
    if not isinstance(spec, Mapping):
        raise ConfigError("defense", spec, "a mapping of " + ", ".join(DEFENSE_FIELDS))
    mechanism = spec.get("mechanism", "upload")
    if mechanism == "dp_sgd":  # sample-level DP-SGD inside local training (fedlib.privacy.dpsgd)
        from fedlib.privacy.dpsgd import check_dp_sgd

        return check_dp_sgd(spec)
    if mechanism != "upload":
        raise ConfigError("defense.mechanism", mechanism, "upload (the default: clip + noise on every upload) "
                          "or dp_sgd (per-sample clipping + noise in local training)")
    spec = {k: v for k, v in spec.items() if k != "mechanism"}
    unknown = sorted(set(spec) - set(DEFENSE_FIELDS))
    missing = [k for k in DEFENSE_FIELDS if k not in spec]
    if unknown or missing:
        raise ConfigError(f"defense.{(unknown or missing)[0]}", spec.get((unknown or missing)[0]),
                          "exactly the keys " + ", ".join(DEFENSE_FIELDS))
    for key in ("clip_update", "clip_features"):
        check_positive(f"defense.{key}", spec[key], integer=False)
    _check_nonnegative("defense.noise_multiplier", spec["noise_multiplier"])
    return {k: float(spec[k]) for k in DEFENSE_FIELDS}


def model_keys(broadcast: Mapping, upload: Mapping) -> list[str]:
    """The upload's model-space tensors that start from a broadcast tensor of the same shape: their difference
    is the client's update (:func:`fedlib.privacy.holds.kind_of` ``model`` or ``head``)."""
    from fedlib.privacy.holds import kind_of

    def kind(key):
        return kind_of(key.split(".", 1)[0] + ".*") if "." in key else kind_of(key)

    return [k for k, v in upload.items() if torch.is_tensor(v) and v.is_floating_point()
            and kind(k) in ("model", "head") and k in broadcast and torch.is_tensor(broadcast[k])
            and broadcast[k].shape == v.shape]


def feature_keys(upload: Mapping) -> list[str]:
    """The upload's feature statistics (kinds ``prototypes``, ``mixture`` means, ``feature_stats``): float
    tensors of at least two dimensions whose last dimension is the feature (mixture ``vars`` and ``weights`` are
    left as they are: the means are what an attack inverts)."""
    from fedlib.privacy.holds import FEATURE_KINDS, kind_of

    return [k for k, v in upload.items() if torch.is_tensor(v) and v.is_floating_point() and v.dim() >= 2
            and kind_of(k) in FEATURE_KINDS and k not in ("vars", "weights")]


def defend_upload(broadcast: Mapping, upload: Mapping, spec: Mapping, generator: torch.Generator | None = None
                  ) -> dict:
    """``upload`` under the defence ``spec`` (:func:`check_defense`): the model update clipped as a whole to
    ``clip_update`` with N(0, (sigma clip_update)^2) per coordinate (:func:`private_update`), and every row of
    every feature statistic clipped to ``clip_features`` with N(0, (sigma clip_features)^2) per coordinate.
    Counts, classes and other keys pass unchanged. With sigma = 0 only the clipping acts."""
    spec = check_defense(spec)
    sigma = spec["noise_multiplier"]
    out = dict(upload)
    names = model_keys(broadcast, upload)
    if names:
        defended = private_update({k: broadcast[k] for k in names}, {k: upload[k] for k in names},
                                  spec["clip_update"], sigma, generator, prefix="")
        out.update(defended)
    c = spec["clip_features"]
    for k in feature_keys(upload):
        v = upload[k]
        rows = clip_rows(v.reshape(-1, v.shape[-1]).float(), c)
        rows = rows + torch.randn(rows.shape, generator=generator) * (sigma * c)
        out[k] = rows.reshape(v.shape).to(v.dtype)
    return out


def upload_defense(spec) -> bool:
    """Whether a checked ``defense`` block acts on the uploads (:class:`DefendedClients`) rather than inside
    local training (DP-SGD)."""
    return bool(spec) and spec.get("mechanism", "upload") == "upload"


class DefendedClients:
    """A cohort (:class:`fedlib.engine.LocalClients`) whose uploads leave through :func:`defend_upload`: the
    engine's ``clients`` for a run config with a ``defense`` block. The noise of client i in round r is drawn
    from its own seed, so a run is reproducible and independent of the client order."""

    def __init__(self, inner, spec: Mapping, seed: int):
        self.inner, self.spec, self.seed = inner, check_defense(spec), seed

    def __getattr__(self, name):  # num_clients, seconds, init_states, states, receive, evaluate
        return getattr(self.inner, name)

    def train(self, clients: dict, msgs: dict, rnd) -> dict:
        from fedlib.algorithms.base import derive_seed

        out = self.inner.train(clients, msgs, rnd)
        for cid, (up, metrics) in out.items():
            gen = torch.Generator().manual_seed(derive_seed(self.seed, 7, rnd.index, cid))
            out[cid] = (defend_upload(msgs[cid], up, self.spec, gen), metrics)
        return out
