"""Shared fixtures: tiny in-memory datasets so tests run in seconds on 2 cores."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedlib.algorithms.base import Context, Round, TrainSettings
from fedlib.data.sources import Dataset

ROOT = Path(__file__).resolve().parents[1]  # the checkout
DATA = ROOT / "tests" / "data"  # the tests' own inputs (a config, two small notebooks)

# Tiny models gain nothing from intra-op threads, and spinning OpenMP workers slow everything
# down badly when another process shares the two cores.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def empty_run_archive(tmp_path_factory, monkeypatch):
    """Every test reads an empty run archive, not the repository's archive/ (whose runs a short profile's
    paper-protocol tables would otherwise find); tests of the archive pass their own folder."""
    from fedlib import archive

    monkeypatch.setattr(archive, "ARCHIVE", tmp_path_factory.mktemp("archive"))


def label_blocks(per_class: int, num_classes: int) -> np.ndarray:
    """Labels 0..C-1, ``per_class`` each, interleaved like a shuffled dataset."""
    return np.tile(np.arange(num_classes), per_class)


def tiny_image_dataset(per_class_train=40, per_class_test=10, num_classes=4, shape=(1, 8, 8), seed=0) -> Dataset:
    """Separable synthetic images: class c has a bright patch at position c plus noise (the contract check's data)."""
    from fedlib.algorithms.checks import tiny_dataset

    return tiny_dataset(per_class_train, per_class_test, num_classes, shape, seed, "synthetic test images")


@pytest.fixture
def tiny():
    return tiny_image_dataset()


R = Round(index=1, total=2, seed=0)  # a round record for calls made by hand


def make_ctx(num_classes=4, input_shape=(1, 8, 8), num_clients=4, model="cnn_fmnist", seed=0, **train):
    settings = TrainSettings(**{"lr": 0.05, "momentum": 0.5, "batch_size": 8, **train})
    return Context(num_classes=num_classes, input_shape=input_shape, num_clients=num_clients,
                   model_name=model, model_args={}, train=settings, seed=seed)
