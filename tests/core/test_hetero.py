"""ProtoNorm's heterogeneous family: shapes, 512-d pooling, per-client architectures, prototype-only traffic."""

import pytest
import torch

from fedlib.algorithms import make_algorithm
from fedlib.data import FederatedData
from fedlib.data.partition import label_partition
from fedlib.engine import Simulator
from fedlib.models import build_model, member
from fedlib.models.hetero import HT0, HT0_LITE
from tests.conftest import make_ctx, tiny_image_dataset


# the full-size torchvision members take 0.2-0.6 s each to build on 2 cores: the fast loop (`make test-fast`) builds
# ResNet-8 and the lite family, `make test` every member
@pytest.mark.parametrize("arch", [a if a in HT0_LITE or a == "resnet8" else pytest.param(a, marks=pytest.mark.slow)
                                  for a in HT0 + HT0_LITE])
@pytest.mark.parametrize("shape", [(1, 28, 28), (3, 32, 32)])
def test_every_member_gives_512_d_features_for_grey_and_colour_images(arch, shape):
    torch.manual_seed(0)
    model = build_model(arch, shape, 10).eval()
    logits, feats = model(torch.randn(2, *shape))
    assert logits.shape == (2, 10) and feats["high"].shape == (2, 512)
    assert model.feature_dims == {"high": 512}
    small = build_model(arch, shape, 10, feature_dim=64).eval()
    assert small(torch.randn(2, *shape))[1]["high"].shape == (2, 64)


def test_resnet8_duplicates_its_256_channels_into_512():
    torch.manual_seed(0)
    h = build_model("resnet8", (1, 28, 28), 10).eval()(torch.randn(3, 1, 28, 28))[1]["high"]
    assert torch.equal(h[:, 0::2], h[:, 1::2])


@pytest.mark.slow
def test_family_assigns_architecture_i_mod_4():
    assert [member("ht0", c) for c in range(6)] == list(HT0) + list(HT0[:2])
    assert member("ht0", None) == "resnet8" and member("cnn_fmnist", 3) == "cnn_fmnist"
    ctx = make_ctx(model="ht0", num_classes=4, input_shape=(1, 8, 8))
    kinds = [type(ctx.new_model(c).base).__name__ for c in range(4)]
    assert kinds == ["Sequential", "Sequential", "ShuffleNetV2", "Sequential"]
    assert ctx.new_model(1).base[0].__class__.__name__ == "Sequential"  # MobileNetV2 features


def test_lite_family_has_four_distinct_architectures_of_decreasing_cost():
    assert [member("ht0_lite", c) for c in range(5)] == list(HT0_LITE) + [HT0_LITE[0]]
    from fedlib.models import count_parameters
    lite = [count_parameters(build_model(a, (1, 28, 28), 10)) for a in HT0_LITE]
    full = [count_parameters(build_model(a, (1, 28, 28), 10)) for a in HT0]
    assert len(set(lite)) == 4 and sum(lite) < sum(full) / 5
    assert lite == [82_378, 582_026, 346_490, 243_098]  # ResNet-4, FedAvgCNN, ShuffleNetV2 x0.5, MobileNetV2 x0.25


def test_fedavg_cnn_member_rejects_images_too_small_for_two_5x5_stages():
    from fedlib.validation import ConfigError
    with pytest.raises(ConfigError, match="at least 16x16"):
        build_model("fedavg_cnn_base", (1, 8, 8), 10)


@pytest.mark.slow
def test_heterogeneous_clients_share_only_prototypes():
    ds = tiny_image_dataset()
    part = label_partition("pathological", ds.y_train.numpy(), ds.y_test.numpy(), 4, num_clients=4,
                           classes_per_client=2, balance=True, seed=1, split="official")
    ctx = make_ctx(model="ht0", num_classes=4, input_shape=(1, 8, 8), batch_size=16)
    recs = Simulator(make_algorithm({"name": "protonorm", "gamma": 10.0}), ctx, FederatedData(ds, part),
                     rounds=2, progress=False).run()
    pairs = int((part.counts > 0).sum())
    assert recs[0]["up_params"] == recs[1]["up_params"] == pairs * 512
    assert recs[1]["down_params"] == 4 * 4 * 512  # every client receives the 4 aligned prototypes
