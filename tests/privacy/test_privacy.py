"""Prototype inversion attack (FedMPS Fig. 11), PSNR/SSIM and references."""

import math

import matplotlib
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedlib.models import build_model
from fedlib.privacy import (
    InversionDecoder,
    attack_figure,
    class_average_reference,
    class_mean_images,
    model_query,
    prototype_attack,
    psnr_ssim,
    reconstruct,
    scores_against_class,
    single_sample_reference,
    to_unit_range,
    train_inversion,
)
from fedlib.prototypes import class_means
from fedlib.validation import ConfigError

matplotlib.use("Agg")

MEAN, STD = 0.5, 0.25


def toy_images(n, num_classes=4, seed=0):
    """8x8 images in [0, 1] on a 3-d manifold: a class pattern, a brightness and a contrast.

    Returned normalised with MEAN/STD, like a fedlib dataset.
    """
    g = torch.Generator().manual_seed(seed)
    grid = torch.linspace(0, 1, 8)
    yy, xx = torch.meshgrid(grid, grid, indexing="ij")
    patterns = torch.stack([xx, yy, (xx + yy) / 2, ((xx - 0.5) ** 2 + (yy - 0.5) ** 2) * 2])[:num_classes]
    y = torch.arange(n) % num_classes
    bright = 0.2 * torch.rand(n, 1, 1, generator=g)
    contrast = 0.5 + 0.5 * torch.rand(n, 1, 1, generator=g)
    x = (bright + contrast * patterns[y]).clamp(0, 1).unsqueeze(1)
    return (x - MEAN) / STD, y


# Identity-like opaque box: "low" is the image itself, "high" an L2-normalised projection.
PROJ = torch.randn(64, 16, generator=torch.Generator().manual_seed(1))


def identity_query(x):
    flat = x.flatten(1)
    return {"low": flat, "high": F.normalize(flat @ PROJ, dim=1)}


# ----------------------------------------------------------------------------- metrics

def test_identical_images_give_inf_psnr_and_ssim_one():
    x, _ = toy_images(3)
    s = psnr_ssim(x, x.clone(), MEAN, STD)
    assert len(s) == 3
    assert (s.psnr == math.inf).all()
    assert s.ssim.tolist() == pytest.approx([1.0, 1.0, 1.0])


@pytest.mark.parametrize("shape", [(12, 28, 28, 1), (6, 32, 32, 3), (5, 8, 8, 1), (4, 5, 5, 2)])
def test_batched_scores_equal_scikit_image_bit_for_bit(shape):
    # the batched SSIM / PSNR replace a scikit-image call per image pair: the same numbers, to the last bit,
    # for every window size the image side allows (7, 7, 7, 5) and for several channels
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    from fedlib.privacy.metrics import psnr_batch, ssim_batch

    rng = np.random.default_rng(1)
    a = rng.random(shape)
    b = np.clip(a + rng.normal(0, 0.2, shape), 0, 1)
    b[0] = a[0]                                           # one identical pair: SSIM 1, PSNR inf
    win = 7 if shape[1] >= 7 else 5
    pairs = list(zip(a, b, strict=True))
    want = [structural_similarity(x, y, data_range=1.0, channel_axis=-1, win_size=win) for x, y in pairs]
    assert ssim_batch(a, b).tolist() == want
    with np.errstate(divide="ignore"):
        assert psnr_batch(a, b).tolist() == [peak_signal_noise_ratio(y, x, data_range=1.0) for x, y in pairs]


def test_known_mse_gives_known_psnr_and_ssim_of_constants():
    # Prepare: pixels 0.5 and 0.6 after de-normalisation -> MSE = 0.01
    a = torch.zeros(2, 1, 8, 8)                   # (0.5 - 0.5) / 0.25
    b = torch.full((2, 1, 8, 8), 0.4)             # (0.6 - 0.5) / 0.25
    # Execute
    s = psnr_ssim(a, b, MEAN, STD)
    # Assert: PSNR = 10 log10(1 / MSE); SSIM of constant images is the luminance term only
    assert s.psnr.tolist() == pytest.approx([20.0, 20.0], abs=1e-6)
    c1 = 0.01 ** 2
    assert s.ssim.tolist() == pytest.approx([(2 * 0.5 * 0.6 + c1) / (0.5 ** 2 + 0.6 ** 2 + c1)] * 2, abs=1e-6)
    assert s.mean().psnr == pytest.approx(20.0)


def test_to_unit_range_per_channel_and_clipping():
    x = torch.tensor([1.0, -10.0, 10.0]).view(1, 3, 1, 1).expand(1, 3, 2, 2)
    u = to_unit_range(x, mean=(0.5, 0.5, 0.5), std=(0.1, 0.2, 0.3))
    assert u.shape == (1, 2, 2, 3)
    assert u[0, 0, 0].tolist() == pytest.approx([0.6, 0.0, 1.0])
    with pytest.raises(ConfigError, match=r"std: got \(0\.1, 0\.2\); allowed: one number or 3 numbers"):
        to_unit_range(x, mean=0.5, std=(0.1, 0.2))


def test_scores_against_class_mean_and_best():
    # Class 0 has two images at pixel 0.5 and 0.6; the reconstruction equals the first.
    x = torch.stack([torch.zeros(1, 8, 8), torch.full((1, 8, 8), 0.4), torch.zeros(1, 8, 8)])
    y = torch.tensor([0, 0, 1])
    rec = torch.zeros(2, 1, 8, 8)
    s = scores_against_class(rec, torch.tensor([0, 1]), x, y, MEAN, STD)
    assert s["class"].tolist() == [0, 1] and s.n.tolist() == [2, 1]
    assert s.psnr_best[0] == math.inf and s.ssim_best[0] == pytest.approx(1.0)
    assert s.ssim[0] < 1.0
    with pytest.raises(ConfigError, match="classes: got 7"):
        scores_against_class(rec[:1], torch.tensor([7]), x, y, MEAN, STD)


def test_class_mean_images_by_hand_and_missing_class():
    x = torch.tensor([1.0, 3.0, 5.0, 10.0]).view(4, 1, 1, 1).expand(4, 1, 3, 3)
    y = torch.tensor([0, 0, 2, 2])
    m = class_mean_images(x, y, torch.tensor([2, 0]))
    assert m.shape == (2, 1, 3, 3)
    assert m[:, 0, 0, 0].tolist() == [7.5, 2.0]
    with pytest.raises(ConfigError, match=r"aux_y: got \[1\]; allowed: auxiliary data holding every attacked class"):
        class_mean_images(x, y, torch.tensor([1]))


# ----------------------------------------------------------------------------- attack

@pytest.mark.slow
def test_decoder_loss_decreases_on_learnable_mapping():
    x, _ = toy_images(256)
    r = train_inversion(identity_query, x, ("low",), steps=100, batch_size=32, lr=3e-3, seed=0, progress=False)
    assert r.loss_curve.shape == (100,)
    assert r.feature_dims == {"low": 64}
    assert r.loss_curve[-20:].mean() < 0.1 * r.loss_curve[:20].mean()


@pytest.mark.slow
def test_same_seed_same_reconstructions_different_seed_differs():
    x, y = toy_images(128)
    protos = {lv: class_means(f, y, 4)[0] for lv, f in identity_query(x).items()}

    def run(seed):
        r = train_inversion(identity_query, x, ("low", "high"), steps=20, batch_size=16, seed=seed, progress=False)
        return r, reconstruct(r, protos)

    (r1, a), (r2, b), (_, c) = run(3), run(3), run(4)
    assert a.shape == (4, 1, 8, 8)
    assert torch.equal(a, b)
    assert (r1.loss_curve == r2.loss_curve).all()
    assert not torch.equal(a, c)


@pytest.mark.slow
def test_attack_recovers_single_samples_and_class_means_far_better_than_noise():
    # Prepare: attacker's auxiliary data and a disjoint client, same distribution
    aux_x, _ = toy_images(512, seed=0)
    client_x, client_y = toy_images(64, seed=1)
    r = train_inversion(identity_query, aux_x, ("low", "high"), steps=150, batch_size=32, lr=3e-3, seed=0,
                        progress=False)
    # Execute
    single = single_sample_reference(r, identity_query, client_x, client_y, MEAN, STD)
    noise = torch.rand(client_x.shape, generator=torch.Generator().manual_seed(5)) / STD - MEAN / STD
    noise_psnr = psnr_ssim(noise, client_x, MEAN, STD).psnr.mean()
    protos = {lv: class_means(f, client_y, 4)[0] for lv, f in identity_query(client_x).items()}
    from_protos = reconstruct(r, protos)
    client_class_means = class_mean_images(client_x, client_y, torch.arange(4))
    proto_vs_mean = psnr_ssim(from_protos, client_class_means, MEAN, STD)
    # Assert: with invertible features the decoder recovers each image; noise stays near 8 dB
    assert noise_psnr < 10
    assert single.psnr.mean() > noise_psnr + 10
    assert single.ssim.mean() > 0.8
    assert (proto_vs_mean.psnr > 20).all()


def test_unknown_level_is_a_clear_error():
    x, _ = toy_images(16)
    allowed = r"allowed: a level the model returns: one of \['high', 'low'\]"
    with pytest.raises(ValueError, match=r"levels: got 'mid'; " + allowed):
        train_inversion(identity_query, x, ("low", "mid"), steps=1, progress=False)
    with pytest.raises(ValueError, match="levels: got 'low'; allowed: a non-empty tuple"):
        train_inversion(identity_query, x, "low", steps=1, progress=False)
    with pytest.raises(ValueError, match=r"steps: got 0; allowed: an integer in \[1, inf\)"):
        train_inversion(identity_query, x, ("low",), steps=0, progress=False)


def test_mismatched_prototype_dims_are_a_clear_error():
    x, _ = toy_images(16)
    r = train_inversion(identity_query, x, ("low", "high"), steps=2, batch_size=4, progress=False)
    with pytest.raises(ValueError, match=r"protos\['high'\]: got \(4, 15\); allowed: a tensor of shape \(k, 16\)"):
        reconstruct(r, {"low": torch.zeros(4, 64), "high": torch.zeros(4, 15)})
    missing = r"protos: got \['low'\]; allowed: a mapping with the levels \['low', 'high'\]"
    with pytest.raises(ValueError, match=missing):
        reconstruct(r, {"low": torch.zeros(4, 64)})
    with pytest.raises(ValueError, match=r"protos\['high'\]: got \(3, 16\); allowed: 4 rows"):
        reconstruct(r, {"low": torch.zeros(4, 64), "high": torch.zeros(3, 16)})


def test_model_query_leaves_model_untouched():
    model = build_model("cnn_fmnist", (1, 8, 8), 4).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    feats = model_query(model, batch_size=5)(torch.randn(12, 1, 8, 8))
    assert feats["low"].shape == (12, model.feature_dims["low"])
    assert feats["high"].shape == (12, model.feature_dims["high"])
    assert model.training
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_model_query_normalizes_only_the_named_levels():
    model = build_model("cnn_fmnist", (1, 8, 8), 4)
    x = torch.randn(6, 1, 8, 8)
    raw, unit = model_query(model)(x), model_query(model, normalize=("high",))(x)
    assert torch.allclose(unit["high"].norm(dim=1), torch.ones(6))
    assert torch.allclose(unit["high"] * raw["high"].norm(dim=1, keepdim=True), raw["high"], atol=1e-5)
    assert torch.equal(unit["low"], raw["low"])


@pytest.mark.slow
def test_prototype_attack_report_and_figure(tiny):
    # Prepare: a client's model, its uploaded two-level prototypes, disjoint auxiliary data
    model = build_model("cnn_fmnist", tiny.input_shape, tiny.num_classes)
    client_x, client_y = tiny.x_train[:40], tiny.y_train[:40]
    feats = model_query(model)(client_x)
    classes = torch.tensor([0, 2, 3])
    protos = {lv: class_means(f, client_y, 4)[0][classes] for lv, f in feats.items()}
    # Execute
    report = prototype_attack(model, tiny.x_test, protos, classes, aux_y=tiny.y_test, client_x=client_x,
                              client_y=client_y, steps=15, batch_size=8, seed=0, progress=False)
    fig = attack_figure(report)
    # Assert
    assert list(report.runs) == ["low+high", "low", "high"]
    assert all(run.recons.shape == (3, 1, 8, 8) for run in report.runs.values())
    assert report.originals.shape == (3, 1, 8, 8)
    counts = report.scores.groupby(["source", "levels"], sort=False).size()
    assert counts.to_dict() == {("prototype", "low+high"): 3, ("single_sample", "low+high"): 3,
                                ("prototype", "low"): 3, ("single_sample", "low"): 3,
                                ("prototype", "high"): 3, ("single_sample", "high"): 3,
                                ("class_average", "-"): 3}
    assert set(report.scores["class"]) == {0, 2, 3}
    assert len(report.summary()) == 7
    assert len(fig.axes) == 3 * 4 + 1
    assert fig.axes[-1].get_yscale() == "log"
    # a title, axis labels, and each reconstruction's SSIM (the report's score for its class) under it, legible
    assert fig.get_suptitle() and fig.axes[-1].get_title() and fig.axes[-1].get_xlabel() and fig.axes[-1].get_ylabel()
    own = report.scores[report.scores["source"] == "prototype"].set_index(["levels", "class"])["ssim"]
    images = fig.axes[:-1]
    for r, c in enumerate(classes.tolist()):
        assert images[4 * r].get_xlabel() == ""                          # the client's own image: no score
        for j, levels in enumerate(report.runs, start=1):
            label = images[4 * r + j].xaxis.label
            assert label.get_text() == f"SSIM {own[(levels, c)]:.2f}" and label.get_fontsize() >= 7
    assert attack_figure(report, title="Fig. 11 here").get_suptitle() == "Fig. 11 here"
    baseline = class_average_reference(tiny.x_test, tiny.y_test, classes, client_x, client_y)
    assert baseline.psnr.tolist() == pytest.approx(report.scores.query("source == 'class_average'").psnr.tolist())


@pytest.mark.parametrize("shape, base", [((1, 28, 28), (32, 7, 7)), ((3, 32, 32), (64, 4, 4)), ((1, 8, 8), (64, 1, 1))])
def test_decoder_shape_follows_the_image(shape, base):
    g = InversionDecoder(10, shape)
    assert g.base == base
    assert g(torch.zeros(2, 10)).shape == (2, *shape)
