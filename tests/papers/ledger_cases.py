"""Hand-made inputs of the FedIC and MP-FedCL ledgers, every branch of their claims: the cases whose ledgers
``tests/papers/data/ledger_golden.json`` holds (made by the hand-written ledgers that params/<paper>/claims.yaml
replaced), so that the claims engine is checked to judge them exactly as those did (test_claims_engine.py).

Each case is ``(name, paper, plan, res)``; MP-FedCL's trends need the ``finished`` fixture (every run a flat
20-round curve), under which :func:`fedlib.papers.mpfedcl.trends` names every group. Where a claim's wording or
judgement is changed on purpose, ``python -m tests.papers.ledger_cases`` writes the golden file again from the
ledgers as they now are (then review its diff)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from fedlib import claims as C
from fedlib import plateau


def fedic_cell(*seeds, curve=None, cfg=None, label="x", **extra):
    """A cell as :func:`fedlib.papers.fedic.cells` makes it; ``curve`` every seed's accuracy curve (None: flat at the
    mean), its trend named after ``cfg`` when given."""
    group = plateau.Group(label, cfg, tuple(range(len(seeds))), "acc_head") if cfg is not None else None
    t = C.trend(label, [curve or [float(np.mean(seeds))] * 100] * len(seeds), group)
    return {"best": float(np.mean(seeds)), "last": float(np.mean(seeds)), "n": len(seeds),
            "best_std": C.sample_std(seeds), "per_seed": list(seeds), "best_round": 1,
            "plateau": t.plateau_text(), "trend": t, **extra}


def _fedic_cases():
    from fedlib.papers import fedic as I

    quick, conv, paper = I.load_plan("quick"), I.load_plan("converged"), I.load_plan("paper")
    t1c = I.table1_configs(conv)
    slow = list(np.linspace(89.0, 90.0, 100))
    cell = fedic_cell

    def t1_three():
        return {("pat", "fedic"): cell(97.0, 97.2, 96.8, cfg=t1c[("pat", "fedic")], label="FedIC pat",
                                       seconds=2.0, seconds_per_seed=[2.0, 2.2, 1.9], megabytes=10.0),
                ("pat", "fedpac"): cell(90.0, 90.3, 89.7, curve=slow, cfg=t1c[("pat", "fedpac")],
                                        label="FedPAC pat", seconds=1.5, seconds_per_seed=[1.5, 1.6, 1.4],
                                        megabytes=11.0),
                ("pat", "fedavg"): cell(88.0, 88.1, 87.9),
                ("pra", "fedic"): cell(82.0, 82.5, 81.9, seconds=2.0, seconds_per_seed=[2.0, 2.0, 2.0],
                                       megabytes=12.0),
                ("pra", "fedpac"): cell(81.6, 81.4, 82.4, seconds=1.0, seconds_per_seed=[1.0, 1.0, 1.0],
                                        megabytes=11.0),
                ("pra", "fedproto"): cell(70.0, 71.0, 69.0)}

    ks3 = {1: cell(80.0, 80.2, 79.8), 2: cell(84.0, 84.3, 83.9), 3: cell(85.0, 85.1, 84.9),
           4: cell(83.0, 83.5, 82.7), 5: cell(82.0, 82.1, 81.9)}
    ab3 = {"baseline": cell(1.0, 1.1, 0.9), "clustering": cell(2.0, 2.1, 1.9), "collaboration": cell(3.0, 3.1, 2.9),
           "fedic": cell(2.5, 2.6, 2.4)}
    scale = {(20, "fedic"): cell(90.0, 90.5, 89.5), (20, "fedpac"): cell(88.0, 88.5, 87.5),
             (40, "fedic"): cell(80.0, 80.5, 79.5), (40, "fedpac"): cell(82.0, 82.5, 81.5)}
    alphas = {(0.05, "fedic"): cell(70.0, 71.0, 70.5), (0.05, "fedpac"): cell(60.0, 61.0, 60.5),
              (0.5, "fedic"): cell(92.0, 92.1, 91.9), (0.5, "fedpac"): cell(91.0, 91.2, 90.9),
              (0.1, "fedic"): cell(85.0, 85.2, 84.8), (0.1, "fedpac"): cell(84.9, 85.5, 84.0)}
    return [
        ("empty", quick, {}),
        ("quick one seed", quick, {
            "table1": {("pra", "fedic"): cell(90.0, seconds=2.0, megabytes=10.0),
                       ("pra", "fedpac"): cell(91.0, seconds=2.5, megabytes=11.0)},
            "k": {1: cell(88.0), 3: cell(90.0), 5: cell(89.0)},
            "ablation": {"baseline": cell(1.0), "clustering": cell(2.0), "collaboration": cell(3.0),
                         "fedic": cell(4.0)},
            "bias": {"global": 2.0, "cluster": 1.0},
            "scale": {(20, "fedic"): cell(90.0), (20, "fedpac"): cell(89.0), (40, "fedic"): cell(85.0),
                      (40, "fedpac"): cell(86.0)},
            "alphas": {(0.1, "fedic"): cell(80.0)}}),
        ("converged three seeds", conv, {"table1": t1_three(), "k": ks3, "ablation": ab3,
                                         "bias": {"global": 1.0, "cluster": 1.5}, "scale": scale, "alphas": alphas}),
        ("converged table 1, short sweeps from quick", conv, {
            "table1": t1_three(), "sweeps_plan": quick, "k": {1: cell(80.0, 80.1, 79.9), 3: cell(81.0, 81.2, 80.8)},
            "scale": {(20, "fedic"): cell(90.0), (20, "fedpac"): cell(89.0)},
            "alphas": {(0.1, "fedic"): cell(80.0), (0.5, "fedic"): cell(82.0)}}),
        ("no fedic in table 1", paper, {"table1": {("pra", "fedpac"): cell(80.0, 81.0, 79.0)},
                                        "k": {1: cell(80.0), 6: cell(81.0), 3: cell(82.0)}}),
        ("paper edge K and a rising ablation", paper, {
            "k": {1: cell(86.0, 86.1, 85.9), 3: cell(85.0, 85.1, 84.9), 6: cell(84.0, 84.5, 83.5)},
            "ablation": {"baseline": cell(80.0, 80.1, 79.9), "clustering": cell(81.0, 81.1, 80.9, curve=slow),
                         "collaboration": cell(82.0, 82.1, 81.9), "fedic": cell(83.0, 83.1, 82.9)},
            "bias": {"global": 2.0, "cluster": 1.0}}),
    ]


def mp_row(seeds, rounds=60):
    return {"mean": float(np.mean(seeds)), "std": C.sample_std(seeds), "n": len(seeds), "per_seed": list(seeds),
            "rounds": rounds}


# the archived Table VI (paper profile, seeds 0-2, last round): margins of 0.4-1.07 inside sample stds of 2.7-3.6
TABLE6 = {"fedavg": mp_row([81.0, 85.4, 78.2], 110), "fedprox": mp_row([81.0, 85.4, 78.4], 100),
          "fedproto": mp_row([25.8, 25.2, 31.0], 100), "dpfedcl": mp_row([77.6, 82.6, 82.6]),
          "spfedcl": mp_row([77.2, 83.0, 82.8]), "mpfedcl": mp_row([79.0, 84.2, 82.8])}
FS_SEEDS = {"mpfedcl": [59.0, 60.5, 60.0], "local": [44.0, 45.0, 44.3], "fedavg": [30.0, 31.0, 29.0],
            "fedprox": [30.5, 31.2, 29.4], "fedproto": [40.0, 41.0, 39.0], "spfedcl": [59.2, 60.6, 59.9],
            "dpfedcl": [58.9, 60.1, 59.7]}


def _frame(ssim, average):
    return pd.DataFrame({"source": ["prototype", "prototype", "class_average"], "levels": ["high", "low", "-"],
                         "ssim": [ssim, ssim - 0.1, average]})


def _mp_cases():
    from fedlib.papers import mpfedcl as M

    paper, quick, one = M.load_plan("paper"), M.load_plan("quick"), M.load_plan("paper", seeds=[0])
    tr = M.trends(paper)
    means = {m: float(np.mean(v)) for m, v in FS_SEEDS.items()}
    budget_seeds = {"mpfedcl": {"accuracy": [79.0, 84.2, 82.8], "rounds": [60, 60, 60]},
                    "fedavg": {"accuracy": [80.2, 81.0, 78.2], "rounds": [80, 40, 110]},
                    "fedproto": {"accuracy": [26.0, 25.0, 31.0], "rounds": [40, 20, 60]}}
    holes = {"mpfedcl": {"accuracy": [80.0, 81.0, 79.0], "rounds": [60] * 3},
             "fedavg": {"accuracy": [70.0, math.nan, 71.0], "rounds": [30, 0, 30]},
             "local": {"accuracy": [math.nan] * 3, "rounds": [0] * 3}}
    return [
        ("empty", paper, {}),
        ("table 6 with trends, comm, K", paper, {
            "table6": TABLE6, "trends": tr, "comm": {"model": 798_474, "prototypes": 1_536, "full": 5_120},
            "k": {1: [80.0, 81.0, 82.0], 2: [85.0, 86.0, 87.0], 3: [79.0, 80.0, 81.0], 4: [81.0, 82.0, 83.0]}}),
        ("one seed", one, {"table6": {m: mp_row(r["per_seed"][:1], r["rounds"]) for m, r in TABLE6.items()},
                           "trends": M.trends(one), "k": {1: 81.0, 2: 82.0, 3: 81.13, 4: 82.0},
                           "comm": {"model": 798_474, "prototypes": 90_000}}),
        ("quick profile", quick, {"table6": {m: TABLE6[m] for m in ("mpfedcl", "spfedcl", "fedavg")},
                                  "k": {1: [80.0], 2: [79.0]}}),
        ("one-seed sweeps", paper, {
            "alpha": {1.0: {"mpfedcl": 87.0, "fedavg": 87.0, "fedproto": 40.0}, 0.1: {"mpfedcl": 84.0, "fedavg": 84.4}},
            "clients": {5: {"mpfedcl": 80.0, "fedavg": 75.6, "spfedcl": 79.0}, 40: {"mpfedcl": 60.0, "fedavg": 10.0}},
            "trends": tr}),
        ("sweeps over seeds", paper, {
            "alpha": {0.5: {"mpfedcl": [85.0, 86.0, 87.0], "fedavg": [80.0, 80.5, 79.5]}},
            "clients": {5: {"mpfedcl": [80.0, 81.0, 82.0], "fedavg": [70.5, 70.5, 71.5]},
                        10: {"mpfedcl": [80.0, 81.0, 82.0], "fedavg": [76.5, 76.5, 77.5]}}}),
        ("budget one seed, feature skew, attack", paper, {
            "budget": {"fedavg": {"rounds": 110, "accuracy": 81.0}, "fedproto": {"rounds": 64, "accuracy": 26.0},
                       "mpfedcl": {"rounds": 60, "accuracy": 79.0}},
            "feature_skew": means, "feature_skew_seeds": FS_SEEDS,
            "attack": {1: _frame(0.477, 0.427), 2: _frame(0.40, 0.45), 4: _frame(0.5, math.nan)}, "trends": tr}),
        ("budget per seed", paper, {"budget": budget_seeds, "trends": tr}),
        ("budget with holes, blind feature skew", paper, {
            "budget": holes, "feature_skew": {**means, "local": 61.0}}),
        ("feature skew, a baseline ahead", paper, {
            "feature_skew": {**means, "local": 61.0}, "feature_skew_seeds": {**FS_SEEDS, "local": [60.0, 62.0, 61.0]}}),
        ("feature skew without the variants", quick, {
            "feature_skew": {m: means[m] for m in ("mpfedcl", "fedavg", "fedproto")},
            "feature_skew_seeds": {m: FS_SEEDS[m][:1] for m in ("mpfedcl", "fedavg", "fedproto")}}),
    ]


def cases() -> list[tuple[str, str, object, dict]]:
    """Every case: ``(name, paper, plan, res)``."""
    return ([(name, "fedic", plan, res) for name, plan, res in _fedic_cases()]
            + [(name, "mpfedcl", plan, res) for name, plan, res in _mp_cases()])


def _trend(t) -> list | None:
    if t is None:
        return None
    g = t.group
    group = None if g is None else [g.label, list(g.seeds), g.metric, g.stat, (g.cfg or {}).get("name")]
    return [t.label, t.rounds, t.plateaued, repr(t.rise), repr(t.gain), repr(t.tail), t.window, t.since, group]


def _test(t) -> list:
    return [t.label, repr(t.margin), repr(t.spread), t.n, repr(t.p), repr(t.p_min), t.paired, _trend(t.a_trend),
            _trend(t.b_trend)]


def dump(claims: list) -> list:
    """A ledger as JSON-able lists: every field of every claim, its comparisons with their trends and groups
    (floats by their repr: equal means bit-identical)."""
    return [[c.claim, c.source, c.evidence, c.verdict, c.note, c.profile,
             None if c.tests is None else [_test(t) for t in c.tests]] for c in claims]


def write_golden() -> None:
    """Write ``tests/papers/data/ledger_golden.json`` from the ledgers as they now are, under the ``finished``
    fixture's flat curves."""
    import importlib
    import json

    from fedlib import results
    from tests.conftest import ROOT
    from tests.papers.conftest import METRICS

    def rounds(cfg, seed, archive_root=None):
        return [{"round": r + 1, "acc": {m: {"mean": 0.8, "weighted": 0.8, "std": 0.0} for m in METRICS}}
                for r in range(20)]

    results.rounds = rounds
    out = {f"{paper}: {name}": dump(importlib.import_module(f"fedlib.papers.{paper}").ledger(plan, res))
           for name, paper, plan, res in cases()}
    (ROOT / "tests" / "papers" / "data" / "ledger_golden.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    write_golden()
