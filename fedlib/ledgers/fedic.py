"""The fedic study's numbers and claims ledger: the values of its tables' cells, read from its runs through
:mod:`fedlib.results`, the named cells (:class:`fedlib.claims.Cells`) that params/fedic/claims.yaml reads
(``tables``) and the claims judged on them (``ledger``). The tables and figures are drawn by
:mod:`fedlib.papers.fedic`, which re-exports these names (the study interface)."""

from __future__ import annotations

import numpy as np

from fedlib import results, study
from fedlib.claims import Cells, sample_std
from fedlib.config import run_id
from fedlib.plans.fedic import Plan, ablation_configs, k_configs, table1_configs


def metric(plan: Plan, method: str) -> str:
    """The scoring rule of a Table 1 row (or of a FedIC variant: the head)."""
    return plan.metric(method) if method in plan.spec["methods"] else "acc_head"


def cost(records: list[dict]) -> dict:
    """A run's measured cost per round (decision 12): median seconds, mean floats up and down, megabytes."""
    secs = float(np.median([r["train_seconds"] for r in records if "train_seconds" in r]))
    up, down = (float(np.mean([r[k] for r in records])) for k in ("up_params", "down_params"))
    return {"seconds": secs, "up_params": up, "down_params": down, "megabytes": 4 * (up + down) / 1e6}


def cells(plan: Plan, finished: dict, records: dict | None = None, configs: dict | None = None,
          more: bool = False) -> dict:
    """``{key: cell}`` of finished runs (``key[-1]`` or ``key`` the method, variant or K): best- and last-round
    accuracy (%) over seeds, ``best_std`` (ddof 1); with ``records`` (one run's, or every seed's) the first seed's
    :func:`cost` and the ``plateau`` of the seed-mean curve; with ``configs`` the runs' ``trend`` (``more``: the
    runs were read with the seeds added after the profile's, :func:`fedlib.results.cached`)."""
    out = {}
    for key, runs in finished.items():
        mt = metric(plan, key[-1] if isinstance(key, tuple) else ("fedic" if isinstance(key, int) else key))
        best, last = ([100.0 * s["metrics"][mt][f"{stat}_weighted"] for s in runs] for stat in ("best", "last"))
        cell = out[key] = {"best": float(np.mean(best)), "last": float(np.mean(last)), "n": len(runs),
                           "best_std": sample_std(best), "per_seed": best, "seeds": [s.get("seed") for s in runs],
                           "best_round": int(runs[0]["metrics"][mt]["best_weighted_round"])}
        if key in (records or {}):
            recs = records[key]
            every = recs if recs and isinstance(recs[0], list) else [recs]
            cell.update(cost(every[0]), seconds_per_seed=[cost(r)["seconds"] for r in every if r],
                        plateau=study.plateau_text(recs, mt, "weighted"))
        if key in (configs or {}):
            seeds = [s["seed"] for s in runs] if all("seed" in s for s in runs) else configs[key]["seeds"]
            if (t := study.trend(key_label(plan, key), configs[key], seeds, mt, "weighted", more)) is not None:
                cell["trend"] = t
    return out


def key_label(plan: Plan, key) -> str:
    """A cell's key as the ledger names it: ``FedIC pra``, ``K 3``, ``+ clustering``, ``FedPAC 40``."""
    parts = key if isinstance(key, tuple) else (key,)
    return " ".join([_label(plan, parts[-1]), *map(str, parts[:-1])])


def _bias(recs: list) -> dict:
    return {"global": recs[-1]["server"]["bias_global"], "cluster": recs[-1]["server"]["bias_cluster"]}


def converged_runs(plan: Plan) -> dict:
    """Table 1, Fig. 2 and Fig. 4 under the ``converged`` profile from finished runs only (trains nothing):
    ``{"plan", "found", "total", "table1", "k", "ablation", "complete", "bias", "made_by"}``, each run counted
    once by run id (K = 3 and the full variant are Table 1's FedIC Pra run, K = 1 is "+ collaboration")."""
    cp = Plan.load("converged", plan.results_dir, plan.data_root, device=plan.device, executor=plan.executor)
    parts = {"table1": table1_configs(cp), "k": k_configs(cp), "ablation": ablation_configs(cp)}
    out, made, jobs = {"plan": cp, "complete": True}, {}, {}
    for name, cfgs in parts.items():
        done, _ = results.cached(cfgs, cp.seeds, more=True)   # and any seeds the evidence planner added
        out["complete"] &= len(done) == len(cfgs)
        out[name] = cells(cp, done, {k: [results.rounds(cfgs[k], x["seed"]) for x in done[k]] for k in done}, cfgs,
                          more=True)
        made.update({run_id(cfgs[k], x["seed"]): x for k in done for x in done[k]})
        jobs.update({run_id(c, s): (c, s) for c in cfgs.values() for s in cp.seeds})   # one per run id
    out["found"] = sum(rid in made or results.find(*job)[1] is not None for rid, job in jobs.items())
    out["total"] = len(jobs)
    pra = (cp.settings["partitions"][-1], "fedic")
    recs = results.rounds(parts["table1"][pra], cp.seeds[0]) if pra in out["table1"] else []
    out["bias"] = _bias(recs) if recs else None
    out["made_by"] = study.made_by(made.values()) if made else ""
    return out


def _label(plan: Plan, name) -> str:
    return f"K {name}" if isinstance(name, int) else plan.label(name)


def _claim_cells(plan: Plan, cells_: dict, order=None) -> dict:
    """:func:`cells` as the claims engine reads them, with ``label``, ``value`` and ``round_seconds``; keys
    ``(point, method)`` in ``order`` of their points (default: ascending)."""
    out = {key: {**c, "label": _label(plan, key[-1] if isinstance(key, tuple) else key), "value": c["best"],
                 **({"round_seconds": c.get("seconds_per_seed") or [c["seconds"]]} if "seconds" in c else {})}
           for key, c in cells_.items()}
    if out and all(isinstance(k, tuple) for k in out):
        return {k: out[k] for p in (order if order is not None else sorted({k[0] for k in out})) for k in out
                if k[0] == p}
    return dict(sorted(out.items())) if all(isinstance(k, int) for k in out) else out


def tables(plan: Plan, res: dict) -> dict:
    """The tables ``params/fedic/claims.yaml`` reads, by name (None where ``res`` lacks them): Table 1, Figs. 2
    and 4, the Tables 3-4 analogues (made under ``res["sweeps_plan"]``, default ``plan``) and the bias."""
    def caveat(p):
        return p.setting() + ("" if p.profile in ("paper", "converged") else "; not converged (the paper: 800 rounds)")

    def table(name, p=plan, order=None, **kw):
        got = _claim_cells(p, res[name], order) if res.get(name) else None
        if not got:
            return None
        got = {k: {**c, "run": key_label(p, k)} for k, c in got.items()}

        def caveat_of(cells):   # the seeds the planner added to the cells a claim reads (Pat's claim: none of Pra's)
            return caveat(p) + study.added_seeds_text({c["run"]: c.get("seeds", ()) for c in cells.values()}, p.seeds)
        return Cells(got, p.profile, caveat_of(got), caveat_of=caveat_of, **kw)

    sweeps, parts, bias = res.get("sweeps_plan", plan), plan.settings["partitions"], res.get("bias")
    methods = {"methods": ", ".join(sweeps.sweep_methods())}
    scale = {**methods, "partition": plan.partition_label(plan.settings["clients_partition"])}
    return {"table1": table("table1", order=parts, points={p: plan.partition_label(p) for p in parts}),
            "k": table("k"), "ablation": table("ablation"), "scale": table("scale", sweeps, text=scale),
            "alphas": table("alphas", sweeps, text=methods),
            "bias": Cells({k: {"label": k, "value": bias[k]} for k in ("global", "cluster")}, plan.profile,
                          caveat(plan), seeds=1) if bias else None}


def ledger(plan: Plan, res: dict) -> list:
    """FedIC's claims judged on :func:`tables` of ``res`` (``table1``, ``k``, ``ablation``, ``scale``,
    ``alphas``: :func:`cells`; ``bias``; ``sweeps_plan``), paired per seed (:func:`fedlib.claims.ledger`)."""
    from fedlib import claims

    return claims.ledger("fedic", tables(plan, res))
