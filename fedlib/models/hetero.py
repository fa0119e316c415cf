"""ProtoNorm's heterogeneous model family "Ht0" (docs/protonorm.md, the official code).

Client i gets ``HT0[i % 4]``: ResNet-8, MobileNetV2, ShuffleNetV2 x1.0, EfficientNet-B0,
all from scratch. Each backbone ends in global average pooling; as in HtFLlib's
``BaseHeadSplit``, its classifier is replaced by ``AdaptiveAvgPool1d(feature_dim)`` so every
client has the same feature size d (512 by default: ResNet-8's 256-d output is duplicated,
MobileNetV2/EfficientNet 1280 and ShuffleNetV2 1024 are average-pooled, not projected), and
the head is ``Linear(d, C)`` (EfficientNet: Dropout(0.2) + Linear). The first convolution
takes the dataset's channel count, so grey 28x28 images work (torchvision's stems expect
RGB; this is the only change to the published architectures).

``ht0_lite`` is a CPU-sized stand-in with the same four architecture kinds and the same
512-d pooled features: ResNet-4 (HtFLlib's one-block ResNet), the 4-layer FedAvgCNN (the
paper's homogeneous "4-layer CNN", its 512-d fc1 output as the base), ShuffleNetV2 x0.5 and
MobileNetV2 at width 0.25. One 32-image SGD step costs about a quarter of Ht0's on one CPU
core (28x28 grey inputs; ``python -m fedlib.bench --models`` prints the figures). It is a
deviation the quick profile names; the paper profile uses ``ht0``.
"""

from __future__ import annotations

import torch.nn as nn

from fedlib.validation import ConfigError

HT0 = ("resnet8", "mobilenet_v2", "shufflenet_v2", "efficientnet_b0")
HT0_LITE = ("resnet4", "fedavg_cnn_base", "shufflenet_v2_x0_5", "mobilenet_v2_w025")


class HeadSplit(nn.Module):
    """base (n, base_dim) -> AdaptiveAvgPool1d(feature_dim) -> features "high" -> head."""

    def __init__(self, base: nn.Module, feature_dim: int, num_classes: int, head_dropout: float = 0.0):
        super().__init__()
        self.base = base
        self.pool = nn.AdaptiveAvgPool1d(feature_dim)
        linear = nn.Linear(feature_dim, num_classes)
        self.head = nn.Sequential(nn.Dropout(head_dropout), linear) if head_dropout else linear
        self.feature_dims = {"high": feature_dim}

    def forward(self, x):
        h = self.pool(self.base(x).unsqueeze(1)).squeeze(1)
        return self.head(h), {"high": h}


def _check(input_shape, name):
    if len(input_shape) != 3:
        raise ConfigError("model.name", name, f"a model for inputs (C, H, W); this dataset gives {tuple(input_shape)}")
    return input_shape[0]


def _resnet8(c):
    """HtFLlib ResNet-8: ImageNet stem (7x7/2 conv + max-pool), one BasicBlock per stage, 64/128/256."""
    from torchvision.models.resnet import BasicBlock

    def block(cin, cout, stride):
        down = None
        if stride != 1 or cin != cout:
            down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        return BasicBlock(cin, cout, stride, down)

    return nn.Sequential(
        nn.Conv2d(c, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1),
        block(64, 64, 1), block(64, 128, 2), block(128, 256, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten())


def _resnet4(c):
    """HtFLlib ResNet-4: the ResNet-8 stem and a single 64-channel BasicBlock."""
    from torchvision.models.resnet import BasicBlock

    return nn.Sequential(
        nn.Conv2d(c, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1),
        BasicBlock(64, 64, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten())


def _fedavg_cnn_base(c, hw=(28, 28)):
    """FedAvgCNN up to its 512-d fc1 + ReLU (two 5x5 conv + max-pool stages)."""
    h, w = ((hw[0] - 4) // 2 - 4) // 2, ((hw[1] - 4) // 2 - 4) // 2
    return nn.Sequential(nn.Conv2d(c, 32, 5), nn.ReLU(inplace=True), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 5), nn.ReLU(inplace=True), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(64 * h * w, 512), nn.ReLU(inplace=True))


def _first_conv(conv: nn.Conv2d, c: int) -> nn.Conv2d:
    if conv.in_channels == c:
        return conv
    return nn.Conv2d(c, conv.out_channels, conv.kernel_size, conv.stride, conv.padding, bias=conv.bias is not None)


def _mobilenet_v2(c):
    from torchvision.models import mobilenet_v2

    m = mobilenet_v2(weights=None)
    m.features[0][0] = _first_conv(m.features[0][0], c)
    return nn.Sequential(m.features, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2))


def _shufflenet_v2(c):
    from torchvision.models import shufflenet_v2_x1_0

    m = shufflenet_v2_x1_0(weights=None)
    m.conv1[0] = _first_conv(m.conv1[0], c)
    m.fc = nn.Identity()  # its forward ends with a global mean over H, W
    return m


def _shufflenet_v2_x0_5(c):
    from torchvision.models import shufflenet_v2_x0_5

    m = shufflenet_v2_x0_5(weights=None)
    m.conv1[0] = _first_conv(m.conv1[0], c)
    m.fc = nn.Identity()
    return m


def _mobilenet_v2_w025(c):
    from torchvision.models import mobilenet_v2

    m = mobilenet_v2(weights=None, width_mult=0.25)
    m.features[0][0] = _first_conv(m.features[0][0], c)
    return nn.Sequential(m.features, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2))


def _efficientnet_b0(c):
    from torchvision.models import efficientnet_b0

    m = efficientnet_b0(weights=None)
    m.features[0][0] = _first_conv(m.features[0][0], c)
    return nn.Sequential(m.features, nn.AdaptiveAvgPool2d(1), nn.Flatten())


BUILDERS = {"resnet8": _resnet8, "mobilenet_v2": _mobilenet_v2, "shufflenet_v2": _shufflenet_v2,
            "efficientnet_b0": _efficientnet_b0, "resnet4": _resnet4, "fedavg_cnn_base": _fedavg_cnn_base,
            "shufflenet_v2_x0_5": _shufflenet_v2_x0_5, "mobilenet_v2_w025": _mobilenet_v2_w025}


def hetero_model(arch: str, input_shape=(3, 32, 32), num_classes: int = 10, feature_dim: int = 512) -> HeadSplit:
    c = _check(input_shape, arch)
    dropout = 0.2 if arch == "efficientnet_b0" else 0.0
    if arch == "fedavg_cnn_base":
        if min(input_shape[1:]) < 16:
            raise ConfigError("model.name", arch, f"inputs of at least 16x16 pixels; got {tuple(input_shape)}")
        base = _fedavg_cnn_base(c, tuple(input_shape[1:]))
    else:
        base = BUILDERS[arch](c)
    return HeadSplit(base, feature_dim, num_classes, head_dropout=dropout)


def _named(arch):
    def build(input_shape=(3, 32, 32), num_classes=10, feature_dim=512):
        return hetero_model(arch, input_shape, num_classes, feature_dim)
    build.__name__ = arch
    return build


MODELS = {arch: _named(arch) for arch in HT0 + HT0_LITE}
FAMILIES = {"ht0": HT0, "ht0_lite": HT0_LITE}
