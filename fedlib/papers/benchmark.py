"""The cross-paper benchmark: every registered method on the same settings, metric and budget, ranked with its
uncertainty, against PFLlib's published Fashion-MNIST leaderboard (Zhang et al., "PFLlib: A Beginner-Friendly and
Comprehensive Personalized Federated Learning Library", JMLR 26, 2025; arXiv:2312.04992).

It draws the settings table, the ranked table, the critical-difference diagrams, the accuracy-vs-cost fronts,
PFLlib's numbers beside ours, the anchor's curves and the ledger. A method from outside the repository is put
against its archived runs by :mod:`fedlib.yours` (docs/your_method.md). The decisions (settings,
metric, which methods a setting runs, profiles): docs/benchmark.md.
"""

from __future__ import annotations

import argparse

import pandas as pd

from fedlib import ranking, report, study
from fedlib.plans.benchmark import all_jobs, archived_tables  # noqa: F401  (the plan's part of the study interface)
from fedlib.plans.benchmark import Plan, anchor_configs, config, configs, jobs, load_plan
from fedlib.study.notebook import Shown
from fedlib.validation import ConfigError
from fedlib.ledgers.benchmark import (  # noqa: F401  (re-exported: the study's ledger)
    tables, ledger, scores, trends, _mean_std)

PFLLIB_COLUMNS = {"pat": "pathological", "dir": "dirichlet"}   # params/benchmark/paper.yaml's column per setting


def settings_table(plan: Plan) -> pd.DataFrame:
    """One row per setting of the profile: data, split, model, optimiser, rounds, seeds, methods run."""
    rows = {}
    for setting in plan.setting_names():
        some = next(m for m in plan.method_names() if plan.why_not(m, setting) is None)
        c = config(plan, some, setting)
        part, train = c["partition"], c["train"]
        frac = c["dataset"].get("fraction", 1.0)
        split = {"pathological": f"{part.get('classes_per_client')} classes per client",
                 "dirichlet": f"Dirichlet({part.get('alpha')})",
                 "nway_kshot": f"n-way k-shot, n {part.get('ways')}, k {part.get('shots')}"}.get(part["scheme"],
                                                                                              part["scheme"])
        rows[plan.setting_label(setting)] = {
            "data": "Fashion-MNIST" + ("" if frac == 1 else f", a stratified {100 * frac:g}%"),
            "split": f"{part['num_clients']} clients, {split}" + (", pooled, 75/25 per client"
                                                                  if part.get("split") == "merge" else ""),
            "model": c["model"]["name"], "optimiser": f"SGD lr {train['lr']:g}, momentum {train['momentum']:g}, "
                                                      f"batch {train['batch_size']}, E = {train['local_epochs']}",
            "rounds": train["rounds"], "seeds": ", ".join(map(str, plan.setting_seeds(setting))),
            "methods": sum(plan.why_not(m, setting) is None for m in plan.method_names())}
    return pd.DataFrame(rows).T


def missing(plan: Plan) -> pd.DataFrame:
    """The (setting, method) pairs of the profile that do not run, and why."""
    rows = [{"setting": plan.setting_label(s), "method": plan.label(m), "why not": plan.why_not(m, s)}
            for s in plan.setting_names() for m in plan.method_names() if plan.why_not(m, s)]
    return pd.DataFrame(rows, columns=["setting", "method", "why not"]).set_index(["setting", "method"])


def obtain(plan: Plan, train: bool = True, workers: int | None = None) -> dict[tuple[str, str, int], dict]:
    """``{(setting, method, seed): summary}``: runs read, the missing trained with ``train``; failed ones printed."""
    from fedlib import results

    cfgs = configs(plan)
    out = {}
    for setting in plan.setting_names():
        mine = {m: c for (s, m), c in cfgs.items() if s == setting}
        seeds = plan.setting_seeds(setting)
        got = None
        if train:
            try:
                got = results.run_or_read(mine, seeds, workers=workers, desc=f"benchmark {setting}")
            except results.RunsFailed as exc:   # the others finished: read them, say which failed, go on
                print(f"benchmark {setting}: {exc}")
        if got is None:
            got = {m: [results.find(c, s)[1] for s in seeds] for m, c in mine.items()}
        for m, summaries in got.items():
            out.update({(setting, m, s): summ for s, summ in zip(seeds, summaries, strict=True) if summ is not None})
    return out


def reach_curves(plan: Plan | None = None) -> dict:
    """``{"setting method": [per-seed curve]}`` of the converged profile's archived runs (docs/runs.md)."""
    from fedlib import plateau, results

    plan = plan or load_plan("converged")
    out = {}
    with results.archive_only():
        for (s, m), cfg in configs(plan).items():
            recs = [results.rounds(cfg, x) for x in plan.setting_seeds(s)]
            recs = [r for r in recs if r and not any(q.get("diverged") for q in r)]
            if recs:
                out[f"{s} {m}"] = [plateau.curve(r, plan.metric(m)) for r in recs]
    return out


def accuracy_blocks(table: pd.DataFrame, value: str = "best") -> pd.DataFrame:
    """Rows (setting, seed), columns methods: what the ranking compares (higher is better)."""
    return table.pivot_table(index=["setting", "seed"], columns="method", values=value)


def ranked(plan: Plan, table: pd.DataFrame, rising: dict | None = None) -> pd.DataFrame:
    """The ranked table: mean ranks, best round mean ± std and last round per setting; where ``rising`` plateaued."""
    if table.empty:
        return pd.DataFrame()
    rank = ranking.mean_ranks(accuracy_blocks(table), by="setting")
    out = pd.DataFrame(index=rank.index)
    out["method"] = [plan.label(m) for m in rank.index]
    out["rule"] = [plan.metric(m).removeprefix("acc_") for m in rank.index]
    out["mean rank"] = rank["overall"].round(2)
    for setting in plan.setting_names():
        if setting not in rank:
            continue
        part = table[table.setting == setting]
        out[f"{setting} rank"] = rank[setting].round(2)
        out[f"{setting} best"] = [_mean_std(part[part.method == m]["best"]) for m in rank.index]
        last_mean = part.groupby("method")["last"].mean()
        out[f"{setting} last"] = [f"{last_mean[m]:.2f}" if m in last_mean else "—" for m in rank.index]
    if rising is not None:
        out["plateaued"] = [_plateaued(rising, m) for m in rank.index]
    return out.sort_values("mean rank").set_index("method")


def _plateaued(rising: dict, method: str) -> str:
    """``3 of 4 (pat from 78, ...; hetero +0.61 at 200)``: on how many settings ``method`` plateaued, and where."""
    mine = {s: t for (s, m), t in rising.items() if m == method}
    notes = [f"{s} from {t.since}" if t.plateaued else f"{s} +{t.rise:.2f} at {t.rounds}" for s, t in mine.items()]
    done = sum(t.plateaued for t in mine.values())
    return f"{done} of {len(mine)}" + (f" ({', '.join(notes)})" if notes else "")


def top(plan: Plan, table: pd.DataFrame, n: int = 5) -> dict[str, list[str]]:
    """Each setting's ``n`` best methods by mean rank over its seeds (equal mean ranks: higher mean accuracy)."""
    out = {}
    for setting in plan.setting_names():
        if not (table.setting == setting).any():
            continue
        part = accuracy_blocks(table[table.setting == setting])
        order = pd.DataFrame({"rank": ranking.mean_ranks(part), "acc": -part.mean(axis=0)}).sort_values(["rank", "acc"])
        out[setting] = [plan.label(m) for m in order.index[:n]]
    return out


def cd_figure(plan: Plan, table: pd.DataFrame, settings: list[str] | None = None, highlight: str | None = None):
    """The critical-difference diagram over ``settings`` (default the table's): Friedman, Nemenyi CD (0.05)."""
    if settings is not None:
        table = table[table.setting.isin(settings)]
    blocks = accuracy_blocks(table).dropna(axis=1)
    n, k, p, cd = blocks.shape[0], blocks.shape[1], float("nan"), float("nan")
    if k >= 2 and n >= 2:
        _, p, n, k = ranking.friedman(blocks)
        cd = ranking.nemenyi_cd(k, n)
    ranks = (ranking.mean_ranks(blocks) if blocks.shape[1] else pd.Series()).rename(index=plan.label)
    over = ", ".join(sorted(table.setting.unique(), key=plan.setting_names().index))
    title = (f"{k} methods, mean rank over {n} (setting, seed) blocks ({over}); Friedman p = {p:.2g}; Nemenyi CD = "
             f"{cd:.2f} ({plan.profile})")
    return ranking.cd_diagram(ranks, cd, title=title, highlight=highlight)


def cd_figures(plan: Plan, table: pd.DataFrame, settings: list[str], captions: tuple[str, str],
               highlight: str | None = None) -> list[tuple]:
    """``[(figure, caption, name)]``: over ``settings`` and, where they differ, their homogeneous ones."""
    out = [(cd_figure(plan, table, settings, highlight=highlight), captions[0], "cd")]
    same = [s for s in homogeneous_settings(plan) if s in settings]
    if same and set(same) != set(settings):
        out.append((cd_figure(plan, table, same, highlight=highlight), captions[1].format(", ".join(same)),
                    "cd_homogeneous"))
    return out


def homogeneous_settings(plan: Plan) -> list[str]:
    """The profile's settings where every client has the same model (all but ``hetero``)."""
    from fedlib.models import FAMILIES

    return [s for s in plan.setting_names()
            if plan.spec["settings"][s].get("base", plan.spec["base"])["model"]["name"] not in FAMILIES]


def cost_figures(plan: Plan, table: pd.DataFrame, settings: list[str], highlight: str | None = None,
                 at: str = "") -> list[tuple]:
    """``[(figure, caption, name)]``: per setting, accuracy vs floats and vs seconds per round, Pareto fronts drawn."""
    agg = table.groupby(["setting", "method"]).agg(best=("best", "mean"), floats=("floats", "mean"),
                                                     seconds=("seconds", "median")).reset_index()
    agg["label"] = [plan.label(m) for m in agg.method]
    out = []
    for setting in settings:
        part = agg[agg.setting == setting].set_index("label")
        if part.empty:
            continue
        # Local sends nothing: one float keeps it on the log axis (said in the axis label)
        part["floats"] = part["floats"].clip(lower=1.0)
        name = plan.setting_label(setting)
        out += [(ranking.pareto_scatter(part, "floats", "best", logx=True, highlight=highlight,
                                        title=f"{name}: accuracy vs communication ({plan.profile})"),
                 f"{name}{at}: accuracy vs communication", f"{setting}_communication"),
                (ranking.pareto_scatter(part, "seconds", "best", highlight=highlight,
                                        title=f"{name}: accuracy vs time ({plan.profile})"),
                 f"{name}{at}: accuracy vs time", f"{setting}_time")]
    return out


def pflib_comparison(plan: Plan, table: pd.DataFrame) -> pd.DataFrame:
    """PFLlib's published Fashion-MNIST numbers (``params/benchmark/paper.yaml``) beside ours on pat and dir."""
    ref = report.load_paper("benchmark")["pfllib"]
    rows = []
    for method, cols in ref["methods"].items():
        row = {"method": plan.label(method)}
        for setting, key in PFLLIB_COLUMNS.items():
            row[f"PFLlib {setting}"] = f"{cols[key]:.2f}"
            row[f"ours {setting}"] = _mean_std(table[(table.setting == setting) & (table.method == method)]["best"],
                                               "not run")
        rows.append(row)
    return pd.DataFrame(rows).set_index("method")


def _accuracy(plan: Plan, method: str, records: list[dict]) -> list[tuple[int, float]]:
    """``[(round, accuracy %)]``: sample-weighted, under the method's rule, of the evaluated rounds."""
    metric = plan.metric(method)
    return [(r["round"], 100 * r["acc"][metric]["weighted"]) for r in records if metric in r.get("acc", {})]


def anchor_curves(plan: Plan, train: bool = True, workers: int | None = None) -> pd.DataFrame:
    """One row per (method, round) of the anchor's runs (empty where the profile has none)."""
    from fedlib import results

    cfgs = anchor_configs(plan)
    if not cfgs:
        return pd.DataFrame(columns=["method", "round", "accuracy"])
    seed = plan.spec["anchor"]["seed"]
    if train:
        results.run_or_read(dict(cfgs), workers=workers, progress=False, seeds=[seed])
    rows = [{"method": m, "round": r, "accuracy": a} for m, c in cfgs.items()
            for r, a in _accuracy(plan, m, results.rounds(c, seed))]
    return pd.DataFrame(rows, columns=["method", "round", "accuracy"])


def reduced_curves(plan: Plan) -> pd.DataFrame:
    """The anchor's methods at the profile's data fraction: seed-mean accuracy per (method, round)."""
    from fedlib import results

    setting, cfgs, rows = plan.spec["anchor"]["setting"], configs(plan), []
    for m in plan.spec["anchor"]["methods"]:
        if (setting, m) not in cfgs:
            continue
        runs = [results.rounds(cfgs[(setting, m)], s) for s in plan.setting_seeds(setting)]
        per = pd.DataFrame([{"seed": i, "round": r, "accuracy": a}
                            for i, run in enumerate(runs) for r, a in _accuracy(plan, m, run)])
        if len(per):
            mean = per.groupby("round").agg(accuracy=("accuracy", "mean"), seeds=("seed", "nunique")).reset_index()
            rows += [{"method": m, **row} for row in mean.to_dict("records")]
    return pd.DataFrame(rows, columns=["method", "round", "accuracy", "seeds"])


def anchor_figure(plan: Plan, curves: pd.DataFrame, reduced: pd.DataFrame | None = None):
    """Our anchor curves against PFLlib's 2,000-round numbers (dashed) and, where given, :func:`reduced_curves`."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    ref = report.load_paper("benchmark")["pfllib"]["methods"]
    key = PFLLIB_COLUMNS[plan.spec["anchor"]["setting"]]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for i, (m, part) in enumerate(curves.groupby("method", sort=False)):
        line, = ax.plot(part["round"], part["accuracy"], label=f"{plan.label(m)} (ours, all of the data)",
                        color=f"C{i}")
        if reduced is not None and (reduced.method == m).any():
            low = reduced[reduced.method == m]
            ax.plot(low["round"], low["accuracy"], color=line.get_color(), linestyle=":",
                    label=f"{plan.label(m)} (ours, {100 * plan.settings['fraction']:g}% of the data, mean of "
                          f"{int(low.seeds.max())} seeds)")
        if m in ref:
            ax.axhline(ref[m][key], color=line.get_color(), linestyle="--", linewidth=1,
                       label=f"{plan.label(m)}: PFLlib, 2,000 rounds ({ref[m][key]:.2f})")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(xlabel="round", ylabel="accuracy (%), sample-weighted, own test split",
           title=f"{plan.setting_label(plan.spec['anchor']['setting'])}: ours vs PFLlib")
    ax.legend(fontsize=7)
    return fig


@study.command
def main(argv: list[str] | None = None) -> int:
    """``python -m fedlib.papers.benchmark [--profile P] ...``: train the profile's missing runs (:func:`jobs`; a
    failed one: exit status 1), print the ranked table and the anchor's. Your own method against the archived
    benchmark: ``python -m fedlib.yours --method FILE`` (docs/your_method.md)."""
    from fedlib import results

    parser = study.cli("python -m fedlib.papers.benchmark", main.__doc__)
    parser.add_argument("--method", help=argparse.SUPPRESS)   # moved: said so, not read as an abbreviated --methods
    args = parser.parse_args(argv)
    if args.method is not None:
        raise ConfigError("--method", args.method, "nothing here: your method runs with `python -m fedlib.yours "
                          "--method FILE`")
    try:
        plan = load_plan(args.profile, methods=args.methods, seeds=args.seeds, rounds=args.rounds,
                         device=args.device, executor=args.executor)
    except ConfigError as exc:
        print(f"error: {exc}")
        return 2
    grid = jobs(plan)
    todo = [(c, s) for c, s in grid if results.find(c, s)[1] is None]
    print(f"benchmark, profile {plan.profile}: {len(grid) - len(todo)} of {len(grid)} runs finished (results folder "
          f"or run archive); training {len(todo)}")
    failed = None
    try:
        results.run_many(todo, workers=args.workers, desc=f"benchmark {plan.profile}")
    except results.RunsFailed as exc:   # the others finished: show them, name the failures, exit 1
        failed = exc
        print(f"benchmark: {exc}")
    table = scores(plan, obtain(plan, train=False))
    print(f"Benchmark, {plan.setting_text()}; best round, sample-weighted (%)")
    print(report.to_markdown(ranked(plan, table)))
    for m, part in anchor_curves(plan, train=False).groupby("method", sort=False):
        print(f"anchor (all of the data, {plan.setting_label(plan.spec['anchor']['setting'])}): {plan.label(m)} best "
              f"{part.accuracy.max():.2f}, last {part.accuracy.iloc[-1]:.2f} after {int(part['round'].max())} rounds")
    return 1 if failed else 0


# -- the notebook's cells (notebooks/benchmark.py): one call each ----------------------------------------------------
def notebook(profile: str, methods=None, seeds=None, rounds=None, workers=None, device=None, backend=None):
    """The set-up cell: the notebook state (a method of your own joins it in :func:`fedlib.yours.attach`)."""
    from fedlib.study.notebook import open_notebook

    return open_notebook("benchmark", load_plan, profile, lambda plan: (
        f"{plan.rounds} (every run)", config(plan, plan.method_names()[0], plan.setting_names()[0])["device"],
        plan.setting_text()), backend=backend, workers=workers, title="One benchmark across the five papers",
        reference=None, methods=methods, seeds=seeds, rounds=rounds, device=device)


def show_settings(nb):
    """The settings table, and the (setting, method) pairs that do not run, with why."""
    settings = nb.table("**Settings.** " + nb.plan.setting_text(), settings_table(nb.plan))
    gaps = missing(nb.plan)
    if len(gaps):
        nb.table("**Methods that do not run on a setting.**", gaps)
    return Shown((settings, gaps))


def print_grid(nb) -> None:
    """One line per setting: its methods, seeds and runs; then the number of runs."""
    cfgs, total = configs(nb.plan), 0
    for setting in nb.plan.setting_names():
        methods = [m for s, m in cfgs if s == setting]
        seeds = nb.plan.setting_seeds(setting)
        total += len(methods) * len(seeds)
        print(f"{setting}: {len(methods)} methods x seeds {seeds} = {len(methods) * len(seeds)} runs of "
              f"{nb.plan.rounds} rounds")
    print(f"{total} runs in all")


def results(nb) -> pd.DataFrame:
    """:func:`scores` of every run of the profile: finished runs read, the others trained."""
    def make():
        summaries = obtain(nb.plan, workers=nb.workers)
        nb.section.text(f"_{len(summaries)} runs · made by {study.made_by(summaries.values())}_")
        return scores(nb.plan, summaries)
    return nb.once("scores", make)


def _trends(nb) -> dict:
    return nb.once("trends", lambda: trends(nb.plan, results(nb)))


def show_ranked(nb):
    """The ranked table (:func:`ranked`)."""
    short = "" if nb.profile in ("converged", "paper") else " **Not converged: short runs.**"
    return nb.table(f"**Ranked table ({nb.plan.setting_text()}; best round, sample-weighted, %).**" + short
                    + " `plateaued`: the settings where the method's seed-mean curve plateaued (its best-so-far "
                    "accuracy gains under 0.2 points over the last 20% of rounds: `fedlib.claims.plateau`) and the "
                    "round from which it did; for those still rising, the gain over their last 20% and the rounds "
                    "they reached (runs behind an open claim are extended towards their plateau: `fedlib.plateau`).",
                    ranked(nb.plan, results(nb), _trends(nb)))


def fig_cd(nb):
    """The critical-difference diagrams: every setting, and the settings with one model for all."""
    table = results(nb)
    settings = [s for s in nb.plan.setting_names() if (table.setting == s).any()]
    return Shown([nb.figure(*f) for f in cd_figures(nb.plan, table, settings, (
        "Critical-difference diagram, every setting (mean ranks, Nemenyi CD)",
        "Critical-difference diagram, one model for all ({}: mean ranks, Nemenyi CD)"))])


def figs_costs(nb):
    """Accuracy against floats and against seconds per round, per setting, with the Pareto fronts."""
    return Shown([nb.figure(*f) for f in cost_figures(nb.plan, results(nb), nb.plan.setting_names())])


def show_pflib(nb):
    """PFLlib's published Fashion-MNIST numbers beside ours (:func:`pflib_comparison`)."""
    ref = nb.paper["pfllib"]["budget"]
    return nb.table(f"**PFLlib's Fashion-MNIST numbers (reference: {ref}) beside ours ({nb.plan.setting_text()}).**",
                    pflib_comparison(nb.plan, results(nb)))


def show_anchor(nb):
    """The anchor's curves and table against PFLlib's 2,000-round numbers (or which profile runs it)."""
    plan, anchor = nb.plan, nb.plan.spec["anchor"]
    curves = anchor_curves(plan, workers=nb.workers)
    where = plan.setting_label(anchor["setting"])
    if not len(curves):
        print(f"The anchor ({', '.join(plan.label(m) for m in anchor['methods'])} on {where} with all of "
              f"Fashion-MNIST) runs in the converged profile (anchor_rounds: {plan.settings.get('anchor_rounds', 0)} "
              f"in profile {plan.profile}).")
        return None
    ref, key = nb.paper["pfllib"]["methods"], PFLLIB_COLUMNS[anchor["setting"]]
    reduced, frac = reduced_curves(plan), f"{100 * plan.settings['fraction']:g}%"
    table = results(nb)
    mine = table[table.setting == anchor["setting"]].groupby("method")["best"].mean()   # mean of the seeds' best
    rows = {}
    for m, part in curves.groupby("method", sort=False):
        best, last = part.loc[part.accuracy.idxmax()], int(part["round"].max())
        low = reduced[reduced.method == m].set_index("round").accuracy
        rows[plan.label(m)] = {"rounds run": last,
                               "ours: best round": f"{best.accuracy:.2f} (round {int(best['round'])})",
                               "ours: last round": f"{part.accuracy.iloc[-1]:.2f}",
                               f"ours, {frac} of the data: round {last}": f"{low[last]:.2f}" if last in low else "-",
                               f"ours, {frac}: best round of {plan.rounds} (the ranked table's)":
                                   f"{mine[m]:.2f}" if m in mine else "-",
                               "PFLlib, 2,000 rounds (reference)": f"{ref[m][key]:.2f}" if m in ref else "-"}
    fig = nb.figure(anchor_figure(plan, curves, reduced), f"{where}: our curves with all of Fashion-MNIST (seed "
                    f"{anchor['seed']}) and with {frac} of it (seed mean), against PFLlib's published numbers",
                    "anchor")
    return Shown((fig, nb.table(f"**The anchor: all of Fashion-MNIST on {where}, seed {anchor['seed']}, "
                                f"{plan.settings['anchor_rounds']} rounds (ours) against PFLlib's 2,000 rounds "
                                "(reference data).**", pd.DataFrame(rows).T)))


def show_top(nb):
    """Each setting's five best methods."""
    best = top(nb.plan, results(nb))
    nb.section.record(top=best)
    frame = pd.DataFrame({nb.plan.setting_label(s): pd.Series(v, index=range(1, len(v) + 1))
                          for s, v in best.items()})
    return nb.table("**Top five per setting (mean rank).**", frame.rename_axis("rank"))


def show_ledger(nb):
    """The cross-cutting claims judged on common ground; writes the report section."""
    return nb.ledger(ledger(nb.plan, results(nb), _trends(nb)))


if __name__ == "__main__":
    raise SystemExit(main())
