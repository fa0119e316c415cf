"""The FedIC study (Zheng et al., AAAI 2026): configs, tables, analyses.

``load_plan(profile)`` reads ``params/fedic/experiments.yaml``; the ``*_configs`` functions give the
validated configs of Table 1 (per setting and method), Fig. 2 (the number of clusters K), Fig. 4 (the
component ablation), and the Table 3 and Table 4 analogues on Fashion-MNIST (client count, Dirichlet
concentration); the rest turns finished runs into the paper's numbers.

Scoring (docs/fedic.md): PFLlib's personalised accuracy, every client's model on its own test split,
argmax over all classes, summed correct over summed test samples (sample-weighted); the paper's
number is read as the best round (what PFLlib prints), the last round is shown beside it. FedProto
predicts by its nearest global prototype, every other method by its head.
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np

from fedlib import papers
from fedlib.grid import run_configs as run  # noqa: F401 (I.run in the notebook)


@dataclasses.dataclass
class Plan(papers.TablePlan):
    """The FedIC experiments under one profile."""

    paper = "fedic"

    def sweep_methods(self) -> list[str]:
        value = self.settings["sweep_methods"]
        return [m for m in self.table1_methods() if value == "all" or m in value]

    def partition_label(self, name: str) -> str:
        return self.spec["partitions"][name]["label"]

    def setting(self) -> str:
        """What made the numbers, for every table caption."""
        frac = self.settings["fraction"]
        data = "all of Fashion-MNIST" if frac == 1 else f"{100 * frac:g}% of Fashion-MNIST (stratified)"
        return f"profile {self.profile}: {data}, {self.rounds} rounds, seeds {self.seeds}"


def load_plan(profile: str = "quick", **options) -> Plan:
    """The plan of ``profile``; ``methods``, ``seeds`` and ``rounds`` override it, and ``results_dir``,
    ``data_root``, ``device`` and ``executor`` place the runs (:meth:`papers.Plan.load`)."""
    return Plan.load(profile, **options)


def config(plan: Plan, method: str, partition: str = "pra", name: str | None = None, variant: bool = False,
           dataset: str = "fmnist", **changes) -> dict:
    """The validated config of ``method`` (or, with ``variant``, a Fig. 4 variant) on ``partition`` of
    ``dataset`` (its Pat classes per client and FedIC's K from ``datasets`` in the params file, by reference);
    ``changes`` are dotted overrides applied last (``partition.num_clients``, ``partition.alpha``,
    ``algorithm.K``)."""
    dspec = plan.entry("datasets", dataset, "dataset")
    entry = plan.method_entry(method, variant=variant, field="variant" if variant else "method")
    pspec = plan.entry("partitions", partition, "partition")
    base = copy.deepcopy(plan.spec["base"])
    base["dataset"] = {**base["dataset"], "name": dataset}
    if plan.settings["fraction"] != 1:
        base["dataset"]["fraction"] = plan.settings["fraction"]
    where = "" if dataset == "fmnist" else f"{dataset}/"
    return plan.config(entry, name or f"fedic-study/{where}{partition}/{method}", method=method, base=base,
                       dataset=dspec, partition=pspec, rounds=plan.rounds, changes=changes)


def table1_configs(plan: Plan, dataset: str = "fmnist") -> dict[tuple[str, str], dict]:
    """Table 1: ``{(partition, method): config}`` on ``dataset``."""
    return {(p, m): config(plan, m, p, dataset=dataset) for p in plan.settings["partitions"]
            for m in plan.table1_methods()}


def k_configs(plan: Plan) -> dict[int, dict]:
    """Fig. 2: FedIC with K clusters per class (Pra)."""
    return {k: config(plan, "fedic", name=f"fedic-study/pra/K{k}", **{"algorithm.K": k})
            for k in plan.settings["k_values"]}


def ablation_configs(plan: Plan) -> dict[str, dict]:
    """Fig. 4: the four variants (Pra); ``{}`` when the profile skips it."""
    if not plan.settings["ablation"]:
        return {}
    return {v: config(plan, v, name=f"fedic-study/pra/ablation/{v}", variant=True) for v in plan.spec["variants"]}


def scale_configs(plan: Plan) -> dict[tuple[int, str], dict]:
    """Table 3 analogue: ``{(clients, method): config}`` for the profile's sweep methods on the profile's
    ``clients_partition`` (Pat: under Pra a 5% subsample cannot give 40 clients PFLlib's 40 samples each)."""
    p = plan.settings["clients_partition"]
    return {(n, m): config(plan, m, p, name=f"fedic-study/{p}/n{n}/{m}", **{"partition.num_clients": n})
            for n in plan.settings["clients"] for m in plan.sweep_methods()}


def alpha_configs(plan: Plan) -> dict[tuple[float, str], dict]:
    """Table 4 analogue: ``{(alpha, method): config}`` (Dirichlet concentration) for the sweep methods."""
    return {(a, m): config(plan, m, name=f"fedic-study/dir{a:g}/{m}", **{"partition.alpha": float(a)})
            for a in plan.settings["alphas"] for m in plan.sweep_methods()}


def all_jobs(plan: Plan) -> list[tuple[dict, int]]:
    """Every (config, seed) of the notebook, unique, longest first."""
    jobs = [(c, s) for c in table1_configs(plan).values() for s in plan.seeds]
    for cfgs in (k_configs(plan), ablation_configs(plan), scale_configs(plan), alpha_configs(plan)):
        jobs += [(c, s) for c in cfgs.values() for s in plan.seeds]
    two_phase = {"fedpac", "fedic", "fedccfa"}

    def cost(cfg):
        return cfg["train"]["rounds"] * (1 + (cfg["algorithm"]["name"] in two_phase))

    return papers.unique_jobs(jobs, cost)


# -- reading results ---------------------------------------------------------------------------
def metric(plan: Plan, method: str) -> str:
    """The scoring rule of a Table 1 row (or of a FedIC variant: the head)."""
    return plan.metric(method) if method in plan.spec["methods"] else "acc_head"


def accuracy(plan: Plan, method: str, summary: dict, stat: str = "best") -> float:
    """A run's sample-weighted personalised accuracy (%) at the best (or last) round."""
    return 100.0 * summary["metrics"][metric(plan, method)][f"{stat}_weighted"]


def cost(records: list[dict]) -> dict:
    """Measured per-round cost of a run: median seconds of training and aggregation (this machine), and
    floats sent up and down per round summed over clients, with megabytes at 4 bytes per float."""
    secs = float(np.median([r["train_seconds"] for r in records if "train_seconds" in r]))
    up = float(np.mean([r["up_params"] for r in records]))
    down = float(np.mean([r["down_params"] for r in records]))
    return {"seconds": secs, "up_params": up, "down_params": down, "megabytes": 4 * (up + down) / 1e6}


def cells(plan: Plan, results: dict, records: dict | None = None) -> dict:
    """``{key: {"best", "last", "n", "per_seed", "best_round", **cost, "plateau"}}`` of finished runs (``key[-1]``
    or ``key`` is the method/variant): accuracies (%) averaged over seeds; where ``records`` are given, the cost of
    the first seed's run and ``plateau`` (:func:`fedlib.papers.plateau_text` of the records: "" once plateaued)."""
    out = {}
    for key, runs in results.items():
        m = key[-1] if isinstance(key, tuple) else ("fedic" if isinstance(key, int) else key)
        best = [accuracy(plan, m, s, "best") for s in runs]
        last = [accuracy(plan, m, s, "last") for s in runs]
        mt = metric(plan, m)
        out[key] = {"best": float(np.mean(best)), "last": float(np.mean(last)), "n": len(runs),
                    "best_std": float(np.std(best)), "per_seed": best,
                    "best_round": int(runs[0]["metrics"][mt]["best_weighted_round"])}
        if records is not None and key in records:
            out[key].update(cost(records[key]))
            out[key]["plateau"] = papers.plateau_text(records[key], mt, "weighted")
    return out


def plateau_note(plan: Plan, cells_: dict) -> str:
    """A caption's note naming the runs whose curve had not plateaued (:func:`fedlib.papers.plateau_text`
    of the records :func:`cells` was given), ``""`` where all had or none was checked."""
    def name(k):
        parts = k if isinstance(k, tuple) else (k,)
        return " ".join([plan.label(parts[-1]), *map(str, parts[:-1])])

    rising = [f"{name(k)}: {c['plateau']}" for k, c in cells_.items() if c.get("plateau")]
    return ("Not plateaued (best-so-far accuracy still rising by 0.2 points or more over the last 20% of rounds): "
            + "; ".join(rising) + ".") if rising else ""


def ours_table(plan: Plan, table: dict, stat: str = "best", dataset: str = "fmnist") -> dict:
    """Table 1 cells as ``{method: {pat_<dataset>|pra_<dataset>: [mean, std, n]}}`` (:func:`fedlib.report.compare`)."""
    return {m: {f"{p}_{dataset}": [c[stat], c["best_std"] if stat == "best" else None, c["n"]]
                for (p, mm), c in table.items() if mm == m} for m in plan.table1_methods()}


def prototype_distances(state, cls: int = 0) -> tuple[np.ndarray, list[int]]:
    """Fig. 3a: pairwise cosine distances (holders x holders) of the class-``cls`` prototypes the clients of a
    finished FedPAC/FedIC run would upload next (their last uploads are not kept), and the holders' ids.
    Uses the client models the server would send (global extractor, combined head) after one local update."""
    from fedlib.algorithms.base import Round

    algo, ctx = state.algorithm, state.ctx
    rnd = Round(state.round + 1, state.cfg["train"]["rounds"], ctx.seed)
    rows, ids = [], []
    for cid in range(ctx.num_clients):
        _, up, _ = algo.local_update(ctx, cid, state.clients[cid], state.message(cid), state.data.train[cid], rnd)
        hit = (up["classes"] == cls).nonzero().flatten()
        if len(hit):
            rows.append(up["protos"][hit[0]].double().cpu().numpy())
            ids.append(cid)
    x = np.stack(rows)
    unit = x / np.clip(np.linalg.norm(x, axis=1, keepdims=True), 1e-12, None)
    return np.clip(1 - unit @ unit.T, 0, 2), ids


def _vs_best(plan: Plan, row: dict, name: str) -> list:
    """``name`` against the best other entry of ``row`` (``{key: cell}``) per seed, paired (the methods share
    each seed's partition); ``[]`` with one seed."""
    from fedlib.claims import versus_best

    if min(c["n"] for c in row.values()) < 2:
        return []
    return [versus_best(plan.label(name), {plan.label(k): c["per_seed"] for k, c in row.items()})]


def _sweep_claim(plan: Plan, cells_: dict, claim_: str, source: str, name: str, enough, note: str):
    """"FedIC is best at every value" of a sweep ``{(value, method): cell}``; not tested when the profile's
    values are not ``enough`` or FedIC has nobody to beat."""
    from fedlib.claims import claim, untested

    keys = sorted({k[0] for k in cells_})
    rows = {v: {m: c for (vv, m), c in cells_.items() if vv == v} for v in keys}
    rows = {v: r for v, r in rows.items() if "fedic" in r and len(r) > 1}
    if not rows or not enough(keys):
        return untested(claim_, source, f"the profile runs {', '.join(name.format(v) for v in keys)} with "
                        + ", ".join(plan.sweep_methods()))
    wins = [r["fedic"]["best"] >= max(c["best"] for m, c in r.items() if m != "fedic") for r in rows.values()]
    evidence = "; ".join(name.format(v) + ": " + ", ".join(f"{plan.label(m)} {c['best']:.2f}"
                                                           for (vv, m), c in cells_.items() if vv == v) for v in keys)
    n = min(c["n"] for r in rows.values() for c in r.values())
    tests = [t for r in rows.values() for t in _vs_best(plan, r, "fedic")]
    return claim(claim_, source, evidence, all(wins), plan.profile, n, tests,
                 note + "; methods: " + ", ".join(plan.sweep_methods()))


def ledger(plan: Plan, res: dict) -> list:
    """FedIC's claims with our evidence and a verdict each, by :func:`fedlib.claims.verdict`.

    ``res`` (each key optional): ``table1`` (:func:`cells` of Table 1), ``k`` (``{K: cell}``), ``ablation``
    (``{variant: cell}``), ``scale`` (``{(clients, method): cell}``), ``alphas`` (``{(alpha, method): cell}``),
    ``bias`` (``{"global": x, "cluster": y}`` from FedIC's last round). Accuracy claims compare per seed, paired
    (every method and variant runs on the same seeds, so the same partitions); claim "clustering reduces the
    aggregation bias" holds by construction."""
    from fedlib.claims import claim, compare, untested

    prof = plan.profile
    caveat = plan.setting() + ("" if prof in ("paper", "converged") else "; not converged (the paper: 800 rounds)")
    out = []
    t1 = res.get("table1")
    if t1 and any(k[-1] == "fedic" for k in t1):
        for p in plan.settings["partitions"]:
            row = {k[-1]: v for k, v in t1.items() if k[0] == p}
            if "fedic" not in row or len(row) < 2:
                continue
            best = max((m for m in row if m != "fedic"), key=lambda m: row[m]["best"])
            out.append(claim(f"FedIC beats every baseline on Fashion-MNIST {plan.partition_label(p)}", "Table 1",
                             f"FedIC {row['fedic']['best']:.2f} vs best baseline {plan.label(best)} "
                             f"{row[best]['best']:.2f} (best round, sample-weighted)",
                             row["fedic"]["best"] > row[best]["best"], prof, row["fedic"]["n"],
                             _vs_best(plan, row, "fedic"), caveat))
        for p in plan.settings["partitions"]:
            if (p, "fedpac") in t1 and (p, "fedic") in t1:
                a, b = t1[(p, "fedic")], t1[(p, "fedpac")]
                if "seconds" in a and "seconds" in b:
                    out.append(claim("FedIC's round costs at most moderately more time than FedPAC's (the "
                                     "paper: 1.13x) and FedIC communicates less", "Table 1 (cost columns)",
                                     f"{plan.partition_label(p)}: {a['seconds']:.2f} vs {b['seconds']:.2f} s per "
                                     f"round ({a['seconds'] / b['seconds']:.2f}x, this machine); "
                                     f"{a['megabytes']:.2f} vs {b['megabytes']:.2f} MB per round",
                                     a["megabytes"] < b["megabytes"] and a["seconds"] < 1.5 * b["seconds"], prof, 1,
                                     note="rule: less traffic and under 1.5x the time; timings from one CPU run; "
                                     "FedPAC computes its statistics twice (before and after training), "
                                     "FedIC once (docs/fedic.md, decision 5)"))
                    break
    else:
        out.append(untested("FedIC beats every baseline", "Table 1", "not run"))
    ks = res.get("k")
    if ks and len(ks) >= 3:
        accs = {k: c["best"] for k, c in ks.items()}
        best = max(accs, key=accs.get)
        inner = max((k for k in ks if min(ks) < k < max(ks)), key=accs.get)
        outer = max((min(ks), max(ks)), key=accs.get)
        n = min(c["n"] for c in ks.values())
        tests = [compare(f"K {inner} - K {outer}", ks[inner]["per_seed"], ks[outer]["per_seed"])] if n > 1 else ()
        out.append(claim("An intermediate K is best (K = 3 on Fashion-MNIST)", "Fig. 2",
                         ", ".join(f"K {k}: {a:.2f}" for k, a in sorted(accs.items())), min(accs) < best < max(accs),
                         prof, n, tests, caveat + "; Pra"))
    elif ks:
        out.append(untested("An intermediate K is best", "Fig. 2", f"the profile runs K = {sorted(ks)}"))
    ab = res.get("ablation")
    if ab and len(ab) == 4:
        a = {v: c["best"] for v, c in ab.items()}
        steps = ("baseline", "clustering", "collaboration", "fedic")
        n = min(c["n"] for c in ab.values())
        tests = [compare(f"{plan.label(hi)} - {plan.label(lo)}", ab[hi]["per_seed"], ab[lo]["per_seed"])
                 for lo, hi in zip(steps, steps[1:], strict=False)] if n > 1 else ()
        out.append(claim("baseline < + clustering < + collaboration < both", "Fig. 4",
                         ", ".join(f"{plan.label(v)} {x:.2f}" for v, x in a.items()),
                         all(a[lo] < a[hi] for lo, hi in zip(steps, steps[1:], strict=False)), prof, n, tests,
                         caveat + "; the paper's ablation is on CIFAR-100, ours on Fashion-MNIST Pra"))
    sweeps = (("scale", "FedIC stays best with 40 and 60 clients", "Table 3", "{} clients",
               lambda keys: max(keys) > 20, "the paper's table is CIFAR, ours Fashion-MNIST "
               + plan.partition_label(plan.settings["clients_partition"])),
              ("alphas", "FedIC is best at every Dirichlet concentration", "Table 4", "alpha {:g}",
               lambda keys: len(keys) > 1, "alpha 0.01 cannot give 20 clients 40 samples each on 10 classes "
               "(PFLlib's resampling never ends): 0.05 instead"))
    for key, claim_, source, name, enough, note in sweeps:
        cells_ = res.get(key)
        if cells_:
            out.append(_sweep_claim(plan, cells_, claim_, source, name, enough, f"{caveat}; {note}"))
    bias = res.get("bias")
    if bias:
        out.append(claim("Clustering reduces the prototype aggregation bias", "Eqs. 4-5, Fig. 3a",
                         f"mean distance of a client's prototype to its anchor: cluster {bias['cluster']:.3f} vs "
                         f"global {bias['global']:.3f}", bias["cluster"] < bias["global"], prof, 1,
                         note=caveat + "; FedIC's last round, Pra; whether accuracy follows is Fig. 4's question",
                         construction="for K > 1 a client's prototype lies in its own group, so its group's anchor "
                         "is nearer than the mean over all groups"))
    out.append(untested("CIFAR-10, CIFAR-100 and TinyImageNet columns; ResNet backbones", "Tables 1-5",
                        "the data are not on this machine"))
    return out


def archived_tables() -> list[tuple[str, dict, list[int]]]:
    """The converged-profile tables the report reads: ``(name, configs, seeds)`` (:mod:`fedlib.papers.catalog`)."""
    cp = load_plan("converged")
    return [("FedIC Table 1 (converged profile)", table1_configs(cp), cp.seeds),
            ("FedIC Fig. 2 (converged profile)", k_configs(cp), cp.seeds),
            ("FedIC Fig. 4 (converged profile)", ablation_configs(cp), cp.seeds)]


@papers.command
def main(argv: list[str] | None = None) -> int:
    """``python -m fedlib.papers.fedic [--profile P] [--dataset D] [--methods M ...] [--seeds S ...] [--rounds N]``:
    run Table 1 headless and print paper | ours per setting (best round, sample-weighted)."""
    from fedlib import report
    from fedlib.runner import load_rounds

    parser = papers.cli("python -m fedlib.papers.fedic", main.__doc__)
    parser.add_argument("--dataset", default="fmnist", help="fmnist (default), cifar10 or cifar100 (their files "
                        "must be in the data root; nothing is downloaded)")
    args, plan = papers.plan_from_cli(parser, load_plan, argv)
    if plan is None:
        return 2
    if args.dataset not in plan.spec["datasets"]:
        print(f"error: --dataset: got {args.dataset!r}; allowed: {', '.join(plan.spec['datasets'])}")
        return 2
    cfgs = table1_configs(plan, args.dataset)
    res = run(cfgs, workers=args.workers, desc="Table 1")
    t1 = cells(plan, res, {k: load_rounds(c, plan.seeds[0]) for k, c in cfgs.items()})
    paper = report.load_paper("fedic")["tables"]["table1"]
    print(f"FedIC Table 1 on {args.dataset}, {plan.setting()}; best round, sample-weighted (%)")
    print(report.to_markdown(report.compare(paper, ours_table(plan, t1, dataset=args.dataset))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
