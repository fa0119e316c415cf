"""The ProtoNorm study: G. Lee, J. Shin, D. Choi, "Heterogeneous Federated Learning with Prototype Alignment and
Upscaling", arXiv 2507.04310. Draws the spiral study (Figs. 1, 2, 6), Table 1 on Fashion-MNIST, Tables 3-5,
Figs. 3-5 and 7-8, and the claims ledger; every decision (scoring: 1, 16, 26) is in docs/protonorm.md."""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd
import torch

from fedlib import analysis, report, results, study
from fedlib.analysis import pairwise_distances
from fedlib.claims import sample_std
from fedlib.data.partition import label_partition
from fedlib.plans.protonorm import (  # noqa: F401  (re-exported: the study's plan part)
    Plan, all_jobs, archived_tables, check_spiral_section, code_protocol_configs, extra_datasets, gamma_configs,
    homogeneous_configs, load_plan, pa_phase_config, spiral_configs, table1_config, table1_configs)
from fedlib.study.notebook import Shown, open_notebook
from fedlib.validation import ConfigError
from fedlib.ledgers.protonorm import (  # noqa: F401  (re-exported: the study's ledger)
    simplex_distance, tables, ledger, score, diverged, plateaus, converged_runs, homogeneous_accuracy, gamma_results)
from fedlib.ledgers.protonorm import (  # noqa: F401  (re-exported: the study's ledger)
    smallest_angle, global_prototypes, claims, synthetic_pa, margins, pa_history, pa_iterations, collect, _runs)


CONVERGED_COMMAND = "python -m fedlib.papers.protonorm --profile converged --all-tables"


@study.command
def main(argv: list[str] | None = None) -> int:
    """``python -m fedlib.papers.protonorm [--profile P] [--methods M ...] [--partitions ...] [--all-tables]``:
    run the Table 1 protocol on Fashion-MNIST headless and print it beside the paper's CIFAR-10; with
    ``--all-tables`` also the code protocol, Table 3 and Tables 4-5. A run already finished (results folder,
    another device, the run archive) is read, not trained again."""
    ap = study.add_retrain_archived(study.cli("python -m fedlib.papers.protonorm", main.__doc__))
    ap.add_argument("--partitions", nargs="+", help="default: the profile's partitions")
    ap.add_argument("--all-tables", action="store_true", help="also run the code protocol, Table 3 and Tables 4-5 "
                    "on Fashion-MNIST, every seed of the profile (the runs the converged profile keeps in the run "
                    "archive)")
    ap.add_argument("--model", help="model family instead of the profile's (ht0, ht0_lite)")
    ap.add_argument("--dataset", default="fmnist", help="fmnist (default), cifar10, cifar100 (from the data root)")
    args = ap.parse_args(argv)
    plan = load_plan(args.profile, methods=args.methods, rounds=args.rounds, seeds=args.seeds, device=args.device,
                     executor=args.executor)
    known = list(plan.spec["partitions"])
    if args.partitions:
        if any(p not in known for p in args.partitions):
            raise ConfigError("--partitions", args.partitions, "some of " + ", ".join(known))
        plan.settings["table1"]["partitions"] = list(args.partitions)
    if args.model:
        if args.model not in ("ht0", "ht0_lite"):
            raise ConfigError("--model", args.model, "ht0 or ht0_lite")
        plan.settings["table1"]["model"] = args.model
    if args.dataset not in plan.spec["datasets"]:
        raise ConfigError("--dataset", args.dataset, "one of " + ", ".join(plan.spec["datasets"]))
    dspec = plan.spec["datasets"][args.dataset]
    grids = [("Table 1", table1_configs(plan, args.dataset))]
    if args.all_tables:
        grids += [("code protocol", code_protocol_configs(plan)), ("Table 3", homogeneous_configs(plan)),
                  ("Tables 4-5", gamma_configs(plan))]
    res = {what: results.run_or_read(cfgs, plan.seeds, workers=args.workers, desc=what,
                                     retrain_archived=args.retrain_archived) for what, cfgs in grids}["Table 1"]
    paper = report.load_paper("protonorm")["tables"]["table1"]
    t = plan.table1
    print(f"ProtoNorm Table 1 protocol on {dspec['label']}, profile {args.profile}: model {t['model']}, "
          f"data fraction {t['fraction']}, {t['rounds']} rounds, seeds {plan.seeds}; pooled accuracy, best round (%). "
          f"Paper column: {dspec['paper_column']}"
          + (" (Fashion-MNIST is not in the paper: shown for reference, no difference taken)"
             if args.dataset == "fmnist" else ""))
    for part in t["partitions"]:
        ours = {m: score(plan, m, res[(m, part)]) for m in t["methods"]}
        col = f"{part}_{dspec['paper_column']}"
        df = report.compare(paper, {m: {col: (r["mean"], r["std"] if r["n"] > 1 else math.nan)}
                                    for m, r in ours.items()})
        if args.dataset == "fmnist":  # another dataset than the paper's column: no difference is taken
            df = df.drop(columns="diff").rename(columns={"paper": f"paper ({dspec['paper_column']})",
                                                         "ours": "ours (Fashion-MNIST)"})
        df["rule"] = [ours[m]["metric"] if m in ours else "" for m in df.index]
        df["best round"] = [",".join(map(str, ours[m]["best_rounds"])) if m in ours else "" for m in df.index]
        print(f"\n{plan.spec['partitions'][part]['label']}")
        print(report.to_markdown(df))
    return 0


# The notebook (notebooks/protonorm.py): one function per cell, each adding its table or figure to the report section
# and returning it; ``nb`` is the notebook's state (:class:`fedlib.study.notebook.Notebook`).

def notebook(profile: str, methods=None, rounds=None, workers=None, embedding: str = "tsne", device=None,
             backend=None):
    """The set-up cell (:func:`fedlib.study.notebook.open_notebook`): the notebook state the other cells take."""
    def about(plan):
        T1 = plan.table1
        return (f"spiral {plan.settings['spiral_rounds']}, Table 1 protocol {T1['rounds']}",
                table1_config(plan, "protonorm")["device"],
                f"profile {profile!r}: spiral rounds {plan.settings['spiral_rounds']}, seeds {plan.seeds}; Table 1 "
                f"protocol: {T1['model']}, data fraction {T1['fraction']}, {T1['rounds']} rounds, methods "
                f"{T1['methods']}")

    return open_notebook("protonorm", load_plan, profile, about, backend=backend, workers=workers,
                         embedding=embedding, title="ProtoNorm (Lee, Shin, Choi, arXiv 2507.04310)", methods=methods,
                         rounds=rounds, device=device)


def run_all(nb) -> None:
    """Every run of the notebook (the spiral's first), one process per core; prints how long it took."""
    t_start = time.time()
    jobs = [(c, nb.seed0) for c in spiral_configs(nb.plan).values()] + all_jobs(nb.plan)
    nb.run_all(jobs, desc="all runs")
    print(f"{len(jobs)} runs ready in {(time.time() - t_start) / 60:.1f} min")


def _spiral(nb) -> dict:
    """The spiral runs and, per seed, the smallest angle between the global prototypes and the last accuracies."""
    def make():
        plan, cfgs = nb.plan, spiral_configs(nb.plan)
        done = results.run_or_read(cfgs, plan.seeds, workers=nb.workers, desc="spiral")
        per_seed = {key: {"angle": [results.derived(cfg, s, "spiral-smallest-angle",
                                                    lambda st: smallest_angle(global_prototypes(st)[1]))
                                    for s in plan.seeds],
                          **{w: [100 * x["metrics"][metric]["last"] for x in done[key]]
                             for w, metric in (("acc", "acc_proto"), ("head", "acc_head"))}}
                    for key, cfg in cfgs.items()}
        return {"configs": cfgs, "seeds": list(plan.seeds), "per_seed": per_seed,
                "labels": {k: plan.spec["spiral"]["runs"][k]["label"] for k in cfgs}}
    return nb.once("spiral", make)


def fig_spiral(nb):
    """Figs. 1, 2 and 6: each spiral run's test features, global (stars) and local (x) prototypes, first seed."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    sp = _spiral(nb)
    palette = sns.color_palette("tab10", 6)
    fig, axes = plt.subplots(1, 4, figsize=(20, 5))
    for ax, (key, cfg) in zip(axes, sp["configs"].items(), strict=False):
        st = results.state(cfg, nb.seed0)
        f = analysis.test_features(st, "high", max_points=3000, seed=0)
        classes, g = global_prototypes(st)
        gamma = cfg["algorithm"].get("gamma", 1.0) if cfg["algorithm"]["name"] == "protonorm" else 1.0
        for c in range(6):
            ax.scatter(*f["z"][f["y"] == c].T, s=2, color=palette[c], alpha=0.4)
        with torch.no_grad():   # local prototypes: each client's class means of its training features
            for cid in range(st.data.num_clients):
                train = st.data.train[cid]
                z = st.features(cid, train.x)["high"]
                for c in torch.unique(train.y).tolist():
                    ax.scatter(*z[train.y == c].mean(0).numpy(), marker="x", s=25, color=palette[c], linewidths=1)
        for c, p in zip(classes, g, strict=False):
            ax.scatter(*(gamma * p), marker="*", s=300, color=palette[int(c)], edgecolors="black", linewidths=1)
        angle, acc = sp["per_seed"][key]["angle"][0], sp["per_seed"][key]["acc"][0]
        ax.set_title(f"{sp['labels'][key]}\nsmallest angle {angle:.1f} deg, accuracy {acc:.1f}%", fontsize=9)
        ax.set_aspect("equal", adjustable="datalim")
    fig.suptitle(f"Spiral, 10 clients, {nb.plan.settings['spiral_rounds']} rounds, seed {nb.seed0}")
    return nb.figure(fig, "Spiral study (Figs. 1, 2, 6): test features, global prototypes (stars), local prototypes "
                     f"(x), seed {nb.seed0}", "spiral")


def show_spiral(nb):
    """The spiral's smallest angles and last-round accuracies, mean ± std over seeds (the paper shows pictures)."""
    sp = _spiral(nb)
    cols = {"angle": "smallest angle between global prototypes (deg)", "acc": "accuracy, nearest global prototype (%)",
            "head": "accuracy, head (%)"}
    rows = {sp["labels"][k]: {c: report.fmt(float(np.mean(v[w])), sample_std(v[w]), n=len(v[w]))
                              for w, c in cols.items()} for k, v in sp["per_seed"].items()}
    return nb.table(f"**Spiral study (ours; the paper shows pictures only), {nb.plan.settings['spiral_rounds']} "
                    f"rounds, seeds {', '.join(map(str, sp['seeds']))}: mean ± std over seeds.**",
                    pd.DataFrame(rows).T.rename_axis(report.DASH))


def check_spiral(nb) -> None:
    """Print the spiral's checks: alignment spreads the six prototypes, aligned prototypes are unit vectors."""
    sp, aligned = _spiral(nb), ("pa", "pa_pu")
    print("runs:", list(sp["configs"]))
    print("alignment spreads the six prototypes to at least 55 of 60 degrees:",
          all(min(sp["per_seed"][k]["angle"]) >= 55 for k in aligned))
    norms = [np.linalg.norm(global_prototypes(results.state(sp["configs"][k], nb.seed0))[1], axis=1) for k in aligned]
    print("aligned prototypes are unit vectors:", all(np.allclose(n, 1.0, atol=1e-5) for n in norms))


def show_setting(nb):
    """The Table 1 protocol's setting: the paper's beside this run's, row by row."""
    T1, seeds = nb.plan.table1, nb.plan.seeds
    grid = {key: ", ".join(f"{g:g}" for g in T1[key]) for key in ("protonorm_gamma", "pbfl_gamma")}
    lite = "ht0_lite: ResNet-4, FedAvgCNN, ShuffleNetV2 x0.5, MobileNetV2 x0.25 (CPU-sized stand-in)"
    part = "all" if T1["fraction"] == 1 else f"{100 * T1['fraction']:g}% stratified subsample (seed 0)"
    return nb.setting({
        "dataset": ("CIFAR-10/100, Flowers-102, Tiny ImageNet", "Fashion-MNIST (the 10-class data on this machine)"),
        "models": ("Ht0: ResNet-8, MobileNetV2, ShuffleNetV2, EfficientNet-B0",
                   "Ht0 (the paper's)" if T1["model"] == "ht0" else lite),
        "data used": ("all", part),
        "rounds": ("300", str(T1["rounds"])), "seeds": ("3", f"{len(seeds)} (seed {', '.join(map(str, seeds))})"),
        "Table 1 methods": ("all seven", ", ".join(nb.label(m) for m in T1["methods"])),
        "ProtoNorm gamma grid (Table 4)": ("1, 200, 400, 600, 800, 1000",
                                           grid["protonorm_gamma"] + " and 100 (Table 1)"),
        "FedProto/FedTGP gamma (Table 5)": ("1.0, 1.1, 1.2, 1.3, 1.4", "1.0, " + grid["pbfl_gamma"]),
    }, title="**Table 1 protocol: paper vs this run.**")


def _practical(nb):
    """The practical split of the Table 1 protocol (ProtoNorm's run, first seed), built."""
    return nb.once("practical", lambda: results.build(table1_config(nb.plan, "protonorm", "practical"), nb.seed0)[0])


def _partitions(nb) -> dict:
    """Figs. 7-8's splits of this run's Fashion-MNIST pool: practical at three alphas, pathological."""
    def make():
        ds = _practical(nb).dataset
        y_tr, y_te = ds.y_train.numpy(), ds.y_test.numpy()
        specs = {f"practical, Dir({a:g})": dict(scheme="dirichlet", alpha=a) for a in (0.1, 0.5, 1.0)}
        specs["pathological, 2 classes"] = dict(scheme="pathological", classes_per_client=2)
        return {name: label_partition(spec.pop("scheme"), y_tr, y_te, 10, num_clients=20, seed=1, split="merge",
                                      **spec) for name, spec in specs.items()}
    return nb.once("partitions", make)


def fig7_8(nb):
    """Figs. 7-8: training samples per client and class, practical split at three alphas and pathological."""
    import matplotlib.pyplot as plt

    from fedlib import plots

    ds = _practical(nb).dataset
    pooled = len(ds.y_train) + len(ds.y_test)
    fig, axes = plt.subplots(2, 2, figsize=(16, 7))
    for ax, (name, part) in zip(axes.flat, _partitions(nb).items(), strict=False):
        plots.partition_heatmap(part, ax=ax, annotate=False, title=f"{name} ({pooled} images pooled)")
    fig.tight_layout()
    return nb.figure(fig, "Figs. 7-8: training samples per client and class (practical at three alphas, "
                     "pathological)", "fig7_partitions")


def check_partitions(nb) -> None:
    """Print the splits' checks: every pooled image used once, 75/25 per client, classes per client."""
    ds = _practical(nb).dataset
    total = len(ds.y_train) + len(ds.y_test)
    for name, part in _partitions(nb).items():
        pooled = np.concatenate([np.concatenate([part.train[c], part.test[c]]) for c in range(part.num_clients)])
        sizes = [(len(part.train[c]), len(part.train[c]) + len(part.test[c])) for c in range(part.num_clients)]
        print(f"{name}: clients {part.num_clients}; every pooled image used once: "
              f"{len(pooled) == len(np.unique(pooled)) == total}; train share 0.75 (to one image): "
              f"{all(abs(tr / n - 0.75) <= 1 / n for tr, n in sizes)}; "
              f"most classes on a client: {int((part.counts > 0).sum(1).max())}")


def _table1_scores(nb) -> dict:
    T1, t1 = nb.plan.table1, _runs(nb, "table1")
    return nb.once("table1_scores", lambda: {p: {m: score(nb.plan, m, t1[(m, p)]) for m in T1["methods"]}
                                             for p in T1["partitions"]})


def _claims(nb) -> dict:
    """The paper's claim (ProtoNorm above every baseline), ours vs paper."""
    ours1 = _table1_scores(nb)
    return claims(nb.plan, {p: {m: r["mean"] for m, r in row.items()} for p, row in ours1.items()},
                  nb.paper["table1"]["rows"], {p: f"{p}_cifar10" for p in ours1})


def _fmt(r: dict, n: bool = False) -> str:
    """A :func:`score` as ``mean ± std``; one seed: its value (``n``: with ``(n=1)``)."""
    return report.fmt(r["mean"], r["std"] if n or r["n"] > 1 else math.nan, n=r["n"] if n else math.nan)


def _table1_rows(nb, plan: Plan, scores: dict, converged: bool = False) -> dict:
    """Table 1's rows, ours per split beside the paper's CIFAR-10 (``converged``: finished rows, their plateaus)."""
    T1, rows = plan.table1, {}
    for m in T1["methods"]:
        if converged and not any(m in scores.get(p, {}) for p in T1["partitions"]):
            continue
        row, ref = {}, nb.paper["table1"]["rows"].get(m)
        for p in T1["partitions"]:
            r = scores.get(p, {}).get(m)
            row[f"ours: Fashion-MNIST {p}"] = _fmt(r, converged) + _n_note(r, plan) if r else "not finished"
            if converged:
                row[f"plateau {p}"] = study.plateau_cell(r["plateau"] if r else None, r.get("trend") if r else None)
            row[f"paper: CIFAR-10 {p}"] = report.fmt(*ref[f"{p}_cifar10"]) if ref else "—"
        rows[nb.label(m)] = row
    return rows


def _n_note(r: dict, plan: Plan) -> str:
    """`` (n = 5)`` for a score read on other seeds than the profile's (the evidence planner's added seeds)."""
    return f" (n = {r['n']})" if r.get("n", len(plan.seeds)) != len(plan.seeds) else ""


def _code_rows(nb, paper: dict, code: dict, n: bool = False) -> dict:
    """Each method's score under the paper's protocol and the code's, and the difference; a cell read on other
    seeds than the profile's (the evidence planner's added seeds) says its n."""
    return {nb.label(m): {"paper protocol": _fmt(paper[m], n) + _n_note(paper[m], nb.plan),
                          "code protocol": _fmt(r, n) + _n_note(r, nb.plan),
                          "code - paper": report.fmt(r["mean"] - paper[m]["mean"], digits=2, sign=True)}
            for m, r in code.items() if m in paper}


def show_table1(nb):
    """Table 1 beside the paper's CIFAR-10, ProtoNorm under its three inference rules (decision 1), the claim."""
    T1, L, ours1, t1 = nb.plan.table1, nb.label, _table1_scores(nb), _runs(nb, "table1")
    longer = [f"{L(m)} {p} {n} rounds" for (m, p), runs in sorted(t1.items()) if m in T1["methods"]
              and (n := max(s["rounds"] for s in runs)) > T1["rounds"]]
    longer = f"; curves still rising extended towards their plateau: {', '.join(longer)}" if longer else ""
    table1_df = nb.table(f"**Table 1 protocol on Fashion-MNIST (ours, {T1['model']}, {T1['rounds']} rounds{longer}) "
                         "beside the paper's CIFAR-10 columns** (pooled accuracy %, best round; the paper's numbers "
                         "are another dataset: no difference is taken).",
                         pd.DataFrame(_table1_rows(nb, nb.plan, ours1)).T)
    claims_df = nb.table("**The paper's claim, ours vs paper (percentage points).**", pd.DataFrame(_claims(nb)).T)
    nb.section.record(table1={p: dict(row) for p, row in ours1.items()})
    rules = {(p, L(v)): {name: report.fmt(100 * t1[(v, p)][0]["metrics"][key]["best_weighted"]) for name, key in
                         (("nearest global prototype (code)", "acc_proto"),
                          ("nearest local prototype (Eq. 6)", "acc_proto_local"), ("head", "acc_head"))}
             for p in T1["partitions"] for v in T1["methods"] if v.startswith("protonorm")}
    rules_df = nb.table("**ProtoNorm under its three inference rules (ours, best round, pooled %).**",
                        pd.DataFrame(rules).T)
    return Shown((table1_df, rules_df, claims_df))


def show_extra_datasets(nb):
    """Table 1 on the paper's CIFAR-10/100 where their files are in the data root: ours vs paper."""
    plan, T1, shown = nb.plan, nb.plan.table1, []
    for ds_name in extra_datasets():
        dspec = plan.spec["datasets"][ds_name]
        res = results.run_or_read(table1_configs(plan, ds_name), None, workers=nb.workers, desc=dspec["label"])
        for p in T1["partitions"]:
            table = {m: {f"{p}_{dspec['paper_column']}": (r["mean"], r["std"])}
                     for m, r in {m: score(plan, m, res[(m, p)]) for m in T1["methods"]}.items()}
            caption = f"Table 1, {dspec['label']} {p} (ours vs paper, same dataset)"
            shown.append(nb.section.table(nb.paper["table1"], table, caption=caption, key=f"table1_{ds_name}_{p}"))
    if not shown:
        print("CIFAR-10/100 are not in the data root: Table 1 runs on Fashion-MNIST only "
              "(put torchvision's CIFAR files under $FEDLIB_DATA to add their columns)")
    return Shown(shown)


def show_code_protocol(nb):
    """The prototype methods under the paper's protocol and the official code's (practical; decision 27)."""
    plan, ours1 = nb.plan, _table1_scores(nb)
    cp_cfgs = code_protocol_configs(plan)
    code = {m: score(plan, m, sums) for m, sums in results.run_or_read(cp_cfgs, None, progress=False).items()}
    part_code = results.build(cp_cfgs[next(iter(cp_cfgs))], nb.seed0)[0].partition
    same_split = all(np.array_equal(part_code.train[c], _practical(nb).partition.train[c])
                     for c in range(part_code.num_clients))
    redraw = ("at least 1 sample" if plan.settings.get("code_min_size", 1) == 1 else "PFLlib's least_samples, as the "
              "paper protocol (the code's 1 leaves a client one sample and no test split at this data fraction: "
              "decision 27)")
    df = nb.table("**Paper protocol vs the official code's (practical split, pooled accuracy %, best round; code: "
                  f"lambda 10 for its row, Dirichlet redrawn until every client has {redraw}, unshuffled batches).** "
                  f"The two protocols' splits are {'the same draw here.' if same_split else 'different draws.'}",
                  pd.DataFrame(_code_rows(nb, ours1["practical"], code)).T)
    print("same Dirichlet split under both protocols:", same_split)
    return df


def table3_frame(plan: Plan, runs: dict | None, paper: dict, accuracies: dict | None = None):
    """Table 3 (mean ± sample std over the same seeds, rule, the paper's CIFAR-100 CNN) from runs or ``accuracies``."""
    per = accuracies if accuracies is not None else homogeneous_accuracy(runs) or {}
    rows = {plan.label(m): {"ours: Fashion-MNIST practical": report.fmt(float(np.mean(v)), sample_std(v), n=len(v)),
                            "seeds": len(v), "rule": "acc_proto" if m == "protonorm" else "acc_head",
                            "paper: CIFAR-100 (CNN)": report.fmt(*paper["table3"]["rows"][m]["cnn_cifar100"])}
            for m, v in per.items()}
    return pd.DataFrame(rows).T


def show_table3(nb):
    """Table 3 (homogeneous 4-layer CNN) on Fashion-MNIST beside the paper's CIFAR-100 CNN column."""
    homo = _runs(nb, "homogeneous")
    if not homo:
        print("this profile runs no homogeneous table")
        return None
    return nb.table("**Table 3 (homogeneous 4-layer CNN), ours on Fashion-MNIST (best round, mean ± std over seeds) "
                    "beside the paper's CIFAR-100.**", table3_frame(nb.plan, homo, nb.paper))


def fig_gamma(nb):
    """Tables 4-5 over gamma, ours beside the paper's other datasets; returns the figure and the table."""
    import matplotlib.pyplot as plt

    L, paper = nb.label, nb.paper
    recs = nb.once("gamma_results", lambda: gamma_results(nb.plan, _runs(nb, "gamma")))
    gamma_df = pd.DataFrame([{"method": L(r["method"]), "gamma": r["gamma"], "accuracy (%)": r["acc"],
                              "diverged": r["diverged"], "best round": r["best_round"]} for r in recs])
    fig, axes = plt.subplots(1, 2, figsize=(13, 4))
    pn = gamma_df[gamma_df.method == L("protonorm")]
    axes[0].plot(pn.gamma, pn["accuracy (%)"], "o-", color="C3", label=f"ours: {L('protonorm')}, Fashion-MNIST")
    for ds_key, style in (("cifar100", "s--"), ("flowers102", "^--"), ("tinyimagenet", "v--")):
        pr = {float(k): v for k, v in paper["table4"]["rows"][ds_key].items() if v is not None}
        axes[0].plot(list(pr), list(pr.values()), style, color="grey", alpha=0.6, label=f"paper: {ds_key}")
    axes[0].set_xscale("symlog", linthresh=1)
    axes[0].set(xlabel="gamma", ylabel="accuracy (%)", title="Table 4: ProtoNorm over gamma")
    axes[0].legend(fontsize=7)
    for m, color in ((L("fedproto"), "C0"), (L("fedtgp"), "C2")):
        sub = gamma_df[gamma_df.method == m]
        axes[1].plot(sub.gamma, sub["accuracy (%)"], "o-", color=color, label=f"ours: {m}")
        pr = {float(k): v for k, v in paper["table5"]["rows"][m.lower() + "_cifar10"].items() if v is not None}
        axes[1].plot(list(pr), list(pr.values()), "s--", color=color, alpha=0.4, label=f"paper: {m}, CIFAR-10")
    axes[1].set(xlabel="gamma", ylabel="accuracy (%)", title="Table 5: FedProto and FedTGP over gamma")
    axes[1].legend(fontsize=7)
    nb.figure(fig, "Tables 4-5: accuracy over gamma (ours: Fashion-MNIST, solid; paper: other datasets, dashed)",
              "tables4_5_gamma")
    table = gamma_df.pivot_table(index="method", columns="gamma", values="accuracy (%)").round(2)
    table.columns = [f"gamma {g:g}" for g in table.columns]
    table = table.astype(object).where(table.notna(), "—")  # not part of that method's sweep
    div = gamma_df[gamma_df.diverged]
    nb.table("**Tables 4-5 (ours, Fashion-MNIST practical, accuracy %).**", table, "Diverged: " + ", ".join(
        f"{r.method} gamma {r.gamma:g}" for r in div.itertuples()) if len(div) else "No run diverged.")
    return Shown((fig, table))


def show_converged(nb):
    """Tables 1, 3, 4-5 and the code protocol under the converged profile, from :func:`converged_runs`."""
    data, early = nb.paper_protocol("Tables 1, 3 and 4-5", "converged", converged_runs, lambda d: d["table1"],
                                    CONVERGED_COMMAND, counts=True, profile="converged")
    if early is not None:
        return early
    cp, L, t1, T1 = data["plan"], nb.label, data["table1"], data["plan"].table1
    waiting = [L(m) for m in T1["methods"] if not any(m in t1.get(p, {}) for p in T1["partitions"])]
    where = f"{T1['model']}, {100 * T1['fraction']:g}% of Fashion-MNIST, {T1['rounds']} rounds, seeds {cp.seeds}"
    shown = [nb.table(
        f"**Table 1 under the converged profile ({where}; mean ± std over {len(cp.seeds)} seeds, or n where the "
        "evidence planner added seeds, pooled accuracy %, "
        f"best round) beside the paper's CIFAR-10 columns** (another dataset: no difference is taken) · "
        f"{data['found']} of {data['total']} runs of Tables 1, 3, 4-5 and the code protocol finished · "
        f"{data['made_by']}", pd.DataFrame(_table1_rows(nb, cp, t1, converged=True)).T,
        study.PLATEAU_RULE + (f" Not finished yet (every seed), so not shown: {', '.join(waiting)}; "
                               f"`{CONVERGED_COMMAND}` goes on where the archive ends." if waiting else ""))]
    if data["code"] and "practical" in t1:
        shown.append(nb.table("**Paper protocol vs the official code's under the converged profile (practical, "
                              "pooled accuracy %, best round, mean ± std over seeds).**",
                              pd.DataFrame(_code_rows(nb, t1["practical"], data["code"], n=True)).T))
    if data["homogeneous"]:
        homo = table3_frame(cp, None, nb.paper, data["homogeneous"]).drop(columns=["seeds", "rule"])
        shown.append(nb.table("**Table 3 under the converged profile (homogeneous 4-layer CNN, mean ± std over "
                              "seeds).**", homo))
    if data["gamma"]:
        gam = pd.DataFrame([{"method": L(r["method"]), "gamma": f"gamma {r['gamma']:g}",
                             "acc": ("diverged" if r["diverged"] else
                                     report.fmt(r["acc"], sample_std(r["per_seed"]), n=len(r["per_seed"])))}
                            for r in data["gamma"]]).pivot(index="method", columns="gamma", values="acc").fillna("—")
        shown.append(nb.table("**Tables 4-5 under the converged profile (practical, accuracy %, mean ± std over "
                              "seeds; \"diverged\": a seed's run diverged).**", gam))
    return Shown(tuple(shown))


def fig3(nb):
    """Fig. 3: (a) PA iterations per round, (b) accuracy per round of every Table 1 method (practical)."""
    import matplotlib.pyplot as plt

    T1 = nb.plan.table1
    its = {p: pa_iterations(_rounds(nb, "protonorm", p)) for p in T1["partitions"] if "protonorm" in T1["methods"]}
    fig, axes = plt.subplots(1, 2, figsize=(13, 4))
    for (p, it), color in zip(its.items(), ("C3", "C1"), strict=False):
        axes[0].plot(np.arange(1, len(it) + 1), it, color=color, label=f"ProtoNorm, {p}")
    axes[0].set(xlabel="round", ylabel="PA iterations until the stopping rule",
                title="Fig. 3a: PA iterations per round")
    axes[0].legend(fontsize=8)
    for m in T1["methods"]:
        ev = [r for r in _rounds(nb, m) if "acc" in r]
        axes[1].plot([r["round"] for r in ev], [100 * r["acc"][nb.plan.metric(m)]["weighted"] for r in ev],
                     label=nb.label(m), lw=2 if m == "protonorm" else 1)
    axes[1].set(xlabel="round", ylabel="pooled test accuracy (%)", title="Fig. 3b: accuracy per round (practical)")
    axes[1].legend(fontsize=7)
    nb.figure(fig, "Fig. 3: PA iterations per round (a) and accuracy per round (b), ours", "fig3_convergence")
    if "protonorm" in T1["methods"]:
        it = its["practical"]
        print(f"PA iterations per round (practical): first {it[:5].tolist()}, last {it[-5:].tolist()}, "
              f"min {it.min()}, max {it.max()}")
    return fig


def _pa_phase(nb):
    """Round 1's PA phase: the K = 10 distance history, and the synthetic K = 100 one with its iterations."""
    return nb.once("pa_phase", lambda: (pa_history(results.state(pa_phase_config(nb.plan), nb.seed0)),
                                        *synthetic_pa(k=100, d=512)))


def fig4(nb):
    """Fig. 4: pairwise global-prototype distances during one PA phase (K = 10 and synthetic K = 100)."""
    import matplotlib.pyplot as plt

    hist10, hist100, it100 = _pa_phase(nb)
    fig, axes = plt.subplots(1, 2, figsize=(13, 4))
    for ax, h, k, title in ((axes[0], hist10, 10, "(a) Fashion-MNIST, round 1 (K = 10)"),
                            (axes[1], hist100, 100, "(b) synthetic post-ReLU-like prototypes (K = 100)")):
        x = np.arange(len(h))  # 0 = the normalised averages before PA
        ax.fill_between(x, h[:, 0], h[:, 2], color="C0", alpha=0.2, label="min - max")
        ax.plot(x, h[:, 1], color="C0", label="mean")
        ax.axhline(simplex_distance(k), color="C3", ls="--",
                   label=f"regular simplex sqrt(2K/(K-1)) = {simplex_distance(k):.4f}")
        ax.axhline(math.sqrt(2), color="grey", ls=":", label="sqrt(2)")
        ax.set_xscale("symlog", linthresh=10)
        ax.set(xlabel="PA iteration (0 = before PA)", ylabel="pairwise distance of global prototypes", title=title)
        ax.legend(fontsize=7)
    nb.figure(fig, "Fig. 4: pairwise global-prototype distances during one PA phase", "fig4_pa_phase")
    print(f"K = 10: {len(hist10) - 1} iterations; mean distance {hist10[0, 1]:.4f} -> {hist10[-1, 1]:.4f} "
          f"(simplex {simplex_distance(10):.4f}), min {hist10[0, 0]:.4f} -> {hist10[-1, 0]:.4f}")
    print(f"K = 100 (synthetic): {it100} iterations; mean {hist100[0, 1]:.4f} -> {hist100[-1, 1]:.4f} "
          f"(simplex {simplex_distance(100):.4f}), min {hist100[0, 0]:.4f} -> {hist100[-1, 0]:.4f}")
    nb.section.record(fig4={"k10_iterations": len(hist10) - 1, "k10_mean_first": hist10[0, 1], "k10_mean_last":
                            hist10[-1, 1], "k10_min_last": hist10[-1, 0], "k100_iterations": it100, "k100_mean_last":
                            hist100[-1, 1]})
    return fig


def check_pa_phase(nb) -> None:
    """Print the PA phase's checks: the prototypes spread and end near the simplex distance."""
    hist10 = _pa_phase(nb)[0]
    print("one PA phase spreads the prototypes (smallest and mean pairwise distance grow):",
          bool(hist10[-1, 0] > hist10[0, 0] and hist10[-1, 1] > hist10[0, 1]))
    print("and ends near the simplex distance (within 0.01):", bool(abs(hist10[-1, 1] - simplex_distance(10)) < 0.01))


def _states(nb) -> dict:
    cfgs = table1_configs(nb.plan)
    return nb.once("states", lambda: {m: results.state(cfgs[(m, "practical")], nb.seed0)
                                      for m in nb.plan.table1["methods"]})


def _prototype_methods(nb) -> list[str]:
    return [m for m in ("fedproto", "fedtgp", "protonorm") if m in nb.plan.table1["methods"]]


def fig5(nb):
    """Fig. 5: per class, the normalised margin to the nearest other global prototype; the figure and numbers."""
    import matplotlib.pyplot as plt

    pbfl, states = _prototype_methods(nb), _states(nb)
    fig, ax = plt.subplots(figsize=(9, 3.8))
    width = 0.8 / max(1, len(pbfl))
    rows = {}
    for i, m in enumerate(pbfl):
        classes, g = global_prototypes(states[m])
        mg = margins(g)
        ax.bar(classes + (i - (len(pbfl) - 1) / 2) * width, mg, width, label=nb.label(m))
        rows[nb.label(m)] = {"min normalised margin": mg.min(), "std": mg.std(), "classes": len(classes)}
    ax.set(xlabel="class", ylabel="margin / largest margin",
           title="Fig. 5: normalised global-prototype margins (practical)")
    ax.set_xticks(range(10))
    ax.legend(fontsize=8)
    nb.figure(fig, "Fig. 5: per-class margin (distance to the nearest other global prototype) / the method's largest",
              "fig5_margins")
    df = nb.table("**Fig. 5 in numbers (ours): evenly spaced prototypes have margins near 1.**",
                  pd.DataFrame(rows).T.round(3))
    return Shown((fig, df))


def fig_distances(nb):
    """Distances between each prototype method's unit-normalised global prototypes; the figure and numbers."""
    import matplotlib.pyplot as plt

    from fedlib import plots

    pbfl, states = _prototype_methods(nb), _states(nb)
    fig, axes = plt.subplots(1, max(1, len(pbfl)), figsize=(5.5 * max(1, len(pbfl)), 4.5), squeeze=False)
    rows = {}
    for ax, m in zip(axes.flat, pbfl, strict=False):
        classes, g = global_prototypes(states[m])
        D = pairwise_distances(g / np.linalg.norm(g, axis=1, keepdims=True))
        plots.distance_heatmap(D, classes.tolist(), ax=ax, title=f"{nb.label(m)}: unit-normalised global prototypes")
        off = ~np.eye(len(D), dtype=bool)
        rows[nb.label(m)] = {"min distance": D[off].min(), "mean distance": D[off].mean(),
                             "prototype norm (mean)": np.linalg.norm(g, axis=1).mean()}
    nb.figure(fig, "Prototype distances: unit-normalised global prototypes of each prototype method (practical)",
              "prototype_distances")
    simplex = f"{simplex_distance(10):.4f}"
    df = nb.table(f"**Distances between unit-normalised global prototypes (simplex value {simplex}).**",
                  pd.DataFrame(rows).T.round(3))
    return Shown((fig, df))


def fig_attack_pictures(nb):
    """The leakage study's attacks on ProtoNorm and its strongest baseline (:func:`fedlib.papers.privacy`)."""
    from fedlib.papers import privacy

    return privacy.paper_pictures(nb, "protonorm", nb.paper["table1"])


def fig_features(nb):
    """t-SNE (or UMAP) of the 512-d test features of every method, each client under its own model, pooled."""
    import matplotlib.pyplot as plt

    from fedlib import plots

    states, n_pts = _states(nb), nb.plan.settings["tsne_points"]
    ncol = (len(states) + 1) // 2
    fig, axes = plt.subplots(2, ncol, figsize=(4 * ncol, 8), squeeze=False)
    for ax in axes.flat[len(states):]:
        ax.set_visible(False)
    for ax, (m, st) in zip(axes.flat, states.items(), strict=False):
        f = analysis.test_features(st, "high", max_points=n_pts, seed=0)
        plots.embedding_scatter(analysis.embed_2d(f["z"], nb.embedding), f["y"], ax=ax, title=nb.label(m),
                                num_classes=10)
    axes.flat[0].legend(fontsize=6, markerscale=3, ncol=2, title="class")
    fig.suptitle(f"{nb.embedding.upper()} of 512-d test features, every client under its own model, pooled "
                 f"({n_pts} points)")
    return nb.figure(fig, f"{nb.embedding} of the test features of every method (practical)", "feature_embedding")


def _rounds(nb, method: str, partition: str = "practical", seed: int | None = None) -> list[dict]:
    return results.rounds(table1_configs(nb.plan)[(method, partition)], nb.seed0 if seed is None else seed)


def show_communication(nb):
    """Floats sent in the last round by all clients (up) and by the server (down), measured (practical)."""
    rows = {nb.label(m): {"up (floats, all clients)": (last := _rounds(nb, m)[-1])["up_params"],
                          "down (floats, all clients)": last["down_params"]} for m in nb.plan.table1["methods"]}
    return nb.table("**Communication per round (last round, practical; measured from the messages).** Supp. D: PBFL "
                    "methods send sum_i (K_i + K) x d floats, FedDistill sum_i (K_i + K) x K, the others model parts.",
                    pd.DataFrame(rows).T)


def show_summary(nb) -> None:
    """The summary: the spiral's angles and accuracies, ProtoNorm's rank and margins, what the profile means."""
    T1, profile = nb.plan.table1, nb.profile
    sp = nb.part(lambda: _spiral(nb))
    lines = [f"Spiral, {sp['labels'][k]}: smallest angle {np.mean(v['angle']):.1f} deg, accuracy "
             f"{np.mean(v['acc']):.1f}% (mean of {len(v['acc'])} seed{'s' if len(v['acc']) > 1 else ''})"
             for k, v in sp["per_seed"].items()] if sp else []
    for (p, who, v), c in _claims(nb).items():
        if who == "ours":
            lines.append(f"Table 1 protocol, {p} (ours), {v}: rank {c['rank among baselines + it']}; "
                         f"minus FedProto {c['minus FedProto']:+.2f}, minus FedTGP {c['minus FedTGP']:+.2f}, "
                         f"minus best baseline ({c['best baseline']}) {c['minus best baseline']:+.2f} points")
    if profile == "smoke":
        lines.append("smoke profile: a few rounds on 1% of the data; the numbers and pictures are not meaningful.")
    elif profile != "paper":
        lines.append(f"{profile} profile: {T1['model']} on {100 * T1['fraction']:g}% of Fashion-MNIST for "
                     f"{T1['rounds']} rounds: not converged; the paper profile follows the paper (300 rounds, all "
                     "data, Ht0, 3 seeds).")
    nb.section.text("**Summary.**\n\n" + "\n".join(f"- {x}" for x in lines))
    print("\n".join(lines))


def show_ledger(nb):
    """The claims ledger: Tables 1, 3, 4-5 on the converged profile once it is complete, the rest on this one."""
    T1, part, plan = nb.plan.table1, nb.part, nb.plan
    sp = part(lambda: _spiral(nb))
    pa_phase = part(lambda: _pa_phase(nb)[0])
    res = {"spiral": sp and sp["per_seed"], "table1": part(lambda: _table1_scores(nb)),
           "homogeneous": part(lambda: homogeneous_accuracy(_runs(nb, "homogeneous"))),
           # every seed's accuracy (per_seed): the verdict weighs the spread
           "gamma": part(lambda: nb.once("gamma_results", lambda: gamma_results(plan, _runs(nb, "gamma")))),
           "pa_iterations": part(lambda: {p: [pa_iterations(_rounds(nb, "protonorm", p, s)) for s in plan.seeds]
                                          for p in T1["partitions"] if "protonorm" in T1["methods"]}),
           "pa_phase": None if pa_phase is None else (pa_phase, 10),
           "margins": part(lambda: {m: float(margins(global_prototypes(_states(nb)[m])[1]).min())
                                    for m in _prototype_methods(nb)}),
           # per prototype method: floats up + down in the last round, and Supp. D's sum_i (K_i + K) x d (K_i: held)
           "comm": part(lambda: {m: ((last := _rounds(nb, m)[-1])["up_params"] + last["down_params"],
                                     int((((_practical(nb).partition.counts > 0).sum(1) + 10) * 512).sum()))
                                 for m in _prototype_methods(nb)})}
    res = {k: v for k, v in res.items() if v is not None}
    conv = nb.once("converged", lambda: converged_runs(nb.plan)) if nb.profile not in ("converged", "paper") else None
    if conv and conv["complete"]:   # Tables 1, 3 and 4-5 judged on the converged profile, the rest on this one's
        res.update(table1=conv["table1"], homogeneous=conv["homogeneous"], gamma=conv["gamma"], short_plan=nb.plan,
                   rising=conv["rising"])
    else:
        res["rising"] = nb.once("plateaus", lambda: plateaus(nb.plan))
    return nb.ledger(ledger(conv["plan"] if conv and conv["complete"] else nb.plan, res), record=False)


if __name__ == "__main__":
    raise SystemExit(main())
