"""The plan of the fedmps study (which runs it makes): its Plan subclass, the run configs and grids, every (config,
seed) of a profile and the tables the run archive keeps. Its tables and figures are drawn by
:mod:`fedlib.papers.fedmps`."""

from __future__ import annotations

import dataclasses

from fedlib import study
from fedlib.study import check_methods, check_rounds
from fedlib.validation import ConfigError

PAPER_METRIC_PROTO = "acc_proto_own"


COMMON_METRIC = "acc_head"


SWEEPS = ("stdev", "clients", "tau1", "tau2")   # Figs. 8-10's grids (experiments.yaml, grids)
#: Fig. 10's grids, trained on every seed of the profile: the claim on them is a per-seed threshold (docs/fedmps.md,
#: decision 21b), while Figs. 8-9 follow the paper's one run per point (the first seed)
TEMPERATURES = ("tau1", "tau2")


@dataclasses.dataclass
class Plan(study.Plan):
    """The FedMPS experiments under one profile."""

    paper = "fedmps"
    sections = {"ablation": None, "time_target": None, "grids": None}   # its own sections of experiments.yaml

    def selected(self, key: str) -> list[str]:
        """The methods the profile's ``key`` lists (``all``: every method)."""
        value = self.settings[key]
        return self.methods if value == "all" else list(value)

    def ablation_seeds(self) -> list[int]:
        """Table VII's seeds: the profile's ``ablation_seeds`` (``all`` or a list), else its first seed."""
        value = self.settings.get("ablation_seeds")
        if value is None:
            return self.seeds[:1]
        return self.seeds if value == "all" else study.check_seeds(value, f"{self.profile}.ablation_seeds")

    def paper_metric(self, method: str) -> str:
        """The paper's rule for ``method`` (decision 11; a variant follows its method)."""
        method = self.spec.get("variants", {}).get(method, {}).get("of", method)
        return PAPER_METRIC_PROTO if method in self.spec["prototype_methods"] else COMMON_METRIC

    def override(self, methods: list[str] | None = None, rounds: int | None = None) -> None:
        """``methods`` (Table III rows; the sweeps keep those of theirs that remain) and ``rounds`` (every study)."""
        if methods is not None:
            methods = check_methods(methods, self.methods, ("fedproto", "fedmps"), " (the figures compare them)")
            self.settings["table3_methods"] = list(methods)
            sweep = self.settings["sweep_methods"]
            self.settings["sweep_methods"] = list(methods) if sweep == "all" else [m for m in sweep if m in methods]
        if rounds is not None:
            self.settings["rounds"] = {k: check_rounds(rounds) for k in self.settings["rounds"]}


def load_plan(profile: str = "quick", results_dir: str | None = None, data_root: str | None = None,
              methods: list[str] | None = None, seeds: list[int] | None = None, rounds: int | None = None,
              device: str | None = None, executor: str | None = None) -> Plan:
    """The plan of ``profile``, with the notebook's parameters as overrides."""
    return Plan.load(profile, results_dir, data_root, seeds, device=device, executor=executor, methods=methods,
                     rounds=rounds)


def config(plan: Plan, method: str, rounds: str = "main", name: str | None = None, **changes) -> dict:
    """The validated config of ``method`` (or a variant); ``changes``: dotted overrides after the profile's."""
    variants = plan.spec.get("variants", {})
    if method not in plan.spec["methods"] and method not in variants:
        raise ConfigError("method", method, "one of " + ", ".join(plan.methods + list(variants)))
    entry = plan.method_entry(method, variant=method in variants)
    return plan.config(entry, name or f"fedmps-study/{method}", method=method,
                       rounds=plan.settings["rounds"][rounds], changes=changes)


# -- the configs of each table and figure ----------------------------------------------
def table3_configs(plan: Plan) -> dict[str, dict]:
    """Table III: every method in the paper's setting (n = 3)."""
    return {m: config(plan, m) for m in plan.selected("table3_methods")}


def variant_configs(plan: Plan) -> dict[str, dict]:
    """The code-faithful variants on Table III's setting."""
    return {v: config(plan, v) for v in plan.settings.get("variants", [])}


def grid_configs(plan: Plan, kind: str) -> dict[tuple[str, object], dict]:
    """Table VI's (``ways``) or a Figs. 8-10 grid's ``{(method, value): config}`` (experiments.yaml, ``grids``)."""
    g = plan.spec["grids"][kind]
    methods = plan.selected(g["methods"]) if isinstance(g["methods"], str) else g["methods"]
    cast = float if g.get("type") == "float" else (lambda v: v)   # a temperature written 5 is the 5.0 it always was
    return {(m, v): config(plan, m, rounds=g.get("rounds", "sweep"), name=f"fedmps-study/{m}/{g['tag']}{v}",
                           **{g["field"]: cast(v)}) for m in methods for v in plan.settings[kind]}


def temperature_configs(plan: Plan) -> dict[tuple[str, str, object], dict]:
    """Fig. 10's two grids as one ``{(grid, method, value): config}`` (a grid's value at FedMPS's own temperature is
    Table III's FedMPS run: the run id leaves the name out)."""
    return {(t, *k): c for t in TEMPERATURES for k, c in grid_configs(plan, t).items()}


def grid_seeds(plan: Plan, kind: str) -> list[int]:
    """The seeds a grid runs on: every seed for Fig. 10's temperatures, the first for the others (the paper's rule)."""
    return list(plan.seeds) if kind in TEMPERATURES else plan.seeds[:1]


def ways_configs(plan: Plan) -> dict[tuple[str, int], dict]:
    """Table VI: n in the profile's ``ways`` ("under the same random seed")."""
    return grid_configs(plan, "ways")


def ablation_configs(plan: Plan) -> dict[int, dict]:
    """Table VII: FedMPS with each loss term (alpha, beta, mu) off or at its Fashion-MNIST value."""
    a = plan.spec["methods"]["fedmps"]["algorithm"]
    return {r["row"]: config(plan, "fedmps", rounds="ablation", name=f"fedmps-study/ablation{r['row']}",
                             **{"algorithm.alpha": a["alpha"] * r["low"], "algorithm.beta": a["beta"] * r["high"],
                                "algorithm.mu": a["mu"] * r["soft"]})
            for r in plan.spec["ablation"]}


def archived_tables() -> list[tuple[str, dict, list[int]]]:
    """The paper-profile tables the report reads: ``(name, configs, seeds)``."""
    pp = load_plan("paper")
    return [("FedMPS Table III (paper profile)", table3_configs(pp), pp.seeds),
            ("FedMPS Table VI (paper profile)", ways_configs(pp), pp.seeds[:1]),
            ("FedMPS Table VII (paper profile)", ablation_configs(pp), pp.ablation_seeds()),
            ("FedMPS Fig. 8 noise grid (paper profile)", grid_configs(pp, "stdev"), grid_seeds(pp, "stdev")),
            ("FedMPS Fig. 10 temperature grids (paper profile)", temperature_configs(pp),
             grid_seeds(pp, TEMPERATURES[0]))]


def all_jobs(plan: Plan) -> list[tuple[dict, int]]:
    """Every (config, seed) the notebook needs, longest first (rounds x epochs x clients x ways)."""
    seed0 = [plan.seeds[0]]
    jobs = [(c, s) for c in table3_configs(plan).values() for s in c["seeds"]]
    for configs, seeds in ((variant_configs(plan), seed0), (ways_configs(plan), seed0),
                           (ablation_configs(plan), plan.ablation_seeds()),
                           *((grid_configs(plan, kind), grid_seeds(plan, kind)) for kind in SWEEPS)):
        jobs += [(c, s) for c in configs.values() for s in seeds]
    return study.unique_jobs(jobs, lambda c: c["train"]["rounds"] * c["train"]["local_epochs"]
                             * c["partition"].get("num_clients", 20) * c["partition"].get("ways", 3))
