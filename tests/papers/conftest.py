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


def sides(claim, stat: str = "mean") -> set:
    """The runs named by both sides of every comparison of ``claim``: ``{run ids of a group}``; every side must
    name its runs, scored on ``stat`` over clients (the unweighted mean, as every FedMPS and MP-FedCL cell is)."""
    out = set()
    assert claim.tests, f"no comparison: {claim.claim}"
    for t in claim.tests:
        for side in (t.a_trend, t.b_trend):
            assert side is not None and side.group is not None, f"{t.label}: a side without its runs"
            assert side.group.stat == stat
            out.add(ids(side.group.cfg, side.group.seeds))
    return out
