"""The quickstart notebook's cells (notebooks/quickstart.ipynb): a newcomer's first hour, one call per cell.

It loads one setting of the benchmark (PFLlib's Fashion-MNIST Dir(0.1) split, :mod:`fedlib.papers.benchmark`),
trains FedAvg and FedProto on it for a few rounds with a progress bar, draws their accuracy curves and the
partition, then puts a method file (default the template shipped in ``docs/method_template.py``) through the
contract check and against the archived benchmark (:func:`fedlib.yours.compare`): the ranked
table, where it lands, the critical-difference diagram and the accuracy-vs-communication front, every method read at
the same round.

Profiles: ``smoke`` (the benchmark's smoke setting: 1% of the data, 10 clients, 2 rounds; the method file under the
smoke budget, about a minute in all) and ``quick`` (2% of the data, 20 clients, 5 rounds; the quick budget, a few
minutes). The longer profiles (``converged``, ``paper``) run as ``quick`` here: the quickstart is for minutes, and
``python -m fedlib.yours --method FILE --profile converged`` makes the evidence. Nothing is written but
runs in the results folder (and the comparison beside them: :func:`fedlib.yours.out_dir`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd

from fedlib import claims, results
from fedlib import yours as Y
from fedlib.papers import benchmark
from fedlib.study.notebook import Shown

#: the benchmark setting the first half runs on, and the two methods it compares
SETTING = "dir"
METHODS = ("fedavg", "fedproto")


def template_path():
    """The template method file shipped with fedlib: ``docs/method_template.py`` of this checkout."""
    from fedlib.paths import CHECKOUT

    return CHECKOUT / "docs" / "method_template.py"


def budget_of(profile: str) -> str:
    """The profile the quickstart runs ``profile`` as: ``smoke`` itself, every other one ``quick``."""
    return "smoke" if profile == "smoke" else "quick"


@dataclasses.dataclass
class Quickstart:
    """The notebook's state: the profile asked and the one it runs as, the benchmark plan of the setting (FedAvg and
    FedProto), the comparison plan of the method file, ``workers`` and what cells computed."""

    profile: str
    plan: Any
    yours: Any
    workers: int | None = None
    results: dict = dataclasses.field(default_factory=dict)

    @property
    def budget(self) -> str:
        return budget_of(self.profile)

    @property
    def seed(self) -> int:
        return self.plan.seeds[0]

    def once(self, key: str, make):
        if key not in self.results:
            self.results[key] = make()
        return self.results[key]


def notebook(profile: str, rounds=None, method_file=None, method_rule=None, workers=None, device=None,
             backend=None) -> Quickstart:
    """The set-up cell: every parameter checked before any work (a bad one, or a method file that breaks the
    contract, stops the notebook with one line: :class:`~fedlib.study.notebook.ParameterError`), the kernel set
    up (:func:`fedlib.study.notebook.start`) and a line on what the notebook will run."""
    from fedlib.config import read_yaml
    from fedlib.reproduce import PROFILES
    from fedlib.study.notebook import ParameterError, check_parameters, checkout_problem, start
    from fedlib.validation import ConfigError

    problem = checkout_problem()
    if problem:
        raise ParameterError(problem)
    try:
        known = list(read_yaml(PROFILES) or {})
        if profile not in known:
            raise ConfigError("profile", profile, "one of " + ", ".join(known) + " (longer than quick: run as quick "
                              "here)")
        check_parameters(workers, "tsne", device)
        start(backend)
        plan = benchmark.load_plan(budget_of(profile), methods=list(METHODS), rounds=rounds, device=device)
        mine = Y.load(template_path() if method_file is None else method_file, rule=method_rule,
                      field="method_file", rule_field="method_rule")
        yours = Y.plan(mine, budget_of(profile), results_dir=plan.results_dir, device=device, field="profile")
    except ConfigError as exc:
        raise ParameterError(str(exc)) from None
    qs = Quickstart(profile, plan, yours, workers)
    runs_as = "" if budget_of(profile) == profile else f" (run as {budget_of(profile)} here)"
    print(f"quickstart, profile {profile}{runs_as}: {', '.join(plan.label(m) for m in METHODS)} on "
          f"{plan.setting_label(SETTING)}, {plan.rounds} rounds, seed {qs.seed}; then {mine.label} against the "
          f"archived benchmark, {yours.budget_rounds} rounds")
    return qs


def configs(qs: Quickstart) -> dict[str, dict]:
    """``{method: config}`` of FedAvg and FedProto on the setting."""
    return {m: benchmark.config(qs.plan, m, SETTING) for m in METHODS}


def _partition(qs: Quickstart):
    return qs.once("partition", lambda: results.split(configs(qs)["fedavg"], qs.seed)[1])


def show_setting(qs: Quickstart) -> pd.DataFrame:
    """The setting: data, split, model, optimiser, rounds and seed (what every method on it shares)."""
    table = benchmark.settings_table(qs.plan)
    row = table.loc[[qs.plan.setting_label(SETTING)]].drop(columns="methods")
    row["seeds"] = str(qs.seed)
    return row.T


def check_partition(qs: Quickstart) -> None:
    """Print the partition: clients, classes and training samples per client."""
    part = _partition(qs)
    counts = part.counts
    print(f"{part.num_clients} clients, {counts.shape[1]} classes")
    print("classes per client:", [len(part.classes(c)) for c in range(part.num_clients)])
    print("training samples per client:", [int(n) for n in counts.sum(axis=1)])


def fig_partition(qs: Quickstart):
    """Training samples per client and class (the heatmap of the partition)."""
    import matplotlib.pyplot as plt

    from fedlib import plots

    fig, ax = plt.subplots(figsize=(8, 3.6))
    plots.partition_heatmap(_partition(qs), ax=ax,
                            title=f"{qs.plan.setting_label(SETTING)}: training samples per client and class")
    plt.close(fig)
    return fig


def _runs(qs: Quickstart) -> dict:
    return qs.once("runs", lambda: results.run_or_read(configs(qs), seeds=[qs.seed], workers=qs.workers,
                                                        desc=" and ".join(qs.plan.label(m) for m in METHODS)))


def run_methods(qs: Quickstart) -> pd.DataFrame:
    """Train FedAvg and FedProto (a progress bar counts the rounds; finished runs are read, not trained again) and
    show their best and last round (sample-weighted accuracy, %, each by its paper's rule) and what a round cost."""
    rows = {}
    for m, (summary,) in _runs(qs).items():
        metric = qs.plan.metric(m)
        acc = summary["metrics"][metric]
        comm = summary.get("comm_per_round", {})
        rows[qs.plan.label(m)] = {"rule": metric.removeprefix("acc_"),
                                  "best round (%)": round(100 * acc["best_weighted"], 2),
                                  "last round (%)": round(100 * acc["last_weighted"], 2),
                                  "floats per round": int(comm.get("up_params", 0) + comm.get("down_params", 0)),
                                  "seconds per round": round(summary.get("seconds_per_round_median", float("nan")), 2)}
    return pd.DataFrame(rows).T


def fig_curves(qs: Quickstart):
    """Accuracy per round of FedAvg and FedProto (sample-weighted, each by its paper's rule)."""
    import matplotlib.pyplot as plt

    from fedlib import plots, results

    _runs(qs)
    recs = {qs.plan.label(m): results.rounds(c, qs.seed) for m, c in configs(qs).items()}
    fig, ax = plt.subplots(figsize=(6, 4))
    plots.accuracy_curves(recs, {qs.plan.label(m): qs.plan.metric(m) for m in METHODS}, ax=ax, stat="weighted",
                          ylabel="accuracy (%), sample-weighted")
    ax.set_title(f"{qs.plan.setting_label(SETTING)}, profile {qs.plan.profile}")
    plt.close(fig)
    return fig


def check_method(qs: Quickstart) -> None:
    """Print the method file's contract check (it ran in the set-up cell) and the settings it can run on."""
    print(qs.yours.yours.line())
    for s in qs.yours.setting_names():
        why = Y.why_not(qs.yours, s)
        print(f"{s}: " + ("runs" if why is None else f"does not run ({why})"))


def _comparison(qs: Quickstart):
    return qs.once("comparison", lambda: Y.compare(qs.yours, workers=qs.workers))


def show_ranked(qs: Quickstart):
    """Train the method file on every setting it can run on (the budget's rounds; cached runs are read), then the
    ranked table beside the archived benchmark (every method at the same round) and where it lands."""
    return Y.cells(_comparison(qs), figures=False)


def fig_cd(qs: Quickstart):
    """The critical-difference diagrams of the comparison (the method highlighted)."""
    return Shown([fig for fig, _, name in _comparison(qs).figures if name.startswith("cd")])


def fig_costs(qs: Quickstart):
    """Accuracy against floats sent per round on the setting of the first half, the Pareto front drawn (the method
    highlighted)."""
    return Shown([fig for fig, _, name in _comparison(qs).figures if name == f"{SETTING}_communication"])


def show_claims(qs: Quickstart) -> pd.DataFrame:
    """The claim "it beats every other method" on each setting, by the suite's verdict rule (fedlib.claims)."""
    return claims.table(_comparison(qs).claims)
