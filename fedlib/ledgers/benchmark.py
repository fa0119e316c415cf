"""The benchmark study's numbers and claims ledger: the values of its tables' cells, read from its runs through
:mod:`fedlib.results`, the named cells (:class:`fedlib.claims.Cells`) that params/benchmark/claims.yaml reads
(``tables``) and the claims judged on them (``ledger``). The tables and figures are drawn by
:mod:`fedlib.papers.benchmark`, which re-exports these names (the study interface)."""

from __future__ import annotations

import dataclasses

import pandas as pd

from fedlib import claims, results, study
from fedlib.claims import DECISIVE_PROFILES, Cells
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


def added_seeds(plan: Plan, setting: str, method: str, seeds: list[int], cfg: dict | None = None) -> dict[int, float]:
    """``{seed: best-round accuracy (%)}`` of the seeds the evidence planner added after ``seeds`` to the runs of
    ``(setting, method)`` (:func:`fedlib.results.more_seeds`), under a profile whose evidence decides, up to the first
    that holds fewer rounds than the shortest of ``seeds`` (a seed another study made of the same config at its own
    fixed protocol, where the profile's runs went on towards their plateau, is not one of this group's seeds). The
    ranked table keeps the profile's seeds; the claims read these too. ``cfg``: the runs' config, where the caller
    has it (else built from the plan)."""
    cfg = cfg if cfg is not None else configs(plan).get((setting, method))
    if cfg is None or plan.profile not in DECISIVE_PROFILES or not seeds:
        return {}
    own = [results.find(cfg, x)[1] for x in seeds]
    length, out = min((s["rounds"] for s in own if s is not None), default=0), {}
    for x in results.more_seeds(cfg, seeds):
        summary = results.find(cfg, x)[1]
        if summary is None or summary["rounds"] < length:
            break
        out[x] = 100 * summary["metrics"][plan.metric(method)]["best_weighted"]
    return out


def tables(plan: Plan, table: pd.DataFrame, rising: dict | None = None) -> dict:
    """``{"runs": Cells}`` for ``params/benchmark/claims.yaml``: best-round accuracy by seed per (setting, method),
    the profile's seeds and any the evidence planner added (:func:`added_seeds`: named in the claims that read them;
    each cell's trend names its runs with ``more``, so that the planner may add seeds to them)."""
    rising, cells, cfgs = rising or {}, {}, configs(plan)
    for s, part in table.groupby("setting", sort=False):
        means = part.groupby("method")["best"].mean()
        for m, runs in part.groupby("method"):
            seeds = runs.groupby("seed")["best"].mean().dropna()
            extra, trend = added_seeds(plan, s, m, sorted(seeds.index), cfgs.get((s, m))), rising.get((s, m))
            if extra:
                trend = study.trend(f"{plan.label(m)} ({s})", cfgs[(s, m)], [*sorted(seeds.index), *extra],
                                    plan.metric(m), more=True)
            elif trend is not None and trend.group is not None and plan.profile in DECISIVE_PROFILES:
                trend = dataclasses.replace(trend, group=dataclasses.replace(trend.group, more=True))
            cells[(s, m)] = {"label": plan.label(m), "value": means[m], "by_seed": {**dict(seeds.items()), **extra},
                             "trend": trend, "added": f"{plan.label(m)} ({s})" if extra else "", "seeds": list(extra)}
    why = {m: "; ".join(f"{s}: {plan.why_not(m, s)}" for s in plan.setting_names() if plan.why_not(m, s))
           for m in plan.spec["methods"]}

    def caveat_of(read):   # the seeds the planner added to the cells a claim reads
        return study.with_added("", study.added_seeds_text(
            {c["added"]: c["seeds"] for c in read.values() if c.get("added")}, ()))
    return {"runs": Cells(cells, plan.profile, points={s: plan.setting_label(s) for s in plan.setting_names()},
                          text={"why_not": {m: f" ({w})" if w else "" for m, w in why.items()}}, caveat_of=caveat_of)}


def ledger(plan: Plan, table: pd.DataFrame, rising: dict | None = None) -> list:
    """The papers' cross-cutting claims (``params/benchmark/claims.yaml``) judged on :func:`tables`."""
    return claims.ledger("benchmark", tables(plan, table, rising))
