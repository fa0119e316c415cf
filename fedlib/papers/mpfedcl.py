"""The MP-FedCL study on MNIST: configs, tables and figures of Qiao et al., *MP-FedCL: Multiprototype Federated
Contrastive Learning for Edge Intelligence* (IEEE IoT Journal, arXiv 2304.01950). The decisions are in docs/mpfedcl.md;
scoring (decision 17): each client's own test block, mean over clients, last round, mean ± std over seeds; MP-, SP-,
DP-FedCL and FedProto predict by the nearest prototype of the whole pool (Eq. 13), the rest by their head."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from fedlib import report, results, study
from fedlib.claims import DECISIVE_PROFILES, sample_std
from fedlib.plans.mpfedcl import (  # noqa: F401  (re-exported: the study's plan part)
    GRIDS, Plan, all_jobs, archived_tables, config, configs, load_plan)
from fedlib.study.notebook import Shown
from fedlib.ledgers.mpfedcl import (  # noqa: F401  (re-exported: the study's ledger)
    tables, ledger, accuracy, table6, equal_budget_seeds, trends)


@study.command
def main(argv: list[str] | None = None) -> int:
    """``python -m fedlib.papers.mpfedcl [--profile P] [--methods M ...] [--seeds S ...] [--rounds N]``:
    run Table VI's MNIST column headless and print paper | ours | diff. Under ``--profile paper`` a run already
    finished (another device, the run archive) is read, not trained again."""
    parser = study.add_retrain_archived(study.cli("python -m fedlib.papers.mpfedcl", main.__doc__))
    args, plan = study.plan_from_cli(parser, load_plan, argv)
    if plan is None:
        return 2
    rows = table6(plan, results.for_profile(plan.profile, configs(plan, "table6"), workers=args.workers,
                                            desc="Table VI", retrain_archived=args.retrain_archived))
    paper = report.load_paper("mpfedcl")["tables"]["table6"]
    df = report.compare(paper, {m: {"mnist": (r["mean"], r["std"], r["n"])} for m, r in rows.items()})
    df["rounds"] = [rows[m]["rounds"] if m in rows else "" for m in df.index]
    df["rule"] = [rows[m]["metric"] if m in rows else "" for m in df.index]
    print(f"MP-FedCL Table VI, MNIST-2000, profile {args.profile}: seeds {plan.seeds}; last round, mean over "
          "clients (%)")
    print(report.to_markdown(df))
    return 0


# The notebook (notebooks/mpfedcl.py): one function per cell, each adding its table or figure to the report section;
# ``nb`` is the notebook's state (:class:`fedlib.study.notebook.Notebook`).

def notebook(profile: str, methods=None, seeds=None, rounds=None, workers=None, embedding: str = "tsne",
             device=None, backend=None):
    """The set-up cell (:func:`fedlib.study.notebook.open_notebook`): the state the other cells take."""
    from fedlib.study.notebook import open_notebook

    def about(plan):
        return (", ".join(f"{plan.label(m)} {plan.rounds(m)}" for m in plan.table6_methods()),
                config(plan, "mpfedcl")["device"],
                f"profile {profile!r}: seeds {plan.seeds}, Table VI rounds "
                f"{ {m: plan.rounds(m) for m in plan.table6_methods()} }")

    return open_notebook("mpfedcl", load_plan, profile, about, backend=backend, workers=workers, embedding=embedding,
                         methods=methods, seeds=seeds, rounds=rounds, device=device)


def show_setting(nb):
    """The setting table: the paper's setting beside this run's, row by row (``setting`` of experiments.yaml)."""
    plan, seeds = nb.plan, nb.plan.seeds
    values = {"train_size": config(plan, "mpfedcl")["partition"]["train_size"],
              "rounds": ", ".join(f"{nb.label(m)} {plan.rounds(m)}" for m in plan.table6_methods()),
              "trials": len(seeds), "seeds": f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}",
              "encoder": config(plan, "mpfedcl", feature_skew=True)["dataset"]["encoder"]}
    return nb.setting({row: (paper, ours.format(**values)) for row, (paper, ours) in plan.spec["setting"].items()})


def _partition(nb):
    """The label-skew partition of the first seed's MP-FedCL run."""
    return nb.once("partition", lambda: results.build(config(nb.plan, "mpfedcl"), nb.seed0)[0].partition)


def fig6(nb):
    """Fig. 6: training samples per client and class of the label-skew partition, as bubbles."""
    import matplotlib.pyplot as plt

    from fedlib import plots

    fig, ax = plt.subplots(figsize=(5, 4))
    alpha = config(nb.plan, "mpfedcl")["partition"]["alpha"]
    plots.partition_bubbles(_partition(nb), ax=ax, title=f"MNIST, Dir({alpha:g}), seed {nb.seed0}")
    return nb.figure(fig, "Fig. 6: training samples per client (x) and class (y), bubble area = count",
                     "fig6_partition")


def check_partition(nb) -> None:
    """Print the partition's checks: every image split, clients of min_size or more, disjoint test blocks."""
    part, p = _partition(nb), config(nb.plan, "mpfedcl")["partition"]
    print("training images split:", int(part.counts.sum()) == p["train_size"])
    print("every client at least min_size:", int(part.counts.sum(1).min()) >= p["min_size"])
    print("test blocks of test_size, disjoint:", all(len(t) == p["test_size"] for t in part.test)
          and len(np.unique(np.concatenate(part.test))) == sum(len(t) for t in part.test))


def show_table6(nb, draw: bool = True):
    """Table VI (MNIST column): paper | ours | diff, with rounds, rule and the best round; ``draw=False``: the rows."""
    plan, paper = nb.plan, nb.paper["table6"]
    rows = nb.once("table6", lambda: table6(plan, results.for_profile(
        plan.profile, configs(plan, "table6"), workers=nb.workers, desc="Table VI")))
    if not draw:
        return rows
    df = report.compare(paper, {m: {"mnist": (r["mean"], r["std"], r["n"])} for m, r in rows.items()})
    df = df.loc[[m for m in df.index if m in rows]]
    df["rounds (ours / paper)"] = [f"{rows[m]['rounds']} / {paper['rounds'][m]}" for m in df.index]
    df["rule"] = [rows[m]["metric"] for m in df.index]
    df["ours, best round"] = [f"{rows[m]['best_mean']:.2f}" for m in df.index]
    df.index = [nb.label(m) for m in df.index]
    note = "" if nb.profile == "paper" else " **Shorter runs than the paper's: not converged.**"
    nb.section.record(table6=rows)
    return nb.table(f"**Table VI, MNIST column: accuracy (%), last round, mean ± std over seeds {plan.seeds}.**{note}",
                    df)


MODEL_PARAMS = 798_474  # the MNIST MLP 784-512-512-256-10


def check_communication(nb) -> None:
    """Print the checks of MP-FedCL's measured traffic against the counts of the model and the prototypes."""
    part = _partition(nb)
    recs_mp = results.rounds(configs(nb.plan, "table6")["mpfedcl"], nb.seed0)
    held = [int((part.counts[c] >= 2).sum()) for c in range(part.num_clients)]  # classes with >= K samples
    print("MP-FedCL uplink = 5 models + 2 x 256 floats per held class:",
          recs_mp[0]["up_params"] == 5 * MODEL_PARAMS + sum(2 * 256 * h for h in held))
    print("MP-FedCL downlink from round 2 = 5 x (model + pool 5 x 10 x 2 x 256):",
          recs_mp[-1]["down_params"] == 5 * (MODEL_PARAMS + 5 * 10 * 2 * 256))


def show_table2(nb, draw: bool = True):
    """Table II: floats per client and round, up and down, measured from the last round of the Table VI runs;
    ``draw=False``: the ledger's counts (the model, MP-FedCL's measured prototype floats, a full client's)."""
    clients, cfgs, rows = _partition(nb).num_clients, configs(nb.plan, "table6"), {}
    if not draw:
        return nb.once("comm", lambda: {"model": MODEL_PARAMS, "full": 2 * 10 * 256, "prototypes": results.rounds(
            cfgs["mpfedcl"], nb.seed0)[-1]["up_params"] / clients - MODEL_PARAMS})
    for m in nb.plan.table6_methods():
        last = results.rounds(cfgs[m], nb.seed0)[-1]
        up = last["up_params"] / clients
        rows[nb.label(m)] = {"up per client": f"{up:,.0f}", "down per client": f"{last['down_params'] / clients:,.0f}",
                             "prototype floats up per client":
                                 f"{max(0.0, up - MODEL_PARAMS) if m != 'fedproto' else up:,.0f}"}
    return nb.table("**Table II: floats per client and round (measured, last round of seed "
                    f"{nb.seed0}).** A client of all ten classes would send {2 * 10 * 256:,} prototype floats beside "
                    f"the {MODEL_PARAMS:,}-parameter model (paper: 5,120 and 798,474).", pd.DataFrame(rows).T)


def _over_seeds(values) -> str:
    """A cell over seeds: mean ± sample std (``report.fmt``; a single run says n=1)."""
    return report.fmt(float(np.mean(values)), sample_std(values), n=len(values))


def show_table5(nb, draw: bool = True):
    """Tables V and VII (feature non-IID) on the stand-in per client (domain), beside the paper's Digit-5 numbers;
    ``draw=False``: the configs, the data as MP-FedCL's first-seed run records it (its domains and source),
    accuracies per domain and seed, per seed and means."""
    plan, L, paper = nb.plan, nb.label, nb.paper

    def make():
        cfgs = configs(plan, "feature_skew")
        runs, domains = results.train(cfgs, workers=nb.workers, desc="Table V stand-in"), {}
        for m, cfg in cfgs.items():   # Table V's rows: each client's (domain's) last-round accuracy, per seed
            last = [[r for r in results.rounds(cfg, s) if "acc" in r][-1]["clients"][plan.metric(m)]
                    for s in plan.seeds]
            domains[m] = {c: [100.0 * v for v in vs] for c, vs in enumerate(zip(*last, strict=True))}
        per_seed = {m: [accuracy(plan, m, s) for s in runs[m]] for m in cfgs}
        return {"configs": cfgs, "data": runs["mpfedcl"][0]["data"], "domains": domains,
                "mean": {m: float(np.mean(v)) for m, v in per_seed.items()}, "per_seed": per_seed}
    fs = nb.once("feature_skew", make)
    if not draw:
        return fs
    names, t5, t7 = fs["data"]["domains"], paper["table5"]["rows"], paper["table7"]["rows"]
    source = re.sub(r"\S*/(data/encoders/)", r"\1", fs["data"]["source"])   # the data root as the checkout names it
    fs_df = pd.DataFrame({L(m): {**{names[c]: _over_seeds(v) for c, v in fs["domains"][m].items()},
                                 "average": _over_seeds(fs["per_seed"][m]), "rounds": cfg["train"]["rounds"]}
                          for m, cfg in fs["configs"].items()})
    paper5 = pd.DataFrame({L(m): {d: report.fmt(*t5[d][m]) for d in t5} for m in paper["table5"]["columns"]})
    paper7 = pd.DataFrame({"paper, Digit-5 (Table VII)": {L(m): report.fmt(*v["feature_noniid"])
                                                          for m, v in t7.items()}})
    nb.table(f"**Table V / VII analogue on the feature-skew stand-in (not Digit-5): accuracy (%) per client "
             f"(domain), last round, mean ± std over seeds {plan.seeds}.** Source: {source}.",
             fs_df, "**The paper's Table V on Digit-5, for orientation (other data).**",
             report.to_markdown(paper5) + "\n\n" + report.to_markdown(paper7))
    nb.section.record(feature_skew={m: {"mean": v, "per_domain": {names[c]: x for c, x in fs["domains"][m].items()}}
                                    for m, v in fs["mean"].items()})
    return Shown((fs_df, paper5, paper7))


def check_feature_skew(nb) -> None:
    """Print the stand-in's checks: one domain per client, 10 images of every class, only the head sent."""
    fs = show_table5(nb, draw=False)
    data = results.state(fs["configs"]["mpfedcl"], nb.seed0).data
    recs = results.rounds(fs["configs"]["mpfedcl"], nb.seed0)
    print("one domain per client:", [sorted(set(data.dataset.domain_train[t])) for t in
                                     data.partition.train] == [[c] for c in range(5)])
    print("every client holds 10 training images of every class:", bool((data.partition.counts == 10).all()))
    print("only the MLP head is sent: 5 x (133,898 + 2 x 10 x 256) up per round:",
          recs[0]["up_params"] == 5 * (133_898 + 2 * 10 * 256))


def fig10(nb, draw: bool = True):
    """Fig. 10: mean client accuracy per round of the Table VI runs (MNIST), seed mean ± sample std; ``draw=False``:
    their round records, ``{method: [records per seed]}``."""
    import matplotlib.pyplot as plt

    from fedlib.plots import curve_panel

    def make():
        show_table6(nb, draw=False)   # trained or read first
        return {m: [results.rounds(cfg, s) for s in nb.plan.seeds] for m, cfg in configs(nb.plan, "table6").items()}
    curves, seeds = nb.once("curves", make), nb.plan.seeds
    if not draw:
        return curves
    fig, ax = plt.subplots(figsize=(7, 4))
    curve_panel(ax, curves, nb.plan.metric, nb.label)
    words = f"seed {seeds[0]}" if len(seeds) == 1 else \
        f"mean ± std over seeds {', '.join(map(str, seeds))} (n = {len(seeds)})"
    ax.set(ylabel="accuracy (%), each method's rule", title=f"Fig. 10 on MNIST, Dir(0.05), {words}")
    return nb.figure(fig, "Fig. 10: mean client accuracy per round (MNIST)" + ("" if len(seeds) == 1 else
                     f"; mean over {len(seeds)} seeds, band ± sample std"), "fig10_accuracy_per_round")


def show_table8(nb, draw: bool = True):
    """Table VIII analogue: accuracy within MP-FedCL's own training time, per seed (``draw=False``: the cells)."""
    budgets, eq = nb.once("budget", lambda: equal_budget_seeds(nb.plan, fig10(nb, draw=False)))
    if not draw:
        return eq
    seeds, title = nb.plan.seeds, "**Table VIII analogue: accuracy within MP-FedCL's training time"
    if len(seeds) == 1:
        df = pd.DataFrame({nb.label(m): {"accuracy (%)": report.fmt(v["accuracy"][0]),
                                         "rounds in budget": v["rounds"][0]} for m, v in eq.items()}).T
        return nb.table(f"{title} ({budgets[0]:.0f} s on this machine, seed {seeds[0]}).**", df)

    def mean_std_n(values):   # over the seeds with a value, a dash where none has
        v = [float(x) for x in values if not math.isnan(x)]
        return f"{report.fmt(float(np.mean(v)), sample_std(v))} (n = {len(v)})" if v else report.DASH
    df = pd.DataFrame({nb.label(m): {"accuracy (%)": mean_std_n(v["accuracy"]),
                                     "accuracy per seed": ", ".join(f"{a:.2f}" for a in v["accuracy"]),
                                     "rounds in budget, per seed": ", ".join(str(r) for r in v["rounds"])}
                       for m, v in eq.items()}).T
    return nb.table(f"{title} on each seed (" + ", ".join(f"{b:.0f} s" for b in budgets) + " on the machines that "
                    f"made the runs; seeds {', '.join(map(str, seeds))}): mean ± sample std over seeds (n).**", df)


def fig5(nb, draw: bool = True):
    """Fig. 5: MP-FedCL accuracy over K, prototypes per class: figure and numbers (``draw=False``: per K and seed)."""
    import matplotlib.pyplot as plt

    per = nb.once("k", lambda: {k: [accuracy(nb.plan, "mpfedcl", s) for s in runs] for k, runs in
                               results.train(configs(nb.plan, "k"), workers=nb.workers, desc="Fig. 5").items()})
    if not draw:
        return per
    k_acc, k_std = {k: float(np.mean(v)) for k, v in per.items()}, {k: sample_std(v) for k, v in per.items()}
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.errorbar(list(k_acc), list(k_acc.values()), yerr=list(k_std.values()), marker="o", capsize=3)
    ax.set(xlabel="K (prototypes per class)", ylabel="accuracy (%)", xticks=list(k_acc),
           title=f"Fig. 5 on MNIST ({len(nb.plan.seeds)} seed(s))")
    nb.figure(fig, "Fig. 5: MP-FedCL accuracy over K (the paper picks K = 2 on MNIST)", "fig5_k")
    return Shown((fig, pd.DataFrame({"accuracy (%)": k_acc, "std": k_std}).round(2)))


def sweep_runs(nb, grid: str) -> dict:
    """``{(method, value): [summary per seed]}`` of Fig. 8 (``alpha``) or Fig. 9a (``clients``) over the grid's seeds
    (:meth:`~Plan.grid_seeds`); under a decisive profile each (method, value) goes on with the seeds the evidence
    planner added to its runs (:func:`fedlib.results.with_more_seeds`)."""
    def make():
        cfgs, desc = configs(nb.plan, grid), {"alpha": "Fig. 8", "clients": "Fig. 9"}[grid]
        runs = results.train(cfgs, seeds=nb.plan.grid_seeds(grid), workers=nb.workers, desc=desc)
        return results.with_more_seeds(cfgs, runs) if nb.plan.profile in DECISIVE_PROFILES else runs
    return nb.once(grid, make)


def sweep(nb, grid: str) -> dict:
    """Fig. 8 (``alpha``) or Fig. 9a (``clients``) on MNIST (:func:`sweep_runs`): ``{value: {method: [accuracy per
    seed]}}``."""
    out = {}
    for (m, x), got in sweep_runs(nb, grid).items():
        out.setdefault(x, {})[m] = [accuracy(nb.plan, m, r) for r in got]
    return out


def sweep_seeds(plan, grid: str, acc: dict) -> dict:
    """``{(grid's trend key, method, value): [the seeds read]}`` of a sweep's accuracies (:func:`sweep`): the grid's
    seeds, then one per further value, those the evidence planner added (the seeds after the grid's, in turn:
    :func:`fedlib.results.more_seeds`)."""
    name, own = GRIDS[grid][1], plan.grid_seeds(grid)
    return {(name, m, x): own + list(range(max(own) + 1, max(own) + 1 + len(v) - len(own)))
            for x, row in acc.items() for m, v in row.items()}


def fig8_9(nb, draw: bool = True):
    """Figs. 8 and 9a on MNIST over the sweeps' seeds: accuracy over label skew and clients (seed mean ± sample std),
    final training loss over clients (``draw=False``: ``(alpha, clients)``, each :func:`sweep`'s). While the report
    renders from the archive alone, a sweep the archive lacks is left out (None) and the other drawn."""
    import matplotlib.pyplot as plt

    plan, L, methods = nb.plan, nb.label, nb.plan.settings["sweep_methods"]

    def present(acc):   # the methods a sweep holds, in the plan's order (Local is not in Fig. 9a)
        return [m for m in methods if any(m in row for row in acc.values())]
    alpha_acc, n_acc = (nb.part(lambda g=g: sweep(nb, g)) for g in ("alpha", "clients"))
    if alpha_acc is None and n_acc is None:
        raise results.NotArchived("Figs. 8-9: neither sweep is in the run archive")
    if not draw:
        return alpha_acc, n_acc
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for ax, acc, grid, xlabel, title in ((axes[0], alpha_acc, "alpha", "Dirichlet alpha (smaller: more skew)",
                                          "Fig. 8 on MNIST"),
                                         (axes[1], n_acc, "clients", "clients", "Fig. 9a: MNIST, Dir(0.1)")):
        if acc is None:
            ax.set_axis_off()
            ax.set_title(f"{title}: not in the run archive")
            continue
        xs = sorted(acc, reverse=grid == "alpha")
        for m in present(acc):
            mean = [np.mean(acc[x][m]) if m in acc[x] else np.nan for x in xs]
            std = [sample_std(acc[x][m]) if m in acc[x] else np.nan for x in xs]
            ax.errorbar([str(x) for x in xs] if grid == "alpha" else xs, mean, yerr=std, marker="o", capsize=3,
                        label=L(m), color=f"C{methods.index(m)}")   # one colour per method in both panels
        ax.set(xlabel=xlabel, ylabel="accuracy (%)", title=title)
        ax.legend(fontsize=8)
    seeds = {g: plan.grid_seeds(g) for g in ("alpha", "clients")}
    nb.figure(fig, "Figs. 8-9: accuracy over label skew and over the number of clients (MNIST), seed mean ± std",
              "fig8_9_sweeps")

    parts = {g: pd.DataFrame({m: {f"{x:g}": _over_seeds(a[x][m]) for x in a if m in a[x]} for m in present(a)})
             for g, a in (("alpha", alpha_acc), ("clients", n_acc)) if a is not None}   # each value as written
    acc = pd.concat(parts).rename(columns=L)
    out = [fig, acc]
    over = {"alpha": "Fig. 8 over seeds {}", "clients": "Fig. 9a over seeds {}"}
    added = {g: study.added_seeds_text({f"{L(m)} {x:g}": got for (_, m, x), got in sweep_seeds(plan, g, a).items()},
                                       seeds[g]) for g, a in (("alpha", alpha_acc), ("clients", n_acc)) if g in parts}
    texts = ["**Figs. 8-9: accuracy (%) over label skew and clients (MNIST), last round, mean ± std; "
             + "; ".join(over[g].format(seeds[g]) + added[g] for g in parts) + ".**", acc]
    if n_acc is not None:
        n_loss = pd.DataFrame({L(m): {n: float(np.mean([results.rounds(cfg, s)[-1]["train_loss"]
                                                         for s in seeds["clients"]]))
                                      for (mm, n), cfg in configs(plan, "clients").items() if mm == m}
                               for m in methods if m != "local"}).round(3)
        n_loss.index.name = "clients"
        texts += ["**Fig. 9: final training loss per number of clients, mean over the seeds** (FedAvg: cross-entropy, "
                  "log 10 = 2.303 untrained; MP/SP-FedCL: cross-entropy + L_R). With 2,000 images, 20-40 clients take "
                  "one or two SGD steps per round at a learning rate decaying 0.95 per round.",
                  report.to_markdown(n_loss)]
        out.append(n_loss)
    nb.table(*texts)
    return Shown(tuple(out))


def fig1(nb):
    """Fig. 1: t-SNE (or UMAP) of two clients' training embeddings after local training and after FedAvg."""
    import matplotlib.pyplot as plt

    from fedlib import analysis, plots

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, (m, cfg) in zip(axes, configs(nb.plan, "fig1").items(), strict=False):
        z, y = results.state(cfg, nb.seed0).collect("high", "train", clients=range(2))
        keep = np.random.default_rng(0).permutation(len(y))[:nb.plan.settings["tsne_points"]]
        plots.embedding_scatter(analysis.embed_2d(z[keep], nb.embedding), y[keep], ax=ax, num_classes=10,
                                title=f"{nb.label(m)}: clients 1-2, Dir(0.1)")
    axes[0].legend(fontsize=6, markerscale=3, ncol=2, title="class")
    return nb.figure(fig, f"Fig. 1: {nb.embedding} of two clients' training embeddings, local training vs FedAvg",
                     "fig1_embeddings")


def fig_pool(nb):
    """MP-FedCL's final prototype pool (Table VI run): distances by class; the mean within and between printed."""
    import matplotlib.pyplot as plt

    from fedlib import analysis, plots

    state = results.state(configs(nb.plan, "table6")["mpfedcl"], nb.seed0)
    pool, present = state.server["pool"].cpu().numpy(), state.server["present"].cpu().numpy()
    N, C, K, d = pool.shape   # every (client, class, slot) ordered by class, classes no client holds left out
    protos, pclass = pool[:, present].transpose(1, 0, 2, 3).reshape(-1, d), np.repeat(np.arange(C)[present], N * K)
    D = analysis.pairwise_distances(protos)
    fig, ax = plt.subplots(figsize=(7, 6))
    plots.distance_heatmap(D, [f"{c}" for c in pclass], ax=ax, title="MP-FedCL pool: distances (ticks: class)")
    nb.figure(fig, "The final global prototype pool of MP-FedCL: pairwise distances, ordered by class",
              "pool_distances")
    same, off = pclass[:, None] == pclass[None, :], ~np.eye(len(D), dtype=bool)
    print(f"mean distance within a class {D[same & off].mean():.3f}, between classes {D[~same].mean():.3f}")
    return fig


def show_attack(nb, draw: bool = True):
    """Privacy: PSNR / SSIM of the images a curious server decodes from a client's centroids, per K (a decoder
    trained on auxiliary images); ``draw=False``: the attack's summary frame per K."""
    from fedlib import analysis
    from fedlib.data.sources import MNIST_MEAN, MNIST_STD
    from fedlib.privacy import model_query, prototype_attack
    from fedlib.privacy.attack import attacker_aux

    atk, steps = nb.plan.spec["attack"], nb.plan.settings["attack_steps"]
    target = atk["client"]

    def one(cfg):   # the auxiliary images: the sample's test images outside the client's block
        st = results.state(cfg, nb.seed0)
        up, private = analysis.next_uploads(st, clients=[target])[target], st.data.train[target]
        aux_x, aux_y = attacker_aux(st, target, atk["aux_images"], seed=0)
        # MP-FedCL's centroids are means of L2-normalised embeddings: the decoder learns from normalised ones too
        query = model_query(st.model(target), normalize=("high",) if cfg["algorithm"].get("normalize", True) else ())
        return prototype_attack(query, aux_x, {"high": up["protos"]}, up["classes"], aux_y=aux_y, client_x=private.x,
                                client_y=private.y, levels_options=[("high",)], steps=steps,
                                batch_size=atk["batch_size"], lr=atk["lr"], seed=0, mean=MNIST_MEAN, std=MNIST_STD,
                                progress=False).summary()
    atks = nb.once("attack", lambda: {k: one(cfg) for k, cfg in configs(nb.plan, "attack").items()})
    if not draw:
        return atks
    df = pd.concat({f"K = {k}": s.set_index(["source", "levels"]) for k, s in atks.items()}).round(3)
    return nb.table(f"**Reconstruction from client {target + 1}'s centroids: PSNR (dB) / SSIM against its private "
                    f"images of the class ({steps} decoder steps).**", df)


def fig_attack_pictures(nb):
    """The leakage study's attacks on MP-FedCL's upload and its strongest attackable Table VI baseline's
    (:func:`fedlib.papers.privacy.paper_pictures`); returns the figure and the scores."""
    from fedlib.papers import privacy

    return privacy.paper_pictures(nb, "mpfedcl", nb.paper["table6"])


def show_ledger(nb):
    """The claims ledger; writes the report section. A part whose runs the archive lacks while the report renders
    from it alone is left out (:meth:`~fedlib.study.notebook.Notebook.part`); the ledger judges the rest."""
    part = nb.part
    sweeps, fs = part(lambda: fig8_9(nb, draw=False), (None, None)), part(lambda: show_table5(nb, draw=False))
    res = {"table6": part(lambda: show_table6(nb, draw=False)), "comm": part(lambda: show_table2(nb, draw=False)),
           "k": part(lambda: fig5(nb, draw=False)), "alpha": sweeps[0], "clients": sweeps[1],
           "feature_skew": fs and fs["mean"], "feature_skew_seeds": fs and fs["per_seed"],
           "budget": part(lambda: show_table8(nb, draw=False)), "attack": part(lambda: show_attack(nb, draw=False))}
    res = {k: v for k, v in res.items() if v is not None}
    res["trends"] = dict(nb.once("trends", lambda: trends(nb.plan)))
    for grid in ("alpha", "clients"):   # the sweeps' groups on the seeds read, any the evidence planner added included
        if res.get(grid) and nb.profile in DECISIVE_PROFILES:
            read = sweep_seeds(nb.plan, grid, res[grid])
            res["trends"].update(trends(nb.plan, more=read))
    return nb.ledger(ledger(nb.plan, res), record=False)


if __name__ == "__main__":
    raise SystemExit(main())
