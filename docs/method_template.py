"""A prototype method in one file, to copy and change (docs/your_method.md).

Each client trains cross-entropy plus lam x (1 - cosine similarity) between its features and the global prototype
of their class, then uploads its class means; the server averages them (the round is PrototypeMethod's, as FedProto's).
Run it against the benchmark: python -m fedlib.yours --method docs/method_template.py --profile smoke
"""

import dataclasses

import torch.nn.functional as F

from fedlib.algorithms.prototype_method import PrototypeMethod
from fedlib.validation import Interval


@dataclasses.dataclass(frozen=True)
class CosineProto(PrototypeMethod):
    lam: float = 1.0                          # weight of the prototype term
    CONSTRAINTS = {"lam": Interval(0, None)}  # every hyperparameter has one

    def regulariser(self, z, y, table, present):
        """The term added to cross-entropy: 1 - cos(feature, prototype of its class), over the samples whose class
        has a global prototype (``table`` (C, d), ``present`` (C,))."""
        has = present[y].float()
        cos = F.cosine_similarity(z, table[y], dim=1)
        return self.lam * ((1 - cos) * has).sum() / has.sum().clamp(min=1)
