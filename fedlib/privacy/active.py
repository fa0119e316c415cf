"""An active server: a crafted broadcast model that makes the returned update reveal single images.

Threat model
------------
- **Attacker**: a malicious server that deviates from the protocol in one place only: the model it
  broadcasts. The client trains from it as usual and uploads the result (methods where
  :func:`fedlib.privacy.holds.what_server_holds` lists ``imprint``: a model goes down and comes back).
- **It holds** the broadcast it crafted, the returned weights, and auxiliary images of the same
  distribution (to place the bins).
- **It needs** a fully connected layer on the flattened image followed by a ReLU and a second fully
  connected layer (fedlib's MLPs: ``mlp_mnist`` has ``body.1`` then ``body.3``). Convolutional
  backbones would need an inserted module, which fedlib's protocol does not let the server send.
- **Goal**: exact copies of individual training images, however large the batch.

Method: the imprint ("binning") module of Fowl, Geiping, Czaja, Goldblum, Goldstein, "Robbing the
Fed", ICLR 2022. Every row i of the first layer measures the same statistic s(x) (mean pixel) with
bias -t_i, thresholds t_1 < ... < t_m at quantiles of s over the auxiliary data; every column of the
second layer is the same, so a sample's loss gradient dL/dh_i is the same value d_j for every row.
Then, over the samples j of the update,

    dL/dW_i = sum_j d_j [s(x_j) > t_i] x_j,        dL/db_i = sum_j d_j [s(x_j) > t_i],

and (dL/dW_i - dL/dW_{i+1}) / (dL/db_i - dL/db_{i+1}) is the single image with t_i < s <= t_{i+1}
(a mixture where two images share a bin). The ratio is scale-free, so the update (``w_0 - w_E``)
serves as the gradient; it is exact for one local step and degrades as later steps move the
crafted weights. Deviation: the thresholds are empirical quantiles of the auxiliary statistic
(the paper fits a Gaussian to it).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from fedlib.validation import ConfigError


def _linear(state: Mapping[str, torch.Tensor], name: str) -> tuple[torch.Tensor, torch.Tensor]:
    w, b = state.get(f"{name}.weight"), state.get(f"{name}.bias")
    if w is None or b is None or w.dim() != 2:
        raise ConfigError("layer", name, "the name of a Linear layer with a bias in the model's state_dict")
    return w, b


def craft_imprint(state: Mapping[str, torch.Tensor], aux_images: torch.Tensor, first: str = "body.1",
                  second: str = "body.3") -> dict:
    """A copy of ``state`` (a ``state_dict``) whose layers ``first`` / ``second`` form the imprint module.

    Parameters
    ----------
    state : the honest broadcast weights
    aux_images : Tensor, shape (n, C, H, W), the server's auxiliary images (normalised)
    first : the Linear layer on the flattened image, with m output rows (m bins)
    second : the next Linear layer (its input is the first layer's ReLU output)

    Returns
    -------
    dict, the crafted ``state_dict`` to broadcast
    """
    w1, b1 = _linear(state, first)
    w2, _ = _linear(state, second)
    m, d = w1.shape
    flat = torch.as_tensor(aux_images).flatten(1).float()
    if flat.shape[1] != d or len(flat) < 2:
        raise ConfigError("aux_images", tuple(aux_images.shape), f"at least 2 images of {d} pixels")
    s = flat.mean(1)
    thresholds = torch.quantile(s, torch.arange(m, dtype=torch.float32) / m)
    out = {k: v.clone() for k, v in state.items()}
    out[f"{first}.weight"] = torch.full_like(w1, 1.0 / d)
    out[f"{first}.bias"] = -thresholds.to(b1.dtype)
    out[f"{second}.weight"] = w2[:, :1].expand_as(w2).clone()
    return out


def recover_imprint(grads: Mapping[str, torch.Tensor], shape: tuple[int, ...], first: str = "body.1",
                    min_weight: float = 1e-8) -> torch.Tensor:
    """Images (r, C, H, W) read from the imprint layer's (pseudo-)gradient, one per non-empty bin.

    ``grads``: ``{parameter name: Tensor}`` (the update ``w_0 - w_E`` or the gradient; any positive
    scale). Bins whose bias-gradient difference is below ``min_weight`` times the largest hold no
    sample and are skipped.
    """
    gw, gb = _linear(grads, first)
    # Append a zero row: the last bin's samples are those above the last threshold.
    dw = gw - torch.cat([gw[1:], torch.zeros_like(gw[:1])])
    db = gb - torch.cat([gb[1:], torch.zeros_like(gb[:1])])
    keep = db.abs() > min_weight * db.abs().max().clamp_min(1e-30)
    return (dw[keep] / db[keep, None]).view(-1, *shape)
