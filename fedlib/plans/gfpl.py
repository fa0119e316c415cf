"""The plan of the gfpl study (which runs it makes): its Plan subclass, the run configs and grids, every (config, seed)
of a profile and the tables the run archive keeps. Its tables and figures are drawn by :mod:`fedlib.papers.gfpl`."""

from __future__ import annotations

import dataclasses

from fedlib import study


@dataclasses.dataclass
class Plan(study.TablePlan):
    """The GFPL experiments under one profile."""

    paper = "gfpl"

    def dataset_label(self, name: str) -> str:
        """The dataset's label, with the profile's shot count where its ``overrides`` change it."""
        label = self.spec["datasets"][name]["label"]
        shots = self.settings.get("overrides", {}).get("partition.shots")
        return label if shots is None else f"{label.split(', s-bar')[0]}, s-bar {shots} ({self.profile} profile)"

    def figs_seeds(self) -> list[int]:
        """Figs. 3b and 6's seeds: the profile's ``figs_seeds`` (``all`` or a list), else its first seed."""
        return self._seeds_of("figs_seeds", self.seeds[:1])

    def ablation_seeds(self) -> list[int]:
        """Table 2's seeds: the profile's ``ablation_seeds`` (``all`` or a list), else every seed."""
        return self._seeds_of("ablation_seeds", self.seeds)

    def _seeds_of(self, key: str, default: list[int]) -> list[int]:
        value = self.settings.get(key)
        if value is None:
            return list(default)
        return self.seeds if value == "all" else study.check_seeds(value, f"{self.profile}.{key}")

    def adjust(self, raw: dict) -> None:
        """Room in each client's class block for the largest shot count the partition draws."""
        part = raw["partition"]
        part["block"] = max(part["block"], part["shots"] + part["stdev"])


def load_plan(profile: str = "quick", **options) -> Plan:
    """The plan of ``profile``, with the overrides and placement of :meth:`study.Plan.load`."""
    return Plan.load(profile, **options)


def config(plan: Plan, method: str, dataset: str = "mnist5k", ways: int = 4, name: str | None = None,
           variant: bool = False, **changes) -> dict:
    """The validated config of ``method`` (or a Table 2 ``variant``) on ``dataset`` at average ways ``ways``."""
    entry = plan.method_entry(method, variant=variant, field="variant" if variant else "method")
    dspec = plan.entry("datasets", dataset, "dataset")
    return plan.config(entry, name or f"gfpl-study/{dataset}/w{ways}/{method}", method=method, rounds=plan.rounds,
                       before={**dspec["changes"], "partition.ways": ways}, changes=changes)


def table1_configs(plan: Plan) -> dict[tuple[str, int, str], dict]:
    """Table 1: ``{(dataset, w-bar, method): config}``."""
    return {(d, w, m): config(plan, m, d, w) for d in plan.settings["datasets"] for w in plan.settings["ways"]
            for m in plan.table1_methods()}


def ablation_configs(plan: Plan) -> dict[tuple[int, str], dict]:
    """Table 2: ``{(s-hat, variant): config}`` at w-bar 4, w-hat 1 on the ablation dataset."""
    ab = plan.settings["ablation"]
    return {(s, v): config(plan, v, ab["dataset"], 4, name=f"gfpl-study/{ab['dataset']}/ablation/s{s}/{v}",
                           variant=True, **{"partition.stdev": s, "partition.ways_stdev": 1})
            for s in ab["shots_stdev"] for v in plan.spec["variants"]}


def n_configs(plan: Plan) -> dict[int, dict]:
    """Fig. 3b: ``{n: config}``, GFPL with n Gaussian components per class (MNIST-5k, w-bar 4)."""
    return {n: config(plan, "gfpl", name=f"gfpl-study/mnist5k/n{n}", **{"algorithm.n_components": n})
            for n in plan.settings["n_values"]}


def threshold_configs(plan: Plan) -> dict[float, dict]:
    """Fig. 6: ``{S_C: config}``, GFPL with fusion threshold S_C (MNIST-5k, w-bar 4)."""
    return {t: config(plan, "gfpl", name=f"gfpl-study/mnist5k/sc{t:g}", **{"algorithm.threshold": float(t)})
            for t in plan.settings["thresholds"]}


def all_jobs(plan: Plan) -> list[tuple[dict, int]]:
    """Every (config, seed) of the notebook, unique, longest first."""
    grids = ((table1_configs, plan.seeds), (ablation_configs, plan.ablation_seeds()), (n_configs, plan.figs_seeds()),
             (threshold_configs, plan.figs_seeds()))
    return study.unique_jobs([(c, s) for configs, seeds in grids for c in configs(plan).values() for s in seeds],
                             lambda c: c["train"]["rounds"] * c["partition"]["shots"]
                             * (1 + (c["algorithm"]["name"] == "fedrep")))


def _paper_plan(plan: Plan) -> Plan:
    """The ``paper`` profile on ``plan``'s placement, with the Table 1 methods ``plan`` selected."""
    pplan = load_plan("paper", results_dir=plan.results_dir, data_root=plan.data_root, device=plan.device,
                      executor=plan.executor)
    pplan.settings["table1_methods"] = plan.table1_methods()
    return pplan


def archived_tables() -> list[tuple[str, dict, list[int]]]:
    """The paper-profile tables the report reads: ``(name, configs, seeds)``."""
    gp = load_plan("paper")
    figs = {**{("n", n): c for n, c in n_configs(gp).items()},
            **{("sc", t): c for t, c in threshold_configs(gp).items()}}
    return [("GFPL Table 1 (paper profile)", table1_configs(gp), gp.seeds),
            ("GFPL Table 2 (paper profile)", ablation_configs(gp), gp.ablation_seeds()),
            ("GFPL Figs. 3b and 6 (paper profile)", figs, gp.figs_seeds())]
