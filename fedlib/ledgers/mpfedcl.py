"""The mpfedcl study's numbers and claims ledger: the values of its tables' cells, read from its runs through
:mod:`fedlib.results`, the named cells (:class:`fedlib.claims.Cells`) that params/mpfedcl/claims.yaml reads
(``tables``) and the claims judged on them (``ledger``). The tables and figures are drawn by
:mod:`fedlib.papers.mpfedcl`, which re-exports these names (the study interface)."""

from __future__ import annotations

import itertools
import math

import numpy as np

from fedlib import claims, study
from fedlib.claims import Cells, sample_std
from fedlib.plans.mpfedcl import GRIDS, Plan, configs


def accuracy(plan: Plan, method: str, summary: dict, stat: str = "last") -> float:
    """A run's accuracy (%) under the method's rule, mean over clients, at the last (or best) round."""
    return 100.0 * summary["metrics"][plan.metric(method)][stat]


def table6(plan: Plan, summaries: dict[str, list[dict]]) -> dict[str, dict]:
    """Table VI rows: ``{method: {"mean", "std", "n", "per_seed", "best_mean", "rounds", "metric"}}`` (last round)."""
    rows = {}
    for m, runs in summaries.items():
        last, best = (np.array([accuracy(plan, m, s, stat) for s in runs]) for stat in ("last", "best"))
        rows[m] = {"mean": float(last.mean()), "std": sample_std(last), "n": len(runs), "per_seed": last.tolist(),
                   "best_mean": float(best.mean()), "rounds": runs[0]["rounds"], "metric": plan.metric(m)}
    return rows


def equal_budget_seeds(plan: Plan, records: dict[str, list[list[dict]]]) -> tuple[list[float], dict[str, dict]]:
    """Table VIII analogue: per seed, each method's accuracy at its last evaluated round within MP-FedCL's training
    time (NaN if none) and that round; ``(budgets in seconds, {method: {"accuracy": [..], "rounds": [..]}})``."""
    budgets = [sum(r["train_seconds"] for r in recs) for recs in records["mpfedcl"]]
    out = {m: {"accuracy": [], "rounds": []} for m in records}
    for i, budget in enumerate(budgets):
        for m, per in records.items():
            spent = itertools.accumulate(r["train_seconds"] for r in per[i])
            last = ([r for r, t in zip(per[i], spent, strict=True) if t <= budget and "acc" in r] or [None])[-1]
            out[m]["accuracy"].append(100 * last["acc"][plan.metric(m)]["mean"] if last else math.nan)
            out[m]["rounds"].append(last["round"] if last else 0)
    return budgets, out


def trends(plan: Plan, more: dict | None = None) -> dict:
    """``{(GRIDS' key, *configs' key): Trend}`` (mean over clients; ``budget``: Table VI's) of the finished run groups
    behind the ledger's cells; each names its runs for the evidence planner. ``more``: ``{key: seeds}`` of groups read
    with the seeds added after the grid's (their trends say so, and only those are returned)."""
    out = {}
    for grid, (_, name, label) in [*GRIDS.items(), ("table6", ("all", "budget", "{L} (Table VI, equal time)"))]:
        for key, cfg in configs(plan, grid).items() if name else ():
            m, x = key if isinstance(key, tuple) else ("mpfedcl", key) if grid in ("k", "attack") else (key, None)
            k = (name, *(key if isinstance(key, tuple) else (key,)))
            if more is not None and k not in more:
                continue
            seeds = plan.grid_seeds(grid) if more is None else more[k]
            t = study.trend(label.format(L=plan.label(m), x=x), cfg, seeds, plan.metric(m), "mean", more is not None)
            if t is not None:
                out[k] = t
    return out


def _claim_cell(label: str, values, trend=None, **more) -> dict:
    """A cell as the claims engine reads it (:class:`fedlib.claims.Cells`) from an accuracy or its per-seed values."""
    per = [float(x) for x in np.atleast_1d(values)]
    return {"label": label, "value": float(np.mean(per)), "per_seed": per, "n": len(per), "trend": trend, **more}


def tables(plan: Plan, res: dict) -> dict:
    """The tables of ``params/mpfedcl/claims.yaml`` by name (:class:`fedlib.claims.Cells`; None where ``res`` lacks
    them), from ``res`` as :func:`ledger` takes it; every cell with the trend of its runs."""
    L, tr, prof = plan.label, res.get("trends") or {}, plan.profile
    caveat = f"{prof} profile: rounds x {plan.settings['round_scale']:g}, seeds {plan.seeds}" if prof != "paper" else ""

    def table(cells_, **kw):
        return Cells(cells_, prof, caveat, **kw) if cells_ else None

    def sweep(kind):
        return {(x, m): _claim_cell(L(m), v, tr.get((kind, m, x))) for x, row in (res.get(kind) or {}).items()
                for m, v in row.items()}

    def sweep_table(kind):   # its note names the seeds the evidence planner added to a (method, value)
        cells_ = sweep(kind)
        added = study.added_seeds_of({f"{c['label']} {x:g}": c["trend"] for (x, _), c in cells_.items()},
                                     plan.grid_seeds(kind))
        return Cells(cells_, prof, study.with_added(caveat, added)) if cells_ else None

    t6, comm, fs, fs_seeds = (res.get(k) or {} for k in ("table6", "comm", "feature_skew", "feature_skew_seeds"))
    budget = {m: _claim_cell(L(m), v["accuracy"], tr.get(("budget", m))) for m, v in (res.get("budget") or {}).items()}
    nb = min((c["n"] for c in budget.values()), default=None)   # the fewest seeds of a cell
    for m, c in budget.items():   # Table VIII: the mean over the seeds within budget (NaN if none), rounds printed
        acc, rounds = c["per_seed"], np.atleast_1d(res["budget"][m]["rounds"])
        mean = c["value"] = float(np.nanmean(acc)) if not np.isnan(acc).all() else math.nan
        c["text"] = (f"{L(m)} {mean:.2f} ({rounds[0]:g} rounds)" if nb == 1 else
                     f"{L(m)} {mean:.2f} ± {sample_std(acc):.2f} (rounds " + "/".join(f"{x:g}" for x in rounds) + ")")
    # the attack: the best SSIM decoded from the centroids, and a class average's
    attack = {k: {"label": f"K = {k}", "value": float(f.ssim[f.source == "prototype"].max()),
                  "class_average": float(f.ssim[(f.source == "class_average") & (f.levels == "-")].max()),
                  "trend": tr.get(("attack", k))} for k, f in (res.get("attack") or {}).items()}
    return {
        "table6": table({m: _claim_cell(L(m), r["per_seed"], tr.get(("table6", m)), rounds=r["rounds"],
                                        text=f"{L(m)} {r['mean']:.2f} ± {r['std']:.2f}") for m, r in t6.items()},
                        seeds=t6["mpfedcl"]["n"] if "mpfedcl" in t6 else None),
        "comm": table({k: {"label": k, "value": comm.get(k, math.nan)} for k in ("prototypes", "model", "full")},
                      seeds=len(plan.seeds)) if comm else None,
        "k": table({k: _claim_cell(f"K = {k}", v, tr.get(("k", k))) for k, v in (res.get("k") or {}).items()}),
        "alpha": sweep_table("alpha"), "clients": sweep_table("clients"),
        "budget": table(budget, seeds=nb, text={"over": "" if nb == 1 else f" (mean ± std over {nb} seeds)",
                                                "each_seed": "" if nb == 1 else ", on each seed"}),
        "feature_skew": table({m: {"label": L(m), "value": v, "per_seed": fs_seeds.get(m), "n": len(plan.seeds),
                                   "trend": tr.get(("fs", m))} for m, v in fs.items()}, seeds=len(plan.seeds)),
        "attack": table(attack, seeds=1)}


def ledger(plan: Plan, res: dict) -> list:
    """MP-FedCL's claims with our evidence and a verdict each (:func:`fedlib.claims.ledger` on :func:`tables`).

    ``res`` (each key optional): ``table6`` (:func:`table6`), ``comm`` (``{"model", "prototypes", "full"}`` floats
    per client and round), ``k`` (``{K: accuracy or [per seed]}``), ``alpha`` and ``clients`` (``{value: {method:
    accuracy or [per seed]}}``), ``budget`` (:func:`equal_budget_seeds`'s second item), ``attack`` (``{K: summary
    frame}``), ``feature_skew`` (``{method: mean accuracy}``), ``feature_skew_seeds`` (``{method: [per seed]}``)
    and ``trends`` (:func:`trends`). Table VI, Fig. 5, the stand-in and Table VIII compare paired per seed.
    """
    return claims.ledger("mpfedcl", tables(plan, res))
