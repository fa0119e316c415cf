"""FedGKD: Yao et al., "FedGKD: Toward Heterogeneous Federated Learning via Global
Knowledge Distillation", IEEE Trans. Comput. 2024.

The server keeps the last ``buffer_length`` aggregated models and sends every client
two models: the current average (``w.<name>``, which the client trains from) and the
average of the buffer, the historical-ensemble teacher (``t.<name>``). The client
minimises CE + kd_coefficient * s * KL(softmax(t/T) || softmax(x/T)) (batch mean, teacher
logits t from the frozen teacher, T = ``gkd_temperature``). The server takes the plain,
unweighted parameter mean (FedMPS code, docs/fedmps.md). Inference: the average
model's head.

Down: ``w.*`` and, once a global model exists, ``t.*``: twice the model, as FedMPS
Table V counts (2,480,240 on CIFAR-10, N = 20). Up: as :mod:`fedavg`.

Defaults are the FedMPS code's (``--distillation_coefficient 0.1 --buffer_length 5
--gkd_temperature 1``). FedMPS uses lr 0.05 for FedGKD on RealWaste, CIFAR-10,
Fashion-MNIST and FEMNIST (Sec. IV-A): that is ``train.lr`` of the experiment config.

Choices:
- The teacher of round r is the mean of the averages produced after rounds
  r-buffer_length .. r-1 (the buffer gets each new average after aggregation; FedMPS
  code). Round 1 has no teacher and trains with CE only.
- The teacher runs in eval mode (both codes switch it to eval).
- ``code_kd_scale=False``: s = T^2, the usual distillation scaling (the FedGKD code
  multiplies by the square of the temperature that divides the logits). ``True``
  reproduces the FedMPS code, which multiplies by ``args.temperature**2`` = 0.5^2 =
  0.25, the MOON/FedProc contrastive temperature, not T (docs/fedmps.md, decision 25).
"""

from __future__ import annotations

import dataclasses

import torch.nn.functional as F

from fedlib.algorithms.registry import register
from fedlib.algorithms.base import mean_params
from fedlib.algorithms.fedavg import FedAvg
from fedlib.losses import kl_loss
from fedlib.validation import BOOL, Interval

CODE_KD_SCALE = 0.5 ** 2  # FedMPS code: args.temperature (default 0.5) squared


@register
@dataclasses.dataclass(frozen=True)
class FedGKD(FedAvg):
    kd_coefficient: float = 0.1     # FedMPS code --distillation_coefficient 0.1
    buffer_length: int = 5          # FedMPS code --buffer_length 5
    gkd_temperature: float = 1.0    # FedMPS code --gkd_temperature 1
    code_kd_scale: bool = False     # True: the FedMPS code's 0.25 factor (see module docstring)
    weighted: bool = False          # FedMPS code: unweighted parameter mean
    name = "fedgkd"
    CONSTRAINTS = {"kd_coefficient": Interval(0, None), "buffer_length": Interval(1, None, integer=True),
                   "gkd_temperature": Interval(0, None, low_open=True), "code_kd_scale": BOOL}
    BROADCAST = {"w.*": "float[...]", "t.*": "float[...]"}

    def init_server(self, ctx):
        return {**super().init_server(ctx), "buffer": [], "teacher": None}

    def broadcast(self, ctx, server, cid, rnd):
        msg = dict(server["weights"])
        if server["teacher"] is not None:
            msg.update({"t." + k[2:]: v for k, v in server["teacher"].items()})
        return msg

    def teachers(self, start, msg):
        if self.kd_coefficient > 0 and any(k.startswith("t.") for k in msg):
            return {"teacher": {**start, **{k[2:]: v for k, v in msg.items() if k.startswith("t.")}}}
        return {}

    def local_loss(self, out, y, extras, teachers, params):
        logits = out[0]
        loss = F.cross_entropy(logits, y)
        if "teacher" in teachers:
            T = self.gkd_temperature
            scale = CODE_KD_SCALE if self.code_kd_scale else T ** 2
            loss = loss + self.kd_coefficient * (scale * kl_loss(logits, teachers["teacher"][0], T, target_logits=True))
        return loss

    def aggregate(self, ctx, server, uploads, rnd):
        if not uploads:
            return server, {}
        avg = super().aggregate(ctx, server, uploads, rnd)[0]["weights"]
        buffer = (server["buffer"] + [avg])[-self.buffer_length:]
        return {"weights": avg, "buffer": buffer, "teacher": mean_params(buffer, avg)}, {}
