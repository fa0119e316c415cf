"""Your method against the archived benchmark: one method file (or an installed entry point of group
``fedlib.methods``, :mod:`fedlib.algorithms.loader`) on the benchmark's settings, beside the 31 built-in methods'
archived runs, with no file of the repository edited (docs/your_method.md).

The comparison is made equal before anything is ranked:

- **settings**: the archived benchmark's (:data:`REFERENCE`, the converged profile: the same data fraction,
  clients, split, model, optimiser and seeds as the archived runs), each one the method's declared messages allow
  (:func:`why_not`: a method that sends weights of the client's own model cannot run where the clients' models
  differ; a method whose prototype space is a feature level the setting's model does not expose cannot run there);
- **budget**: the profile asked (:data:`BUDGETS`) sets only the rounds and the number of seeds: ``smoke`` 2 rounds
  and one seed (about a minute), ``quick`` 5 rounds and one seed (minutes), ``converged`` the archived runs'
  100 rounds and three seeds (hours: the evidence). Every built-in method is read from its archived run **at the
  same round** (best round up to it, the last round at it, the communication and seconds of those rounds), so a
  2-round run is ranked against the others' first 2 rounds, never against their 100th;
- **seeds**: the first seeds of each setting's archived ones (nway keeps FedMPS's 1234-1236), so every
  (setting, seed) block holds the same partition for every method.

Its runs are ordinary runs (config, seed) of the run cache: cached, resumable, their ids hashing the method's
name, hyperparameters and the SHA-256 of its file (an edited file gets new runs). The built-in methods' runs
are only read (:mod:`fedlib.results`: the results folder, then the run archive); one that neither holds is
named and left out, never trained here.

``python -m fedlib.papers.benchmark --method path/to/my_method.py`` (:func:`main`), the benchmark notebook's
``method_file`` parameter and notebooks/quickstart.ipynb all go through :func:`load` (the contract check, one line
on a violation, before any training) and :func:`compare`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path

import numpy as np
import pandas as pd

from fedlib.papers import benchmark
from fedlib.validation import ConfigError, Options, check_value

#: the profile whose runs the archive holds for every built-in method: the comparison's settings and seeds
REFERENCE = "converged"
#: the profiles a method may be trained under beside the archive (each sets its rounds and number of seeds)
BUDGETS = ("smoke", "quick", "converged")
#: what the method's label carries in every table and figure (``my_method (yours)``)
HIGHLIGHT_SUFFIX = " (yours)"


# -- the method ---------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Yours:
    """A loaded method that passed the contract check: its class (``user:<stem>``), the inference rule it is
    scored by, its hyperparameters (beside its defaults) and what the check took."""

    cls: type
    rule: str
    hyperparameters: dict
    check_seconds: float

    @property
    def key(self) -> str:
        return self.cls.name

    @property
    def stem(self) -> str:
        return self.key.removeprefix("user:")

    @property
    def label(self) -> str:
        return self.stem + HIGHLIGHT_SUFFIX

    @property
    def source(self) -> str:
        return self.cls.__dataclass_fields__["source"].default

    @property
    def sha256(self) -> str:
        return self.cls.__dataclass_fields__["source_sha256"].default

    def algorithm(self) -> dict:
        """The run config's ``algorithm`` section."""
        return {"name": self.key, **self.hyperparameters, "source": self.source, "source_sha256": self.sha256}

    def line(self) -> str:
        """``my_method (user:my_method, /path/my_method.py, SHA-256 3d80ef1a25ac...): contract check passed (1.2 s);
        scored by rule head``."""
        where = self.source if self.source.startswith("entry-point:") else Path(self.source).name
        extra = f", hyperparameters {self.hyperparameters}" if self.hyperparameters else ""
        return (f"{self.stem} ({where}, SHA-256 {self.sha256[:12]}...{extra}): contract check passed "
                f"({self.check_seconds:.1f} s); scored by its rule {self.rule!r}")


def default_rule(cls) -> str:
    """The rule a method is scored by unless asked otherwise: ``head`` (its own classifier) where it has one, else
    its first rule."""
    return "head" if "head" in cls.RULES else cls.RULES[0]


def load(source, rule: str | None = None, hyperparameters: dict | None = None, field: str = "--method",
         rule_field: str = "--rule") -> Yours:
    """The method of ``source`` (a method file's path or an installed entry point's name), checked: an import
    error, a missing hook, a message off its declaration, a non-finite loss, ... is one line (:class:`ConfigError`,
    naming the file, the hook and what was expected) before any training. ``rule`` must be one of its ``RULES``;
    ``hyperparameters`` (``{field: value}``) are validated by its constraints."""
    from fedlib.algorithms import loader
    from fedlib.validation import from_dict

    if not isinstance(hyperparameters, (dict, type(None))):
        raise ConfigError("method hyperparameters", hyperparameters, "a mapping of field names to values")
    cls, seconds, _fresh = loader.checked_method(source, field)
    hyper = dict(hyperparameters or {})
    for key in ("name", "source", "source_sha256"):
        if key in hyper:
            raise ConfigError(f"method hyperparameters.{key}", hyper[key], "none: it is set from the method file")
    from_dict(cls, hyper, owner=f"algorithm ({cls.name})")
    rule = default_rule(cls) if rule is None else check_value(rule_field, rule, Options(tuple(cls.RULES)))
    return Yours(cls, rule, hyper, seconds)


# -- the plan: the archived benchmark's settings, the budget's rounds and seeds -------------------------------------
@dataclasses.dataclass
class Plan(benchmark.Plan):
    """The benchmark under :data:`REFERENCE` (the built-in methods' archived runs) with ``yours`` added: trained for
    ``budget_rounds`` rounds (the ``budget`` profile's) on the first ``n_seeds`` seeds of each setting."""

    yours: Yours | None = None
    budget: str = REFERENCE
    budget_rounds: int = 0
    positions: tuple = (0,)
    only: tuple | None = None   # the settings taken (None: every setting of the archived benchmark)
    cache: dict = dataclasses.field(default_factory=dict, repr=False)   # configs made once (:func:`configs`)

    def setting_names(self) -> list[str]:
        names = super().setting_names()
        return names if self.only is None else [s for s in names if s in self.only]

    def builtin(self) -> list[str]:
        """The built-in methods compared (every one of the reference profile, or those asked)."""
        return [m for m in benchmark.Plan.method_names(self) if m != self.yours.key]

    def method_names(self) -> list[str]:
        return [*self.builtin(), self.yours.key]

    def label(self, method: str) -> str:
        return self.yours.label if method == self.yours.key else super().label(method)

    def metric(self, method: str) -> str:
        return f"acc_{self.yours.rule}" if method == self.yours.key else super().metric(method)

    def why_not(self, method: str, setting: str) -> str | None:
        return why_not(self, setting) if method == self.yours.key else super().why_not(method, setting)

    def setting_seeds(self, setting: str) -> list[int]:
        """The seeds of ``setting`` the comparison takes: those at :attr:`positions` of the archived ones."""
        own = super().setting_seeds(setting)
        return [own[i] for i in self.positions]

    @property
    def equal_rounds(self) -> bool:
        """Whether the method trains as long as the archived runs (the converged budget)."""
        return self.budget_rounds == self.rounds


def load_plan(yours: Yours, profile: str = "smoke", rounds: int | None = None, seeds: list[int] | None = None,
              methods: list[str] | None = None, settings: list[str] | None = None,
              results_dir: str | Path | None = None, data_root: str | None = None, device: str | None = None,
              executor: str | None = None, field: str = "--profile") -> Plan:
    """The comparison of ``yours`` under the budget of ``profile`` (one of :data:`BUDGETS`): its rounds (or
    ``rounds``, at most the archived runs') and its number of seeds (or ``seeds``, a subset of the reference
    profile's: each setting takes the archived seeds at the same positions). ``methods``: the built-in methods shown
    (default all); ``settings``: the settings taken (default every one the method can run on). Runs go to
    ``results_dir`` (default the output root's ``results/``)."""
    from fedlib.papers import check_seeds
    from fedlib.papers.schema import check_rounds

    check_budget(profile, field)
    budget = benchmark.load_plan(profile)
    plan = Plan.load(REFERENCE, results_dir=results_dir, data_root=data_root, device=device, executor=executor,
                     methods=methods)
    plan.yours, plan.budget = yours, profile
    ref_seeds = plan.seeds
    if seeds is not None:
        seeds = check_seeds(seeds)
        if not set(seeds) <= set(ref_seeds):
            raise ConfigError("seeds", seeds, f"a subset of the archived benchmark's seeds {ref_seeds} (each setting "
                              "takes its archived seeds at the same positions; nway: 1234-1236)")
        plan.positions = tuple(ref_seeds.index(s) for s in seeds)
    else:
        plan.positions = tuple(range(min(len(budget.seeds), len(ref_seeds))))
    plan.budget_rounds = budget.rounds if rounds is None else check_rounds(rounds)
    if plan.budget_rounds > plan.rounds:
        raise ConfigError("rounds", plan.budget_rounds, f"at most {plan.rounds}, the rounds of the archived "
                          "benchmark's runs (every method is compared at the same round)")
    if settings is not None:
        known = plan.setting_names()
        if not isinstance(settings, list) or not settings or any(s not in known for s in settings):
            raise ConfigError("settings", settings, "a non-empty list of " + ", ".join(known))
        plan.only = tuple(settings)
    plan.spec["methods"][yours.key] = {"label": yours.label, "algorithm": yours.algorithm()}
    return plan


def check_budget(profile, field: str = "--profile") -> str:
    """``profile`` where it is one of :data:`BUDGETS` (else one line naming ``field``)."""
    if profile not in BUDGETS:
        raise ConfigError(field, profile, f"one of {', '.join(BUDGETS)} (a method's budget beside the archived "
                          f"benchmark's {REFERENCE}-profile runs: docs/your_method.md)")
    return profile


def _model_levels(model: dict, input_shape=(1, 28, 28), num_classes: int = 10) -> set[str]:
    """The feature levels every member of ``model`` (a config's model section) exposes."""
    import json

    return set(_levels(json.dumps(model, sort_keys=True), tuple(input_shape), num_classes))


@functools.lru_cache(maxsize=32)
def _levels(model_json: str, input_shape: tuple, num_classes: int) -> tuple:
    import json

    from fedlib.models import FAMILIES, build_model

    model = json.loads(model_json)
    args = {k: v for k, v in model.items() if k != "name"}
    members = FAMILIES.get(model["name"], (model["name"],))
    levels = None
    for m in members:
        have = set(build_model(m, input_shape, num_classes, **args).feature_dims)
        levels = have if levels is None else levels & have
    return tuple(sorted(levels or ()))


def why_not(plan: Plan, setting: str) -> str | None:
    """Why the method of ``plan`` cannot run on ``setting`` (None: it runs), from its declarations: a setting with
    heterogeneous models (a model family) refuses a method that sends weights of the client's own model
    (:func:`fedlib.algorithms.checks.architecture_keys`); a setting whose model does not expose the feature level the
    method's prototypes live on (its ``level``) refuses it."""
    from fedlib.algorithms.checks import architecture_keys
    from fedlib.models import FAMILIES

    cls = plan.yours.cls
    model = plan.spec["settings"][setting].get("base", plan.spec["base"])["model"]
    if model["name"] in FAMILIES:
        keys = architecture_keys(cls)
        if keys:
            return (f"sends {', '.join(keys)} (weights of the client's own model, whose shapes follow its "
                    "architecture); the clients' models differ here")
    level = getattr(cls, "level", "high")
    if isinstance(level, str) and level not in _model_levels(model):
        return f"its prototypes live on the {level!r} feature level, which {model['name']} does not expose"
    return None


def configs(plan: Plan) -> dict[tuple[str, str], dict]:
    """``{(setting, method): config}``: the built-in methods' archived configs (the reference profile's rounds) and
    the method's own (:attr:`Plan.budget_rounds`), on the settings the method runs on (made once per plan)."""
    if "configs" in plan.cache:
        return plan.cache["configs"]
    out = {}
    for s in runs_on(plan):
        for m in plan.builtin():
            if plan.why_not(m, s) is None:
                out[(s, m)] = benchmark.config(plan, m, s)
        out[(s, plan.yours.key)] = benchmark.config(plan, plan.yours.key, s, rounds=plan.budget_rounds)
    plan.cache["configs"] = out
    return out


def runs_on(plan: Plan) -> list[str]:
    """The settings the method runs on."""
    return [s for s in plan.setting_names() if why_not(plan, s) is None]


def jobs(plan: Plan) -> list[tuple[dict, int]]:
    """The method's runs: one per (setting it runs on, seed)."""
    return [(benchmark.config(plan, plan.yours.key, s, rounds=plan.budget_rounds), seed)
            for s in runs_on(plan) for seed in plan.setting_seeds(s)]


def settings_table(plan: Plan) -> pd.DataFrame:
    """One row per setting of the archived benchmark: whether the method runs there (or why not), its seeds and
    rounds, and the built-in methods it is ranked against."""
    rows = {}
    for s in plan.setting_names():
        why = why_not(plan, s)
        rows[plan.setting_label(s)] = {
            "runs": "yes" if why is None else f"no: {why}",
            "seeds": ", ".join(map(str, plan.setting_seeds(s))) if why is None else "—",
            "rounds": plan.budget_rounds if why is None else "—",
            "built-in methods": sum(plan.why_not(m, s) is None for m in plan.builtin())}
    return pd.DataFrame(rows).T


def train(plan: Plan, workers: int | None = None, progress: bool = True) -> list[str]:
    """Train the method's runs that no results folder or the run archive holds (cached runs are read, an
    interrupted one resumes); returns one line per failed run (the others are kept)."""
    from fedlib import results
    from fedlib.grid import run_many
    from fedlib.runner import RunsFailed

    todo = [(c, s) for c, s in jobs(plan) if results.find(c, s)[1] is None]
    try:
        run_many(todo, workers=workers, progress=progress, desc=f"{plan.yours.stem} ({plan.budget})")
    except RunsFailed as exc:
        return [str(exc)]
    return []


# -- rows at the same round -------------------------------------------------------------------------------------------
def _at_round(records: list[dict], metric: str, rounds: int) -> dict | None:
    """best / last accuracy (%, sample-weighted) of ``metric`` over the evaluated rounds up to ``rounds``, floats
    sent per round (mean) and seconds per round (median) over those rounds; None where none was evaluated."""
    kept = [r for r in records if r.get("round", 0) <= rounds]
    acc = [(r["round"], 100 * r["acc"][metric]["weighted"]) for r in kept if metric in r.get("acc", {})]
    if not acc:
        return None
    values = [a for _, a in acc]
    return {"best": float(np.nanmax(values)) if not all(math.isnan(v) for v in values) else math.nan,
            "last": values[-1], "at": acc[-1][0],
            "floats": float(np.mean([r.get("up_params", 0) + r.get("down_params", 0) for r in kept])),
            "seconds": float(np.median([r["seconds"] for r in kept if "seconds" in r])) if kept else math.nan}


def rows(plan: Plan) -> tuple[pd.DataFrame, list[str]]:
    """The benchmark's score rows (:func:`fedlib.papers.benchmark.scores`' columns, with ``round``: the round the
    run was read at) of every method on every (setting, seed) the method runs on, all at round
    :attr:`Plan.budget_rounds`: the method's own finished runs and the built-in methods' archived ones; and one
    line per run that neither the results folder nor the archive holds (left out)."""
    from fedlib import results

    out, missing = [], []
    for (s, m), cfg in configs(plan).items():
        for seed in plan.setting_seeds(s):
            recs = results.rounds(cfg, seed)
            row = _at_round(recs, plan.metric(m), plan.budget_rounds) if recs else None
            if row is None:
                missing.append(f"{plan.label(m)} on {s}, seed {seed}")
                continue
            out.append({"setting": s, "seed": seed, "method": m, "best": row["best"], "last": row["last"],
                        "rule": plan.metric(m).removeprefix("acc_"), "floats": row["floats"],
                        "seconds": row["seconds"], "round": row["at"]})
    cols = ["setting", "seed", "method", "best", "last", "rule", "floats", "seconds", "round"]
    return pd.DataFrame(out, columns=cols), missing


def curves(plan: Plan, setting: str, method: str) -> list[list[float]]:
    """The per-seed accuracy curves (%, sample-weighted, the method's rule) of ``method`` on ``setting`` up to the
    budget's round (for the verdict rule's trends)."""
    from fedlib import results

    cfg = configs(plan)[(setting, method)]
    out = []
    for seed in plan.setting_seeds(setting):
        recs = [r for r in results.rounds(cfg, seed) if r.get("round", 0) <= plan.budget_rounds]
        metric = plan.metric(method)
        curve = [100 * r["acc"][metric]["weighted"] for r in recs if metric in r.get("acc", {})]
        if curve and not any(r.get("diverged") for r in recs):
            out.append(curve)
    return out


# -- what the comparison shows ---------------------------------------------------------------------------------------
def budget_text(plan: Plan) -> str:
    """What made the numbers, for every caption: the settings, the method's budget, the round the others are read
    at, and whether the comparison is converged evidence."""
    r, seeds = plan.budget_rounds, len(plan.positions)
    text = (f"{plan.yours.label}: {r} rounds ({plan.budget} budget), {seeds} seed{'s' * (seeds > 1)} per setting; the "
            f"built-in methods: their archived {REFERENCE}-profile runs (same data, clients, split, model, optimiser "
            f"and seeds) read at round {r}")
    if not plan.equal_rounds:
        text += (f" of their {plan.rounds}. An early-training ranking at round {r}, not the converged one: "
                 f"train with --profile {REFERENCE} for that")
    return text


def ranked(plan: Plan, table: pd.DataFrame) -> pd.DataFrame:
    """The benchmark's ranked table (:func:`fedlib.papers.benchmark.ranked`) over the settings the method runs on,
    all read at the same round; the method's row is the one labelled ``(yours)``."""
    return benchmark.ranked(plan, table)


def landing(plan: Plan, table: pd.DataFrame) -> pd.DataFrame:
    """Where the method lands, per setting it runs on: its mean rank among the methods of that setting, its best
    round's mean (%), the best other method and its mean, and the difference."""
    from fedlib import ranking

    out = {}
    key = plan.yours.key
    for s in runs_on(plan):
        part = table[table.setting == s]
        if key not in set(part.method):
            out[plan.setting_label(s)] = {"rank": "not finished"}
            continue
        blocks = benchmark.accuracy_blocks(part)
        rank = ranking.mean_ranks(blocks)
        means = part.groupby("method")["best"].mean()
        others = means.drop(key)
        rival = others.idxmax() if len(others) else None
        out[plan.setting_label(s)] = {
            "rank": f"{rank[key]:.1f} of {blocks.shape[1]}", "yours (best round, %)": _mean_sd(part, key),
            "best other": plan.label(rival) if rival else "—",
            "its best round (%)": _mean_sd(part, rival) if rival else "—",
            "difference": f"{means[key] - others.max():+.2f}" if rival else "—",
            "round": plan.budget_rounds}
    return pd.DataFrame(out).T


def _mean_sd(part: pd.DataFrame, method: str) -> str:
    values = part[part.method == method]["best"]
    return f"{values.mean():.2f}" + (f" ± {values.std(ddof=1):.2f}" if len(values) > 1 else "")


def _retitle(plan: Plan, fig):
    """A benchmark figure's title made to say what its numbers are: the round every method was read at and the
    budget (the benchmark's own titles end in the profile's name)."""
    ax = fig.axes[0]
    title = ax.get_title()
    tail = f"({plan.profile})"
    if title.endswith(tail):
        ax.set_title(title[:-len(tail)] + f"(every method at round {plan.budget_rounds}; {plan.yours.label}: "
                     f"{plan.budget} budget)", fontsize=9)
    return fig


def cd_figures(plan: Plan, table: pd.DataFrame) -> list[tuple]:
    """``[(figure, caption, name)]``: the critical-difference diagram over every setting the method runs on (the
    methods that ran on all of them) and, where one of them has heterogeneous models, over those with one model for
    all; the method highlighted."""
    settings = [s for s in runs_on(plan) if (table.setting == s).any()]
    if not settings:
        return []
    out = [(_retitle(plan, benchmark.cd_figure(plan, table, settings, highlight=plan.yours.label)),
            f"Critical-difference diagram at round {plan.budget_rounds} ({', '.join(settings)}; mean ranks, "
            "Nemenyi CD)",
            "cd")]
    same = [s for s in benchmark.homogeneous_settings(plan) if s in settings]
    if same and set(same) != set(settings):
        out.append((_retitle(plan, benchmark.cd_figure(plan, table, same, highlight=plan.yours.label)),
                    f"Critical-difference diagram at round {plan.budget_rounds}, one model for all ({', '.join(same)})",
                    "cd_homogeneous"))
    return out


def cost_figures(plan: Plan, table: pd.DataFrame) -> list[tuple]:
    """``[(figure, caption, name)]``: accuracy against floats sent and against seconds per round, per setting the
    method runs on, Pareto fronts drawn, the method highlighted."""
    out = []
    for s in runs_on(plan):
        figs = benchmark.cost_figures(plan, table, s, highlight=plan.yours.label)
        for kind, fig in zip(("communication", "time"), figs or (), strict=False):
            out.append((_retitle(plan, fig),
                        f"{plan.setting_label(s)} at round {plan.budget_rounds}: accuracy vs {kind}", f"{s}_{kind}"))
    return out


def ledger(plan: Plan, table: pd.DataFrame) -> list:
    """The claim a method author wants to make, one per setting it runs on: "<yours> beats every other method on
    <setting>", judged against the strongest other method there by the suite's one verdict rule
    (:mod:`fedlib.claims`): decided only under the converged budget, with at least two seeds, a margin beyond the
    seed spread and, for a curve still rising, the early decision (:meth:`fedlib.claims.Comparison.status`)."""
    from fedlib import claims

    key, out = plan.yours.key, []
    for s in runs_on(plan):
        part = table[table.setting == s]
        text = f"{plan.yours.label} beats every other method on {plan.setting_label(s)}"
        if key not in set(part.method) or part.method.nunique() < 2:
            out.append(claims.untested(text, "your method", "no finished run of it, or no other method, there"))
            continue
        values = part.pivot_table(index="seed", columns="method", values="best")
        per = {plan.label(m): list(values[m]) for m in values.columns}
        trends = None
        if plan.budget == REFERENCE and plan.equal_rounds:
            trends = {plan.label(m): claims.trend(f"{plan.label(m)} ({s})", c) for m in values.columns
                      if (c := curves(plan, s, m))}
        test = claims.versus_best(plan.yours.label, per, trends=trends)
        rival = test.label.split(" - ", 1)[1]
        out.append(claims.claim(f"{text} (strongest other: {rival})", "your method",
                                f"{plan.yours.label} {np.nanmean(per[plan.yours.label]):.2f} vs {rival} "
                                f"{np.nanmean(per[rival]):.2f} at round {plan.budget_rounds}",
                                test.margin > 0, plan.budget, test.n, tests=[test]))
    return out


@dataclasses.dataclass
class Comparison:
    """Everything :func:`compare` made: the plan, the score rows, the runs missing, the ranked table, where the
    method lands, the figures ``[(figure, caption, name)]``, the claims and the lines of failed runs."""

    plan: Plan
    table: pd.DataFrame
    missing: list
    ranked: pd.DataFrame
    landing: pd.DataFrame
    figures: list
    claims: list
    failed: list

    def caption(self) -> str:
        return budget_text(self.plan)

    def save(self, folder: str | Path, leakage: pd.DataFrame | None = None) -> list[Path]:
        """Write the ranked table (markdown), where it lands, the leakage table where given and the figures (PNG)
        into ``folder`` (created); returns the paths written."""
        from fedlib import report
        from fedlib.validation import check_writable

        folder = Path(folder)
        check_writable(folder, "--out")
        folder.mkdir(parents=True, exist_ok=True)
        text = [f"# {self.plan.yours.label} against the archived benchmark", "", self.caption() + ".", "",
                "## Ranked table", "", report.to_markdown(self.ranked), "", "## Where it lands", "",
                report.to_markdown(self.landing), ""]
        if leakage is not None:
            text += ["## Leakage (the leakage study's headline, your method one of its rows)", "",
                     report.to_markdown(leakage.round(3)), ""]
        written = []
        for fig, caption, name in self.figures:
            path = folder / f"{name}.png"
            fig.savefig(path, dpi=110, bbox_inches="tight")
            written.append(path)
            text += [f"![{caption}]({name}.png)", ""]
        md = folder / "ranked.md"
        md.write_text("\n".join(text))
        return [md, *written]


def compare(plan: Plan, train_missing: bool = True, workers: int | None = None, progress: bool = True) -> Comparison:
    """Train the method's missing runs (``train_missing``), read every method at the budget's round and make the
    ranked table, where the method lands, the CD diagrams, the accuracy-vs-cost fronts (closed figures: a cell
    shows them by returning them) and the ledger."""
    import matplotlib.pyplot as plt

    failed = train(plan, workers, progress) if train_missing else []
    table, missing = rows(plan)
    figures = cd_figures(plan, table) + cost_figures(plan, table) if len(table) else []
    for fig, _, _ in figures:   # shown where a cell returns them, never by the inline backend on its own
        plt.close(fig)
    return Comparison(plan, table, missing, ranked(plan, table), landing(plan, table), figures,
                      ledger(plan, table) if len(table) else [], failed)


def default_out(plan: Plan) -> Path:
    """Where the command writes the comparison unless told: ``<results folder>/yours/<stem>-<sha12>-<budget>``."""
    return Path(plan.results_dir) / "yours" / f"{plan.yours.stem}-{plan.yours.sha256[:12]}-{plan.budget}"


def main(args) -> int:
    """The ``--method`` path of ``python -m fedlib.papers.benchmark`` (parsed ``args``): the budget checked, the method
    loaded and checked (one line and exit status 2 on a violation, before any training), its runs trained, the
    comparison printed and written to ``--out``. Exit status 1 where a run of it failed (the rest are shown)."""
    from fedlib import claims, report

    check_budget(args.profile)
    if args.leakage and args.profile not in LEAKAGE_PROFILES:
        leakage(None, args.profile)   # its one line, before any work
    yours = load(args.method, rule=args.rule)
    plan = load_plan(yours, args.profile, rounds=args.rounds, seeds=args.seeds, methods=args.methods,
                     results_dir=args.results_dir, device=args.device, executor=args.executor)
    print(yours.line())
    print(f"settings ({REFERENCE} profile's, archived):")
    print(report.to_markdown(settings_table(plan)))
    result = compare(plan, workers=args.workers)
    for line in result.failed:
        print(f"error: {line}")
    if result.missing:
        print(f"{len(result.missing)} runs neither the results folder nor the run archive holds, left out: "
              + "; ".join(result.missing))
    print(f"\nRanked table: {result.caption()}; best round up to it, sample-weighted (%)")
    print(report.to_markdown(result.ranked))
    print(f"\nWhere {yours.label} lands")
    print(report.to_markdown(result.landing))
    if result.claims:
        print("\nClaims, by the suite's verdict rule (fedlib.claims)")
        print(report.to_markdown(claims.table(result.claims)))
    leak = None
    if args.leakage:
        leak = leakage(yours, args.profile, args.results_dir, args.workers)
        print(f"\nLeakage ({LEAKAGE_PROFILES[args.profile]} profile of the leakage study, fedlib.papers.privacy): each "
              "method's best realistic attack on its next upload, ranked by SSIM (lower leaks less)")
        print(report.to_markdown(leak.round(3)))
    out = Path(args.out) if args.out else default_out(plan)
    written = result.save(out, leak)
    print(f"\nwritten: {written[0]} and {len(written) - 1} figures beside it")
    return 1 if result.failed else 0


def show(result: Comparison):
    """A notebook cell's display of ``result``: the caption, the failed and missing runs, the ranked table, where the
    method lands, the figures and the ledger, in that order; written under the results folder as well
    (:func:`default_out`, a line says where). Nothing goes into a report section or ``figures/``."""
    from fedlib import claims
    from fedlib.papers.notebook import Shown

    out = [f"{result.caption()}."]
    out += [f"failed: {line}" for line in result.failed]
    if result.missing:
        out.append(f"{len(result.missing)} runs neither the results folder nor the run archive holds, left out: "
                   + "; ".join(result.missing))
    out += [result.ranked, f"Where {result.plan.yours.label} lands:", result.landing]
    out += [fig for fig, _, _ in result.figures]
    if result.claims:
        out += ["Claims, by the suite's verdict rule (fedlib.claims):", claims.table(result.claims)]
    written = result.save(default_out(result.plan))
    out.append(f"written: {written[0]} and {len(written) - 1} figures beside it")
    return Shown(out)


# -- the leakage row -----------------------------------------------------------------------------------------------
#: the leakage study's profile each budget's leakage row runs under (its own runs and attacks; the run archive keeps
#: no trained model, which the attacks need, so no budget reads archived attack results)
LEAKAGE_PROFILES = {"smoke": "smoke", "quick": "quick"}


def leakage(yours: Yours, budget: str, results_dir: str | Path | None = None, workers: int | None = None,
            progress: bool = True) -> pd.DataFrame:
    """The leakage study's headline (:func:`fedlib.papers.privacy.headline`: each method's best realistic attack on
    the target client's next upload, ranked by SSIM, with the three references) with the method as one more row,
    under the study's profile of ``budget`` (:data:`LEAKAGE_PROFILES`): the method trains in the study's setting
    (MNIST, its MLP, its clients) beside the study's methods of that profile, and every attack its declared messages
    allow (:func:`fedlib.privacy.what_server_holds`) runs on it. The converged budget has none: the attacks need every
    method's trained model, which the run archive does not keep (one line says so)."""
    from fedlib.algorithms import loader
    from fedlib.grid import run_many
    from fedlib.papers import privacy

    if budget not in LEAKAGE_PROFILES:
        raise ConfigError("--leakage", budget, "a budget of " + ", ".join(LEAKAGE_PROFILES) + " (the attacks need "
                          "every method's trained model, which the run archive does not keep: run "
                          "python -m fedlib.papers.privacy --profile paper for the study's own table)")
    plan = privacy.load_plan(LEAKAGE_PROFILES[budget], results_dir=results_dir)
    plan.spec["methods"][yours.key] = {"label": yours.label, "algorithm": yours.algorithm()}
    plan.settings["methods"] = [*plan.table_methods(), yours.key]
    if yours.rule == "proto":
        plan.spec["prototype_methods"] = [*plan.spec.get("prototype_methods", []), yours.key]
    with loader.registered(yours.cls):
        run_many([(c, s) for c in privacy.table_configs(plan).values() for s in plan.seeds], workers=workers,
                 progress=progress, desc=f"leakage ({plan.profile})")
        res = privacy.leakage(plan)
        return privacy.headline(plan, res)
