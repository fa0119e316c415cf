"""Feature-skew data (fedlib.data.domains): domains, frozen encoders, the `domains` partition, Digit-5 files."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedlib.config import validate
from fedlib.data.domains import (DIGIT5_DOMAINS, encode, load_domains, load_encoder, make_domain,
                                 pretrain_fmnist)
from fedlib.data.partition import make_partition
from fedlib.data.sources import DatasetUnavailable, load_dataset
from fedlib.models import build_model, count_parameters
from fedlib.runner import load_rounds, run_one
from fedlib.validation import ConfigError


def _fake_digit5(root, n_train=30, n_test=20):
    """Five tiny Digit-5 files in the documented format, grey and RGB, of different sizes."""
    rng = np.random.default_rng(0)
    folder = root / "digit5"
    folder.mkdir(parents=True)
    for i, d in enumerate(DIGIT5_DOMAINS):
        shape = (28, 28) if i % 2 == 0 else (32, 32, 3)
        np.savez(folder / f"{d}.npz",
                 x_train=rng.integers(0, 256, (n_train, *shape), dtype=np.uint8), y_train=np.arange(n_train) % 10,
                 x_test=rng.integers(0, 256, (n_test, *shape), dtype=np.uint8), y_test=np.arange(n_test) % 10)
    return root


def test_domain_transforms_are_the_stated_ones():
    grey = np.random.default_rng(0).random((3, 28, 28)).astype(np.float32)
    plain = make_domain("mnist", grey, seed=0)
    assert plain.shape == (3, 28, 28, 3) and np.array_equal(plain[..., 1], grey)
    assert np.allclose(make_domain("mnist_inverted", grey, seed=0), 1 - plain)
    assert np.array_equal(make_domain("mnist_rotated", grey, seed=0)[0, :, :, 0], np.rot90(grey[0]))
    m = make_domain("mnistm_like", grey, seed=0)
    assert m.min() >= 0 and m.max() <= 1 and not np.allclose(m, plain)
    assert np.array_equal(m, make_domain("mnistm_like", grey, seed=0))      # seeded texture
    with pytest.raises(ValueError, match="make_domain"):
        make_domain("svhn", grey, seed=0)


def test_domains_partition_one_domain_per_client_same_labels():
    y_train = np.tile(np.arange(3), 12)                  # 36 samples, 3 classes
    d_train = np.repeat(np.arange(3), 12)                # 3 domains of 12 (4 per class)
    y_test, d_test = np.tile(np.arange(3), 6), np.repeat(np.arange(3), 6)
    p = make_partition({"scheme": "domains", "train_per_class": 3, "test_per_class": 5}, y_train, y_test, 3,
                       domains=(d_train, d_test))
    assert p.num_clients == 3
    assert p.counts.tolist() == [[3, 3, 3]] * 3           # 3 of the 4 per class
    assert p.test_counts.tolist() == [[2, 2, 2]] * 3      # fewer than 5 available: all of them
    for cid in range(3):
        assert set(d_train[p.train[cid]]) == {cid}
        assert set(d_test[p.test[cid] - len(y_train)]) == {cid}
    again = make_partition({"scheme": "domains", "train_per_class": 3, "test_per_class": 5, "seed": 7},
                           y_train, y_test, 3, domains=(d_train, d_test))
    assert [t.tolist() for t in again.train] == [t.tolist() for t in p.train]   # the seed does not move it
    with pytest.raises(ConfigError, match=r"partition.num_clients: got 4; allowed: 3 \(one client per domain"):
        make_partition({"scheme": "domains", "num_clients": 4}, y_train, y_test, 3, domains=(d_train, d_test))
    with pytest.raises(ConfigError, match="partition.scheme: got 'domains'; allowed: a dataset with domains"):
        make_partition({"scheme": "domains"}, y_train, y_test, 3)


@pytest.mark.slow
def test_frozen_encoders(tmp_path):
    enc, size, how = load_encoder("random", tmp_path)
    assert size == 28 and "random" in how and not enc.training
    assert not any(p.requires_grad for p in enc.parameters())
    imgs = np.random.default_rng(0).random((5, 28, 28, 3)).astype(np.float32)
    f1 = encode(enc, imgs, size)
    assert f1.shape == (5, 512) and torch.equal(f1, encode(load_encoder("random", tmp_path)[0], imgs, size))
    with pytest.raises(DatasetUnavailable, match="resnet18.pth"):
        load_encoder("resnet18", tmp_path)
    import torchvision

    (tmp_path / "encoders").mkdir()
    torch.save(torchvision.models.resnet18().state_dict(), tmp_path / "encoders" / "resnet18.pth")
    net, size, how = load_encoder("resnet18", tmp_path)
    assert size == 64 and "ResNet-18" in how
    assert encode(net, imgs[:2], size).shape == (2, 512)    # 28x28 resized to 64x64, pooled 512-d
    with pytest.raises(ConfigError, match="dataset.encoder: got 'vgg'"):
        load_encoder("vgg", tmp_path)


@pytest.mark.slow
def test_pretraining_is_deterministic():
    a, b = pretrain_fmnist(None, images=256), pretrain_fmnist(None, images=256)
    assert not a.training
    assert all(torch.equal(v, b.state_dict()[k]) for k, v in a.state_dict().items())
    c = pretrain_fmnist(None, images=256, seed=1)
    assert not torch.equal(a.state_dict()["classifier.weight"], c.state_dict()["classifier.weight"])


def test_digit5_files_and_missing_files(tmp_path):
    with pytest.raises(DatasetUnavailable, match=r"mnist.npz, svhn.npz, usps.npz, synth.npz, mnistm.npz missing"):
        load_domains("digit5", tmp_path, "random")
    ds = load_domains("digit5", _fake_digit5(tmp_path), "random")
    assert ds.x_train.shape == (150, 512) and ds.x_test.shape == (100, 512)
    assert ds.domain_names == list(DIGIT5_DOMAINS)
    assert np.bincount(ds.domain_train).tolist() == [30] * 5
    assert ds.record()["domains"] == list(DIGIT5_DOMAINS)


def test_encoder_only_with_domain_datasets():
    base = {"model": "mlp_head", "partition": {"scheme": "domains"}, "algorithm": {"name": "fedavg"},
            "train": {"rounds": 1}}
    with pytest.raises(ConfigError, match=r"dataset.encoder: got 'random'; allowed: only with digit5 or "
                                          r"digit5_standin \(not fmnist\)"):
        validate({**base, "dataset": {"name": "fmnist", "encoder": "random"}})
    with pytest.raises(ConfigError, match="dataset.encoder: got 'vgg'; allowed: one of fmnist_cnn, random, resnet18"):
        validate({**base, "dataset": {"name": "digit5_standin", "encoder": "vgg"}})
    with pytest.raises(ConfigError, match="dataset.encoder"):
        load_dataset("mnist", encoder="random")


@pytest.mark.slow
def test_mpfedcl_feature_skew_sends_the_head_and_k_prototypes_per_class(tmp_path):
    """MP-FedCL Table II, Digit-5 row: 133,898 head parameters + K x C x 256 prototype floats per client."""
    assert count_parameters(build_model("mlp_head", (512,), 10)) == 133_898
    root = _fake_digit5(tmp_path / "data")
    cfg = validate({"dataset": {"name": "digit5", "encoder": "random"}, "model": "mlp_head",
                    "partition": {"scheme": "domains", "train_per_class": 3, "test_per_class": 2},
                    "algorithm": {"name": "mpfedcl", "k": 2}, "train": {"rounds": 2, "batch_size": 8},
                    "data_root": str(root), "results_dir": str(tmp_path / "results")})
    run_one(cfg, 0, progress=False)
    recs = load_rounds(cfg, 0)
    assert recs[0]["up_params"] == 5 * (133_898 + 2 * 10 * 256)
    assert recs[1]["down_params"] == 5 * (133_898 + 5 * 10 * 2 * 256)
