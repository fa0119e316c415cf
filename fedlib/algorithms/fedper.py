"""FedPer: Arivazhagan, Aggarwal, Singh, Choudhary, "Federated Learning with Personalization Layers",
arXiv 1912.00818 (2019); a GFPL Table 1 baseline.

FedAvg on the base layers only: every client keeps its own classifier head (``model.head``, the
personalisation layers) and shares the rest. Each round a client loads the global base into its
model, trains the whole model with cross-entropy and uploads the base; the server averages the
bases (sample-count weights, ``weighted: false``: plain mean). Inference: the client's own head
on the global base (the model it would start the next round from).

Up: the base ``w.*`` (every parameter and float buffer outside ``head``) and ``num_samples``. Down:
the global base. One personalisation layer (the head Linear(d, C)) as in FedProto's comparison;
the paper's choice of how many top layers to keep personal is not a hyperparameter here.
"""

from __future__ import annotations

import dataclasses

from fedlib.algorithms.registry import register
from fedlib.algorithms.fedavg import FedAvg


def base_only(msg: dict) -> dict:
    """``msg`` without the head's tensors (keys ``w.head.*``)."""
    return {k: v for k, v in msg.items() if not k.startswith("w.head.")}


@register
@dataclasses.dataclass(frozen=True)
class FedPer(FedAvg):
    name = "fedper"

    def init_server(self, ctx):
        return {"weights": base_only(super().init_server(ctx)["weights"])}

    def upload(self, model, data) -> dict:
        return base_only(super().upload(model, data))
