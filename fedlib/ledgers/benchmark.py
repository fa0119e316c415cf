"""The benchmark study's numbers and claims ledger: the values of its tables' cells, read from its runs through
:mod:`fedlib.results`, the named cells (:class:`fedlib.claims.Cells`) that params/benchmark/claims.yaml reads
(``tables``) and the claims judged on them (``ledger``). The tables and figures are drawn by
:mod:`fedlib.papers.benchmark`, which re-exports these names (the study interface)."""

from __future__ import annotations

import pandas as pd

from fedlib import claims, study
from fedlib.claims import Cells
from fedlib.plans.benchmark import Plan, configs


def scores(plan: Plan, summaries: dict[tuple[str, str, int], dict]) -> pd.DataFrame:
    """One row per finished (setting, seed, method): best and last accuracy (%), rule, floats and seconds a round."""
    rows = []
    for (setting, method, seed), s in summaries.items():
        m = s["metrics"][plan.metric(method)]
        comm = s.get("comm_per_round", {})
        rows.append({"setting": setting, "seed": seed, "method": method, "best": 100 * m["best_weighted"],
                     "last": 100 * m["last_weighted"], "rule": plan.metric(method).removeprefix("acc_"),
                     "floats": comm.get("up_params", 0.0) + comm.get("down_params", 0.0),
                     "seconds": s.get("seconds_per_round_median", float("nan"))})
    return pd.DataFrame(rows, columns=["setting", "seed", "method", "best", "last", "rule", "floats", "seconds"])


def trends(plan: Plan, table: pd.DataFrame) -> dict:
    """``{(setting, method): Trend}`` of every (setting, method) of ``table`` (:func:`fedlib.study.trend`)."""
    cfgs = configs(plan)
    out = {}
    for (s, m), part in table.groupby(["setting", "method"], sort=False):
        if (s, m) in cfgs:
            t = study.trend(f"{plan.label(m)} ({s})", cfgs[(s, m)], sorted(part.seed), plan.metric(m))
            if t is not None:
                out[(s, m)] = t
    return out


def _mean_std(values: pd.Series, empty: str = "—") -> str:
    """``mean ± std`` (ddof 1, std only with two values or more); ``empty`` where there is none."""
    if not len(values):
        return empty
    return f"{values.mean():.2f}" + (f" ± {values.std(ddof=1):.2f}" if len(values) > 1 else "")


def tables(plan: Plan, table: pd.DataFrame, rising: dict | None = None) -> dict:
    """``{"runs": Cells}`` for ``params/benchmark/claims.yaml``: best-round accuracy by seed per (setting, method)."""
    rising, cells = rising or {}, {}
    for s, part in table.groupby("setting", sort=False):
        means = part.groupby("method")["best"].mean()
        for m, runs in part.groupby("method"):
            seeds = runs.groupby("seed")["best"].mean().dropna()
            cells[(s, m)] = {"label": plan.label(m), "value": means[m], "by_seed": dict(seeds.items()),
                             "trend": rising.get((s, m))}
    why = {m: "; ".join(f"{s}: {plan.why_not(m, s)}" for s in plan.setting_names() if plan.why_not(m, s))
           for m in plan.spec["methods"]}
    return {"runs": Cells(cells, plan.profile, points={s: plan.setting_label(s) for s in plan.setting_names()},
                          text={"why_not": {m: f" ({w})" if w else "" for m, w in why.items()}})}


def ledger(plan: Plan, table: pd.DataFrame, rising: dict | None = None) -> list:
    """The papers' cross-cutting claims (``params/benchmark/claims.yaml``) judged on :func:`tables`."""
    return claims.ledger("benchmark", tables(plan, table, rising))
