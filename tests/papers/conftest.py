"""Fixtures of the study tests."""

import pytest

from fedlib import results
from fedlib.config import run_id

METRICS = ("acc_proto", "acc_head", "acc_proto_own", "acc_head_own")


@pytest.fixture
def finished(monkeypatch):
    """Every run "finished" with a flat 20-round curve under every rule (no file read): a study's trends then name
    every group."""
    def rounds(cfg, seed, archive_root=None):
        return [{"round": r + 1, "acc": {m: {"mean": 0.8, "weighted": 0.8, "std": 0.0} for m in METRICS}}
                for r in range(20)]
    monkeypatch.setattr(results, "rounds", rounds)


def ids(cfg, seeds) -> tuple:
    """The run ids of ``cfg``'s ``seeds``: how a test names the runs a comparison's group holds."""
    return tuple(run_id(cfg, s) for s in seeds)
