"""The plan of the protonorm study (which runs it makes): its Plan subclass, the run configs and grids, every (config,
seed) of a profile and the tables the run archive keeps. Its tables and figures are drawn by
:mod:`fedlib.papers.protonorm`."""

from __future__ import annotations

import copy
import dataclasses

from fedlib import study
from fedlib.data.sources import present
from fedlib.study import check_methods, check_rounds, schema
from fedlib.validation import ConfigError


@dataclasses.dataclass
class Plan(study.Plan):
    """The ProtoNorm experiments under one profile."""

    paper = "protonorm"
    sections = {"spiral": lambda value, field: check_spiral_section(value, field), "code_protocol": None,
                "homogeneous": lambda value, field: schema.check_methods(value.get("methods"), f"{field}.methods")}

    @property
    def table1(self) -> dict:
        """The profile's Table 1 settings with ``methods: all`` expanded."""
        t = dict(self.settings["table1"])
        if t["methods"] == "all":
            t["methods"] = list(self.spec["methods"])
        return t

    def label(self, method: str) -> str:
        entry = self.spec["methods"].get(method) or self.spec["homogeneous"]["methods"][method]
        return entry.get("label", method)

    def override(self, methods: list[str] | None = None, rounds: int | None = None) -> None:
        """``methods`` (Table 1 rows) and ``rounds`` (the Table 1 protocol) replace the profile's."""
        if methods is not None:
            self.settings["table1"]["methods"] = check_methods(methods, list(self.spec["methods"]))
        if rounds is not None:
            self.settings["table1"]["rounds"] = check_rounds(rounds)


def check_spiral_section(spiral, field: str) -> None:
    """The spiral study's section: its base, partitions and runs (label, partition, algorithm)."""
    schema.check_base(spiral.get("base"), f"{field}.base")
    schema.check_entries(spiral.get("partitions"), f"{field}.partitions", ("scheme",))
    schema.check_entries(spiral.get("runs"), f"{field}.runs", ("partition", "algorithm"))
    for name, entry in spiral["runs"].items():
        if entry["partition"] not in spiral["partitions"]:
            raise ConfigError(f"{field}.runs.{name}.partition", entry["partition"],
                              "one of " + ", ".join(spiral["partitions"]))


def load_plan(profile: str = "quick", results_dir: str | None = None, methods: list[str] | None = None,
              rounds: int | None = None, seeds: list[int] | None = None, data_root: str | None = None,
              device: str | None = None, executor: str | None = None) -> Plan:
    """The plan of ``profile``; ``methods`` (Table 1 rows), ``rounds`` (Table 1 protocol) and ``seeds`` override it."""
    return Plan.load(profile, results_dir, data_root, seeds, device=device, executor=executor, methods=methods,
                     rounds=rounds)


def spiral_configs(plan: Plan) -> dict[str, dict]:
    """The four spiral runs (Figs. 1-2, 6), validated."""
    sp, over = plan.spec["spiral"], plan.settings.get("spiral_overrides", {})
    rounds = {"train.rounds": plan.settings["spiral_rounds"]}
    return {key: plan.config(entry, f"protonorm-study/spiral/{key}", base=sp["base"], changes=rounds,
                             partition=sp["partitions"][entry["partition"]], overrides=over)
            for key, entry in sp["runs"].items()}


# -- the Table 1 protocol on Fashion-MNIST (Tables 1, 3, 4, 5; Figs. 3-5, 7-8) -------------
def table1_config(plan: Plan, method: str, partition: str = "practical", homogeneous: bool = False,
                  rounds: int | None = None, name: str | None = None, dataset: str = "fmnist", **changes) -> dict:
    """The validated config of ``method`` under the Table 1 protocol and this profile's sizes on ``dataset``."""
    t, dspec = plan.table1, plan.entry("datasets", dataset, "dataset")
    pspec = plan.entry("partitions", partition, "partition")
    entry = plan.method_entry(method, table=plan.spec["homogeneous"]["methods"] if homogeneous else None)
    base = copy.deepcopy(plan.spec["base"])
    base["dataset"]["name"] = dataset
    base["model"] = dict(plan.spec["homogeneous"]["model"]) if homogeneous else {**base["model"], "name": t["model"]}
    if t["fraction"] != 1:
        base["dataset"]["fraction"] = t["fraction"]
    where = ("" if dataset == "fmnist" else f"{dataset}/") + ("homogeneous" if homogeneous else "table1")
    return plan.config(entry, name or f"protonorm-study/{where}/{partition}/{method}", method=method, base=base,
                       dataset=dspec, partition=pspec, rounds=rounds or t["rounds"], changes=changes)


def table1_configs(plan: Plan, dataset: str = "fmnist") -> dict[tuple[str, str], dict]:
    """Table 1: every selected method on every selected partition."""
    return {(m, p): table1_config(plan, m, p, dataset=dataset)
            for p in plan.table1["partitions"] for m in plan.table1["methods"]}


def code_protocol_configs(plan: Plan) -> dict[str, dict]:
    """The profile's prototype methods on the practical split under the official code's protocol (decision 27)."""
    cp = plan.spec["code_protocol"]
    changes = {**cp["changes"], "partition.min_size": plan.settings.get("code_min_size", 1)}
    if changes["partition.min_size"] is None:   # PFLlib's least_samples, as the paper protocol
        del changes["partition.min_size"]
    return {m: table1_config(plan, m, "practical", name=f"protonorm-study/code-protocol/practical/{m}", **changes)
            for m in cp["methods"] if m in plan.table1["methods"]}


def extra_datasets(root: str | None = None) -> list[str]:
    """The paper's datasets (CIFAR-10, CIFAR-100) whose files are in the data root."""
    return [d for d in ("cifar10", "cifar100") if present(d, root)]


def homogeneous_configs(plan: Plan) -> dict[str, dict]:
    """Table 3: FedNH, FedUV and ProtoNorm with one 4-layer CNN for every client (practical)."""
    return {m: table1_config(plan, m, "practical", homogeneous=True)
            for m in plan.spec["homogeneous"]["methods"]} if plan.table1["homogeneous"] else {}


def gamma_configs(plan: Plan) -> dict[tuple[str, float], dict]:
    """Tables 4-5 (practical): ProtoNorm over the gamma grid, FedProto / FedTGP over small gammas."""
    t, out = plan.table1, {}
    for m, grid in (("protonorm", "protonorm_gamma"), ("fedproto", "pbfl_gamma"), ("fedtgp", "pbfl_gamma")):
        if m in t["methods"]:   # a method out of Table 1 is not swept
            out.update({(m, float(g)): table1_config(plan, m, "practical", **{"algorithm.gamma": float(g)})
                        for g in t[grid]})
            default = table1_config(plan, m, "practical")   # the default: the dataset's gamma, 1 for FedProto/FedTGP
            out[(m, float(default["algorithm"]["gamma"]))] = default
    return dict(sorted(out.items()))


def pa_phase_config(plan: Plan) -> dict:
    """One round of ProtoNorm (practical) that records its PA phase (Fig. 4: the first round)."""
    return table1_config(plan, "protonorm", "practical", rounds=1, name="protonorm-study/fig4/pa-phase",
                         **{"algorithm.record_pa": True})


def all_jobs(plan: Plan) -> list[tuple[dict, int]]:
    """Every (config, seed) of the Table 1 protocol part of the notebook, unique, costliest first."""
    grids = (table1_configs(plan), code_protocol_configs(plan), homogeneous_configs(plan), gamma_configs(plan))
    jobs = [(c, s) for g in grids for c in g.values() for s in plan.seeds] + [(pa_phase_config(plan), plan.seeds[0])]
    jobs += [(c, s) for ds in extra_datasets() for c in table1_configs(plan, ds).values() for s in plan.seeds]
    return study.unique_jobs(jobs, lambda cfg: cfg["train"]["rounds"]   # rounds x data, heterogeneous first
                             * (4 if cfg["model"]["name"].startswith("ht0") else 1))


def archived_tables() -> list[tuple[str, dict, list[int]]]:
    """The converged-profile tables the report reads: ``(name, configs, seeds)`` (:mod:`fedlib.papers.catalog`)."""
    cp = load_plan("converged")
    return [("ProtoNorm Table 1 (converged profile)", table1_configs(cp), cp.seeds),
            ("ProtoNorm code protocol (converged profile)", code_protocol_configs(cp), cp.seeds),
            ("ProtoNorm Table 3 (converged profile)", homogeneous_configs(cp), cp.seeds),
            ("ProtoNorm Tables 4-5 (converged profile)", gamma_configs(cp), cp.seeds),
            ("ProtoNorm spiral study (converged profile; its smallest angles derived from the trained models)",
             spiral_configs(cp), cp.seeds)]
