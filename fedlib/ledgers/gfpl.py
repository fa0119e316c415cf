"""The gfpl study's numbers and claims ledger: the values of its tables' cells, read from its runs through
:mod:`fedlib.results`, the named cells (:class:`fedlib.claims.Cells`) that params/gfpl/claims.yaml reads (``tables``)
and the claims judged on them (``ledger``). The tables and figures are drawn by :mod:`fedlib.papers.gfpl`, which
re-exports these names (the study interface)."""

from __future__ import annotations

import math

import numpy as np

from fedlib import claims, results, study
from fedlib.claims import Cells, sample_std
from fedlib.plans.gfpl import Plan
from fedlib.plans.gfpl import _paper_plan, ablation_configs, n_configs, table1_configs, threshold_configs


def paper_table2(plan: Plan) -> dict:
    """Table 2 under the ``paper`` profile from finished runs only, over the complete s-hat values."""
    pplan = _paper_plan(plan)
    configs, seeds = ablation_configs(pplan), pplan.ablation_seeds()
    done, found = results.cached(configs, seeds, more=True)   # and any seeds the evidence planner added
    keep = {k: runs for k, runs in done.items() if all((k[0], v) in done for v in pplan.spec["variants"])}
    acc, std = ablation_values(pplan, keep) if keep else (None, None)
    return {"plan": pplan, "found": found, "total": len(configs) * len(seeds), "acc": acc, "std": std,
            "per_seed": sweep_per_seed(pplan, keep) if keep else None,
            "trends": trends(pplan, {k: configs[k] for k in keep}, read_seeds(keep), more=True),
            "made_by": study.made_by(s for runs in keep.values() for s in runs) if keep else ""}


def paper_figs(plan: Plan) -> dict:
    """Figs. 3b and 6 under the ``paper`` profile from finished runs only, over each sweep's complete seeds."""
    pplan = _paper_plan(plan)
    seeds, n_cfgs, t_cfgs = pplan.figs_seeds(), n_configs(pplan), threshold_configs(pplan)
    n_seeds, t_seeds = study.finished_seeds(n_cfgs, seeds), study.finished_seeds(t_cfgs, seeds)
    n_done, t_done = (results.cached(c, s, more=True)[0] if s else {} for c, s in ((n_cfgs, n_seeds),
                                                                                      (t_cfgs, t_seeds)))
    used = [s for done in (n_done, t_done) for runs in done.values() for s in runs]
    return {"plan": pplan, "found": results.cached(n_cfgs, seeds)[1] + results.cached(t_cfgs, seeds)[1],
            "total": (len(n_cfgs) + len(t_cfgs)) * len(seeds), "n_seeds": n_seeds, "threshold_seeds": t_seeds,
            **{k: v or None for k, v in sweep_values(pplan, n_done, t_done, t_cfgs).items()},
            "n_trends": trends(pplan, n_cfgs, read_seeds(n_done), "n", more=True) if n_done else {},
            "threshold_trends": trends(pplan, t_cfgs, read_seeds(t_done), "sc", more=True) if t_done else {},
            "made_by": study.made_by(used) if used else ""}


def paper_table1(plan: Plan) -> dict:
    """Table 1 under the ``paper`` profile from finished runs only, over its complete (dataset, w-bar) columns."""
    pplan = _paper_plan(plan)
    configs, methods, seeds = table1_configs(pplan), pplan.table1_methods(), pplan.seeds
    done, found = results.cached(configs, seeds)
    columns = [k[:2] for k in configs if k[-1] == methods[0] and all((*k[:2], m) in done for m in methods)]
    keys = [k for k in configs if k[:2] in columns]
    cells = table1(pplan, {k: done[k] for k in keys}, {k: [results.rounds(configs[k], s) for s in seeds] for k in keys},
                   configs)
    return {"plan": pplan, "found": found, "total": len(configs) * len(seeds), "columns": columns, "cells": cells,
            "made_by": study.made_by(s for k in keys for s in done[k]) if keys else ""}


def accuracy(plan: Plan, method: str, summary: dict, stat: str = "last") -> float:
    """A run's accuracy (%) under the method's rule at the last (NaN if diverged) or best round."""
    if stat == "last" and summary.get("diverged_at"):
        return math.nan
    return 100.0 * summary["metrics"][plan.metric(method)][stat]


def converged_round(records: list[dict] | list[list[dict]], metric: str, tol: float = 1.0) -> int | None:
    """First round from which the (seed-mean) accuracy stays within ``tol`` of the last; None if diverged."""
    runs = records if records and isinstance(records[0], list) else [records]
    if any(r.get("diverged") for recs in runs for r in recs):
        return None
    curves = [{r["round"]: 100 * r["acc"][metric]["mean"] for r in recs if "acc" in r} for recs in runs]
    rounds = sorted(set.intersection(*(set(c) for c in curves)))
    mean = claims.mean_curve([[c[t] for t in rounds] for c in curves])
    off = [i for i, acc in enumerate(mean) if abs(acc - mean[-1]) > tol]   # the last round off the end value
    return rounds[off[-1] + 1] if off else rounds[0]


def communication(records: list[dict]) -> dict:
    """Measured traffic of a run (floats summed over clients): per round, per sending round, total."""
    up = np.array([r["up_params"] for r in records], dtype=float)
    down = np.array([r["down_params"] for r in records], dtype=float)
    active = up > 0
    return {"up_per_round": float(up.mean()), "down_per_round": float(down.mean()),
            "up_per_active_round": float(up[active].mean()) if active.any() else 0.0,
            "active_rounds": int(active.sum()), "up_total": float(up.sum()), "down_total": float(down.sum())}


def table1(plan: Plan, results: dict, records: dict, configs: dict | None = None) -> dict[tuple, dict]:
    """Table 1 cells ``{(dataset, w-bar, method): {...}}``: accuracy, spreads, rounds to converge, traffic, trend."""
    out = {}
    for key, runs in results.items():
        m, recs, metric = key[-1], records[key], plan.metric(key[-1])
        acc = np.array([accuracy(plan, m, s) for s in runs])
        ok, diverged = ~np.isnan(acc), [s.get("diverged_at") for s in runs]
        spread = np.array([100 * s["metrics"][metric]["last_std"] for s, good in zip(runs, ok, strict=True) if good])
        every = recs if recs and isinstance(recs[0], list) else [recs]
        per_seed_rounds = [converged_round(r, metric) if r else None for r in every]
        out[key] = {"mean": float(acc[ok].mean()) if ok.any() else math.nan,
                    "std": float(spread.mean()) if ok.any() else math.nan,
                    "seed_std": sample_std(acc[ok]) if ok.any() else math.nan,
                    "n": int(ok.sum()), "per_seed": acc.tolist(),
                    "best": float(np.mean([accuracy(plan, m, s, "best") for s in runs])),
                    "diverged_at": diverged if any(diverged) else None,
                    "rounds_to_converge": converged_round(recs, metric),
                    "rounds_per_seed": [math.nan if r is None else float(r) for r in per_seed_rounds],
                    "converge_seeds": len(every), "comm": communication(every[0])}
        if configs and key in configs:
            seeds = [s["seed"] for s in runs] if runs and all("seed" in s for s in runs) else None
            for t in trends(plan, {key: configs[key]}, seeds).values():
                out[key]["trend"] = t
    return out


def group_label(plan: Plan, key) -> str:
    """A run group as the ledger names it, e.g. ``GFPL (MNIST-5k, s-bar 18 w4)`` or ``GFPL n 8``."""
    if isinstance(key, tuple) and len(key) == 3:
        return f"{plan.label(key[-1])} ({plan.dataset_label(key[0])} w{key[1]})"
    if isinstance(key, tuple) and len(key) == 2 and key[0] in ("n", "sc"):
        return f"GFPL {'n' if key[0] == 'n' else 'S_C'} {key[1]:g}"
    if isinstance(key, tuple) and len(key) == 2:
        return f"{plan.label(key[-1])} (s-hat {key[0]})"
    return str(key)


def trends(plan: Plan, configs: dict, seeds: list[int] | dict | None = None, prefix: str | None = None,
           more: bool = False) -> dict:
    """``{key: Trend}`` of the finished runs of ``configs`` (``prefix`` ``n``/``sc`` names a sweep's groups);
    ``seeds`` one list for every config or ``{key: the seeds its cell read}``; ``more``: the cells read the seeds the
    evidence planner adds after them (:func:`read_seeds`), so that it may add some."""
    def of(k, c):
        return (seeds.get(k) if isinstance(seeds, dict) else seeds) or c["seeds"]

    got = {k: study.trend(group_label(plan, (prefix, k) if prefix else k), c, of(k, c),
                          plan.metric(k[-1] if isinstance(k, tuple) else "gfpl"), "mean", more)
           for k, c in configs.items() if of(k, c)}
    return {k: t for k, t in got.items() if t is not None}


def read_seeds(runs: dict) -> dict:
    """``{key: [seed of each summary]}`` of ``{key: [summary per seed]}``: the seeds each cell read (the profile's and
    any the evidence planner added: :func:`fedlib.results.cached` with ``more``)."""
    return {k: [x["seed"] for x in v] for k, v in runs.items()}


def _added(trends_: dict | None, profile_seeds) -> str:
    """``", and the seeds the evidence planner added: GFPL n 8 6-11"`` from the cells' trends (their run groups)."""
    return study.added_seeds_of({t.label: t for t in (trends_ or {}).values() if t is not None}, profile_seeds)


def diverged_text(cell: dict) -> str:
    """``diverged at rounds 33, 48 (...)``, or ``""`` where no seed diverged."""
    rounds = [r for r in cell.get("diverged_at") or [] if r]
    if not rounds:
        return ""
    return (f"diverged at round{'s' if len(rounds) > 1 else ''} {', '.join(map(str, rounds))} "
            f"({len(rounds)} of {len(cell['diverged_at'])} seeds; best {cell['best']:.2f} before)")


def ablation_values(plan: Plan, results: dict) -> tuple[dict, dict]:
    """Table 2: ``({(s-hat, variant): accuracy}, {...: std across clients})``, means over seeds (%)."""
    acc = {k: float(np.mean([accuracy(plan, "gfpl", s) for s in runs])) for k, runs in results.items()}
    std = {k: float(np.mean([100 * s["metrics"]["acc_head"]["last_std"] for s in runs])) for k, runs in results.items()}
    return acc, std


def sweep_per_seed(plan: Plan, results: dict) -> dict:
    """``{key: [GFPL accuracy (%) per seed]}`` of finished runs."""
    return {k: [accuracy(plan, "gfpl", s) for s in runs] for k, runs in results.items()}


def sweep_values(plan: Plan, n_runs: dict, t_runs: dict, t_configs: dict) -> dict:
    """Figs. 3b and 6 from their runs: ``n`` (accuracy (%) per n, the mean over seeds), ``thresholds``
    (:func:`threshold_values`) and each sweep's accuracies per seed."""
    n_per = sweep_per_seed(plan, n_runs)
    return {"n": {n: float(np.mean(v)) for n, v in n_per.items()}, "n_per_seed": n_per,
            "thresholds": threshold_values(plan, t_runs, t_configs), "threshold_per_seed": sweep_per_seed(plan, t_runs)}


def threshold_values(plan: Plan, finished: dict, configs: dict) -> dict[float, tuple[float, float, float]]:
    """Fig. 6: ``{S_C: (accuracy (%), merge rate, downlink floats per round)}``, means over seeds."""
    out = {}
    for t, runs in finished.items():
        recs = [results.rounds(configs[t], summary["seed"]) for summary in runs]
        merges = [[r["server"] for r in rr if r.get("server") and "clusters" in r["server"]] for rr in recs]
        rates = [float(np.mean([v["merge_rate"] for v in m])) if m else float("nan") for m in merges]
        out[t] = (float(np.mean([accuracy(plan, "gfpl", s) for s in runs])), float(np.mean(rates)),
                  float(np.mean([communication(rr)["down_per_round"] for rr in recs])))
    return out


def seeds_text(values) -> str:
    """``94.43 ± 0.50 (n = 3)``: per-seed values as mean ± sample std and count; one seed: its value."""
    v = list(np.atleast_1d(values))
    return f"{v[0]:.2f}" if len(v) == 1 else f"{np.mean(v):.2f} ± {sample_std(v):.2f} (n = {len(v)})"


def ledger(plan: Plan, res: dict) -> list:
    """GFPL's claims (``params/gfpl/claims.yaml``) with our evidence and verdicts, judged on :func:`tables`."""
    return claims.ledger("gfpl", tables(plan, res))


def tables(plan: Plan, res: dict) -> dict:
    """The tables GFPL's claims read, by name (None where ``res`` lacks them)."""
    short = plan.profile != "paper"
    caveat = f"{plan.profile} profile: {plan.rounds} rounds, seeds {plan.seeds}" if short else ""
    return {**_table1_tables(plan, res.get("table1"), caveat),
            "ablation": _ablation_table(plan, res.get("ablation"), caveat, res.get("ablation_trends"),
                                        plan.ablation_seeds()),
            "n": _sweep_table(plan.profile, "n", res.get("n"), caveat, res.get("n_trends"), plan.figs_seeds()),
            "thresholds": _sweep_table(plan.profile, "S_C", res.get("thresholds"), caveat, res.get("threshold_trends"),
                                       plan.figs_seeds()),
            "attack": _attack_table(plan, res.get("attack")), **_paper_tables(res if short else {})}


def _paper_tables(res: dict) -> dict:
    """The paper protocol's tables beside a shorter profile's (``*_paper``), each with its caveat."""
    pp, pa, pf = res.get("table1_paper"), res.get("ablation_paper"), res.get("figs_paper") or {}
    out = dict.fromkeys(f"{k}_paper" for k in ("table1", "rounds", "traffic", "ablation", "n", "thresholds"))
    if pp and pp["cells"]:
        p, cols = pp["plan"], ", ".join(f"{pp['plan'].dataset_label(d)} w{w}" for d, w in pp["columns"])
        out.update({f"{k}_paper": v for k, v in _table1_tables(
            p, pp["cells"], f"paper profile: {p.rounds} rounds, seeds {p.seeds}; columns {cols}").items()})
    if pa and pa.get("acc"):
        p = pa["plan"]
        where = f"seeds {p.ablation_seeds()}; {p.dataset_label(p.settings['ablation']['dataset'])}"
        out["ablation_paper"] = _ablation_table(p, pa.get("per_seed") or pa["acc"],
                                                f"paper profile: {p.rounds} rounds, {where}", pa.get("trends"),
                                                p.ablation_seeds())

    def where(seeds):
        return f"paper profile: {pf['plan'].rounds} rounds, {_seeds_words(seeds or pf['plan'].figs_seeds())}"

    if pf.get("n"):
        out["n_paper"] = _sweep_table("paper", "n", pf.get("n_per_seed") or pf["n"], where(pf.get("n_seeds")),
                                      pf.get("n_trends"), pf["plan"].figs_seeds())
    if th := pf.get("thresholds"):
        per = pf.get("threshold_per_seed") or {}
        out["thresholds_paper"] = _sweep_table("paper", "S_C", {t: (per.get(t, v[0]), v[1]) for t, v in th.items()},
                                               where(pf.get("threshold_seeds")), pf.get("threshold_trends"),
                                               pf["plan"].figs_seeds())
    return out


def _table1_tables(plan: Plan, t1: dict | None, caveat: str) -> dict:
    """Table 1's ``table1`` (accuracy), ``rounds`` (to converge) and ``traffic`` tables."""
    if not t1:
        return dict.fromkeys(("table1", "rounds", "traffic"))
    cols, acc, rounds, traffic = sorted({k[:2] for k in t1}), {}, {}, {}
    for col in cols:
        row = {k[-1]: c for k, c in t1.items() if k[:2] == col}
        ok = {m: c for m, c in row.items() if not math.isnan(c["mean"])}
        if "gfpl" in ok and len(ok) > 1:
            acc.update({(col, m): {"label": plan.label(m), "value": c["mean"], "seed_std": c["seed_std"],
                                   "per_seed": c["per_seed"], "trend": c.get("trend")} for m, c in ok.items()})
        for m, c in [(m, c) for m, c in row.items() if m != "local"]:
            up, down = c["comm"]["up_per_round"], c["comm"]["down_per_round"]
            traffic[(col, m)] = {"label": plan.label(m), "value": up, "total": up + down}
            got = [math.nan if r is None else float(r) for r in c.get("rounds_per_seed", [c.get("rounds_to_converge")])]
            if not all(math.isnan(r) for r in got):
                rounds[(col, m)] = {"label": plan.label(m), "value": float(np.nanmean(got)), "per_seed": got,
                                    "trend": c.get("trend")}
    first = ("mnist5k", 4) if ("mnist5k", 4) in cols else cols[0]   # the column of the communication table
    both = [c["total"] <= min(x["total"] for k, x in traffic.items() if k[0] == col)
            for (col, m), c in traffic.items() if m == "gfpl" and sum(k[0] == col for k in traffic) > 1]
    text = {"column": f"{plan.dataset_label(first[0])} w{first[1]}", "both": "the" if both and all(both) else "not the",
            "uploads": ", ".join(f"{c['label']} {c['value']:,.0f} ({c['total']:,.0f})"
                                 for (col, _), c in traffic.items() if col == first)}
    kw = {"seeds": len(plan.seeds), "points": {col: f"{plan.dataset_label(col[0])} w{col[1]}" for col in cols}}
    return {"table1": Cells(acc, plan.profile, caveat, **kw), "rounds": Cells(rounds, plan.profile, caveat, **kw),
            "traffic": Cells(traffic, plan.profile, caveat, text=text, **kw)}


def _ablation_table(plan: Plan, ab: dict | None, caveat: str, trends_: dict | None = None, seeds=()):
    """Table 2's table: each variant's mean, per-seed values and trend, s-hat ascending; a claim's caveat names the
    seeds the evidence planner added (beyond the profile's ``seeds``) to the cells it reads."""
    if not ab:
        return None
    trends_, cells = trends_ or {}, {}
    for (s, v), a in sorted(ab.items(), key=lambda item: item[0][0]):
        per, values = isinstance(a, (list, tuple, np.ndarray)), list(np.atleast_1d(a))
        cells[(s, v)] = {"label": plan.label(v), "value": float(np.mean(values)), "per_seed": values if per else None,
                         "n": len(values) if per else len(plan.seeds), "trend": trends_.get((s, v))}

    def caveat_of(read):
        return study.with_added(caveat, _added({k: c["trend"] for k, c in read.items()}, seeds))
    return Cells(cells, plan.profile, caveat_of(cells), caveat_of=caveat_of)


def _sweep_table(profile: str, name: str, sweep: dict | None, caveat: str, trends_: dict | None = None, seeds=()):
    """Fig. 3b's table (``name`` ``n``) or Fig. 6's (``S_C``: with merge rates); its caveat names the seeds the
    evidence planner added beyond the profile's ``seeds``."""
    if not sweep:
        return None
    cells = {}
    for k, v in sweep.items():
        acc, rate = v if name == "S_C" else (v, None)
        per = list(np.atleast_1d(acc))
        cells[k] = {"label": f"S_C {k:g}" if name == "S_C" else f"n {k}", "value": float(np.mean(per)), "per_seed": per,
                    "n": len(per), "trend": (trends_ or {}).get(k), "text": seeds_text(per), "merge_rate": rate}
    return Cells(cells, profile, study.with_added(caveat, _added(trends_, seeds)))


def _attack_table(plan: Plan, atk):
    """The attack's SSIM from the component means and from their samples, beside the class average's."""
    if atk is None:
        return None
    ssim = atk.set_index(["source", "levels"])["ssim"]
    base = float(ssim.get(("class_average", "-"), np.nan))
    cells = {i[0]: {"label": "component means" if i[0] == "prototype" else i[0], "value": float(v),
                    "class_average": base} for i, v in ssim.items() if i[0] in ("prototype", "samples")}
    return Cells(cells, plan.profile, seeds=1, text={"class_average": base})


def _seeds_words(seeds, spread: bool = False) -> str:
    """``seed 0`` or ``seeds 0, 1, 2``, with ``spread`` `` (mean ± sample std over seeds, n = 3)`` after several."""
    seeds = list(seeds)
    return (f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"
            + (f" (mean ± sample std over seeds, n = {len(seeds)})" if spread and len(seeds) > 1 else ""))
