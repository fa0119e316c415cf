"""The plan of the fedic study (which runs it makes): its Plan subclass, the run configs and grids, every (config, seed)
of a profile and the tables the run archive keeps. Its tables and figures are drawn by :mod:`fedlib.papers.fedic`."""

from __future__ import annotations

import dataclasses

from fedlib import study


@dataclasses.dataclass
class Plan(study.TablePlan):
    """The FedIC experiments under one profile."""

    paper = "fedic"

    def sweep_methods(self) -> list[str]:
        value = self.settings["sweep_methods"]
        return [m for m in self.table1_methods() if value == "all" or m in value]

    def partition_label(self, name: str) -> str:
        return self.spec["partitions"][name]["label"]

    def setting(self) -> str:
        """What made the numbers, for every table caption."""
        frac = self.settings["fraction"]
        data = "all of Fashion-MNIST" if frac == 1 else f"{100 * frac:g}% of Fashion-MNIST (stratified)"
        return f"profile {self.profile}: {data}, {self.rounds} rounds, seeds {self.seeds}"


def load_plan(profile: str = "quick", **options) -> Plan:
    """The plan of ``profile`` (:meth:`study.Plan.load`)."""
    return Plan.load(profile, **options)


def config(plan: Plan, method: str, partition: str = "pra", name: str | None = None, variant: bool = False,
           dataset: str = "fmnist", **changes) -> dict:
    """The validated config of ``method`` (or a Fig. 4 ``variant``) on ``partition`` of ``dataset``; ``changes``
    are dotted overrides (``partition.num_clients``, ``partition.alpha``, ``algorithm.K``)."""
    dspec = plan.entry("datasets", dataset, "dataset")
    entry = plan.method_entry(method, variant=variant, field="variant" if variant else "method")
    pspec, frac = plan.entry("partitions", partition, "partition"), plan.settings["fraction"]
    data = {**plan.spec["base"]["dataset"], "name": dataset, **({"fraction": frac} if frac != 1 else {})}
    where = "" if dataset == "fmnist" else f"{dataset}/"
    return plan.config(entry, name or f"fedic-study/{where}{partition}/{method}", method=method, dataset=dspec,
                       base={**plan.spec["base"], "dataset": data}, partition=pspec, rounds=plan.rounds,
                       changes=changes)


def table1_configs(plan: Plan, dataset: str = "fmnist") -> dict[tuple[str, str], dict]:
    """Table 1: ``{(partition, method): config}`` on ``dataset``."""
    return {(p, m): config(plan, m, p, dataset=dataset) for p in plan.settings["partitions"]
            for m in plan.table1_methods()}


def k_configs(plan: Plan) -> dict[int, dict]:
    """Fig. 2: FedIC with K clusters per class (Pra)."""
    return {k: config(plan, "fedic", name=f"fedic-study/pra/K{k}", **{"algorithm.K": k})
            for k in plan.settings["k_values"]}


def ablation_configs(plan: Plan) -> dict[str, dict]:
    """Fig. 4: the four variants (Pra); ``{}`` when the profile skips it."""
    return {v: config(plan, v, name=f"fedic-study/pra/ablation/{v}", variant=True)
            for v in plan.spec["variants"] if plan.settings["ablation"]}


def scale_configs(plan: Plan) -> dict[tuple[int, str], dict]:
    """Table 3 analogue: ``{(clients, method): config}`` on the profile's ``clients_partition`` (decision 9)."""
    p = plan.settings["clients_partition"]
    return {(n, m): config(plan, m, p, name=f"fedic-study/{p}/n{n}/{m}", **{"partition.num_clients": n})
            for n in plan.settings["clients"] for m in plan.sweep_methods()}


def alpha_configs(plan: Plan) -> dict[tuple[float, str], dict]:
    """Table 4 analogue: ``{(alpha, method): config}`` over the Dirichlet concentration."""
    return {(a, m): config(plan, m, name=f"fedic-study/dir{a:g}/{m}", **{"partition.alpha": float(a)})
            for a in plan.settings["alphas"] for m in plan.sweep_methods()}


TWO_PHASE = {"fedpac", "fedic", "fedccfa"}   # a head epoch, then the extractor's: twice the cost of a round


def all_jobs(plan: Plan) -> list[tuple[dict, int]]:
    """Every (config, seed) of the notebook, unique, longest first."""
    grids = (table1_configs, k_configs, ablation_configs, scale_configs, alpha_configs)
    return study.unique_jobs([(c, s) for grid in grids for c in grid(plan).values() for s in plan.seeds],
                             lambda c: c["train"]["rounds"] * (1 + (c["algorithm"]["name"] in TWO_PHASE)))


def archived_tables() -> list[tuple[str, dict, list[int]]]:
    """The converged-profile tables the report reads: ``(name, configs, seeds)`` (:mod:`fedlib.papers.catalog`)."""
    cp = load_plan("converged")
    return [("FedIC Table 1 (converged profile)", table1_configs(cp), cp.seeds),
            ("FedIC Fig. 2 (converged profile)", k_configs(cp), cp.seeds),
            ("FedIC Fig. 4 (converged profile)", ablation_configs(cp), cp.seeds)]
