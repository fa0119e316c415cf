"""Convolutional backbones of FedProto/FedMPS, MOON and PFLlib."""

from __future__ import annotations


import torch.nn as nn
import torch.nn.functional as F

from fedlib.validation import ConfigError


def _require(shape, name):
    if len(shape) != 3:
        raise ConfigError("model.name", name, f"a model for inputs (C, H, W); this dataset gives {tuple(shape)}")


class CNNFashion(nn.Module):
    """FedProto's ``CNNFashion_Mnist`` as FedMPS uses it (docs/fedmps.md).

    low  = L2-normalised flatten of conv1 block (16x14x14 = 3136-d),
    high = L2-normalised flatten of conv2 block (32x7x7 = 1568-d), fed to the head,
    head = Linear(1568, C). The forward path continues on the un-normalised low tensor.
    """

    def __init__(self, input_shape=(1, 28, 28), num_classes=10):
        super().__init__()
        _require(input_shape, "cnn_fmnist")
        c, h, w = input_shape
        self.layer1 = nn.Sequential(nn.Conv2d(c, 16, 5, padding=2), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2))
        self.layer2 = nn.Sequential(nn.Conv2d(16, 32, 5, padding=2), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2))
        d_low, d_high = 16 * (h // 2) * (w // 2), 32 * (h // 4) * (w // 4)
        self.feature_dims = {"low": d_low, "high": d_high}
        self.head = nn.Linear(d_high, num_classes)

    def forward(self, x):
        a = self.layer1(x)
        low = F.normalize(a.flatten(1), dim=1)
        high = F.normalize(self.layer2(a).flatten(1), dim=1)
        return self.head(high), {"low": low, "high": high}


class CNNMnist(nn.Module):
    """FedProto's ``CNNMnist`` (the GFPL extractor for MNIST-sized inputs, d = 50): 21,840
    parameters for C = 10.

    conv(1->10, 5) -> max-pool 2 -> ReLU -> conv(10->20, 5) -> channel dropout -> max-pool 2 -> ReLU,
    low = that flatten (320-d), high = ReLU(Linear(320, feature_dim)) (50-d, post-ReLU, not
    normalised), head = Dropout(0.5) + Linear(feature_dim, C).
    """

    def __init__(self, input_shape=(1, 28, 28), num_classes=10, feature_dim=50):
        super().__init__()
        _require(input_shape, "cnn_mnist")
        c, h, w = input_shape
        self.conv1 = nn.Conv2d(c, 10, 5)
        self.conv2 = nn.Conv2d(10, 20, 5)
        self.drop2d = nn.Dropout2d()
        d_low = 20 * (((h - 4) // 2 - 4) // 2) * (((w - 4) // 2 - 4) // 2)
        self.fc1 = nn.Linear(d_low, feature_dim)
        self.feature_dims = {"low": d_low, "high": feature_dim}
        self.head = nn.Sequential(nn.Dropout(0.5), nn.Linear(feature_dim, num_classes))

    def forward(self, x):
        a = F.relu(F.max_pool2d(self.conv1(x), 2))
        low = F.relu(F.max_pool2d(self.drop2d(self.conv2(a)), 2)).flatten(1)
        high = F.relu(self.fc1(low))
        return self.head(high), {"low": low, "high": high}


class CNNCifar(nn.Module):
    """LeNet-style CNN of MOON/FedMPS (docs/fedmps.md): 62,006 parameters for C = 10.

    low = L2-normalised 16x5x5 flatten (400-d, side branch), high = L2-normalised
    ReLU(fc0) (120-d), head = fc1 (120->84) + ReLU + fc2 (84->C) applied to high.
    """

    def __init__(self, input_shape=(3, 32, 32), num_classes=10):
        super().__init__()
        _require(input_shape, "cnn_cifar")
        c, h, w = input_shape
        self.conv1 = nn.Conv2d(c, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        side = ((h - 4) // 2 - 4) // 2
        d_low = 16 * side * side
        self.fc0 = nn.Linear(d_low, 120)
        self.head = nn.Sequential(nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, num_classes))
        self.feature_dims = {"low": d_low, "high": 120}

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2).flatten(1)
        low = F.normalize(x, dim=1)
        high = F.normalize(F.relu(self.fc0(x)), dim=1)
        return self.head(high), {"low": low, "high": high}


class FedAvgCNN(nn.Module):
    """PFLlib's 4-layer ``FedAvgCNN``: two 5x5 conv + pool blocks, fc to 512, head fc 512->C.

    The flatten is 1024-d for 28x28 inputs and 1600-d for 32x32. high = the 512-d
    ReLU output of the fc layer (un-normalised, as in PFLlib/HtFLlib).
    """

    def __init__(self, input_shape=(1, 28, 28), num_classes=10, feature_dim=512):
        super().__init__()
        _require(input_shape, "fedavg_cnn")
        c, h, w = input_shape
        self.conv1 = nn.Sequential(nn.Conv2d(c, 32, 5), nn.ReLU(), nn.MaxPool2d(2))
        self.conv2 = nn.Sequential(nn.Conv2d(32, 64, 5), nn.ReLU(), nn.MaxPool2d(2))
        side_h, side_w = ((h - 4) // 2 - 4) // 2, ((w - 4) // 2 - 4) // 2
        self.flat_dim = 64 * side_h * side_w
        self.fc1 = nn.Sequential(nn.Linear(self.flat_dim, feature_dim), nn.ReLU())
        self.head = nn.Linear(feature_dim, num_classes)
        self.feature_dims = {"high": feature_dim}

    def forward(self, x):
        high = self.fc1(self.conv2(self.conv1(x)).flatten(1))
        return self.head(high), {"high": high}


