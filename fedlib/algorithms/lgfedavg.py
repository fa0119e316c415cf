"""LG-FedAvg: Liang et al., "Think Locally, Act Globally: Federated Learning with Local and
Global Representations", arXiv 2001.01523 (2020), as run by HtFLlib (ProtoNorm Table 1 baseline;
notes protonorm.md §5, field.md §HtFLlib).

Clients keep their own feature extractors (of any architecture); only the classifier head
``model.head`` is shared, which every model of a family has in the same shape (Linear(d, C)).
Each round a client loads the global head, trains its whole model with cross-entropy, and
uploads its head; the server averages the heads weighted by the clients' sample counts
(HtFLlib's ``uploaded_weights``; ``weighted: false`` gives the plain mean) and sends the
result back. Inference: the client's own extractor with the global head.

Up: ``head.<j>.<param>`` (the head's parameters: j numbers the head's parametrised layers, so
``Linear`` and ``Sequential(Dropout, Linear)`` heads give the same names), ``num_samples``,
``train_loss``. Down: the averaged ``head.<j>.<param>``; nothing before the first aggregation
(round 1 trains every client's own initial head, as in HtFLlib). LG-FedAvg has no extra
hyperparameters (ProtoNorm Table 6).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F

from fedlib.algorithms import register
from fedlib.algorithms.base import Algorithm, Message, sgd_epochs, weighted_mean
from fedlib.validation import BOOL


def _head_params(model: nn.Module):
    """``(name, parameter)`` of ``model.head`` named by parametrised-layer index, not module path."""
    j = 0
    for mod in model.head.modules():
        own = list(mod.named_parameters(recurse=False))
        if own:
            for n, p in own:
                yield f"head.{j}.{n}", p
            j += 1


def head_message(model: nn.Module) -> Message:
    """The head's parameters under architecture-independent names."""
    return {k: p.detach().clone() for k, p in _head_params(model)}


def load_head_message(model: nn.Module, msg: Message) -> None:
    """Copy the ``head.*`` tensors of ``msg`` into ``model.head`` (missing keys untouched)."""
    with torch.no_grad():
        for k, p in _head_params(model):
            if k in msg:
                p.copy_(msg[k])


@dataclasses.dataclass
class LGFedAvgClient:
    model: object  # own extractor + (global) head


@dataclasses.dataclass
class LGFedAvgServer:
    head: dict  # {"head.<j>.<param>": Tensor}; empty before the first aggregation


@register
@dataclasses.dataclass(frozen=True)
class LGFedAvg(Algorithm):
    weighted: bool = True  # HtFLlib: heads weighted by client sample counts
    name = "lgfedavg"
    CONSTRAINTS = {"weighted": BOOL}

    def init_client(self, ctx, cid):
        return LGFedAvgClient(ctx.new_model(cid))

    def init_server(self, ctx):
        return LGFedAvgServer({})

    def broadcast(self, ctx, server, cid):
        return dict(server.head)

    def local_update(self, ctx, client, msg, data, gen):
        model = client.model
        load_head_message(model, msg)
        loss = sgd_epochs(ctx, model, data, gen, lambda xb, yb, epoch: F.cross_entropy(model(xb)[0], yb))
        up = head_message(model)
        up["num_samples"] = len(data)
        up["train_loss"] = loss
        return client, up

    def aggregate(self, ctx, server, uploads):
        msgs = list(uploads.values())
        if not msgs:
            return server
        keys = [k for k in msgs[0] if k.startswith("head.")]
        return LGFedAvgServer(weighted_mean(msgs, keys, self.weighted))

    def predict(self, ctx, client, msg, x):
        load_head_message(client.model, msg)
        client.model.eval()
        return {"head": client.model(x)[0]}
