"""The fedmps study's numbers and claims ledger: the values of its tables' cells, read from its runs through
:mod:`fedlib.results`, the named cells (:class:`fedlib.claims.Cells`) that params/fedmps/claims.yaml reads
(``tables``) and the claims judged on them (``ledger``). The tables and figures are drawn by
:mod:`fedlib.papers.fedmps`, which re-exports these names (the study interface)."""

from __future__ import annotations

import math

import numpy as np
import torch

from fedlib import claims, report, results, study
from fedlib.claims import Cells, sample_std
from fedlib.data import FederatedData
from fedlib.data.partition import nway_kshot
from fedlib.data.sources import Dataset
from fedlib.plans.fedmps import COMMON_METRIC, PAPER_METRIC_PROTO, Plan, ablation_configs, grid_configs, table3_configs
from fedlib.plans.fedmps import grid_seeds, ways_configs


def _made_by(done: dict) -> str:
    """Which code and machine made the finished runs ``done`` (:func:`fedlib.study.made_by`)."""
    return study.made_by(s for runs in done.values() for s in runs) if done else ""


def _paper_runs(plan: Plan, configs_of, seeds_of, more: bool = False) -> tuple[Plan, dict, list[int], dict, dict]:
    """``(plan, configs, seeds, finished runs, counts)`` of ``configs_of`` under the ``paper`` profile (``plan``'s
    folders, device, executor and Table III methods), training nothing; ``more``: with the seeds added after the
    profile's (:func:`fedlib.results.cached`)."""
    pplan = Plan.load("paper", plan.results_dir, plan.data_root, device=plan.device, executor=plan.executor,
                      methods=plan.selected("table3_methods"))
    configs, seeds = configs_of(pplan), seeds_of(pplan)
    done, found = results.cached(configs, seeds, protocol=True, more=more)
    return pplan, configs, seeds, done, {"plan": pplan, "found": found, "total": len(configs) * len(seeds),
                                         "made_by": _made_by(done)}


def paper_table3(plan: Plan) -> dict:
    """Table III under the ``paper`` profile from finished runs (``rows`` ``None`` while none); trains nothing."""
    pplan, _, _, done, out = _paper_runs(plan, table3_configs, lambda p: p.seeds, more=True)
    added = {(part, m): [x["seed"] for x in runs] for m, runs in done.items() for part in ("table3", "table3_head")}
    return {**out, "rows": table3(pplan, done) if done else None,
            "head": table3(pplan, done, metric=COMMON_METRIC) if done else None,
            "trends": trends(pplan, list(added), more=added)}


def paper_table6(plan: Plan) -> dict:
    """Table VI under the ``paper`` profile from finished runs, first seed (``rows``; ``per_seed``: with the seeds the
    evidence planner added to each (method, n), what its claim reads), with the ``missing`` methods per n."""
    pplan, _, _, done, out = _paper_runs(plan, ways_configs, lambda p: p.seeds[:1], more=True)
    missing = {n: [m for m in pplan.selected("sweep_methods") if (m, n) not in done] for n in pplan.settings["ways"]}
    read = {("ways", m, n): [x["seed"] for x in runs] for (m, n), runs in done.items()}
    return {**out, "rows": ways_rows(pplan, done) or None, "per_seed": ways_per_seed(pplan, done),
            "missing": missing, "trends": trends(pplan, list(read), more=read)}


def paper_table7(plan: Plan) -> dict:
    """Table VII under the ``paper`` profile, over the ``seeds`` on which every row has finished, each row with the
    seeds the evidence planner added to its runs."""
    pplan, configs, seeds, _, out = _paper_runs(plan, ablation_configs, Plan.ablation_seeds)
    seeds = study.finished_seeds(configs, seeds)
    done = results.cached(configs, seeds, protocol=True, more=True)[0] if seeds else {}
    rows = ablation_table(pplan, done, configs) if done else None
    read = {("ablation", row): [x["seed"] for x in runs] for row, runs in done.items()}
    return {**out, "seeds": seeds, "made_by": _made_by(done), "rows": rows,
            "trends": trends(pplan, list(read), more=read) if done else {}}


def global_prototypes(state: results.RunState, level: str = "high") -> tuple[np.ndarray, np.ndarray]:
    """(classes, prototypes) the server holds for ``level`` (FedProto: its only level)."""
    msg = state.message(0)
    key = level if level in msg else "protos"
    return msg["classes"].numpy(), msg[key].numpy()


def cifar10_shaped(seed: int = 1234, shots: int = 2) -> FederatedData:
    """Table V: CIFAR-10's label layout with constant images, partitioned as in Table II (docs/fedmps.md)."""
    y_tr, y_te = torch.arange(10).repeat(5000), torch.arange(10).repeat(1000)
    img = torch.zeros(1, 3, 32, 32)
    ds = Dataset("cifar10-shaped", img.expand(len(y_tr), -1, -1, -1), y_tr, img.expand(len(y_te), -1, -1, -1),
                 y_te, 10, "CIFAR-10 label layout with constant images (communication counts only)")
    part = nway_kshot(y_tr.numpy(), y_te.numpy(), 10, num_clients=20, ways=3, shots=shots, stdev=1,
                      block=110, test_shots=1, seed=seed)
    return FederatedData(ds, part)


def communication_cifar10(plan: Plan, methods: list[str] | None = None) -> dict[str, dict]:
    """Table V: ``{method: {"up", "down", ...}}`` parameters of round 2 on the CIFAR-10 setting (MOON's CNN)."""
    from fedlib.algorithms import make_algorithm
    from fedlib.algorithms.base import Context, TrainSettings
    from fedlib.engine import Simulator

    data = cifar10_shaped()
    out = {}
    with results.one_thread():
        for m in methods or plan.methods:
            ctx = Context(num_classes=10, input_shape=(3, 32, 32), num_clients=20, model_name="cnn_cifar",
                          model_args={}, train=TrainSettings(local_epochs=1), seed=1234)
            algo = make_algorithm(plan.spec["methods"][m]["algorithm"])
            recs = Simulator(algo, ctx, data, rounds=2, progress=False).run()
            out[m] = {"up": recs[1]["up_params"], "down": recs[1]["down_params"],
                      "up_bytes": recs[1]["up_bytes"], "down_bytes": recs[1]["down_bytes"]}
    return out


def local_prototypes_by_class(uploads: dict[int, dict], level: str = "high") -> dict[int, list[tuple[int, np.ndarray]]]:
    """``{class: [(client, local prototype), ...]}`` from uploads (FedMPS ``high``/``low``, FedProto ``protos``)."""
    owners: dict[int, list] = {}
    for cid, up in uploads.items():
        rows = up[level] if level in up else up["protos"]
        for i, c in enumerate(up["classes"].tolist()):
            owners.setdefault(c, []).append((cid, rows[i].numpy()))
    return owners


def times_to_target(plan: Plan, records: dict[str, list[list[dict]]]) -> dict[str, list[dict]]:
    """``{method: [time_to_target per seed]}`` under each method's paper rule."""
    target = plan.spec["time_target"]
    return {m: [time_to_target(recs, plan.paper_metric(m), target) for recs in per] for m, per in records.items()}


def trend_groups(plan: Plan) -> dict:
    """``{key: (label, config, seeds, metric)}``: every run group a ledger comparison rests on."""
    L, seed0, pm = plan.label, plan.seeds[:1], plan.paper_metric
    out = {}
    for m, c in table3_configs(plan).items():
        out[("table3", m)] = (f"{L(m)} (Table III)", c, plan.seeds, pm(m))
        out[("table3_head", m)] = (f"{L(m)} (Table III, head)", c, plan.seeds, COMMON_METRIC)
        out[("time", m)] = (f"{L(m)} (Table III)", c, plan.seeds, pm(m))
        if m == "fedmps":
            out[("attack",)] = (f"{L(m)} (Table III, seed {seed0[0]})", c, seed0, pm(m))
    for kind, g in plan.spec["grids"].items():   # (kind, method, value)
        out.update({(kind, m, v): (g["label"].format(method=L(m), value=v), c, grid_seeds(plan, kind), pm(m))
                    for (m, v), c in grid_configs(plan, kind).items()})
    out.update({("ablation", row): (f"FedMPS ablation row {row}", c, plan.ablation_seeds(), PAPER_METRIC_PROTO)
                for row, c in ablation_configs(plan).items()})
    return out


def trends(plan: Plan, keys=None, seeds: list[int] | None = None, more: dict | None = None) -> dict:
    """``{key: Trend}`` of the finished groups of :func:`trend_groups` (``keys``: only those); trains nothing.
    ``more``: ``{key: seeds}`` of groups read with the seeds added after the profile's (their trends say so, for the
    evidence planner)."""
    groups, more = trend_groups(plan), more or {}
    out = {}
    for key in groups if keys is None else [k for k in keys if k in groups]:
        label, cfg, own, metric = groups[key]
        own = more.get(key, own if seeds is None else seeds)
        t = study.trend(label, cfg, own, metric, "mean", key in more)
        if t is not None:
            out[key] = t
    return out


def mean_std_n(values, digits: int = 2) -> str:
    """``84.21 ± 3.39 (n = 3)`` over seeds (sample std), ``84.21 (n = 1)``, ``—`` for none (NaN left out)."""
    v = [float(x) for x in values if x is not None and not np.isnan(x)]
    return f"{report.fmt(float(np.mean(v)), sample_std(v), digits)} (n = {len(v)})" if v else report.DASH


def accuracy(summary: dict, metric: str, stat: str = "best") -> float:
    """A run's accuracy in % (``stat``: best or last round; ``best_std``: the std across clients)."""
    return 100.0 * summary["metrics"][metric][stat]


def table3(plan: Plan, summaries: dict[str, list[dict]], metric: str | None = None) -> dict:
    """Table III rows over seeds, ``p_vs_fedmps`` the exact rank-sum p (docs/fedmps.md: its floor)."""
    rows = {}
    for m, runs in summaries.items():
        key = metric or plan.paper_metric(m)
        vals = np.array([accuracy(s, key) for s in runs])
        rows[m] = {"mean": float(vals.mean()), "std": sample_std(vals), "n": len(vals), "per_seed": vals.tolist(),
                   "metric": key, "seeds": [s.get("seed") for s in runs]}
    ref = rows.get("fedmps")
    for m, row in rows.items():
        ok = ref is not None and m != "fedmps" and len(row["per_seed"]) > 1 and len(ref["per_seed"]) > 1
        row["p_vs_fedmps"] = claims.rank_sum_p(row["per_seed"], ref["per_seed"]) if ok else None
    return rows


def ways_rows(plan: Plan, summaries: dict[tuple[str, int], list[dict]]) -> dict[int, dict]:
    """Table VI: ``{n: {method: (accuracy, std across clients)}}`` at the best round, one seed."""
    rows: dict[int, dict] = {}
    for (m, n), runs in summaries.items():
        key = plan.paper_metric(m)
        rows.setdefault(n, {})[m] = (accuracy(runs[0], key), accuracy(runs[0], key, "best_std"))
    return rows


def ways_per_seed(plan: Plan, summaries: dict[tuple[str, int], list[dict]]) -> dict[int, dict]:
    """Table VI's claim values: ``{n: {method: [best-round accuracy per seed]}}`` (the first seed's, then any the
    evidence planner added to that run group), with ``{n: {method: [seeds]}}`` under the key ``"seeds"``."""
    out: dict = {"seeds": {}}
    for (m, n), runs in summaries.items():
        out.setdefault(n, {})[m] = [accuracy(s, plan.paper_metric(m)) for s in runs]
        out["seeds"].setdefault(n, {})[m] = [s.get("seed") for s in runs]
    return out


def ablation_table(plan: Plan, summaries: dict[int, list[dict]], configs: dict[int, dict]) -> dict[int, dict]:
    """Table VII rows, means over seeds with ``per_seed`` values (docs/fedmps.md: why the last round)."""
    accs = {"proto_own_best": (PAPER_METRIC_PROTO, "best"), "proto_own_last": (PAPER_METRIC_PROTO, "last"),
            "head_best": (COMMON_METRIC, "best"), "head_last": (COMMON_METRIC, "last"),
            "proto_own_best_std": (PAPER_METRIC_PROTO, "best_std")}
    rows = {}
    for row, runs in summaries.items():
        per = {k: [accuracy(s, *how) for s in runs] for k, how in accs.items()}
        best_round = [s["metrics"][PAPER_METRIC_PROTO]["best_round"] for s in runs]
        soft = [float(np.mean(x)) for x in ([r["local"]["l_soft"]
                                             for r in results.rounds(configs[row], s["seed"], protocol=True)
                                             if "l_soft" in r.get("local", {})] for s in runs) if x]
        rows[row] = {**{k: float(np.mean(v)) for k, v in per.items()},
                     "best_round": best_round[0] if len(runs) == 1 else best_round,
                     "l_soft_mean": float(np.mean(soft)) if soft else None,
                     "per_seed": {k: per[k] for k in list(accs)[:4]}, "seed_std": sample_std(per["proto_own_best"]),
                     "n": len(runs), "seeds": [s["seed"] for s in runs]}
    return rows


def time_to_target(records: list[dict], metric: str, target: float) -> dict:
    """Fig. 5: the round and cumulative seconds at which ``metric`` first reaches ``target`` (``None``: never)."""
    elapsed = 0.0
    for r in records:
        elapsed += r["seconds"]
        if "acc" in r and r["acc"][metric]["mean"] >= target:
            return {"round": r["round"], "seconds": elapsed}
    return {"round": None, "seconds": None}


def seconds_per_round(records: list[dict]) -> float:
    """Median training seconds a round (round 1, the warm-up, skipped where there are more)."""
    return float(np.median([r["train_seconds"] for r in records[1:] or records]))


def _per_seed(v) -> list[float]:
    """A cell's per-seed values (a single value: one seed)."""
    return [float(x) for x in v] if isinstance(v, (list, tuple, np.ndarray)) else [float(v)]


def _cell(label: str, a, trend, **extra) -> dict:
    """A claim cell over seeds (``a``: one value or the per-seed values)."""
    per = _per_seed(a)
    return {"label": label, "value": float(np.mean(per)), "per_seed": per, "n": len(per), "trend": trend, **extra}


# -- the claims ledger ---------------------------------------------------------------------------
def ledger(plan: Plan, res: dict) -> list:
    """FedMPS's claims (params/fedmps/claims.yaml) judged on :func:`tables` of ``res`` (docs/fedmps.md)."""
    return claims.ledger("fedmps", tables(plan, res))


def tables(plan: Plan, res: dict) -> dict:
    """The tables FedMPS's claims read, by name (None where ``res`` lacks them)."""
    R, seeds, prof = plan.settings["rounds"], plan.seeds, plan.profile
    caveat = "short runs: not converged" if prof != "paper" else ""
    tr = res.get("trends") or {}
    where = f"{prof} profile, {R['main']} rounds, seed{'s' if len(seeds) > 1 else ''} {seeds}" + _added(
        plan, res.get("table3"), seeds)
    out = {**_table3_tables(plan, prof, res.get("table3"), res.get("table3_head"), where, caveat, len(seeds), tr),
           "comm_cifar10": _comm_table(plan, {m: c["up"] for m, c in (res.get("comm_cifar10") or {}).items()}),
           "comm": _comm_table(plan, res.get("comm")),
           "ways": _ways_table(plan, prof, res.get("ways"), f"seed {seeds[0]}", caveat, tr),
           "ablation": _ablation_claim_table(prof, res.get("ablation"), caveat, tr),
           "time": _time_table(plan, res.get("time"), R["main"], caveat, tr),
           "stdev": _sweep_table(plan, "stdev", res.get("stdev"), R["sweep"], caveat, tr),
           "clients": _sweep_table(plan, "clients", res.get("clients"), R["sweep"], caveat, tr),
           "tau": _tau_table(plan, res.get("tau_std"), res.get("tau") or {}, caveat, tr),
           "attack": _attack_table(plan, res.get("attack"), tr)}
    return {**out, **_paper_tables(plan, res if caveat else {})}


def _paper_tables(plan: Plan, res: dict) -> dict:
    """The paper protocol's Tables III, VI and VII beside a shorter profile's (``*_paper``)."""
    pp, pw, pa = res.get("table3_paper"), res.get("ways_paper"), res.get("ablation_paper")
    out = dict.fromkeys(("table3_paper", "table3_head_paper", "ways_paper", "ablation_paper"))
    if pp:
        pseeds = pp["plan"].seeds
        got = _table3_tables(plan, "paper", pp["rows"], pp["head"], f"paper profile, "
                             f"{pp['plan'].settings['rounds']['main']} rounds, seeds {pseeds}"
                             f"{_added(plan, pp['rows'], pseeds)}", "",
                             len(pseeds), pp.get("trends") or {})
        out.update(table3_paper=got["table3"], table3_head_paper=got["table3_head"])
    if pw and pw.get("rows"):
        pr = pw["plan"]
        acc = pw.get("per_seed") or {n: {m: v[0] for m, v in row.items()} for n, row in pw["rows"].items()}
        out["ways_paper"] = _ways_table(plan, "paper", acc, f"paper profile, {pr.settings['rounds']['main']} rounds, "
                                        f"seed {pr.seeds[0]}", "", pw.get("trends") or {})
    if pa and pa.get("rows"):
        pr = pa["plan"]
        seeds = list(pa.get("seeds") or _row_seeds(pa["rows"]) or pr.seeds[:1])
        seeds = f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"
        out["ablation_paper"] = _ablation_claim_table("paper", pa["rows"], f"paper profile, "
                                                      f"{pr.settings['rounds']['ablation']} rounds, {seeds}",
                                                      pa.get("trends") or {})
    return out


def _added(plan: Plan, rows: dict | None, seeds: list[int]) -> str:
    """The seeds Table III's ``rows`` read beyond ``seeds`` (:func:`fedlib.study.added_seeds_text`)."""
    return study.added_seeds_text({plan.label(m): r.get("seeds", ()) for m, r in (rows or {}).items()}, seeds)


def _table3_tables(plan: Plan, profile: str, t3: dict | None, head: dict | None, where: str, caveat: str,
                   n_seeds: int, tr: dict) -> dict:
    """Table III's tables from :func:`table3` rows: ``table3`` (the paper's rule) and ``table3_head``."""
    def table(rows, key):
        return Cells({m: {"label": plan.label(m), "value": r["mean"], "std": r.get("std"), "per_seed": r["per_seed"],
                          "p": r.get("p_vs_fedmps"), "trend": tr.get((key, m))} for m, r in rows.items()},
                     profile, caveat, seeds=n_seeds, text={"where": where}) if rows else None

    return {"table3": table(t3, "table3"), "table3_head": table(head, "table3_head")}


def _comm_table(plan: Plan, up: dict | None):
    """Table V's table from uplink floats per round: FedMPS and the methods that share the model (exact counts)."""
    return Cells({m: {"label": plan.label(m), "value": v} for m, v in up.items() if m != "fedproto"}, plan.profile,
                 seeds=len(plan.seeds)) if up else None


def _ways_table(plan: Plan, profile: str, ways: dict | None, where: str, caveat: str, tr: dict):
    """Table VI's table (``{n: {method: accuracy or [per seed]}}``, with ``"seeds"``: ``{n: {method: [seeds]}}``
    where a cell read seeds the evidence planner added): a cell per (n, method)."""
    if not ways:
        return None
    seeds = ways.get("seeds") or {}
    cells = {(n, m): _cell(f"{plan.label(m)} (n = {n})", a, tr.get(("ways", m, n)), name=plan.label(m),
                           seeds=seeds.get(n, {}).get(m))
             for n, row in ways.items() if n != "seeds" for m, a in row.items()}
    first = [s for c in cells.values() for s in (c["seeds"] or [])[:1]]
    what = "the further seeds of the same runs (at n = 3 Table III's, and any the evidence planner added)"

    def caveat_of(read):   # the seeds beyond the first that the cells a claim reads hold
        return study.with_added(caveat, study.added_seeds_text({c["label"]: c["seeds"] or () for c in read.values()},
                                                               first, what))
    more = any(c["n"] > 1 for c in cells.values())
    return Cells(cells, profile, caveat_of(cells), seeds=min(c["n"] for c in cells.values()),
                 text={"where": where + (", then the further seeds the note names; means over seeds" if more else "")},
                 caveat_of=caveat_of)


def _ablation_claim_table(profile: str, abl: dict | None, caveat: str, tr: dict):
    """Table VII's table from :func:`ablation_table` rows: best-round value per seed, last-round and head means."""
    if not abl:
        return None

    def seeds_of(r, key):
        return _per_seed((r.get("per_seed") or {}).get(key, r[key]))

    cells = {row: _cell(str(row), seeds_of(r, "proto_own_best"), tr.get(("ablation", row)),
                        last=float(np.mean(seeds_of(r, "proto_own_last"))),
                        head=float(np.mean(seeds_of(r, "head_last"))), seeds=r.get("seeds")) for row, r in abl.items()}
    over = " (mean over seeds)" if min(c["n"] for c in cells.values()) > 1 else ""

    def caveat_of(read):   # the seeds the planner added to the rows a claim reads (rows 1-4: none of row 6's)
        return study.with_added(caveat, _added_rows({row: abl[row] for row in read}, _row_seeds(abl)))
    return Cells(cells, profile, caveat_of(cells), text={"over": over}, caveat_of=caveat_of)


def _time_table(plan: Plan, tt: dict | None, rounds: int, caveat: str, tr: dict):
    """The time to target's table: rounds per seed, a never counted as ``rounds + 1`` (``censored``)."""
    if not tt:
        return None
    per = {m: list(v) if isinstance(v, (list, tuple)) else [v] for m, v in tt.items()}
    never, n = rounds + 1, min(len(v) for v in per.values())
    cells = {}
    for m, v in per.items():
        got = [never if t["round"] is None else t["round"] for t in v]
        missed = [t["round"] is None for t in v]
        text = f"{plan.label(m)} " + "/".join("never" if x else str(t["round"]) for x, t in zip(missed, v, strict=True))
        if len(v) > 1 and not all(missed):   # a never counts as rounds + 1: the mean is a lower bound
            text += f" (mean {'≥ ' if any(missed) else ''}{float(np.mean(got)):.1f})"
        cells[m] = {"label": plan.label(m), "value": float(np.mean(got)), "per_seed": got, "n": len(v),
                    "reached": not all(missed), "censored": any(missed), "trend": tr.get(("time", m)), "text": text}
    return Cells(cells, plan.profile, caveat, seeds=n,
                 text={"per_seed": f" per seed (n = {n})" if n > 1 else "", "never": never})


def _sweep_table(plan: Plan, key: str, sweep: dict | None, rounds: int, caveat: str, tr: dict):
    """Fig. 8's (``stdev``) or Fig. 9's (``clients``) table (``{value: {method: accuracy or [per seed]}}``); the
    seeds a cell read beyond the first (its trend's run group: at the base value Table III's further seeds, and
    any the evidence planner added) are named in the note of the claim that reads it."""
    if not sweep:
        return None
    cells = {(k, m): _cell(plan.label(m), a, tr.get((key, m, k)), x=k) for k, row in sweep.items()
             for m, a in row.items()}
    grid, base = plan.spec["grids"][key], table3_configs(plan)["fedmps"]   # the base value: Table III's run
    section, field = grid["field"].split(".")
    point = grid["label"].format(method="", value=base[section][field]).strip()
    what = f"the further seeds of the same runs (at {point} Table III's, and any the evidence planner added)"

    def caveat_of(read):
        return study.with_added(caveat, study.added_seeds_text(
            {t.label: t.group.seeds for c in read.values() if (t := c["trend"]) is not None and t.group is not None},
            plan.seeds[:1], what))
    return Cells(cells, plan.profile, caveat_of(cells), text={"rounds": rounds}, caveat_of=caveat_of)


def _tau_table(plan: Plan, tau_std: dict | None, grid: dict, caveat: str, tr: dict):
    """Fig. 10's table (std across each grid), with the trends of each grid's lowest and highest runs (their seeds:
    what the grid was read on, any the evidence planner added included)."""
    if not tau_std:
        return None
    cells = {}
    for t, s in tau_std.items():
        v = _per_seed(s)
        acc = grid.get(t) or {}
        lo, hi = (min(acc, key=acc.get), max(acc, key=acc.get)) if acc else (None, None)
        cells[t] = {"label": t, "std": float(np.mean(v)), "per_seed": v, "n": len(v),
                    "value": math.nan if np.isnan(v).all() else float(np.nanmean(v)),
                    "trend": tr.get((t, "fedmps", lo)), "b_trend": tr.get((t, "fedmps", hi))}
    added = study.added_seeds_of({t: c["trend"] for t, c in cells.items()}, plan.seeds)
    return Cells(cells, plan.profile, study.with_added(caveat, added))


def _attack_table(plan: Plan, atk, tr: dict):
    """Fig. 11's table: the best mean SSIM from the prototypes and the attacker's class average's (one seed)."""
    if atk is None:
        return None
    ssim = atk.set_index(["source", "levels"])["ssim"]
    proto = max(v for (src, _), v in ssim.items() if src == "prototype")
    ref = ssim.get(("class_average", "-"))
    cells = {"prototypes": {"label": "prototypes", "value": proto, "class_average": math.nan if ref is None else ref,
                            "trend": tr.get(("attack",))}}
    return Cells(cells, plan.profile, seeds=1)


def _row_seeds(rows: dict | None) -> list:
    """The seeds every one of :func:`ablation_table`'s rows was read on (``[]`` where they do not say); a row may read
    more, those the evidence planner added to its runs (:func:`_added_rows`)."""
    seeds = [list(r.get("seeds") or []) for r in (rows or {}).values()]
    return [s for s in seeds[0] if all(s in x for x in seeds)] if seeds else []


def _added_rows(rows: dict | None, base: list | None = None) -> str:
    """``", and the seeds the evidence planner added: row 6 1237-1239"``: the seeds Table VII's rows read beyond
    ``base``, those every row of the table reads (default: every one of ``rows``; a claim reading two rows names
    their seeds beyond the table's, not beyond what the two share) (:func:`fedlib.study.added_seeds_text`); ``""``
    where none does."""
    return study.added_seeds_text({f"row {row}": r.get("seeds") or () for row, r in (rows or {}).items()},
                                  _row_seeds(rows) if base is None else base)
