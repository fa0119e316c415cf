"""The plan of the mpfedcl study (which runs it makes): its Plan subclass, the run configs and grids, every (config,
seed) of a profile and the tables the run archive keeps. Its tables and figures are drawn by
:mod:`fedlib.papers.mpfedcl`."""

from __future__ import annotations

import dataclasses

from fedlib import study
from fedlib.study import check_methods


@dataclasses.dataclass
class Plan(study.Plan):
    """The MP-FedCL experiments under one profile."""

    paper = "mpfedcl"
    sections = {"feature_skew": None, "setting": None}   # its own sections of experiments.yaml

    def rounds(self, method: str, sweep: bool = False) -> int:
        """The method's Table VI rounds scaled by the profile (``sweep``: the sweeps' scale), at least 2."""
        scale = self.settings["sweep_scale" if sweep else "round_scale"]
        return max(2, round(self.spec["methods"][method]["rounds"] * scale))

    def table6_methods(self) -> list[str]:
        """Table VI's rows: the profile's ``table6_methods`` (``all``: every method but Local)."""
        value = self.settings["table6_methods"]
        return [m for m in self.methods if m != "local"] if value == "all" else list(value)

    def grid_seeds(self, grid: str) -> list[int]:
        """The seeds ``grid`` runs on (:data:`GRIDS`): every seed of the profile; the profile's first ``sweep_seeds``
        (Figs. 8-9; one where the profile names none); or the first alone."""
        n = {"all": len(self.seeds), "sweep": self.settings.get("sweep_seeds", 1), "first": 1}[GRIDS[grid][0]]
        return self.seeds[:n]

    def override(self, methods: list[str] | None = None, rounds: int | None = None) -> None:
        """``methods`` (Table VI rows) and ``rounds`` (every run, instead of the scaled paper rounds)."""
        if methods is not None:
            self.settings["table6_methods"] = check_methods(methods, self.methods)
        if rounds is not None:
            self.settings["fixed_rounds"] = study.check_rounds(rounds)


def load_plan(profile: str = "quick", results_dir: str | None = None, data_root: str | None = None,
              methods: list[str] | None = None, seeds: list[int] | None = None, rounds: int | None = None,
              device: str | None = None, executor: str | None = None) -> Plan:
    """The plan of ``profile``; ``methods``, ``seeds`` and ``rounds`` override it (e.g. from the notebook)."""
    return Plan.load(profile, results_dir, data_root, seeds, device=device, executor=executor, methods=methods,
                     rounds=rounds)


def config(plan: Plan, method: str, sweep: bool = False, name: str | None = None, feature_skew: bool = False,
           **changes) -> dict:
    """The validated config of ``method`` (``changes``: dotted overrides); ``feature_skew``: Table V's setting."""
    entry, base, rounds, overrides = plan.method_entry(method), None, plan.rounds(method, sweep), None
    if feature_skew:   # Plan.config copies ``base``
        fs = plan.spec["feature_skew"]
        base, overrides = {**plan.spec["base"], **fs["base"]}, plan.settings.get("fs_overrides", {})
        rounds = max(2, round(fs["rounds"][method] * plan.settings["round_scale"]))
    return plan.config(entry, name or f"mpfedcl-study/{'fs/' if feature_skew else ''}{method}", method=method,
                       base=base, rounds=plan.settings.get("fixed_rounds") or rounds, overrides=overrides,
                       changes=changes)


def configs(plan: Plan, grid: str) -> dict:
    """The configs of one grid: by method ``table6`` and ``feature_skew`` (Tables V, VII on the stand-in); by K ``k``
    (Fig. 5) and ``attack``; by (method, value) ``alpha`` (Fig. 8) and ``clients`` (Fig. 9a, Dir(0.1)); ``fig1``."""
    s = plan.settings
    if grid == "table6":
        return {m: config(plan, m) for m in plan.table6_methods()}
    if grid == "feature_skew":
        return {m: config(plan, m, feature_skew=True) for m in plan.spec["feature_skew"]["rounds"]}
    if grid in ("k", "attack"):
        return {k: config(plan, "mpfedcl", name=f"mpfedcl-study/k{k}", **{"algorithm.k": k})
                for k in s["k_values" if grid == "k" else "attack_k"]}
    if grid == "fig1":
        return {m: config(plan, m, sweep=True, name=f"mpfedcl-study/fig1/{m}", **{"partition.alpha": 0.1})
                for m in ("local", "fedavg")}
    if grid == "alpha":
        return {(m, a): config(plan, m, sweep=True, name=f"mpfedcl-study/{m}/alpha{a:g}", **{"partition.alpha": a})
                for m in s["sweep_methods"] for a in s["alphas"]}
    return {(m, n): config(plan, m, sweep=True, name=f"mpfedcl-study/{m}/N{n}", **{
        "partition.num_clients": n, "partition.alpha": 0.1, "partition.test_size": min(100, 1000 // n)})
        for m in s["sweep_methods"] if m != "local" for n in s["clients"]}


# grid: (its seeds, :meth:`Plan.grid_seeds`: all, sweep or first; its trends' key and label, :func:`trends`)
GRIDS = {"table6": ("all", "table6", "{L} (Table VI)"), "k": ("all", "k", "MP-FedCL K = {x}"),
         "feature_skew": ("all", "fs", "{L} (feature-skew stand-in)"), "alpha": ("sweep", "alpha", "{L} alpha {x:g}"),
         "clients": ("sweep", "clients", "{L} N = {x}"), "fig1": ("first", None, None),
         "attack": ("first", "attack", "MP-FedCL K = {x} (attacked run)")}


def all_jobs(plan: Plan) -> list[tuple[dict, int]]:
    """Every (config, seed) of the notebook, unique, longest first."""
    jobs = [(c, s) for g in GRIDS for c in configs(plan, g).values() for s in plan.grid_seeds(g)]
    return study.unique_jobs(jobs, lambda cfg: cfg["train"]["rounds"] * cfg["partition"]["num_clients"])


def archived_tables() -> list[tuple[str, dict, list[int]]]:
    """The paper-profile tables the report reads: ``(name, configs, seeds)`` (:mod:`fedlib.papers.catalog`)."""
    pp = load_plan("paper")
    names = {"table6": "Table VI", "k": "Fig. 5 (K)", "clients": "Fig. 9a (clients)", "alpha": "Fig. 8 (label skew)",
             "feature_skew": "Tables V, VII (feature-skew stand-in)"}
    return [(f"MP-FedCL {what} (paper profile)", configs(pp, g), pp.grid_seeds(g)) for g, what in names.items()]
