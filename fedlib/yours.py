"""Your method against the archived benchmark: ``python -m fedlib.yours --method FILE [--profile P]``.

One method file (or an installed entry point of group ``fedlib.methods``) on the archived benchmark's settings and
seeds (:mod:`fedlib.papers.benchmark`), every built-in method read from its archived run at the same round; the
budget (``--profile``) sets the rounds and seeds. It is checked, trained, ranked among the 31, placed on the
critical-difference diagrams and the cost fronts, judged by the suite's verdict rule and, with ``--leakage``, given
its row in the leakage study's headline. The benchmark notebook's last cell and the quickstart use it too. What it
does and decides: docs/your_method.md.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd

from fedlib import claims, ranking, report, study
from fedlib.algorithms.checks import refusal
from fedlib.papers import benchmark as B
from fedlib.study.notebook import Shown
from fedlib.validation import ConfigError, Options, check_value

#: the profile whose runs the archive holds for every built-in method: the comparison's settings and seeds
REFERENCE = "converged"
#: the profiles a method may be trained under beside the archive (each sets its rounds and number of seeds)
BUDGETS = ("smoke", "quick", "converged")


@dataclasses.dataclass(frozen=True)
class Yours:
    """A loaded method that passed the contract check: its class, its rule, its hyperparameters, the check's time."""

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
        return self.stem + " (yours)"

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
        """``my_method (my_method.py, SHA-256 3d80ef1a25ac...): contract check passed (1.2 s); ...``."""
        where = self.source if self.source.startswith("entry-point:") else Path(self.source).name
        extra = f", hyperparameters {self.hyperparameters}" if self.hyperparameters else ""
        return (f"{self.stem} ({where}, SHA-256 {self.sha256[:12]}...{extra}): contract check passed "
                f"({self.check_seconds:.1f} s); scored by its rule {self.rule!r}")


def load(source, rule: str | None = None, hyperparameters: dict | None = None, field: str = "--method",
         rule_field: str = "--rule") -> Yours:
    """The method of ``source`` (a file or entry point) after the contract check; ``rule``: one of its ``RULES``."""
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
    if rule is None:
        rule = "head" if "head" in cls.RULES else cls.RULES[0]
    else:
        rule = check_value(rule_field, rule, Options(tuple(cls.RULES)))
    return Yours(cls, rule, hyper, seconds)


@dataclasses.dataclass
class YoursPlan(B.Plan):
    """The benchmark under :data:`REFERENCE` with ``yours`` added at ``budget_rounds`` and ``positions``."""

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
        """The built-in methods compared."""
        return [m for m in B.Plan.method_names(self) if m != self.yours.key]

    def method_names(self) -> list[str]:
        return [*self.builtin(), self.yours.key]

    def label(self, method: str) -> str:
        return self.yours.label if method == self.yours.key else super().label(method)

    def metric(self, method: str) -> str:
        return f"acc_{self.yours.rule}" if method == self.yours.key else super().metric(method)

    def why_not(self, method: str, setting: str) -> str | None:
        return why_not(self, setting) if method == self.yours.key else super().why_not(method, setting)

    def setting_seeds(self, setting: str) -> list[int]:
        own = super().setting_seeds(setting)
        return [own[i] for i in self.positions]

    @property
    def equal_rounds(self) -> bool:
        """Whether the method trains as long as the archived runs."""
        return self.budget_rounds == self.rounds


def plan(yours: Yours, profile: str = "smoke", rounds: int | None = None, seeds: list[int] | None = None,
         methods: list[str] | None = None, settings: list[str] | None = None,
         results_dir: str | Path | None = None, data_root: str | None = None, device: str | None = None,
         executor: str | None = None, field: str = "--profile") -> YoursPlan:
    """The comparison of ``yours`` under the budget of ``profile`` (:data:`BUDGETS`), options overriding it."""
    from fedlib.study import check_seeds
    from fedlib.study.schema import check_rounds

    check_budget(profile, field)
    budget = B.load_plan(profile)
    plan = YoursPlan.load(REFERENCE, results_dir=results_dir, data_root=data_root, device=device,
                          executor=executor, methods=methods)
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


def why_not(plan: YoursPlan, setting: str) -> str | None:
    """Why the method cannot run on ``setting`` (None: it runs), by :func:`refusal`."""
    model = plan.spec["settings"][setting].get("base", plan.spec["base"])["model"]
    found = refusal(plan.yours.cls, plan.yours.hyperparameters, model)
    return None if found is None else found[2]


def configs(plan: YoursPlan) -> dict[tuple[str, str], dict]:
    """``{(setting, method): config}`` where the method runs, its own at the budget's rounds (made once)."""
    if "configs" not in plan.cache:
        out = {}
        for s in runs_on(plan):
            out.update({(s, m): B.config(plan, m, s) for m in plan.builtin() if plan.why_not(m, s) is None})
            out[(s, plan.yours.key)] = B.config(plan, plan.yours.key, s, rounds=plan.budget_rounds)
        plan.cache["configs"] = out
    return plan.cache["configs"]


def runs_on(plan: YoursPlan) -> list[str]:
    """The settings the method runs on."""
    return [s for s in plan.setting_names() if why_not(plan, s) is None]


def jobs(plan: YoursPlan) -> list[tuple[dict, int]]:
    """The method's runs: one per (setting it runs on, seed)."""
    return [(B.config(plan, plan.yours.key, s, rounds=plan.budget_rounds), seed)
            for s in runs_on(plan) for seed in plan.setting_seeds(s)]


def settings_table(plan: YoursPlan) -> pd.DataFrame:
    """Per setting: whether the method runs there (or why not), its seeds and rounds, the built-in methods there."""
    rows = {}
    for s in plan.setting_names():
        why = why_not(plan, s)
        rows[plan.setting_label(s)] = {
            "runs": "yes" if why is None else f"no: {why}",
            "seeds": ", ".join(map(str, plan.setting_seeds(s))) if why is None else "—",
            "rounds": plan.budget_rounds if why is None else "—",
            "built-in methods": sum(plan.why_not(m, s) is None for m in plan.builtin())}
    return pd.DataFrame(rows).T


def _at_round(records: list[dict], metric: str, rounds: int) -> dict | None:
    """Best / last accuracy (%), floats and seconds a round of ``records`` up to ``rounds``; None if none."""
    kept = [r for r in records if r.get("round", 0) <= rounds]
    acc = [(r["round"], 100 * r["acc"][metric]["weighted"]) for r in kept if metric in r.get("acc", {})]
    if not acc:
        return None
    values = [a for _, a in acc]
    return {"best": float(np.nanmax(values)) if not all(math.isnan(v) for v in values) else math.nan,
            "last": values[-1], "at": acc[-1][0],
            "floats": float(np.mean([r.get("up_params", 0) + r.get("down_params", 0) for r in kept])),
            "seconds": float(np.median([r["seconds"] for r in kept if "seconds" in r])) if kept else math.nan}


def rows(plan: YoursPlan) -> tuple[pd.DataFrame, list[str]]:
    """Every method's :func:`scores` rows at the budget's round where the method runs, and the runs missing."""
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


def curves(plan: YoursPlan, setting: str, method: str) -> list[list[float]]:
    """The per-seed accuracy curves (%) of ``method`` on ``setting`` up to the budget's round."""
    from fedlib import results

    cfg = configs(plan)[(setting, method)]
    out = []
    for seed in plan.setting_seeds(setting):
        recs = [r for r in results.rounds(cfg, seed) if r.get("round", 0) <= plan.budget_rounds]
        curve = [a for _, a in B._accuracy(plan, method, recs)]
        if curve and not any(r.get("diverged") for r in recs):
            out.append(curve)
    return out


def landing(plan: YoursPlan, table: pd.DataFrame) -> pd.DataFrame:
    """Per setting the method runs on: its mean rank, its mean, the best other method's and the difference."""
    out = {}
    key = plan.yours.key
    for s in runs_on(plan):
        part = table[table.setting == s]
        if key not in set(part.method):
            out[plan.setting_label(s)] = {"rank": "not finished"}
            continue
        blocks = B.accuracy_blocks(part)
        rank = ranking.mean_ranks(blocks)
        means = part.groupby("method")["best"].mean()
        others = means.drop(key)
        rival = others.idxmax() if len(others) else None
        out[plan.setting_label(s)] = {
            "rank": f"{rank[key]:.1f} of {blocks.shape[1]}",
            "yours (best round, %)": B._mean_std(part[part.method == key]["best"]),
            "best other": plan.label(rival) if rival else "—",
            "its best round (%)": B._mean_std(part[part.method == rival]["best"]) if rival else "—",
            "difference": f"{means[key] - others.max():+.2f}" if rival else "—",
            "round": plan.budget_rounds}
    return pd.DataFrame(out).T


def _retitle(plan: YoursPlan, fig):
    """``fig`` with its title's profile replaced by the round every method was read at and the budget."""
    ax = fig.axes[0]
    title = ax.get_title()
    tail = f"({plan.profile})"
    if title.endswith(tail):
        ax.set_title(title[:-len(tail)] + f"(every method at round {plan.budget_rounds}; {plan.yours.label}: "
                     f"{plan.budget} budget)", fontsize=9)
    return fig


def ledger(plan: YoursPlan, table: pd.DataFrame) -> list:
    """Per setting, "<yours> beats every other method on <setting>" by the suite's verdict rule."""
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
class YoursComparison:
    """What :func:`compare` made; ``figures``: ``[(figure, caption, name)]``, ``failed``: failed runs' lines."""

    plan: YoursPlan
    table: pd.DataFrame
    missing: list
    ranked: pd.DataFrame
    landing: pd.DataFrame
    figures: list
    claims: list
    failed: list

    def caption(self) -> str:
        """What made the numbers: the method's budget and the round the others are read at."""
        plan = self.plan
        r, seeds = plan.budget_rounds, len(plan.positions)
        text = (f"{plan.yours.label}: {r} rounds ({plan.budget} budget), {seeds} seed{'s' * (seeds > 1)} per setting; "
                f"the built-in methods: their archived {REFERENCE}-profile runs (same data, clients, split, "
                f"model, optimiser and seeds) read at round {r}")
        if not plan.equal_rounds:
            text += (f" of their {plan.rounds}. An early-training ranking at round {r}, not the converged one: "
                     f"train with --profile {REFERENCE} for that")
        return text

    def save(self, folder: str | Path, leakage: pd.DataFrame | None = None) -> list[Path]:
        """Write the tables (``ranked.md``) and the figures (PNG) into ``folder``; returns the paths written."""
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
            written.append(folder / f"{name}.png")
            fig.savefig(written[-1], dpi=110, bbox_inches="tight")
            text += [f"![{caption}]({name}.png)", ""]
        (folder / "ranked.md").write_text("\n".join(text))
        return [folder / "ranked.md", *written]


def compare(plan: YoursPlan, train_missing: bool = True, workers: int | None = None,
            progress: bool = True) -> YoursComparison:
    """Train the method's missing runs and compare every method at the budget's round."""
    import matplotlib.pyplot as plt

    from fedlib import results

    failed = []
    if train_missing:
        todo = [(c, s) for c, s in jobs(plan) if results.find(c, s)[1] is None]
        try:
            results.run_many(todo, workers=workers, progress=progress, desc=f"{plan.yours.stem} ({plan.budget})")
        except results.RunsFailed as exc:
            failed = [str(exc)]
    table, missing = rows(plan)
    r, label, figures = plan.budget_rounds, plan.yours.label, []
    settings = [s for s in runs_on(plan) if (table.setting == s).any()]
    if len(table) and settings:
        figures = B.cd_figures(plan, table, settings, (
            f"Critical-difference diagram at round {r} ({', '.join(settings)}; mean ranks, Nemenyi CD)",
            f"Critical-difference diagram at round {r}, one model for all ({{}})"), highlight=label)
    if len(table):
        figures += B.cost_figures(plan, table, runs_on(plan), highlight=label, at=f" at round {r}")
    figures = [(_retitle(plan, fig), caption, name) for fig, caption, name in figures]
    for fig, _, _ in figures:   # shown where a cell returns them, never by the inline backend on its own
        plt.close(fig)
    return YoursComparison(plan, table, missing, B.ranked(plan, table), landing(plan, table), figures,
                           ledger(plan, table) if len(table) else [], failed)


def out_dir(plan: YoursPlan) -> Path:
    """Where the comparison is written unless told: ``<results folder>/yours/<stem>-<sha12>-<budget>``."""
    return Path(plan.results_dir) / "yours" / f"{plan.yours.stem}-{plan.yours.sha256[:12]}-{plan.budget}"


def run(args) -> int:
    """``--method``: the method checked, trained, compared and written to ``--out`` (exit status 1: a failed run)."""
    check_budget(args.profile)
    if args.leakage and args.profile not in LEAKAGE_PROFILES:
        leakage(None, args.profile)   # its one line, before any work
    yours = load(args.method, rule=args.rule)
    planned = plan(yours, args.profile, rounds=args.rounds, seeds=args.seeds, methods=args.methods,
                   results_dir=args.results_dir, device=args.device, executor=args.executor)
    print(yours.line(), f"settings ({REFERENCE} profile's, archived):",
          report.to_markdown(settings_table(planned)), sep="\n")
    result = compare(planned, workers=args.workers)
    for line in result.failed:
        print(f"error: {line}")
    if result.missing:
        print(f"{len(result.missing)} runs neither the results folder nor the run archive holds, left out: "
              + "; ".join(result.missing))
    print(f"\nRanked table: {result.caption()}; best round up to it, sample-weighted (%)",
          report.to_markdown(result.ranked), f"\nWhere {yours.label} lands", report.to_markdown(result.landing),
          sep="\n")
    if result.claims:
        print("\nClaims, by the suite's verdict rule (fedlib.claims)", report.to_markdown(claims.table(result.claims)),
              sep="\n")
    leak = None
    if args.leakage:
        leak = leakage(yours, args.profile, args.results_dir, args.workers)
        print(f"\nLeakage ({LEAKAGE_PROFILES[args.profile]} profile of the leakage study, "
              "fedlib.papers.privacy): each method's best realistic attack on its next upload, ranked by SSIM (lower "
              "leaks less)", report.to_markdown(leak.round(3)), sep="\n")
    written = result.save(Path(args.out) if args.out else out_dir(planned), leak)
    print(f"\nwritten: {written[0]} and {len(written) - 1} figures beside it")
    return 1 if result.failed else 0


def cells(result: YoursComparison, figures: bool = True):
    """A notebook cell's display of ``result`` (its figures and claims unless ``figures`` is False: the quickstart
    shows them in cells of their own), also written under the results folder (:func:`out_dir`)."""
    out = [f"{result.caption()}."]
    out += [f"failed: {line}" for line in result.failed]
    if result.missing:
        out.append(f"{len(result.missing)} runs neither the results folder nor the run archive holds, left out: "
                   + "; ".join(result.missing))
    out += [result.ranked, f"Where {result.plan.yours.label} lands:", result.landing]
    out += [fig for fig, _, _ in result.figures if figures]
    if result.claims and figures:
        out += ["Claims, by the suite's verdict rule (fedlib.claims):", claims.table(result.claims)]
    written = result.save(out_dir(result.plan))
    out.append(f"written: {written[0]} and {len(written) - 1} figures beside it")
    return Shown(out)


#: the leakage study's profile each budget's leakage row runs under (the run archive keeps no trained model)
LEAKAGE_PROFILES = {"smoke": "smoke", "quick": "quick"}


def leakage(yours: Yours, budget: str, results_dir: str | Path | None = None, workers: int | None = None,
            progress: bool = True) -> pd.DataFrame:
    """The leakage study's headline with the method as one more row, under ``budget`` (smoke or quick)."""
    from fedlib import results
    from fedlib.algorithms import loader
    from fedlib.papers import privacy

    if budget not in LEAKAGE_PROFILES:
        raise ConfigError("--leakage", budget, "a budget of " + ", ".join(LEAKAGE_PROFILES) + " (the attacks "
                          "need every method's trained model, which the run archive does not keep: run "
                          "python -m fedlib.papers.privacy --profile paper for the study's own table)")
    plan = privacy.load_plan(LEAKAGE_PROFILES[budget], results_dir=results_dir)
    plan.spec["methods"][yours.key] = {"label": yours.label, "algorithm": yours.algorithm()}
    plan.settings["methods"] = [*plan.table_methods(), yours.key]
    if yours.rule == "proto":
        plan.spec["prototype_methods"] = [*plan.spec.get("prototype_methods", []), yours.key]
    with loader.registered(yours.cls):
        results.run_many([(c, s) for c in privacy.table_configs(plan).values() for s in plan.seeds],
                         workers=workers, progress=progress, desc=f"leakage ({plan.profile})")
        return privacy.headline(plan, privacy.leakage(plan))


@study.command
def main(argv: list[str] | None = None) -> int:
    """``python -m fedlib.yours --method FILE [--profile smoke|quick|converged] ...``: the method checked, trained,
    compared against the archived benchmark and written to ``--out`` (exit status 1: a failed run)."""
    parser = study.cli("python -m fedlib.yours", main.__doc__)
    g = parser.add_argument_group("your method against the archived benchmark (docs/your_method.md)")
    g.add_argument("--method", required=True, help="a method file or an installed entry point of group "
                   "fedlib.methods; --profile is its budget: smoke (2 rounds, 1 seed), quick (5, 1) or converged "
                   "(100, 3)")
    g.add_argument("--rule", help="the rule it is scored by (one of its RULES; default head)")
    g.add_argument("--out", help="the output folder (default <results folder>/yours/...)")
    g.add_argument("--results-dir", help="its runs' results folder (default: the checkout's results/, or "
                   "$FEDLIB_ROOT/results, wherever the command runs)")
    g.add_argument("--leakage", action="store_true", help="(smoke or quick) also its row in the leakage study's "
                   "headline")
    return run(parser.parse_args(argv))


def attach(nb, method_file, method_rule=None, profile: str | None = None, rounds=None, seeds=None, methods=None,
           device=None) -> None:
    """The benchmark notebook's set-up for its "Your method" cell: ``method_file`` loaded, checked and planned into
    ``nb`` (nothing where it is ``None``); a bad value is one :class:`ParameterError` line."""
    from fedlib.study.notebook import ParameterError

    if method_file is None:
        if method_rule is not None:
            raise ParameterError(f"method_rule: got {method_rule!r}; allowed: None without a method_file")
        return
    try:
        yours = load(method_file, rule=method_rule, field="method_file", rule_field="method_rule")
        nb.results["yours"] = plan(yours, profile or nb.profile, rounds=rounds, seeds=seeds, methods=methods,
                                   results_dir=nb.plan.results_dir, device=device, field="profile")
    except ConfigError as exc:
        raise ParameterError(str(exc)) from None
    print(yours.line())


def show(nb):
    """The "Your method" cell: :func:`compare` where ``method_file`` is set, else how to set it."""
    plan = nb.results.get("yours")
    if plan is None:
        print("No method file: set method_file in the parameters cell (e.g. \"../docs/method_template.py\") to rank "
              "your method against the archived benchmark (docs/your_method.md).")
        return None
    return cells(nb.once("yours_result", lambda: compare(plan, workers=nb.workers)))


if __name__ == "__main__":
    raise SystemExit(main())
