"""The FedIC study: Table 1, Figs. 2-4 and the Table 3 and Table 4 analogues on Fashion-MNIST of "Intra-Class
Unbiased Prototype Aggregation and Classifier Collaboration for Personalized Federated Learning" (Zheng et al.,
AAAI 2026). Decisions, scoring (decision 10) and cost columns (decision 12): docs/fedic.md.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from fedlib import analysis, report, results, study
from fedlib.claims import DECISIVE_PROFILES
from fedlib.algorithms.base import Round
from fedlib.plans.fedic import (  # noqa: F401  (re-exported: the study's plan part)
    TWO_PHASE, Plan, ablation_configs, all_jobs, alpha_configs, archived_tables, config, k_configs, load_plan,
    scale_configs, table1_configs)
from fedlib.study.notebook import Shown
from fedlib.ledgers.fedic import (  # noqa: F401  (re-exported: the study's ledger)
    tables, ledger, _label, metric, cells, key_label, converged_runs, _bias)


def plateau_note(plan: Plan, cells_: dict) -> str:
    """A caption's note naming the cells whose curve had not plateaued, ``""`` where none."""
    rising = "; ".join(f"{key_label(plan, k)}: {c['plateau']}" for k, c in cells_.items() if c.get("plateau"))
    return ("Not plateaued (best-so-far accuracy still rising by 0.2 points or more over the last 20% of rounds): "
            + rising + ".") if rising else ""


def ours_table(plan: Plan, table: dict, stat: str = "best", dataset: str = "fmnist") -> dict:
    """Table 1 cells as ``{method: {pat_<dataset>|pra_<dataset>: [mean, std, n]}}`` (:func:`fedlib.report.compare`)."""
    return {m: {f"{p}_{dataset}": [c[stat], c["best_std"] if stat == "best" else None, c["n"]]
                for (p, mm), c in table.items() if mm == m} for m in plan.table1_methods()}


def _holders(uploads: dict, cls: int) -> list[tuple[int, np.ndarray]]:
    """``(client, class-cls prototype)`` of every upload that holds class ``cls``."""
    hits = {cid: (up["classes"] == cls).nonzero().flatten() for cid, up in uploads.items()}
    return [(cid, uploads[cid]["protos"][hit[0]].double().cpu().numpy()) for cid, hit in hits.items() if len(hit)]


def _cosine_distances(rows: list) -> np.ndarray:
    x = np.stack(rows)
    unit = x / np.clip(np.linalg.norm(x, axis=1, keepdims=True), 1e-12, None)
    return np.clip(1 - unit @ unit.T, 0, 2)


def prototype_distances(state, cls: int = 0) -> tuple[np.ndarray, list[int]]:
    """Fig. 3a: cosine distances between the class-``cls`` prototypes the clients of a finished FedPAC/FedIC run
    would upload next (one local update each), and the holders' ids."""
    rnd = Round(state.round + 1, state.cfg["train"]["rounds"], state.ctx.seed)
    held = _holders({cid: state.algorithm.local_update(state.ctx, cid, state.clients[cid], state.message(cid),
                                                       state.data.train[cid], rnd)[1]
                     for cid in range(state.ctx.num_clients)}, cls)
    return _cosine_distances([p for _, p in held]), [cid for cid, _ in held]


CONVERGED_COMMAND = "python -m fedlib.papers.fedic --profile converged --figures"


@study.command
def main(argv: list[str] | None = None) -> int:
    """``python -m fedlib.papers.fedic [--profile P] [--dataset D] [--methods M ...] [--seeds S ...] [--rounds N]
    [--figures]``: run Table 1 headless and print paper | ours per setting (best round, sample-weighted); with
    ``--figures`` also Figs. 2 and 4 (the runs the converged profile keeps in the run archive). A run already
    finished (results folder, another device, the run archive) is read, not trained again."""
    parser = study.add_retrain_archived(study.cli("python -m fedlib.papers.fedic", main.__doc__))
    parser.add_argument("--dataset", default="fmnist", help="fmnist (default), cifar10 or cifar100 (their files "
                        "must be in the data root; nothing is downloaded)")
    parser.add_argument("--figures", action="store_true", help="also run Fig. 2 (K) and Fig. 4 (the ablation) on "
                        "Fashion-MNIST Pra, every seed of the profile")
    args, plan = study.plan_from_cli(parser, load_plan, argv)
    if plan is None:
        return 2
    if args.dataset not in plan.spec["datasets"]:
        print(f"error: --dataset: got {args.dataset!r}; allowed: {', '.join(plan.spec['datasets'])}")
        return 2

    def obtain(configs, desc):  # a finished run (another device, the run archive) is read, not retrained
        return results.run_or_read(configs, plan.seeds, workers=args.workers, desc=desc,
                                   retrain_archived=args.retrain_archived)

    cfgs = table1_configs(plan, args.dataset)
    t1 = cells(plan, obtain(cfgs, "Table 1"), {k: [results.rounds(c, s) for s in plan.seeds] for k, c in cfgs.items()})
    paper = report.load_paper("fedic")["tables"]["table1"]
    print(f"FedIC Table 1 on {args.dataset}, {plan.setting()}; best round, sample-weighted (%)")
    print(report.to_markdown(report.compare(paper, ours_table(plan, t1, dataset=args.dataset))))
    if note := plateau_note(plan, t1):
        print(note)
    for fig, configs, sep in (("Fig. 2", k_configs, ": "), ("Fig. 4", ablation_configs, " ")) if args.figures else ():
        got = cells(plan, obtain(configs(plan), fig))
        print(f"{fig} (Pra, best round): " + ", ".join(
            f"{_label(plan, k)}{sep}{report.fmt(c['best'], c['best_std'], n=c['n'])}" for k, c in got.items()))
    return 0


# The notebook (notebooks/fedic.py): one function per cell; ``nb`` is its state (fedlib.study.notebook.Notebook).

def notebook(profile: str, methods=None, seeds=None, rounds=None, workers=None, embedding: str = "tsne",
             device=None, backend=None):
    """The set-up cell (:func:`fedlib.study.notebook.open_notebook`): the state the other cells take."""
    from fedlib.study.notebook import open_notebook

    return open_notebook("fedic", load_plan, profile, lambda plan: (
        f"{plan.rounds} (every method)", config(plan, "fedic")["device"], plan.setting()),
        backend=backend, workers=workers, embedding=embedding, methods=methods, seeds=seeds, rounds=rounds,
        device=device)


def show_setting(nb):
    """The setting table: the paper's setting beside this run's, row by row."""
    plan, frac = nb.plan, nb.plan.settings["fraction"]
    cfg0 = config(plan, "fedic")
    return nb.setting({
        "data": ("FMNIST, CIFAR-10, CIFAR-100, TinyImageNet", "Fashion-MNIST" + ("" if frac == 1 else
                 f": a stratified {100 * frac:g}% of the pooled 70,000 images ({int(70000 * frac):,})")),
        "split": ("Pat, Pra (Dir 0.1); not detailed", "PFLlib: pooled train + test, 20 clients, 75/25 per client; Pat "
                  "2 classes per client, Pra Dir(0.1) with >= 40 samples per client (decision 9)"),
        "model": ("CNN", "PFLlib's FedAvgCNN (d = 512), every method"),
        "optimiser": ("SGD lr 0.005, batch 10, E = 1", "the same, no momentum; FedPAC/FedIC: one head epoch, then "
                      "E = 1"),
        "rounds": ("T = 800", f"{plan.rounds}" + ("" if plan.rounds >= 800 else " (not converged)")),
        "FedIC": ("K = 3 (Fashion-MNIST), lam not given", f"K = {cfg0['algorithm']['K']}, lam "
                  f"{cfg0['algorithm']['lam']:g} (nn.MSELoss), agglomerative clusters (cosine), QP head weights "
                  "(decisions 1-7)"),
        "runs": ("not stated", f"{len(plan.seeds)} (seed{'s' if len(plan.seeds) > 1 else ''} "
                 f"{', '.join(map(str, plan.seeds))}); the partition is fixed (seed 1, PFLlib)"),
        "reported accuracy": ("test accuracy", "PFLlib's: every client's model on its own test split, total correct "
                              "over total samples, best round (last round beside it); FedProto: nearest global "
                              "prototype"),
    })


def _partitions(nb) -> dict:
    """The client partition of every split of the profile (Pat, Pra), first seed."""
    return nb.once("partitions", lambda: {p: results.build(config(nb.plan, "fedic", p), nb.seed0)[0].partition
                                          for p in nb.plan.settings["partitions"]})


def fig_partitions(nb):
    """The Pat and Pra splits: training samples per client and class, as bubbles."""
    import matplotlib.pyplot as plt

    from fedlib import plots

    names = nb.plan.settings["partitions"]
    fig, axes = plt.subplots(1, len(names), figsize=(6 * len(names), 4), squeeze=False)
    for ax, p in zip(axes[0], names, strict=False):
        plots.partition_bubbles(_partitions(nb)[p], ax=ax, title=nb.plan.partition_label(p))
    return nb.figure(fig, "Training samples per client (x) and class (y), bubble area = count", "partitions")


def check_partitions(nb) -> None:
    """Print the splits' checks: 25% test shares, PFLlib's least samples per client, Pat's two classes."""
    for p, part in _partitions(nb).items():
        n_tr, n_te = part.counts.sum(1), part.test_counts.sum(1)
        least = int(min(40, (n_tr + n_te).sum() / len(n_tr) / 2))   # PFLlib's least_samples (decision 9)
        print(f"{p}: {len(n_tr)} clients, each with a 25% test share (+- 1 sample):",
              bool((np.abs(n_te - 0.25 * (n_tr + n_te)) <= 1).all()), f"| every client >= {least} samples:",
              bool((n_tr + n_te >= least).all()))
        if p == "pat":
            print("   Pat: 2 classes per client:", bool(((part.counts > 0).sum(1) == 2).all()),
                  "| holders per class:", sorted(set((part.counts > 0).sum(0).tolist())))


def _sweep(nb, name: str, configs, desc: str) -> dict:
    """:func:`cells` of one table's runs (plateau on each config's seed-mean curve), trained or read once."""
    def make():
        cfgs, more = configs(nb.plan), nb.profile in DECISIVE_PROFILES
        runs = nb.with_added_seeds(cfgs, results.run_or_read(cfgs, workers=nb.workers, desc=desc))
        return cells(nb.plan, runs, {k: [results.rounds(cfgs[k], x["seed"]) for x in runs[k]] for k in runs}, cfgs,
                     more=more)
    return nb.once(name, make)


def _table1(nb) -> dict:
    """Table 1's cells (:func:`cells`), configs and first-seed round records."""
    def make():
        cfgs = table1_configs(nb.plan)
        return {"cells": _sweep(nb, "table1_cells", table1_configs, "Table 1"), "configs": cfgs,
                "records": {k: results.rounds(c, nb.seed0) for k, c in cfgs.items()}}
    return nb.once("table1", make)


def _compare(nb, plan: Plan, t1: dict, columns: dict, finished_only: bool = False) -> pd.DataFrame:
    """Table 1 paper | ours | diff by (method, setting), with ``columns`` ``{name: f(cell)}`` ("—" where a cell
    is missing); ``finished_only``: no paper number beside an unfinished cell."""
    cmp = report.compare(nb.paper["table1"], ours_table(plan, t1))
    if cmp.index.nlevels == 1:
        cmp.index = pd.MultiIndex.from_tuples([(r, f"{plan.settings['partitions'][0]}_fmnist") for r in cmp.index])
    if finished_only:
        cmp = cmp[[(c[:3], m) in t1 for m, c in cmp.index]]
    for name, f in columns.items():
        cmp[name] = [f(t1[(c[:3], m)]) if (c[:3], m) in t1 else "—" for m, c in cmp.index]
    cmp.index = pd.MultiIndex.from_tuples([(nb.label(m), c) for m, c in cmp.index], names=["method", "setting"])
    return cmp


def show_table1(nb):
    """Table 1 on Fashion-MNIST: accuracy paper | ours | diff with the last and best round, then the cost columns."""
    plan, paper, t1, last = nb.plan, nb.paper["table1"], _table1(nb)["cells"], nb.plan.settings["partitions"][-1]
    added = any(c["n"] != len(plan.seeds) for c in t1.values())   # seeds the evidence planner added to some cells
    cmp = _compare(nb, plan, t1, {"ours, last round": lambda c: f"{c['last']:.2f}",
                                  "best round": lambda c: c["best_round"],
                                  **({"n": lambda c: c["n"]} if added else {})})
    if nb.profile != "paper":   # the gap to the paper is mostly the short run: the column says so
        cmp = cmp.rename(columns={"diff": f"diff ({nb.profile}: not converged)"})
    cost = pd.DataFrame({nb.label(m): {"s / round (ours)": f"{c['seconds']:.2f}",
                                       "MB / round (ours)": f"{c['megabytes']:.2f}",
                                       "s / round (paper, CIFAR-100)": paper["seconds_per_round"][m],
                                       "MB / round (paper, CIFAR-100)": paper["megabytes_per_round"][m]}
                         for (p, m), c in t1.items() if p == last}).T
    note = "" if nb.profile == "paper" else " **Not the paper's protocol: " + plan.setting() + ".**"
    nb.table("**Table 1, Fashion-MNIST: accuracy (%), best round, sample-weighted.**" + note, cmp)
    nb.table(f"**Table 1 cost columns ({plan.partition_label(last)}, first seed, this machine).**", cost)
    nb.section.record(table1={f"{p}/{m}": {k: v for k, v in c.items() if k != "trend"} for (p, m), c in t1.items()})
    return Shown((cmp, cost))


def check_communication(nb) -> None:
    """Print the checks of the measured uplinks (last setting) against the model's and the prototypes' floats."""
    p0 = nb.plan.settings["partitions"][-1]
    part, recs = _partitions(nb)[p0], _table1(nb)["records"]
    model = results.build(config(nb.plan, "fedic"), nb.seed0)[1].new_model(None)
    P = sum(v.numel() for v in model.state_dict().values() if v.is_floating_point())
    M, protos = part.num_clients, 512 * int((part.counts > 0).sum())
    print("model floats:", P)
    for m, text, floats in (
            ("fedic", f"FedIC uplink = {M} models + one 512-d prototype per held class:", M * P + protos),
            ("fedpac", "FedPAC uplink = FedIC's + its 10 x 512 h statistics per client:", M * (P + 10 * 512) + protos),
            ("fedproto", "FedProto uplink = prototypes only:", protos)):
        if (p0, m) in recs:
            print(text, recs[(p0, m)][0]["up_params"] == floats)


def fig_accuracy(nb):
    """Accuracy per round of every Table 1 method, one panel per setting (sample-weighted)."""
    import matplotlib.pyplot as plt

    from fedlib import plots

    plan, L, recs, names = nb.plan, nb.label, _table1(nb)["records"], nb.plan.settings["partitions"]
    fig, axes = plt.subplots(1, len(names), figsize=(7 * len(names), 4), squeeze=False)
    for ax, p in zip(axes[0], names, strict=False):
        plots.accuracy_curves({L(m): recs[(p, m)] for m in plan.table1_methods()},
                              {L(m): plan.metric(m) for m in plan.table1_methods()}, ax=ax, stat="weighted",
                              ylabel="personalised accuracy (%), sample-weighted")
        ax.set_title(plan.partition_label(p))
    return nb.figure(fig, "Accuracy per round of every Table 1 method", "accuracy_per_round")


def fig2(nb):
    """Fig. 2: FedIC's accuracy (best and last round) over the number of clusters K on Pra; prints the values."""
    import matplotlib.pyplot as plt

    k_cells = _sweep(nb, "k", k_configs, "Fig. 2")
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for stat, marker in (("best", "o"), ("last", "s")):
        ax.plot(list(k_cells), [c[stat] for c in k_cells.values()], marker=marker, label=f"{stat} round")
    ax.set(xlabel="K (clusters per class)", ylabel="accuracy (%)", title="Fig. 2 on Fashion-MNIST (Pra)")
    ax.set_xticks(list(k_cells))
    ax.legend()
    nb.figure(fig, "Fig. 2: FedIC's accuracy over K (Pra)", "fig2_k")
    print(", ".join(f"K {k}: {c['best']:.2f} (last {c['last']:.2f})" for k, c in k_cells.items()))
    return fig


def fig4(nb):
    """Fig. 4, the ablation on Pra: accuracy per round of each variant, and its best and last round."""
    import matplotlib.pyplot as plt

    from fedlib import plots

    cfgs, ab_cells = ablation_configs(nb.plan), _sweep(nb, "ablation", ablation_configs, "Fig. 4")
    fig, ax = plt.subplots(figsize=(6, 4))
    plots.accuracy_curves({nb.label(v): results.rounds(c, nb.seed0) for v, c in cfgs.items()}, "acc_head", ax=ax,
                          stat="weighted", ylabel="accuracy (%), sample-weighted")
    ax.set_title("Fig. 4 on Fashion-MNIST (Pra)")
    nb.figure(fig, "Fig. 4: the ablation, accuracy per round (Pra)", "fig4_ablation")
    df = pd.DataFrame({nb.label(v): {"best": report.fmt(c["best"]), "last": report.fmt(c["last"])}
                       for v, c in ab_cells.items()}).T
    return Shown((fig, nb.table("**Fig. 4 ablation (accuracy %, Pra).**", df)))


def show_converged(nb):
    """Table 1, Fig. 2 and Fig. 4 under the converged profile from finished runs (:func:`converged_runs`)."""
    data, early = nb.paper_protocol("Table 1 and Figs. 2 and 4", "converged", converged_runs, lambda d: d["table1"],
                                    CONVERGED_COMMAND, counts=True, profile="converged")
    if early is not None:
        return early
    cp, t1 = data["plan"], data["table1"]
    added = any(c["n"] != len(cp.seeds) for c in t1.values())   # seeds the evidence planner added to some cells
    cmp = _compare(nb, cp, t1, {"plateau": lambda c: study.plateau_cell(c.get("plateau"), c.get("trend")),
                                **({"n": lambda c: c["n"]} if added else {})}, finished_only=True)
    waiting = [f"{nb.label(m)} {cp.partition_label(p)}" for p in cp.settings["partitions"]
               for m in cp.table1_methods() if (p, m) not in t1]
    head = (f"**Table 1 under the converged profile ({cp.setting()}; n = {len(cp.seeds)} seeds per cell"
            + (", more where the n column says (seeds added where a claim's margin was within the spread)"
               if added else "") + "; mean ± std "
            f"over seeds, best round, sample-weighted, %)** · {data['found']} of {data['total']} runs of Table 1 and "
            f"Figs. 2 and 4 finished · {data['made_by']}")
    more = [f"Not finished yet (every seed), so not shown: {', '.join(waiting)}; `{CONVERGED_COMMAND}` goes on where "
            "the archive ends."] if waiting else []
    nb.table(head, cmp, study.PLATEAU_RULE, *more)
    return Shown((cmp, *(_converged_figs(nb, data["k"], data["ablation"]) if data["k"] or data["ablation"] else ())))


def _converged_figs(nb, ks: dict, ab: dict) -> tuple:
    """Fig. 2 and Fig. 4 under the converged profile (mean ± std over seeds): the figure and its table."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    if ks:
        axes[0].errorbar(list(ks), [c["best"] for c in ks.values()], yerr=[c["best_std"] for c in ks.values()],
                         marker="o", capsize=3)
        axes[0].set(xlabel="K (clusters per class)", ylabel="accuracy (%), best round",
                    title=f"Fig. 2, converged (Pra, n = {min(c['n'] for c in ks.values())})")
        axes[0].set_xticks(list(ks))
    if ab:
        axes[1].bar([nb.label(v) for v in ab], [c["best"] for c in ab.values()],
                    yerr=[c["best_std"] for c in ab.values()], capsize=3, color="tab:gray")
        axes[1].set(ylim=(min(c["best"] - c["best_std"] for c in ab.values()) - 2, None),
                    ylabel="accuracy (%), best round",
                    title=f"Fig. 4, converged (Pra, n = {min(c['n'] for c in ab.values())})")
        axes[1].tick_params(axis="x", labelrotation=15)
    nb.figure(fig, "Fig. 2 (K) and Fig. 4 (the ablation) under the converged profile, mean ± std over seeds",
              "converged_fig2_fig4")
    rows = {**{f"K {k}": c for k, c in ks.items()}, **{nb.label(v): c for v, c in ab.items()}}
    df = pd.DataFrame({name: {"best round (mean ± std)": report.fmt(c["best"], c["best_std"], n=c["n"]),
                              "last round": f"{c['last']:.2f}", "n": c["n"],
                              "plateau": study.plateau_cell(c.get("plateau"), c.get("trend"))}
                       for name, c in rows.items()}).T
    return fig, nb.table("**Figs. 2 and 4 under the converged profile (Pra, accuracy %).**", df)


def show_tables3_4(nb):
    """The Table 3 and Table 4 analogues: best-round accuracy over the number of clients and over Dir alpha."""
    plan = nb.plan

    def frame(got: dict, points: str, head: str) -> pd.DataFrame:   # {(point, method): cell} -> method x point
        return pd.DataFrame({head.format(x): {nb.label(m): report.fmt(c["best"]) for (xx, m), c in got.items()
                                              if xx == x} for x in plan.settings[points]})

    sc, al = _sweep(nb, "scale", scale_configs, "Table 3"), _sweep(nb, "alphas", alpha_configs, "Table 4")
    sc_df, al_df = frame(sc, "clients", "{} clients"), frame(al, "alphas", "Dir {:g}")
    nb.table(f"**Table 3 analogue (Fashion-MNIST {plan.partition_label(plan.settings['clients_partition'])}, "
             "accuracy %, best round).**", sc_df, "**Table 4 analogue (Fashion-MNIST, accuracy %, best round).**",
             report.to_markdown(al_df))
    return Shown((sc_df, al_df))


def _fedic_state(nb):
    """The first-seed FedIC run of Table 1's last setting, trained state (:func:`fedlib.results.state`)."""
    return nb.once("fedic_state", lambda: results.state(
        _table1(nb)["configs"][(nb.plan.settings["partitions"][-1], "fedic")], nb.seed0))


def _fedic_records(nb) -> list:
    return _table1(nb)["records"][(nb.plan.settings["partitions"][-1], "fedic")]


def fig_bias(nb):
    """The prototype-aggregation bias (Eqs. 4-5) per round and the class-0 groups over rounds; prints the last."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    recs = _fedic_records(nb)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    rr = [r["round"] for r in recs]
    axes[0].plot(rr, [r["server"]["bias_global"] for r in recs], marker="o", label="to the global prototype (Eq. 3)")
    axes[0].plot(rr, [r["server"]["bias_cluster"] for r in recs], marker="s", ls="--",
                 label="to its group's prototype (Eq. 7)")
    axes[0].set(xlabel="round", ylabel="mean L2 distance", title="prototype aggregation bias (FedIC)")
    axes[0].legend(fontsize=8)
    hist = _fedic_state(nb).server["history"][:, 0].float().cpu().numpy()   # (rounds, clients), -1: not a holder
    axes[1].imshow(np.ma.masked_less(hist.T, 0), aspect="auto", cmap="tab10", vmin=0, vmax=9, interpolation="nearest",
                   extent=(0.5, hist.shape[0] + 0.5, hist.shape[1] - 0.5, -0.5))  # columns are rounds 1..R
    axes[1].set(xlabel="round", ylabel="client", title="class-0 groups per round")
    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    nb.figure(fig, "Prototype aggregation bias per round and the class-0 groups over rounds (FedIC)", "bias_clusters")
    bias = _bias(recs)
    print(f"last round: to global {bias['global']:.3f}, to group {bias['cluster']:.3f}; class-0 group changes over "
          f"the run: {int((np.diff(hist, axis=0) != 0).sum())}")
    return fig


def fig3(nb):
    """Fig. 3: (a) class-0 prototype distances, (b) last-round head weights beta, FedPAC vs FedIC; prints FedIC's."""
    import matplotlib.pyplot as plt

    from fedlib import plots

    p0, cfgs, st_ic = nb.plan.settings["partitions"][-1], _table1(nb)["configs"], _fedic_state(nb)
    st_pac = results.state(cfgs[(p0, "fedpac")], nb.seed0) if (p0, "fedpac") in cfgs else None
    fig, axes = plt.subplots(2, 2, figsize=(11, 9))
    for col, (name, st) in enumerate((("FedPAC", st_pac), ("FedIC", st_ic))):
        if st is None:
            continue
        dist, ids = prototype_distances(st, 0)
        plots.distance_heatmap(dist, [str(i + 1) for i in ids], ax=axes[0, col],
                               title=f"(a) {name}: class-0 prototypes, cosine distance", label="1 - cos")
        beta = st.server["beta"].cpu().numpy()
        plots.distance_heatmap(beta, [str(i + 1) for i in range(len(beta))], ax=axes[1, col],
                               title=f"(b) {name}: head weights beta (row: receiving client)", label="beta")
    nb.figure(fig, "Fig. 3: class-0 prototype distances (a) and head weights (b), FedPAC vs FedIC", "fig3")
    beta_ic = st_ic.server["beta"].cpu().numpy()
    print(f"FedIC: mean nonzero weights per client {(beta_ic > 0).sum(1).mean():.1f} of 20, mean self weight "
          f"{np.diag(beta_ic).mean():.3f}")
    return fig


def class_prototype_distances(state) -> dict[int, dict]:
    """Per class held by two clients or more, the cosine distances between the prototypes the clients would upload
    next (:func:`fedlib.analysis.next_uploads`), holders ordered by FedIC's last-round group, then id:
    ``{class: {"distance", "clients", "groups"}}`` (FedPAC: one group)."""
    uploads, labels = analysis.next_uploads(state), state.server.get("labels")
    out = {}
    for c in range(state.ctx.num_classes):
        rows = sorted(((int(labels[c, cid]) if labels is not None and labels.numel() else 0, cid, p)
                       for cid, p in _holders(uploads, c)), key=lambda r: (r[0], r[1]))
        if len(rows) >= 2:
            groups, clients, protos = (list(col) for col in zip(*rows, strict=True))
            out[c] = {"distance": _cosine_distances(protos), "clients": clients, "groups": groups}
    return out


def fig_class_distances(nb):
    """FedIC's intra-class prototype clusters: per class, the holders' cosine distances ordered by FedIC's groups
    (white lines between them), one colour scale; returns the figure and the mean distance within/between groups."""
    import matplotlib.pyplot as plt

    from fedlib import plots

    per_class = class_prototype_distances(_fedic_state(nb))
    top = max([float(v["distance"].max()) for v in per_class.values()] + [1e-6])
    ncol = min(4, max(1, len(per_class)))
    nrow = max(1, (len(per_class) + ncol - 1) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(1.95 * ncol + 1.1, 2.0 * nrow + 0.7), squeeze=False,
                             layout="constrained")
    rows = {}
    for ax, (c, v) in zip(axes.flat, per_class.items(), strict=False):
        g, n, d = np.asarray(v["groups"]), len(set(v["groups"])), v["distance"]
        plots.distance_heatmap(d, [str(i + 1) for i in v["clients"]], ax=ax, groups=g, cbar=False, vmin=0.0,
                               vmax=top, title=f"class {c}: {len(g)} holders, {n} group{'s' * (n > 1)}")
        ax.tick_params(labelsize=8 if len(g) <= 12 else 6, length=0)
        for t in list(ax.texts):   # the values are in the table below; the colours carry them here
            t.remove()
        within, between = d[(g[:, None] == g[None, :]) & ~np.eye(len(g), dtype=bool)], d[g[:, None] != g[None, :]]
        rows[c] = {"holders": len(g), "groups": n, "within a group": within.mean() if within.size else np.nan,
                   "between groups": between.mean() if between.size else np.nan}
    plt.setp(axes.flat[len(per_class):], visible=False)
    plt.setp(axes[:, 0], ylabel="client")
    plt.setp(axes[-1, :], xlabel="client")
    fig.colorbar(plt.cm.ScalarMappable(norm=plt.Normalize(0.0, top), cmap="viridis"), ax=axes, shrink=0.8,
                 label="cosine distance (1 - cos)")
    fig.suptitle("FedIC: each class's client prototypes, cosine distances;\nclients (ids) ordered by FedIC's groups "
                 "of the last round, white lines between the groups", fontsize=10)
    nb.figure(fig, "FedIC's intra-class prototype clusters: per class, the cosine distances between the holders' "
              "prototypes, grouped by FedIC's clusters of the last round", "class_prototype_distances")
    df = pd.DataFrame(rows).T.astype({"holders": int, "groups": int}).rename_axis("class")
    return Shown((fig, nb.table("**FedIC's intra-class clusters per class: mean cosine distance between the holders' "
                                "prototypes, within a group and between groups** (the groups of the last round; the "
                                "prototypes of the next round's local update).", df.round(3))))


def fig_attack_pictures(nb):
    """The leakage study's attacks on FedIC's upload and on its best-scoring Table 1 baseline's
    (:func:`fedlib.papers.privacy.paper_pictures`): the figure and the scores."""
    from fedlib.papers import privacy

    return privacy.paper_pictures(nb, "fedic", nb.paper["table1"])


def fig_features(nb):
    """t-SNE (or UMAP) of four clients' test features under their FedIC models, with their anchors (stars)."""
    import matplotlib.pyplot as plt

    from fedlib import plots

    st = _fedic_state(nb)
    tests, msgs = [st.data.test[cid] for cid in range(4)], [st.message(cid) for cid in range(4)]
    with torch.no_grad():
        f = np.concatenate([st.features(cid, t.x)["high"].cpu().numpy() for cid, t in enumerate(tests)])
    y = np.concatenate([t.y.cpu().numpy() for t in tests])
    keep = np.random.default_rng(0).permutation(len(y))[:nb.plan.settings["tsne_points"]]
    an, ay = (np.concatenate([m[k].cpu().numpy() for m in msgs]) for k in ("protos", "classes"))
    emb = analysis.embed_2d(np.concatenate([f[keep], an]), nb.embedding)
    fig, ax = plt.subplots(figsize=(6, 5))
    plots.embedding_scatter(emb[:len(keep)], y[keep], ax=ax, num_classes=10, title="FedIC: clients 1-4, features")
    cmap = plt.get_cmap("tab10")
    ax.scatter(emb[len(keep):, 0], emb[len(keep):, 1], marker="*", s=200, c=[cmap(int(c)) for c in ay], ec="k")
    return nb.figure(fig, f"{nb.embedding} of four clients' features with their anchors (stars)", "features")


def show_ledger(nb):
    """The claims ledger, judged on the converged runs of Table 1 and Figs. 2 and 4 once all have finished
    (:func:`converged_runs`), else on this profile's; writes the report section."""
    sweeps = {"scale": _sweep(nb, "scale", scale_configs, "Table 3"),
              "alphas": _sweep(nb, "alphas", alpha_configs, "Table 4")}
    conv = nb.once("converged", lambda: converged_runs(nb.plan)) if nb.profile not in ("converged", "paper") else None
    if conv and conv["complete"]:
        claims = ledger(conv["plan"], {"table1": conv["table1"], "k": conv["k"], "ablation": conv["ablation"],
                                       "bias": conv["bias"], "sweeps_plan": nb.plan, **sweeps})
    else:
        claims = ledger(nb.plan, {"table1": _table1(nb)["cells"], "k": _sweep(nb, "k", k_configs, "Fig. 2"),
                                  "ablation": _sweep(nb, "ablation", ablation_configs, "Fig. 4"),
                                  "bias": _bias(_fedic_records(nb)), **sweeps})
    return nb.ledger(claims)


if __name__ == "__main__":
    raise SystemExit(main())
