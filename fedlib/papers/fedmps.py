"""FedMPS (W. Yang et al., "FedMPS: Federated Learning in a Synergy of Multi-Level Prototype-Based Contrastive
Learning and Soft Label Generation", IEEE TNNLS 2025) on Fashion-MNIST: the configs, Tables III and V-VII, Figs. 3-11
and the claims ledger. Every decision (the evaluation conventions: decision 11) is in docs/fedmps.md. The notebook's
grids train through fedlib.results.train(protocol=True): a run the benchmark extended is read at the paper's rounds."""

from __future__ import annotations

import functools
import math

import numpy as np
import pandas as pd

from fedlib import report, results, study
from fedlib.analysis import embed_2d, next_uploads, pairwise_distances, test_features
from fedlib.claims import DECISIVE_PROFILES, sample_std
from fedlib.plans.fedmps import (  # noqa: F401  (re-exported: the study's plan part)
    COMMON_METRIC, PAPER_METRIC_PROTO, SWEEPS, TEMPERATURES, Plan, ablation_configs, all_jobs, archived_tables,
    config, grid_configs, grid_seeds, load_plan, temperature_configs, table3_configs, variant_configs, ways_configs)
from fedlib.privacy.attack import attacker_aux
from fedlib.study import check_methods
from fedlib.study.notebook import Shown
from fedlib.ledgers.fedmps import (  # noqa: F401  (re-exported: the study's ledger)
    ledger, tables, _row_seeds, _added_rows, trend_groups, trends, mean_std_n, accuracy, table3, ways_rows,
    ways_per_seed, ablation_table, time_to_target, seconds_per_round)
from fedlib.ledgers.fedmps import (  # noqa: F401  (re-exported: the study's ledger)
    paper_table3, paper_table6, paper_table7, global_prototypes, cifar10_shaped, communication_cifar10,
    local_prototypes_by_class, times_to_target)

TABLE6_BLOCKS = {3: "table6_block1", 4: "table6_block2"}  # Table VI's printed blocks by n (decision 12)
TABLE6_NOTES = {4: " (paper block 2: n label uncertain)", 5: " (no paper block)"}
FIGURES = {"stdev": 8, "clients": 9}   # the figure each sweep of :data:`SWEEPS` draws


# -- reading results -------------------------------------------------------------------
def paper_vs_ours(paper: dict, table: str | None, ours: dict):
    """``paper | [authors' code |] ours | diff`` for the Fashion-MNIST column (decision 27)."""
    df = report.compare(paper["tables"][table] if table else {"rows": {}}, ours)
    return report.reference_column(df, paper, table, "fmnist") if table else df


@study.command
def main(argv: list[str] | None = None) -> int:
    """``python -m fedlib.papers.fedmps [--profile P] [--table III|VI|VII] [--methods M ...] [--seeds S ...]
    [--rounds N]``: run one table headless (no notebook) and print paper | ours | diff. Table III runs
    every seed of the profile; Table VI its first seed (the paper's "same random seed"); Table VII the profile's
    ``ablation_seeds`` (the paper profile: every seed; else the first)."""
    parser = study.add_retrain_archived(study.cli("python -m fedlib.papers.fedmps", main.__doc__))
    parser.add_argument("--table", default="III", choices=["III", "VI", "VII"],
                        help="III (default: every method, every seed), VI (n = 3, 4, 5) or VII (the loss ablation)")
    args = parser.parse_args(argv)

    def obtain(*a, **kw):  # a finished run is read, not retrained; at the paper's rounds (longest=False)
        return results.run_or_read(*a, retrain_archived=args.retrain_archived, longest=False, protocol=True,
                                   **kw)

    plan = Plan.load(args.profile, seeds=args.seeds, rounds=args.rounds, device=args.device, executor=args.executor)
    if args.methods:
        methods = check_methods(args.methods, plan.methods)
        plan.settings["table3_methods"] = plan.settings["sweep_methods"] = methods
    full, seed0, R = report.load_paper("fedmps"), plan.seeds[0], plan.settings["rounds"]
    if args.table == "VI":
        rows = ways_rows(plan, obtain(ways_configs(plan), seeds=[seed0], workers=args.workers, desc="Table VI"))
        for n, ours in sorted(rows.items()):
            print(f"FedMPS Table VI, n = {n}, profile {args.profile}: {R['main']} rounds, seed {seed0}; best round, "
                  "mean ± std across clients (%)")
            print(report.to_markdown(_table6_frame(full, plan.label, n, ours)))
        return 0
    if args.table == "VII":
        configs, seeds = ablation_configs(plan), plan.ablation_seeds()
        rows = ablation_table(plan, obtain(configs, seeds=seeds, workers=args.workers, desc="Table VII"), configs)
        print(f"FedMPS Table VII (Fashion-MNIST; the paper's is CIFAR-10), profile {args.profile}: {R['ablation']} "
              f"rounds, {_seeds_text(rows)} (%)")
        print(report.to_markdown(_table7_frame(full, rows)))
        return 0
    configs = table3_configs(plan)
    rows = table3(plan, obtain(configs, workers=args.workers, desc="Table III"))
    head = table3(plan, obtain(configs, workers=args.workers, progress=False), metric=COMMON_METRIC)
    print(f"FedMPS Table III, Fashion-MNIST, profile {args.profile}: {R['main']} rounds, "
          f"seeds {plan.seeds}; best round, unweighted mean over clients (%)")
    print(report.to_markdown(_table3_frame(full, plan.label, rows, head, args.profile)))
    return 0


# The notebook (notebooks/fedmps.py): one function per cell, each adding its table or figure to the report section
# and returning it; ``nb`` is the notebook's state (:class:`fedlib.study.notebook.Notebook`), ``nb.paper`` the whole
# params/fedmps/paper.yaml.

def notebook(profile: str, methods=None, seeds=None, rounds=None, workers=None, embedding: str = "tsne",
             device=None, backend=None):
    """The set-up cell: the notebook state the other cells take."""
    from fedlib.study.notebook import open_notebook

    def about(plan):
        R = plan.settings["rounds"]
        return (f"{R['main']} (sweeps {R['sweep']}, ablation {R['ablation']})", config(plan, "fedmps")["device"],
                f"profile {profile!r}: rounds {R}, seeds {plan.seeds}, profile overrides {plan.settings['overrides']}")

    return open_notebook("fedmps", load_plan, profile, about, backend=backend, workers=workers, embedding=embedding,
                         reference=None, methods=methods, seeds=seeds, rounds=rounds, device=device)


def introduction(nb) -> None:
    """The report section's opening paragraph: the setting of the Fashion-MNIST column and the profile."""
    R = nb.plan.settings["rounds"]
    nb.section.text(
        "Fashion-MNIST column of FedMPS (Table II partition: 20 clients, n = 3, k = 100, |A_ij| = 110, t = 15, "
        "std 2; FedProto's CNN; SGD lr 0.01, momentum 0.5, batch 8, 1 local epoch). "
        f"Profile `{nb.profile}`: rounds {R}, seeds {nb.plan.seeds}. Accuracy = best round of the unweighted mean over "
        "clients (%). Paper numbers are reference data (params/fedmps/paper.yaml); *ours* come from runs of this "
        "suite." + (" **Quick/smoke runs are far shorter than the paper's: their numbers are not converged.**"
                    if nb.profile != "paper" else ""))


def _partition(nb):
    """The Table II partition of Table III's FedMPS run, first seed."""
    return nb.once("partition", lambda: results.build(config(nb.plan, "fedmps"), nb.seed0)[0].partition)


def fig3(nb):
    """Fig. 3 (e): training samples per client and class of the Fashion-MNIST partition."""
    import matplotlib.pyplot as plt

    from fedlib import plots

    fig, ax = plt.subplots(figsize=(10, 3.8))
    plots.partition_heatmap(_partition(nb), ax=ax, title=f"Fashion-MNIST, n = 3, std 2, 20 clients (seed {nb.seed0})")
    return nb.figure(fig, "Fig. 3 (e): training samples per client (x) and class (y)", "fig3_partition")


def check_partition(nb) -> None:
    """Print the partition's classes per client, (client, class) pairs and client 0's classes."""
    part = _partition(nb)
    print("classes per client:", [len(part.classes(c)) for c in range(part.num_clients)])
    print("(client, class) pairs:", int((part.counts > 0).sum()))
    print("client 0 classes:", part.classes(0).tolist())


def _communication_cifar(nb) -> dict:
    return nb.once("comm_cifar", lambda: communication_cifar10(nb.plan, nb.plan.selected("table3_methods")))


def print_table5(nb) -> None:
    """Print Table V's measured parameters per round, up and down (CIFAR-10 setting)."""
    for m, c in _communication_cifar(nb).items():
        print(f"{nb.label(m):9} up {c['up']:>10,}   down {c['down']:>10,}")


def show_table5(nb):
    """Table V (CIFAR-10 setting): parameters per round, paper vs measured in the paper's direction."""
    comm = _communication_cifar(nb)
    direction = {m: ("down" if m == "fedgkd" else "up") for m in comm}
    df = report.compare(nb.paper["tables"]["table5"], {m: {"params": c[direction[m]]} for m, c in comm.items()},
                        digits=0)
    df["our direction"] = [direction.get(m, "") for m in df.index]
    df["ours down"] = [f"{comm[m]['down']:,}" if m in comm else "-" for m in df.index]
    return nb.table("**Table V (CIFAR-10 setting): parameters per round, paper vs measured.** FedMPS: the paper's "
                    "30,780 = our uplink 30,680 + one 10 x 10 soft-label table; our downlink sends each client all "
                    "global prototypes (400 + 120) and soft labels (10) per class.", df)


def _table3(nb) -> dict:
    """Table III's runs and rows under the paper's rule and under the head over all classes."""
    def make():
        configs = table3_configs(nb.plan)
        runs = results.train(configs, workers=nb.workers, desc="Table III", protocol=True)
        # and the seeds the evidence planner added where a margin was within the spread
        runs = nb.with_added_seeds(configs, runs, protocol=True)
        return {"runs": runs, "rows": table3(nb.plan, runs), "head": table3(nb.plan, runs, metric=COMMON_METRIC)}
    return nb.once("table3", make)


def _table3_frame(paper: dict, label, rows: dict, head: dict, profile: str | None = None):
    """Table III as shown: paper | ours | diff (with ``profile``: the rule), the p against FedMPS, the head's."""
    df = paper_vs_ours(paper, "table3", {m: {"fmnist": (r["mean"], r["std"], r["n"])} for m, r in rows.items()})
    if profile:
        df = report.short_run(df, profile)
        df["rule (paper's convention)"] = [rows[m]["metric"] if m in rows else "" for m in df.index]
    df["p vs FedMPS"] = [("—" if rows.get(m, {}).get("p_vs_fedmps") is None else f"{rows[m]['p_vs_fedmps']:.3g}")
                         for m in df.index]
    df["ours, head over all classes"] = [report.fmt(head[m]["mean"], head[m]["std"], n=head[m]["n"]) if m in head
                                         else "—" for m in df.index]
    df.index = [label(m) for m in df.index]
    return df


def show_table3(nb):
    """Table III (Fashion-MNIST) under the paper's rule and the head over all classes, with the p against FedMPS."""
    t3 = _table3(nb)
    nb.section.record(table3=t3["rows"], table3_head=t3["head"])
    added = [f"{nb.label(m)} {r['n']}" for m, r in t3["rows"].items() if r["n"] > len(nb.plan.seeds)]
    return nb.table("**Table III (Fashion-MNIST): accuracy (%), mean ± std over seeds; paper's evaluation convention, "
                    "and the head over all classes for every method.**",
                    _table3_frame(nb.paper, nb.label, t3["rows"], t3["head"], nb.profile),
                    *([f"Seeds added where a claim's margin was within the seed spread: {', '.join(added)} seeds "
                       f"(the others: {len(nb.plan.seeds)})."] if added else []))


def _uplinks(nb) -> dict:
    """Each Table III method's measured uplink per round (Fashion-MNIST)."""
    return {m: runs[0]["comm_per_round"]["up_params"] for m, runs in _table3(nb)["runs"].items()}


def check_table3(nb) -> None:
    """Print Table III's checks: distinct code paths, smaller prototype uplinks that match the (client, class) pairs."""
    rows3, fm_comm, pairs = _table3(nb)["rows"], _uplinks(nb), int((_partition(nb).counts > 0).sum())
    proto_methods = [m for m in ("fedproto", "fedmps") if m in fm_comm]
    param_methods = [m for m in fm_comm if m not in proto_methods]
    print("every method's accuracy differs from FedMPS's (no two methods share one code path):",
          all(rows3[m]["per_seed"] != rows3["fedmps"]["per_seed"] for m in rows3 if m != "fedmps"))
    print("prototype methods upload fewer parameters than every parameter method:",
          max(fm_comm[m] for m in proto_methods) < min([fm_comm[m] for m in param_methods], default=float("inf")))
    print("FedProto uploads one 1568-d prototype per (client, class) pair:", fm_comm["fedproto"] == 1568 * pairs)
    print("FedMPS uploads (3136 + 1568) per pair:", fm_comm["fedmps"] == (3136 + 1568) * pairs)


def show_conventions(nb):
    """Table III's methods under four evaluation conventions, with the rank under two of them."""
    L, t3 = nb.label, _table3(nb)
    runs, rows3, head3 = t3["runs"], t3["rows"], t3["head"]
    conv = pd.DataFrame({
        "paper's convention": {L(m): rows3[m]["mean"] for m in rows3},
        "head, all classes": {L(m): head3[m]["mean"] for m in head3},
        "head, own classes": {L(m): np.mean([accuracy(s, "acc_head_own") for s in runs[m]]) for m in runs},
        "nearest prototype, all classes": {L(m): np.mean([accuracy(s, "acc_proto") for s in runs[m]])
                                           for m in runs if "acc_proto" in runs[m][0]["metrics"]},
    }).round(2)
    conv["rank (paper)"] = conv["paper's convention"].rank(ascending=False).astype(int)
    conv["rank (head, all)"] = conv["head, all classes"].rank(ascending=False).astype(int)
    return nb.table("**Evaluation conventions (Fashion-MNIST, mean over seeds, %).** The paper's rule restricts the "
                    "prototype methods to each client's 2-5 classes; the head over all classes is one common rule.",
                    conv)


def _from_paper_runs(roman: str, load, flag: str = ""):
    """A cell showing Table ``roman`` from the paper profile's finished runs; ``fn(nb, data)``: (setting, text)."""
    def wrap(fn):
        @functools.wraps(fn)
        def cell(nb):
            data, early = nb.paper_protocol(f"Table {roman}", load.__name__, load, lambda d: d["rows"],
                                            "python -m fedlib.papers.fedmps --profile paper" + flag)
            if early is not None:
                return early
            where, text = fn(nb, data)
            return nb.markdown(f"**Table {roman} under the paper protocol (profile `paper`: {where}), from finished "
                               f"runs: {data['found']} of {data['total']}; {data['made_by']}.**" + text)
        return cell
    return wrap


@_from_paper_runs("III", paper_table3)
def paper_protocol_table3(nb, pt3):
    """Table III under the paper protocol, from the paper profile's finished runs (trains nothing)."""
    pp3, missing = pt3["plan"], [nb.label(m) for m in table3_configs(pt3["plan"]) if m not in pt3["rows"]]
    added = [f"{nb.label(m)} {r['n']}" for m, r in pt3["rows"].items() if r["n"] > len(pp3.seeds)]
    return (f"{pp3.settings['rounds']['main']} rounds, seeds {pp3.seeds}"
            + (f"; seeds added where a claim's margin was within the spread: {', '.join(added)} seeds"
               if added else ""),
            (f" Not finished yet: {', '.join(missing)}." if missing else "")
            + "\n\n" + report.to_markdown(_table3_frame(nb.paper, nb.label, pt3["rows"], pt3["head"])))


def show_variants(nb):
    """Paper-faithful vs code-faithful: each variant beside its Table III row (first seed)."""
    plan, L, seed0, t3 = nb.plan, nb.label, nb.seed0, _table3(nb)["runs"]
    rows = {}
    for v, runs in results.train(variant_configs(plan), [seed0], nb.workers, "variants", protocol=True).items():
        of = plan.spec["variants"][v]["of"]
        key = plan.paper_metric(of)
        ref = [s for s in t3.get(of, []) if s["seed"] == seed0]
        paper, code = (accuracy(ref[0], key) if ref else math.nan), accuracy(runs[0], key)
        rows[L(v)] = {"paper-faithful": report.fmt(paper), "code-faithful": report.fmt(code), "rule": key,
                      "seed": seed0, "code minus paper": report.fmt(code - paper, sign=True)}
    return nb.table(f"**Paper-faithful vs code-faithful (Table III setting, seed {seed0}, best round, %).**",
                    pd.DataFrame(rows).T)


def _curves_all(nb) -> dict:
    """Table III's round records, ``{method: [records per seed]}``, after :func:`_table3` trained or read them."""
    def make():
        _table3(nb)
        return {m: [results.rounds(cfg, s, protocol=True) for s in nb.plan.seeds]
                for m, cfg in table3_configs(nb.plan).items()}
    return nb.once("curves_all", make)


def fig4(nb):
    """Fig. 4: mean client accuracy per round under the paper's rule and the head, seed mean ± sample std."""
    import matplotlib.pyplot as plt

    from fedlib.plots import curve_panel

    per, seeds = _curves_all(nb), nb.plan.seeds
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    curve_panel(axes[0], per, nb.plan.paper_metric, nb.label)
    curve_panel(axes[1], per, lambda m: COMMON_METRIC, nb.label)
    axes[0].set_ylabel("accuracy (%), paper's convention")
    axes[1].set_ylabel("accuracy (%), head over all classes")
    which = f"seed {seeds[0]}" if len(seeds) == 1 else f"mean ± std over seeds {', '.join(map(str, seeds))} " \
                                                        f"(n = {len(seeds)})"
    axes[0].set_title(f"Fig. 4 (e) Fashion-MNIST, {which}")
    axes[1].set_title("same runs, one common rule")
    return nb.figure(fig, "Fig. 4: mean client accuracy per round (left: paper's convention; right: head over all "
                     "classes)" + ("" if len(seeds) == 1 else f"; mean over {len(seeds)} seeds, band ± sample std"),
                     "fig4_accuracy_per_round")


def _rounds_cell(times: list[dict], never: int) -> str:
    """Rounds to the target over seeds, a seed that never reached it counted as ``never`` (``≥``: a lower bound)."""
    got = [t["round"] for t in times]
    if all(r is None for r in got):
        return f"never (n = {len(got)})"
    text = mean_std_n([never if r is None else r for r in got])
    return ("≥ " + text) if None in got else text


def fig5(nb):
    """Fig. 5: seconds per round and time to the target accuracy of every method; returns the figure and numbers."""
    import matplotlib.pyplot as plt

    target, per = nb.plan.spec["time_target"], _curves_all(nb)
    tt_all = nb.once("time", lambda: times_to_target(nb.plan, per))
    never, pct, seeds = nb.plan.settings["rounds"]["main"] + 1, f"{100 * target:.0f}%", nb.plan.seeds
    spr = {m: [seconds_per_round(recs) for recs in per[m]] for m in tt_all}
    secs = {m: [np.nan if t["seconds"] is None else t["seconds"] for t in v] for m, v in tt_all.items()}
    timing = pd.DataFrame({
        nb.label(m): {"s per round (median)": mean_std_n(spr[m]),
                      f"rounds to {pct}": _rounds_cell(tt_all[m], never),
                      f"rounds to {pct}, per seed": ", ".join("never" if t["round"] is None else str(t["round"])
                                                             for t in tt_all[m]),
                      f"seconds to {pct} (seeds that reached it)": mean_std_n(secs[m])}
        for m in tt_all}).T
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.6))
    x, names = np.arange(len(tt_all)), [nb.label(m) for m in tt_all]
    err = [np.nan_to_num([sample_std(v) if len(v) > 1 else 0.0 for v in d.values()]) for d in (spr, secs)]
    axes[0].bar(x, [np.mean(v) for v in spr.values()], yerr=err[0], color="tab:blue", capsize=3)
    axes[0].set_ylabel("seconds per round")
    tt = np.array([np.nanmean(v) if not np.isnan(v).all() else np.nan for v in secs.values()])
    axes[1].bar(x, np.nan_to_num(tt), yerr=err[1], color="tab:orange", capsize=3)
    axes[1].set_ylabel(f"seconds until {pct} (paper's convention)")
    for i, v in enumerate(tt):
        if np.isnan(v):
            axes[1].text(i, 0, "not reached", rotation=90, ha="center", va="bottom", fontsize=8)
    for ax in axes:
        ax.set_xticks(x, names, rotation=90)
    fig.suptitle("Fig. 5: training time (2 CPU cores, parallel single-thread runs: timings include contention)"
                 + ("" if len(seeds) == 1 else f"; mean ± std over {len(seeds)} seeds"))
    nb.figure(fig, f"Fig. 5: seconds per round and time to {pct} accuracy", "fig5_time")
    nb.section.text(f"**Fig. 5 numbers** (seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}: mean ± "
                    f"sample std over seeds, n seeds; a seed that never reached {pct} counts as {never} rounds, a "
                    "lower bound marked ≥).\n\n" + report.to_markdown(timing))
    return Shown((fig, timing))


def _ways_runs(nb) -> dict:
    """Table VI's runs: the first seed, then the seeds the evidence planner added to each (method, n)
    (:meth:`Notebook.with_added_seeds`)."""
    def make():
        cfgs = ways_configs(nb.plan)
        runs = results.train(cfgs, [nb.seed0], nb.workers, "Table VI", protocol=True)
        return nb.with_added_seeds(cfgs, runs, protocol=True)
    return nb.once("ways_runs", make)


def _ways(nb) -> dict:
    """Table VI's :func:`ways_rows`, first seed."""
    return nb.once("ways", lambda: ways_rows(nb.plan, _ways_runs(nb)))


def _table6_frame(paper: dict, label, n: int, ours: dict):
    """Table VI's block for ``n``: paper | ours | diff (``ours``: ``{method: (accuracy, std across clients)}``)."""
    df = paper_vs_ours(paper, TABLE6_BLOCKS.get(n), {m: {"fmnist": v} for m, v in ours.items()})
    df.index = [label(m) for m in df.index]
    return df


def show_table6(nb):
    """Table VI: accuracy per average number of classes per client n, paper | ours | diff, one block per n."""
    return pd.concat({n: nb.table(f"**Table VI, n = {n}{TABLE6_NOTES.get(n, '')}: accuracy (%) mean ± std across "
                                  f"clients, seed {nb.seed0}.**",
                                  report.short_run(_table6_frame(nb.paper, nb.label, n, ours), nb.profile))
                      for n, ours in _ways(nb).items()}, names=["n"])


@_from_paper_runs("VI", paper_table6, " --table VI")
def paper_protocol_table6(nb, pt6):
    """Table VI under the paper protocol: per n, the methods finished so far (trains nothing)."""
    text = "".join(f" n = {n}: not finished yet: {', '.join(nb.label(m) for m in left)}." if n in pt6["rows"]
                   else f" n = {n}: no run finished yet." for n, left in pt6["missing"].items() if left)
    for n, ours in sorted(pt6["rows"].items()):
        partial = " (not every method has finished)" if pt6["missing"][n] else ""
        text += (f"\n\n**Table VI, paper protocol, n = {n}{TABLE6_NOTES.get(n, '')}: accuracy (%) mean ± std across "
                 f"clients{partial}.**\n\n" + report.to_markdown(_table6_frame(nb.paper, nb.label, n, ours)))
    return f"{pt6['plan'].settings['rounds']['main']} rounds, seed {pt6['plan'].seeds[0]}", text


def _ablation(nb) -> dict:
    """Table VII's rows over :meth:`Plan.ablation_seeds` (those at hand, rendering from the archive), each row with
    the seeds the evidence planner added to its runs (:meth:`Notebook.with_added_seeds`)."""
    def make():
        cfgs = ablation_configs(nb.plan)
        seeds = study.seeds_at_hand(cfgs, nb.plan.ablation_seeds())
        runs = results.train(cfgs, seeds, nb.workers, "Table VII", protocol=True)
        return ablation_table(nb.plan, nb.with_added_seeds(cfgs, runs, protocol=True), cfgs)
    return nb.once("ablation", make)


def _table7_frame(paper: dict, rows7: dict, paper_column: bool = True):
    """Table VII as shown: the paper's gain over row (1) and ours (several seeds: mean ± sample std, paired gains)."""
    comp, prow7 = paper["tables"]["table7"]["components"], paper["tables"]["table7"]["rows"]
    by_number, paper_base = {v["number"]: k for k, v in comp.items()}, prow7["sup"]["acc"][0]
    table = {}
    for row, r in rows7.items():
        k = by_number[row]
        if r.get("n", 1) > 1:
            ps, base = r["per_seed"], dict(zip(rows7[1]["seeds"], rows7[1]["per_seed"]["proto_own_best"], strict=True))
            gains = [a - base[s] for s, a in zip(r["seeds"], ps["proto_own_best"], strict=True) if s in base]   # paired
            ours = {"ours: best round": mean_std_n(ps["proto_own_best"]),
                    "our gain over (1)": f"{report.fmt(float(np.mean(gains)), sample_std(gains), sign=True)}",
                    "ours: last round": mean_std_n(ps["proto_own_last"]),
                    "ours: head, last round": mean_std_n(ps["head_last"]),
                    "std across clients, best round": f"{r['proto_own_best_std']:.2f}"}
        else:
            ours = {"ours: best round": report.fmt(r["proto_own_best"], r["proto_own_best_std"]),
                    "our gain over (1)": f"{r['proto_own_best'] - rows7[1]['proto_own_best']:+.2f}",
                    "ours: last round": f"{r['proto_own_last']:.2f}",
                    "ours: head, last round": f"{r['head_last']:.2f}"}
        table[f"({row}) low {comp[k]['con_low']} high {comp[k]['con_high']} soft {comp[k]['soft']}"] = {
            **({"paper (CIFAR-10)": report.fmt(*prow7[k]["acc"])} if paper_column else {}),
            "paper gain over (1)" + ("" if paper_column else ", CIFAR-10"): f"{prow7[k]['acc'][0] - paper_base:+.2f}",
            **ours,
            **({"best round": ", ".join(map(str, r["best_round"])) if isinstance(r["best_round"], list)
                else r["best_round"]} if paper_column else {}),
            "mean l_soft": "—" if r["l_soft_mean"] is None else f"{r['l_soft_mean']:.4f}"}
    return pd.DataFrame(table).T


def _seeds_text(rows7: dict) -> str:
    """What Table VII's numbers are: ``seed 1234; mean ± std across clients`` or the seeds and sample std."""
    seeds = _row_seeds(rows7)
    if len(seeds) > 1:
        return (f"seeds {', '.join(map(str, seeds))} (n = {len(seeds)}){_added_rows(rows7)}; mean ± sample std over "
                "seeds, the std across clients (mean over seeds) in its own column")
    return f"seed {seeds[0] if seeds else '?'}; mean ± std across clients"


def show_table7(nb):
    """Table VII, the loss-component ablation on Fashion-MNIST beside the paper's CIFAR-10 gains over row (1)."""
    R, rows7 = nb.plan.settings["rounds"], _ablation(nb)
    return nb.table("**Table VII: FedMPS loss ablation (%). Paper: CIFAR-10; ours: Fashion-MNIST, "
                    f"{R['ablation']} rounds, {_seeds_text(rows7)}.** No difference is taken "
                    "between the two datasets: compare the gains over row (1). The paper's rule picks the best round, "
                    "which hides a term that acts only from round 2 on (soft labels exist after the first aggregation) "
                    "or only on the head: the last round, the head and the logged soft-label loss show what the term "
                    "does." + (" A gain over (1) is paired, on the seeds both rows hold." if _added_rows(rows7)
                               else ""), _table7_frame(nb.paper, rows7))


def check_table7(nb) -> None:
    """Print Table VII's check: the rows that log a soft-label loss are the soft-label rows."""
    rows7, comp = _ablation(nb), nb.paper["tables"]["table7"]["components"]
    soft_rows = sorted(v["number"] for v in comp.values() if v["soft"] and v["number"] in rows7)
    logged = sorted(row for row, r in rows7.items() if r["l_soft_mean"] is not None and r["l_soft_mean"] > 0)
    print("the rows that log a soft-label loss are the soft-label rows (from round 2 on):",
          logged == (soft_rows if nb.plan.settings["rounds"]["ablation"] > 1 else []))


@_from_paper_runs("VII", paper_table7, " --table VII")
def paper_protocol_table7(nb, pt7):
    """Table VII under the paper protocol, over the seeds on which all six rows have finished (trains nothing)."""
    pp7 = pt7["plan"]
    left = [s for s in pp7.ablation_seeds() if s not in pt7["seeds"]]
    return (f"{pp7.settings['rounds']['ablation']} rounds, {_seeds_text(pt7['rows'])}; Fashion-MNIST",
            (f" Seed{'s' if len(left) > 1 else ''} {', '.join(map(str, left))}: not every row has finished yet."
             if left else "") + "\n\n" + report.to_markdown(_table7_frame(nb.paper, pt7["rows"], paper_column=False)))


def _sweeps(nb) -> dict:
    """Figs. 8-9's accuracies (the paper's rule): ``{"stdev" | "clients": {value: {method: [acc per seed]}}}`` on the
    first seed, and under a decisive profile with the seeds the evidence planner added to that (method, value) after
    it (:func:`fedlib.results.with_more_seeds`, as Table VI reads them; the base value is Table III's run, which
    holds more seeds), with the seeds read under ``"sweep_seeds"`` (``{(grid, method, value): [seeds]}``). Each grid
    is read on its own: while the archive alone is read, a grid none of whose runs it holds is left out and the
    other one still shown (:class:`fedlib.results.NotArchived` only when neither is there)."""
    def make():
        acc, read, missing = {}, {}, None
        for kind in (k for k in SWEEPS if k not in TEMPERATURES):
            cfgs = grid_configs(nb.plan, kind)
            try:
                got = results.train(cfgs, seeds=[nb.seed0], workers=nb.workers, desc=f"Fig. {FIGURES[kind]}",
                                    protocol=True)
            except results.NotArchived as exc:
                missing = exc
                continue
            if nb.plan.profile in DECISIVE_PROFILES:
                got = results.with_more_seeds(cfgs, got, protocol=True)
            for (m, v), runs in got.items():
                acc.setdefault(kind, {}).setdefault(v, {})[m] = [accuracy(r, nb.plan.paper_metric(m)) for r in runs]
                read[(kind, m, v)] = [r["seed"] for r in runs]
        if not acc:
            raise missing
        return {**acc, "sweep_seeds": read}
    return nb.once("sweeps", make)


def _temperatures(nb) -> dict:
    """Fig. 10 on every seed: ``{"tau": {grid: {value: seed-mean accuracy}}, "tau_std": {grid: [std per seed]},
    "tau_seeds": {grid: [...]}}``; a seed's std is the population std of its accuracies across the grid's values (the
    grid is the whole set measured; docs/fedmps.md, decision 21b). Under a decisive profile a grid also reads the seeds
    the evidence planner added after the profile's, those every one of its values has finished
    (:func:`fedlib.results.with_more_seeds`; FedMPS's own value is Table III's run, which holds more seeds)."""
    def make():
        configs, seeds = temperature_configs(nb.plan), grid_seeds(nb.plan, "tau1")
        got = results.train(configs, seeds=seeds, workers=nb.workers, desc="Fig. 10", protocol=True)
        if nb.plan.profile in DECISIVE_PROFILES:
            got = results.with_more_seeds(configs, got, protocol=True)
        acc, read = {}, {}
        for (t, m, v), runs in got.items():
            acc.setdefault(t, {})[v] = {r["seed"]: accuracy(r, nb.plan.paper_metric(m)) for r in runs}
        for t, row in acc.items():   # the seeds every value of the grid holds, in the order of the first
            first = next(iter(row.values()))
            read[t] = [s for s in first if all(s in a for a in row.values())]
        return {"tau": {t: {v: float(np.mean([a[s] for s in read[t]])) for v, a in row.items()}
                        for t, row in acc.items()},
                "tau_std": {t: [float(np.std([row[v][s] for v in row])) for s in read[t]] for t, row in acc.items()},
                "tau_seeds": read}
    return nb.once("temperatures", make)


def fig8_9(nb):
    """Figs. 8-9: accuracy over the noise std and the number of clients N (the paper's one run a point, the first
    seed; a point with seeds the evidence planner added shows their mean and says so). A sweep whose runs the run
    archive lacks is left out of the report's render (its panel says so)."""
    import matplotlib.pyplot as plt

    plan, sw = nb.plan, _sweeps(nb)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, key, methods, xlabel, title in (
            (axes[0], "stdev", ("fedproto", "fedmps"), "noise std of n and k", "Fig. 8: accuracy vs std"),
            (axes[1], "clients", plan.selected("sweep_methods"), "clients N", "Fig. 9: accuracy vs number of clients")):
        if key not in sw:
            ax.text(0.5, 0.5, "not in the run archive", ha="center", va="center", transform=ax.transAxes)
            ax.set(title=title, xticks=[], yticks=[])
            continue
        seeds = sorted({len(sw["sweep_seeds"][(key, m, x)]) for m in methods for x in plan.settings[key]})
        for m in methods:
            ax.plot(plan.settings[key], [float(np.mean(sw[key][x][m])) for x in plan.settings[key]], marker="o",
                    label=nb.label(m))
        ax.set(xlabel=xlabel, ylabel="accuracy (%), paper's convention",
               title=title + (f"\nmean of {' to '.join(map(str, (seeds[0], seeds[-1])))} seeds a point"
                              if seeds[-1] > 1 else ""))
        ax.legend(fontsize=8)
    fig.suptitle(f"Fashion-MNIST, {plan.settings['rounds']['sweep']} rounds, seed {nb.seed0}"
                 + (" and the seeds added after it" if any(len(v) > 1 for v in sw["sweep_seeds"].values()) else ""))
    fig.tight_layout()
    return nb.figure(fig, "Figs. 8-9: accuracy vs noise std and number of clients", "fig8_9_sweeps")


def fig10(nb):
    """Fig. 10: FedMPS's accuracy over each temperature grid (mean over seeds) and its std across the grid, per seed,
    beside the paper's."""
    import matplotlib.pyplot as plt

    plan, tau = nb.plan, _temperatures(nb)
    seeds = tau["tau_seeds"]
    n = sorted({len(v) for v in seeds.values()})
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for t, ax_label in (("tau1", "tau1 (contrastive)"), ("tau2", "tau2 (soft labels)")):
        ys = [tau["tau"][t][x] for x in plan.settings[t]]
        ax.plot(range(len(ys)), ys, marker="o", label=ax_label)
        for i, x in enumerate(plan.settings[t]):
            ax.annotate(f"{x:g}", (i, ys[i]), fontsize=7)
    ax.set(xlabel="grid position (value annotated)", ylabel="accuracy (%), paper's convention",
           title=f"Fig. 10: FedMPS temperature sensitivity\n{plan.settings['rounds']['sweep']} rounds, mean of "
                 f"{' or '.join(map(str, n))} seed{'s' * (n[-1] > 1)}")
    ax.legend(fontsize=8)
    nb.figure(fig, "Fig. 10: FedMPS's accuracy across its temperature grids", "fig10_temperatures")
    sens = {t: {"fedmps": {"fmnist": float(np.mean(v)) if len(plan.settings[t]) > 1 else float("nan")}}
            for t, v in tau["tau_std"].items()}
    df10 = pd.concat({t: report.short_run(report.compare(nb.paper["tables"][f"{t}_sensitivity"], sens[t]), nb.profile)
                      for t in ("tau1", "tau2")}, names=["temperature"])
    nb.table(f"**Fig. 10 sensitivity: std (%) of FedMPS accuracy across the temperature grid, per seed, mean over "
             f"seeds {'; '.join(f'{t} ' + ', '.join(map(str, v)) for t, v in seeds.items())}.**", df10)
    return Shown((fig, df10))


def _states(nb) -> dict:
    """Every Table III method's trained state, first seed. A run the benchmark extended past the paper's rounds keeps
    only its last model (its checkpoint): a line names those, so the figures drawn from them say so."""
    def make():
        configs = table3_configs(nb.plan)
        states = {m: results.state(cfg, nb.seed0) for m, cfg in configs.items()}
        late = [f"{nb.label(m)} (round {st.round})" for m, st in states.items()
                if st.round > configs[m]["train"]["rounds"]]
        if late:
            print(f"The models of {', '.join(late)} come from runs extended past the paper's "
                  f"{nb.plan.settings['rounds']['main']} rounds towards their plateau (the benchmark's nway runs): "
                  "the figures drawn from them show those rounds' models; the tables read the runs at the paper's "
                  "rounds.")
        return states
    return nb.once("states", make)


def fig6(nb):
    """Fig. 6: t-SNE (or UMAP) of the high-level test features of every method, all clients pooled."""
    import matplotlib.pyplot as plt

    from fedlib import plots

    n_pts, states = nb.plan.settings["tsne_points"], _states(nb)
    fig, axes = plt.subplots(2, (len(states) + 1) // 2, figsize=(4 * ((len(states) + 1) // 2), 8), squeeze=False)
    for ax in axes.flat[len(states):]:
        ax.set_visible(False)
    for ax, (m, st) in zip(axes.flat, states.items(), strict=False):
        f = test_features(st, "high", max_points=n_pts, seed=0)
        plots.embedding_scatter(embed_2d(f["z"], nb.embedding), f["y"], ax=ax, title=nb.label(m), num_classes=10)
    axes.flat[0].legend(fontsize=6, markerscale=3, ncol=2, title="class")
    fig.suptitle(f"Fig. 6: {nb.embedding.upper()} of high-level test features, all clients pooled ({n_pts} points)")
    return nb.figure(fig, f"Fig. 6: {nb.embedding} of the high-level test features of every method", "fig6_embedding")


def fig7(nb):
    """Fig. 7: t-SNE (or UMAP) of the attacked client's test features, FedProto vs FedMPS."""
    import matplotlib.pyplot as plt

    from fedlib import plots

    target = nb.plan.spec["attack"]["client"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 4))
    for ax, m in zip(axes, ("fedproto", "fedmps"), strict=False):
        f = test_features(_states(nb)[m], "high", clients=[target])
        plots.embedding_scatter(embed_2d(f["z"], nb.embedding), f["y"], ax=ax, num_classes=10,
                                title=f"{nb.label(m)}: client {target + 1} ({len(f['y'])} test images)")
    axes[0].legend(fontsize=7, markerscale=3, title="class")
    return nb.figure(fig, f"Fig. 7: {nb.embedding} of client {target + 1}'s test features, FedProto vs FedMPS",
                     "fig7_client_embedding")


def fig_distances(nb):
    """Prototype-distance heatmaps of FedProto and FedMPS (global; the most held class's local ones)."""
    import matplotlib.pyplot as plt

    from fedlib import plots

    fig, axes = plt.subplots(2, 2, figsize=(11, 9))
    summary = {}
    for row, m in enumerate(("fedproto", "fedmps")):
        st, L = _states(nb)[m], nb.label
        classes, protos = global_prototypes(st, "high")
        D = pairwise_distances(protos)
        plots.distance_heatmap(D, classes.tolist(), ax=axes[row, 0], title=f"{L(m)}: global prototypes")
        owners = local_prototypes_by_class(next_uploads(st))
        c_star = max(owners, key=lambda c: (len(owners[c]), -c))
        cids, P = zip(*owners[c_star], strict=False)
        Dl = pairwise_distances(np.stack(P))
        plots.distance_heatmap(Dl, [c + 1 for c in cids], ax=axes[row, 1],
                               title=f"{L(m)}: local prototypes of class {c_star} (clients)")
        off = ~np.eye(len(D), dtype=bool)
        summary[L(m)] = {"global: min distance": D[off].min(), "global: mean distance": D[off].mean(),
                         f"local (class {c_star}): mean distance": Dl[~np.eye(len(Dl), dtype=bool)].mean()}
    nb.figure(fig, "Prototype distances: global prototypes (left), one class's local prototypes (right)",
              "prototype_distances")
    return Shown((fig, nb.table("**Prototype distances (high level).**", pd.DataFrame(summary).T.round(3))))


def _attack(nb):
    """Fig. 11's attack on the attacked client's FedMPS prototypes (:func:`fedlib.privacy.prototype_attack`)."""
    from fedlib.data.sources import MNIST_MEAN, MNIST_STD
    from fedlib.privacy import prototype_attack

    def make():
        atk = nb.plan.spec["attack"]   # FedMPS's state only (every method's where the notebook has them)
        st = nb.results["states"]["fedmps"] if "states" in nb.results else \
            results.state(table3_configs(nb.plan)["fedmps"], nb.seed0)
        target = atk["client"]
        up = next_uploads(st, clients=[target])[target]
        aux_x, aux_y = attacker_aux(st, target, atk["aux_images"], seed=0)
        private = st.data.train[target]
        return prototype_attack(st.model(target), aux_x, {"low": up["low"], "high": up["high"]}, up["classes"],
                                aux_y=aux_y, client_x=private.x, client_y=private.y,
                                steps=nb.plan.settings["attack_steps"], batch_size=atk["batch_size"], lr=atk["lr"],
                                seed=0, mean=MNIST_MEAN, std=MNIST_STD)
    return nb.once("attack", make)


def fig11(nb):
    """Fig. 11: the client's classes reconstructed from its FedMPS prototypes, and the PSNR / SSIM scores."""
    from fedlib.privacy import attack_figure

    attack, target = _attack(nb), nb.plan.spec["attack"]["client"]
    title = (f"Fig. 11: client {target + 1}'s classes reconstructed from its FedMPS prototypes by a decoder "
             f"({nb.plan.settings['attack_steps']} steps on the attacker's images), SSIM under each ({nb.profile} "
             "profile)")
    fig = nb.figure(attack_figure(attack, title=title), f"Fig. 11: reconstructions of client {target + 1}'s classes "
                    f"from its FedMPS prototypes ({nb.plan.settings['attack_steps']} decoder steps) and the decoders' "
                    "loss curves", "fig11_attack")
    table = attack.summary().round(3)
    nb.section.text("**Fig. 11 scores: PSNR (dB) / SSIM of reconstructions vs client 1's private images of the "
                    "class.**\n\n" + report.to_markdown(table.set_index(["source", "levels"])))
    return Shown((fig, table))


def fig_attack_pictures(nb):
    """The leakage study's attacks on FedMPS's and its strongest Table III baseline's uploads (beside Fig. 11, the
    paper's own attack on the prototypes)."""
    from fedlib.papers import privacy

    return privacy.paper_pictures(nb, "fedmps", nb.paper["tables"]["table3"])


def show_summary(nb):
    """The summary: FedMPS vs FedProto against the paper, the best parameter-sharing method, the attack's SSIM."""
    from IPython.display import Markdown

    rows3, head3 = _table3(nb)["rows"], _table3(nb)["head"]
    L, R, T, attack = nb.label, nb.plan.settings["rounds"], nb.paper["tables"], _attack(nb)
    fm, fp = rows3["fedmps"], rows3["fedproto"]
    paper_fm, paper_fp = T["table3"]["rows"]["fedmps"]["fmnist"][0], T["table3"]["rows"]["fedproto"]["fmnist"][0]
    lines = [f"FedMPS {fm['mean']:.2f} vs FedProto {fp['mean']:.2f} (paper {paper_fm} vs {paper_fp}): FedMPS "
             f"{'>=' if fm['mean'] >= fp['mean'] else '<'} FedProto; gaps to the paper {fm['mean'] - paper_fm:+.2f} "
             f"and {fp['mean'] - paper_fp:+.2f} points ({R['main']} rounds, seeds {nb.plan.seeds})."]
    best_param = max(((r["mean"], m) for m, r in rows3.items() if m not in ("fedmps", "fedproto")), default=None)
    if best_param:
        below = best_param[0] < min(fm["mean"], fp["mean"])
        lines.append(f"Best parameter-sharing method: {L(best_param[1])} {best_param[0]:.2f}, "
                     f"{'below' if below else 'NOT below'} both prototype methods under the paper's convention; "
                     f"under one common rule (head over all classes) the order is "
                     + " > ".join(L(m) for m in sorted(head3, key=lambda m: -head3[m]["mean"])) + ".")
    ssim = attack.summary().set_index(["source", "levels"])["ssim"]
    lines.append("Attack (Fig. 11): mean SSIM of the reconstructions from client 1's prototypes "
                 + ", ".join(f"{lv} {ssim[('prototype', lv)]:.3f}" for lv in attack.runs)
                 + (f"; the attacker's own class-average image scores {ssim[('class_average', '-')]:.3f}"
                    if ("class_average", "-") in ssim.index else "")
                 + (f"; decoding single private images' features {ssim[('single_sample', 'low+high')]:.3f}"
                    if ("single_sample", "low+high") in ssim.index else "") + ".")
    if nb.profile != "paper":
        lines.append(f"Profile `{nb.profile}`: {R['main']} rounds (paper: 100), seeds {nb.plan.seeds}; the numbers are "
                     "not converged. Paper protocol: `python -m fedlib reproduce --profile paper` (hours on a CPU), "
                     "or Table III alone: `python -m fedlib.papers.fedmps --profile paper`.")
    text = "\n".join(f"- {x}" for x in lines)
    nb.section.text("**Summary.**\n\n" + text)
    return Markdown(text)


def show_ledger(nb):
    """The claims ledger from the parts the results or the run archive have; writes the report section."""
    plan, part = nb.plan, nb.part
    sw, tau, t3 = part(lambda: _sweeps(nb)), part(lambda: _temperatures(nb)), part(lambda: _table3(nb))
    pt3, pt6, pt7 = (nb.once(f.__name__, lambda f=f: f(plan)) for f in (paper_table3, paper_table6, paper_table7))
    res = {"table3": t3 and t3["rows"], "table3_head": t3 and t3["head"], "comm": t3 and _uplinks(nb),
           "ways": part(lambda: ways_per_seed(plan, _ways_runs(nb))),
           "ablation": part(lambda: _ablation(nb)),
           "time": part(lambda: nb.once("time", lambda: times_to_target(plan, _curves_all(nb)))),
           "attack": part(lambda: _attack(nb).summary()), "comm_cifar10": _communication_cifar(nb),
           "table3_paper": pt3 if pt3["found"] == pt3["total"] else None,
           "ways_paper": pt6 if pt6["found"] == pt6["total"] else None, "ablation_paper": pt7}
    res.update({k: v for k, v in (sw or {}).items() if k != "sweep_seeds"},
               **{k: v for k, v in (tau or {}).items() if k != "tau_seeds"})
    res = {k: v for k, v in res.items() if v is not None}
    res["trends"] = dict(nb.once("trends", lambda: trends(plan)))
    if t3 and nb.profile == "paper":   # Table III's groups as read, with any seeds added to them
        added = {(part, m): [x["seed"] for x in runs] for m, runs in t3["runs"].items()
                 for part in ("table3", "table3_head")}
        res["trends"].update(trends(plan, list(added), more=added))
    if res.get("ways") and nb.profile in DECISIVE_PROFILES:   # Table VI's groups as read, any added seeds included
        read = {("ways", m, n): got for n, row in res["ways"]["seeds"].items() for m, got in row.items()}
        res["trends"].update(trends(plan, list(read), more=read))
    if sw and nb.profile in DECISIVE_PROFILES:   # Figs. 8-9's points on the seeds they were read on, any added included
        res["trends"].update(trends(plan, list(sw["sweep_seeds"]), more=sw["sweep_seeds"]))
    if tau and nb.profile in DECISIVE_PROFILES:   # Fig. 10's grids on the seeds they were read on, any added included
        read = {(t, "fedmps", v): got for t, got in tau["tau_seeds"].items() for v in plan.settings[t]}
        res["trends"].update(trends(plan, list(read), more=read))
    if res.get("ablation"):   # Table VII's rows name the seeds they were read on, any the planner added included
        read = {("ablation", row): r["seeds"] for row, r in res["ablation"].items()}
        res["trends"].update(trends(plan, list(read), more=read) if nb.profile in DECISIVE_PROFILES
                             else trends(plan, list(read), _row_seeds(res["ablation"]) or None))
    return nb.ledger(ledger(plan, res), record=False)


if __name__ == "__main__":
    raise SystemExit(main())
