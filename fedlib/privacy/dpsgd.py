"""Sample-level DP-SGD on a client's local steps, through Opacus.

Where the upload that leaks is the model (FedAvg's family: the update ``w_0 - w_E`` is what gradient
inversion and the imprint server read), the defence belongs inside local training. DP-SGD (Abadi,
Chu, Goodfellow, McMahan, Mironov, Talwar, Zhang, "Deep Learning with Differential Privacy", CCS 2016)
clips each sample's gradient to L2 norm ``clip`` and adds N(0, (sigma clip)^2) to their sum before the
step, so each step is a sampled Gaussian mechanism over one sample's contribution; the whole run's
(epsilon, delta) comes from Opacus's RDP accountant (:func:`fedlib.privacy.defense.sample_level_epsilon`).

How: Opacus's ``GradSampleModule`` hooks the model's layers (per-sample gradients in
``p.grad_sample``) and its ``DPOptimizer`` wraps the local SGD optimiser (clip, noise, mean, then the
usual SGD step with momentum). The hooks sit on the layers, so fedlib's loss functions call the model
as usual; they are removed when the local update ends (the scratch modules are reused).

A run config turns it on with ``defense: {mechanism: dp_sgd, clip_sample: C, noise_multiplier: sigma}``.

Limits, each checked where a config is read:
- **Methods** (:data:`DP_SGD_METHODS`): those whose upload is the model and whose local loss is a mean of
  per-sample terms on the model's outputs. Opacus's per-sample gradients come from the layers'
  activations and back-propagated outputs, so a loss term on the parameters themselves (FedProx's proximal
  term, weight regularisers) would be dropped silently, and a loss that couples the samples of a batch
  (contrastive losses) has no per-sample gradient. Methods that upload prototypes are not protected by
  DP-SGD at all (the prototypes are computed from the raw features after training); their defence is
  :func:`fedlib.privacy.defense.private_prototypes`.
- **Executor**: the sequential one (the batched executor's vmapped step has no per-sample hooks).
- **Models** without batch normalisation (``cnn_fmnist`` and the ht0 ResNets have it: a batch
  statistic mixes the samples), checked when local training starts.
- **Sampling (deviation)**: the batches are the run's usual shuffled fixed-size batches, not Poisson
  sampling; the accountant is given the rate q = batch / samples, the common approximation (Opacus's own
  tutorials train with shuffled batches too). Each step's noisy sum is divided by that step's batch size
  (a shorter last batch is not scaled down as Opacus's Poisson mode would).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Mapping

import numpy as np
import torch
import torch.nn as nn

from fedlib.validation import ConfigError

# This module imports nothing else of fedlib: the local training loop (fedlib.algorithms.loops) imports it.

DP_SGD_METHODS = ("fedavg", "fedper")
"""Methods DP-SGD applies to: the model goes up and the local loss is a per-sample mean (module docstring)."""

DP_SGD_FIELDS = ("mechanism", "clip_sample", "noise_multiplier")


def check_dp_sgd(spec: Mapping) -> dict:
    """A ``defense`` block with ``mechanism: dp_sgd``: exactly :data:`DP_SGD_FIELDS`, ``clip_sample`` in
    (0, inf), ``noise_multiplier`` in [0, inf); a one-line :class:`ConfigError` naming the field otherwise."""
    unknown = sorted(set(spec) - set(DP_SGD_FIELDS))
    missing = [k for k in DP_SGD_FIELDS if k not in spec]
    if unknown or missing:
        key = (unknown or missing)[0]
        raise ConfigError(f"defense.{key}", spec.get(key), "with mechanism dp_sgd exactly the keys "
                          + ", ".join(DP_SGD_FIELDS))
    for key, low in (("clip_sample", "(0"), ("noise_multiplier", "[0")):
        v = spec[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or (v == 0 and low == "(0"):
            raise ConfigError(f"defense.{key}", v, f"a number in {low}, inf)")
    return {"mechanism": "dp_sgd", "clip_sample": float(spec["clip_sample"]),
            "noise_multiplier": float(spec["noise_multiplier"])}


def check_dp_sgd_run(cfg: dict) -> None:
    """The run-level limits of DP-SGD (module docstring): a method of :data:`DP_SGD_METHODS` and the
    sequential executor; a one-line :class:`ConfigError` otherwise."""
    name = cfg["algorithm"]["name"]
    if name not in DP_SGD_METHODS:
        raise ConfigError("defense.mechanism", "dp_sgd", (
            f"a method whose upload is the model and whose loss is a per-sample mean ({', '.join(DP_SGD_METHODS)}); "
            f"{name} is not one: use the upload defence (clip_update, clip_features, noise_multiplier)"))
    if cfg.get("executor") != "sequential":
        raise ConfigError("executor", cfg.get("executor"), "sequential with defense.mechanism dp_sgd "
                          "(the batched step has no per-sample gradients)")


@contextlib.contextmanager
def private_steps(parts: list[tuple[nn.Module, float]], opts: list[torch.optim.Optimizer], clip: float,
                  noise_multiplier: float, generator: torch.Generator) -> Iterator[list[torch.optim.Optimizer]]:
    """``opts`` wrapped in Opacus's ``DPOptimizer`` for the duration of the block, with the per-sample hooks on
    the single trained module of ``parts``; the hooks and per-sample gradients are removed on exit. Before each
    step the caller sets ``expected_batch_size`` to the batch's size (see the module docstring)."""
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    if len(parts) != 1:
        raise ConfigError("defense.mechanism", "dp_sgd", f"a method with one trained module (got {len(parts)})")
    model = parts[0][0]
    norms = sorted({type(m).__name__ for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)})
    if norms:  # a batch statistic mixes the samples: no per-sample gradient exists
        raise ConfigError("defense.mechanism", "dp_sgd", f"a model without batch normalisation ({type(model).__name__} "
                          f"has {', '.join(norms)}, which mixes the samples of a batch; use another model)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Opacus warns that its RNG is not cryptographically secure
        try:
            hooked = GradSampleModule(model, loss_reduction="mean", strict=True)
        except NotImplementedError as err:  # a layer Opacus has no per-sample gradient for
            raise ConfigError("defense.mechanism", "dp_sgd", f"a model whose layers Opacus supports ({err})") from err
        private = [DPOptimizer(o, noise_multiplier=noise_multiplier, max_grad_norm=clip, expected_batch_size=1,
                               loss_reduction="mean", generator=generator) for o in opts]
    try:
        with warnings.catch_warnings():  # the hooks' "no inputs require gradients" note on the first layer
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            yield private
    finally:
        hooked._close()


def noise_generator(gen: torch.Generator, device) -> torch.Generator:
    """The noise's generator, seeded from the seed of the client's batch-order generator ``gen`` (which is the
    run's seed, round and client: each client and round gets its own noise, reproducibly). Nothing is drawn
    from ``gen``, so the batches are those of the same run without DP-SGD."""
    state = np.random.SeedSequence([gen.initial_seed(), 11]).generate_state(2, dtype=np.uint32)
    return torch.Generator(device=device).manual_seed(int(state[0]) << 31 | int(state[1]) >> 1)
