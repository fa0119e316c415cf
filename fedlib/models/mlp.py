"""Multi-layer perceptrons: MP-FedCL's MNIST MLP, its MLP head on encoder features, the spiral toy MLP."""

from __future__ import annotations

import math

import torch.nn as nn


class MLPMnist(nn.Module):
    """MP-FedCL's MNIST MLP 784-512-512-256-10 (798,474 parameters, MP-FedCL Table II).

    high = the 256-d ReLU output of the third layer (the prototype space: the encoder plus the
    MLP's first layers), head = Linear(256, C).
    """

    def __init__(self, input_shape=(1, 28, 28), num_classes=10):
        super().__init__()
        d_in = math.prod(input_shape)
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(d_in, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                                  nn.Linear(512, 256), nn.ReLU())
        self.head = nn.Linear(256, num_classes)
        self.feature_dims = {"high": 256}

    def forward(self, x):
        high = self.body(x)
        return self.head(high), {"high": high}


class MLPHead(nn.Module):
    """MP-FedCL's MLP on the 512-d output of a frozen encoder: Linear(512, 256) + ReLU (high, the prototype
    space), then Linear(256, C): 133,898 parameters for C = 10 (MP-FedCL Table II, Digit-5 / Office-10).
    The encoder is not part of the model: a feature-skew dataset (fedlib.data.domains) holds its outputs."""

    def __init__(self, input_shape=(512,), num_classes=10):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), 256), nn.ReLU())
        self.head = nn.Linear(256, num_classes)
        self.feature_dims = {"high": 256}

    def forward(self, x):
        high = self.body(x)
        return self.head(high), {"high": high}


class SpiralMLP(nn.Module):
    """5-layer MLP for ProtoNorm's spiral: 2 -> 8d -> 4d -> 2d -> d, then Linear(d, C).

    Widths follow FedNH's toy MLP (docs/protonorm.md, decision 21); d = 2 so the
    feature space can be drawn.
    """

    def __init__(self, input_shape=(2,), num_classes=6, feature_dim=2):
        super().__init__()
        d = feature_dim
        self.body = nn.Sequential(nn.Linear(math.prod(input_shape), 8 * d), nn.ReLU(), nn.Linear(8 * d, 4 * d),
                                  nn.ReLU(), nn.Linear(4 * d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))
        self.head = nn.Linear(d, num_classes)
        self.feature_dims = {"high": d}

    def forward(self, x):
        high = self.body(x)
        return self.head(high), {"high": high}
