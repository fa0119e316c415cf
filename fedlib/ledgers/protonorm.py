"""The protonorm study's numbers and claims ledger: the values of its tables' cells, read from its runs through
:mod:`fedlib.results`, the named cells (:class:`fedlib.claims.Cells`) that params/protonorm/claims.yaml reads
(``tables``) and the claims judged on them (``ledger``). The tables and figures are drawn by
:mod:`fedlib.papers.protonorm`, which re-exports these names (the study interface)."""

from __future__ import annotations

import math

import numpy as np
import torch

import fedlib.claims
from fedlib import results, study
from fedlib.analysis import pairwise_distances
from fedlib.claims import Cells, sample_std
from fedlib.plans.protonorm import (
    Plan, code_protocol_configs, gamma_configs, homogeneous_configs, load_plan, table1_config, table1_configs)
from fedlib.prototypes import thomson_align
from fedlib.validation import ConfigError


def smallest_angle(protos: np.ndarray) -> float:
    """Smallest angle (degrees) between any two prototypes (the spiral panels' number)."""
    p = np.asarray(protos, dtype=np.float64)
    p = p / np.linalg.norm(p, axis=1, keepdims=True).clip(1e-12)
    cos = np.clip(p @ p.T, -1.0, 1.0)
    np.fill_diagonal(cos, -1.0)
    return math.degrees(math.acos(cos.max()))


def global_prototypes(state: results.RunState) -> tuple[np.ndarray, np.ndarray]:
    """(classes, prototypes) the server sends, as a client would use them for inference."""
    msg = state.message(0)
    return msg["classes"].numpy(), msg["protos"].numpy()


def claims(plan: Plan, ours: dict[str, dict[str, float]], paper_rows: dict, paper_column: dict[str, str],
           paper_label: str = "paper CIFAR-10") -> dict:
    """Table 1's claim, ours and the paper's: ``{(partition, "ours" | paper_label, label): margins and rank}``."""
    out = {}
    variants = [m for m in plan.table1["methods"] if m.startswith("protonorm")]
    for p, vals_ours in ours.items():
        vals_paper = {m: paper_rows[m][paper_column[p]][0] for m in vals_ours if m in paper_rows}
        for who, vals in (("ours", vals_ours), (paper_label, vals_paper)):
            others = {m: v for m, v in vals.items() if not m.startswith("protonorm")}
            best = max(others, key=others.get) if others else None
            for v in (v for v in variants if v in vals):   # "minus FedProto", "minus FedTGP": the methods' labels
                out[(p, who, plan.label(v))] = {
                    **{f"minus {plan.label(b)}": round(vals[v] - vals[b], 2) if b in vals else math.nan
                       for b in ("fedproto", "fedtgp")},
                    "minus best baseline": round(vals[v] - others[best], 2) if best else math.nan,
                    "best baseline": plan.label(best) if best else "",
                    "rank among baselines + it": 1 + sum(x > vals[v] for x in others.values())}
    return out


def synthetic_pa(k: int = 100, d: int = 512, seed: int = 0):
    """Fig. 4b's stand-in: (distances per PA iteration, iterations) of K post-ReLU-like prototypes |b| + 0.5 |e_k|."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(d, generator=g, dtype=torch.float64).abs()
    protos = base + 0.5 * torch.randn(k, d, generator=g, dtype=torch.float64).abs()
    _, iters, hist = thomson_align(protos, record=True)
    x = torch.nn.functional.normalize(protos, dim=1)
    return _distance_summary([torch.cdist(x, x), *hist]), iters


def _distance_summary(hist) -> np.ndarray:
    pairs = [np.asarray(d, dtype=np.float64)[np.triu_indices(len(d), 1)] for d in hist]
    return np.array([(x.min(), x.mean(), x.max()) for x in pairs])


def margins(protos: np.ndarray) -> np.ndarray:
    """Fig. 5: per class, the distance to the nearest other global prototype over the largest of these."""
    d = pairwise_distances(np.asarray(protos, dtype=np.float64))
    np.fill_diagonal(d, np.inf)
    m = d.min(1)
    return m / m.max()


def pa_history(state: results.RunState) -> np.ndarray:
    """Min, mean and max pairwise global-prototype distance before and after each PA iteration of the last round."""
    hist = state.server["history"]
    if not hist:
        raise ConfigError("algorithm.record_pa", state.cfg["algorithm"].get("record_pa"),
                          "true for the run whose PA phase is plotted (see pa_phase_config)")
    return _distance_summary(hist)


def pa_iterations(records: list[dict]) -> np.ndarray:
    """PA iterations per round (Fig. 3a) from a ProtoNorm run's round log."""
    return np.array([r["server"]["pa_iterations"] for r in records if "server" in r])


def collect(nb) -> None:
    """Read the Table 1 protocol's runs (Table 1, Table 3, the gamma sweeps) and say how many there are."""
    t1, homo, gam = _runs(nb, "table1"), _runs(nb, "homogeneous"), _runs(nb, "gamma")
    print(f"Table 1: {len(t1)} configs x {len(nb.plan.seeds)} seed(s); Table 3: {len(homo)}; gamma sweeps: {len(gam)}")


def _runs(nb, grid: str) -> dict:
    """``{key: [summary per seed]}`` of the Table 1 protocol's ``grid`` ("table1", "homogeneous" or "gamma")."""
    configs = {"table1": table1_configs, "homogeneous": homogeneous_configs, "gamma": gamma_configs}[grid]
    seeds = None if grid == "table1" else nb.plan.seeds

    def make():
        cfgs = configs(nb.plan)
        # under a decisive profile, with the seeds the evidence planner added (as plateaus() reads them)
        return nb.with_added_seeds(cfgs, results.run_or_read(cfgs, seeds, progress=False))
    return nb.once(grid, make)


def score(plan: Plan, method: str, summaries: list[dict]) -> dict:
    """One table cell: best-round pooled accuracy (%) under the method's rule over seeds, each seed's best round."""
    metric = plan.metric(method)
    vals = np.array([100 * s["metrics"][metric]["best_weighted"] if metric in s["metrics"] else np.nan
                     for s in summaries])
    rounds = [s["metrics"].get(metric, {}).get("best_weighted_round") for s in summaries]
    return {"mean": float(vals.mean()), "std": sample_std(vals), "n": len(vals), "per_seed": vals.tolist(),
            "metric": metric, "best_rounds": rounds, "diverged_at": [s.get("diverged_at") for s in summaries]}


def diverged(records: list[dict]) -> bool:
    """True when the run's training loss stopped being finite (the paper's '-': failed to converge)."""
    return any(r.get("diverged") or not math.isfinite(r.get("train_loss") or 0.0) for r in records)


def plateaus(plan: Plan, done: dict | None = None) -> dict:
    """``{key: Trend}`` of every finished run group of Tables 1, 3 and 4-5 (``done``: its finished runs, if known),
    named as the ledger names it, each under its method's rule."""
    L, out = plan.label, {}
    named = {"table1": lambda m, p: ((p, m), f"{L(m)} ({p})"), "homogeneous": lambda m: ((m,), L(m)),
             "gamma": lambda m, g: ((m, g), f"{L(m)} gamma {g:g}")}
    for name, cfgs in (("table1", table1_configs(plan)), ("homogeneous", homogeneous_configs(plan)),
                       ("gamma", gamma_configs(plan))):
        runs = done[name] if done is not None else results.cached(cfgs, plan.seeds, more=True)[0]
        for k, sums in runs.items():
            args = k if isinstance(k, tuple) else (k,)   # (method, ...)
            key, label = named[name](*args)
            seeds = [s["seed"] for s in sums]   # the profile's and any the evidence planner added (more=True)
            if (t := study.trend(label, cfgs[k], seeds, plan.metric(args[0]), more=True)) is not None:
                out[(name, *key)] = t
    return out


def converged_runs(plan: Plan) -> dict:
    """Tables 1, 3, 4-5 and the code protocol under the ``converged`` profile from finished runs only."""
    cp = load_plan("converged", plan.results_dir, data_root=plan.data_root, device=plan.device, executor=plan.executor)
    grids = {"table1": table1_configs(cp), "code": code_protocol_configs(cp), "homogeneous": homogeneous_configs(cp),
             "gamma": gamma_configs(cp)}
    cached = {name: results.cached(cfgs, cp.seeds, more=True) for name, cfgs in grids.items()}
    done = {name: runs for name, (runs, _) in cached.items()}
    made = [x for runs in done.values() for seeds in runs.values() for x in seeds]
    rising, t1, T1 = plateaus(cp, done), done["table1"], cp.table1

    def scored(m, p):
        t = rising.get(("table1", p, m))
        return {**score(cp, m, t1[(m, p)]), "plateau": t.plateau_text() if t is not None else "", "trend": t,
                "rounds": t.rounds if t is not None else T1["rounds"]}

    return {"plan": cp, "found": sum(found for _, found in cached.values()), "rising": rising,
            "total": len(cp.seeds) * sum(map(len, grids.values())),
            "complete": all(len(done[name]) == len(grids[name]) for name in grids if name != "code"),
            "table1": {p: row for p in T1["partitions"]
                       if (row := {m: scored(m, p) for m in T1["methods"] if (m, p) in t1})},
            "code": {m: score(cp, m, sums) for m, sums in done["code"].items()},
            "homogeneous": homogeneous_accuracy(done["homogeneous"]), "gamma": gamma_results(cp, done["gamma"]),
            "made_by": study.made_by(made) if made else ""}


def homogeneous_accuracy(runs: dict) -> dict | None:
    """Table 3: ``{method: [best-round accuracy (%) per seed]}`` under each method's rule, ``None`` without runs."""
    return ({m: [100 * x["metrics"]["acc_proto" if m == "protonorm" else "acc_head"]["best_weighted"] for x in s]
             for m, s in runs.items()} if runs else None)


def gamma_results(plan: Plan, runs: dict) -> list[dict]:
    """Tables 4-5: per (method, gamma) its accuracy over seeds, which seeds diverged, the first seed's best round."""
    cfgs, out = gamma_configs(plan), []
    for (m, g), sums in runs.items():
        s = score(plan, m, sums)
        div = [seed for seed in plan.seeds[:len(sums)] if diverged(results.rounds(cfgs[(m, g)], seed))]
        out.append({"method": m, "gamma": g, "acc": s["mean"], "per_seed": s["per_seed"],
                    "best_round": s["best_rounds"][0], "diverged": bool(div), "diverged_seeds": div})
    return out


def simplex_distance(k: int) -> float:
    """Pairwise distance sqrt(2K/(K-1)) of K unit vectors forming a regular simplex (decision 9)."""
    return math.sqrt(2 * k / (k - 1))


# -- the claims ledger: params/protonorm/claims.yaml, judged by the claims engine on the tables below -----------------
def _cell(label: str, values, per_seed: bool = True, **more) -> dict:
    """A ledger cell of ``values`` (one number, or one per seed): their mean, how many, and (``per_seed``) each."""
    v = [float(x) for x in np.atleast_1d(values)]
    return {"label": label, "value": float(np.mean(v)), "per_seed": v if per_seed else None, "n": len(v), **more}


def _table1_tables(plan: Plan, tab: dict | None, rising: dict, caveat: str, where: str) -> dict:
    """Table 1: one table per split (``table1_<split>``) and ``table1``, every split (None: not run); a split's
    runs extended towards their plateau say how far."""
    per = {}
    for p, rows in (tab or {}).items():
        trend = {m: rising.get(("table1", p, m)) for m in rows}
        longer = [f"{plan.label(m)} {t.rounds} rounds" for m, t in trend.items()
                  if t is not None and t.rounds > plan.table1["rounds"]]
        cells = {m: {"label": plan.label(m), "value": r["mean"], "std": r["std"], "n": r["n"],
                     "per_seed": r["per_seed"] if r["n"] > 1 else None, "trend": trend[m]} for m, r in rows.items()}
        longer = study.added_seeds_of({plan.label(m): t for m, t in trend.items()}, plan.seeds) + (
            f"; extended towards the plateau: {', '.join(longer)}" if longer else "")
        per[p] = Cells(cells, plan.profile, caveat, seeds=min(r["n"] for r in rows.values()),
                       text={"where": where + longer})
    every = {(p, m): c for p, t in per.items() for m, c in t.cells.items()}
    return {**{f"table1_{p}": per.get(p) for p in plan.spec["partitions"]},
            "table1": Cells(every, plan.profile) if per else None}


def _gamma_tables(plan: Plan, gam: list | None, rising: dict, caveat: str) -> dict:
    """Table 4 (ProtoNorm over gamma, its default keyed ``"default"``) and Table 5 (FedProto, FedTGP): ``{gamma: cell}``
    (per-seed values where every gamma has two)."""
    default = float(table1_config(plan, "protonorm", "practical")["algorithm"]["gamma"]) if gam else None
    far = ("; at lambda 1 the upscaled target is far from the features after few rounds"
           if plan.profile not in ("paper", "converged") else "")
    out = {}
    for key, method in (("table4", "protonorm"), ("table5_fedproto", "fedproto"), ("table5_fedtgp", "fedtgp")):
        cells = {}
        for g, r in sorted({r["gamma"]: r for r in gam or () if r["method"] == method}.items()):
            seeds = r.get("per_seed") or [r["acc"]]
            div = "" if not r["diverged"] else (f" (diverged on {len(r['diverged_seeds'])} of {len(seeds)} seeds)"
                                                if r.get("diverged_seeds") else " (diverged)")
            cells["default" if method == "protonorm" and g == default else g] = {
                "label": f"gamma {g:g}", "value": r["acc"], "gamma": g, "per_seed": seeds if len(seeds) > 1 else None,
                "n": len(seeds), "trend": rising.get(("gamma", method, float(g))), "failed": r["diverged"],
                "shown": "diverged" if r["diverged"] else f"{r['acc']:.2f}", "diverged": div}
        if method != "protonorm" and cells and min(c["n"] for c in cells.values()) < 2:
            cells = {g: {**c, "per_seed": None} for g, c in cells.items()}
        added = study.added_seeds_of({f"gamma {c['gamma']:g}": c["trend"] for c in cells.values()}, plan.seeds)
        out[key] = Cells(cells, plan.profile, study.with_added(caveat + (far if method == "protonorm" else ""),
                                                               added)) if cells else None
    return out


def _pa_iterations_table(plan: Plan, splan: Plan, its: dict | None):
    """Fig. 3a: PA's mean iterations over the first and the last 3 rounds, per seed, of runs of 6 rounds or more
    (``its``: per split, one array (one seed) or a list of per-seed arrays)."""
    if not its:
        return None
    seeds = {p: [np.asarray(x) for x in a] if len(a) and np.ndim(a[0]) == 1 else [np.asarray(a)]
             for p, a in its.items()}
    runs, cells = {p: long for p, xs in seeds.items() if (long := [x for x in xs if len(x) >= 6])}, {}
    for p, xs in runs.items():
        over = f" (mean of {len(xs)} seeds)" if len(xs) > 1 else ""
        for end, part in (("first", slice(None, 3)), ("last", slice(-3, None))):
            cells[(p, end)] = _cell(end, [np.mean(x[part]) for x in xs], over=over)
    k = min((len(xs) for xs in runs.values()), default=0)
    caveat = "" if splan.profile in ("paper", "converged") else f"{splan.table1['rounds']} rounds of the paper's 300"
    return Cells(cells, plan.profile if k > 1 else splan.profile, caveat, points={p: p for p in its})


def tables(plan: Plan, res: dict) -> dict:
    """The tables ProtoNorm's claims read, by name (:class:`fedlib.claims.Cells`; None where ``res`` lacks them)."""
    t1, splan, rising = plan.table1, res.get("short_plan", plan), res.get("rising") or {}
    where = f"{t1['model']}, {100 * t1['fraction']:g}% of Fashion-MNIST, {t1['rounds']} rounds, seeds {plan.seeds}"
    caveat = "short runs: not converged" if plan.profile not in ("paper", "converged") else ""
    full = t1["model"] == "ht0" and t1["fraction"] >= 1 and t1["rounds"] >= 300
    out = dict.fromkeys(("spiral", "spiral_accuracy", "homogeneous", "pa_phase", "margins", "comm"))
    if sp := res.get("spiral"):   # Figs. 1, 2 and 6: each panel's smallest angle and accuracy, one value or per seed
        acc = {key: _cell(key, v["acc"]) for key, v in sp.items()}
        angle = {key: _cell(key, v["angle"], acc=acc[key]["value"]) for key, v in sp.items()}
        k = min(c["n"] for c in angle.values())
        collapsed = angle["fedproto_iid"]["value"] < 30   # the IID claim's bound: its note says so
        text = {"over": f", mean of {k} seeds" if k > 1 else "",
                "iid_collapsed": "ours collapse too: the IID panel does not reproduce" if collapsed else ""}
        out.update(spiral=Cells(angle, splan.profile, seeds=k, text=text),
                   spiral_accuracy=Cells(acc, splan.profile, seeds=k))
    if homo := res.get("homogeneous"):   # Table 3: per-seed values where every method has two or more
        k = min(np.size(v) for v in homo.values())
        out["homogeneous"] = Cells({m: _cell(plan.label(m), v, k > 1, trend=rising.get(("homogeneous", m)))
                                    for m, v in homo.items()}, plan.profile, caveat, seeds=k,
                                   text={"over": f", mean of {k} seeds" if k > 1 else ""})
    if res.get("pa_phase") is not None:   # Fig. 4: the PA phase's final mean distance from the simplex's
        hist, k = res["pa_phase"]
        target = simplex_distance(k)
        pa = {"label": "PA", "value": abs(hist[-1, 1] - target), "simplex": target, "mean_before": hist[0, 1],
              "mean_after": hist[-1, 1], "smallest_before": hist[0, 0], "smallest_after": hist[-1, 0]}
        out["pa_phase"] = Cells({"pa": pa}, splan.profile, seeds=1)
    if res.get("margins"):   # Fig. 5
        out["margins"] = Cells({m: {"label": plan.label(m), "value": v} for m, v in res["margins"].items()},
                               splan.profile, seeds=1)
    if res.get("comm"):   # Supp. D: floats sent
        out["comm"] = Cells({m: {"label": plan.label(m), "value": abs(a - f), "measured": a}
                             for m, (a, f) in res["comm"].items()}, splan.profile, seeds=1)
    ran = res.get("datasets") or ()
    return {**out, **_table1_tables(plan, res.get("table1"), rising, caveat, where),
            **_gamma_tables(plan, res.get("gamma"), rising, caveat),
            "pa_iterations": _pa_iterations_table(plan, splan, res.get("pa_iterations")),
            "datasets": Cells({d: {"label": d} for d in ran}, plan.profile) if ran else None,
            "full_protocol": Cells({"ht0": {"label": "Ht0"}} if full else {}, plan.profile, text={"where": where})}


def ledger(plan: Plan, res: dict) -> list:
    """ProtoNorm's claims (``params/protonorm/claims.yaml``) judged on :func:`tables` of ``res`` (see show_ledger)."""
    return fedlib.claims.ledger("protonorm", tables(plan, res))
