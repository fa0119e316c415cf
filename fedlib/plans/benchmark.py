"""The benchmark's plan: every registered method on the same settings, metric and budget (docs/benchmark.md,
sections 1-3): the settings section's schema, which method runs on which setting and why not, the run configs, the
anchor's runs and the profile's grid."""

from __future__ import annotations

import copy
import dataclasses

from fedlib import study
from fedlib.algorithms.checks import refusal, scored_by_prototype
from fedlib.study import schema
from fedlib.validation import ConfigError


SETTING_KEYS = ("label", "partition", "base", "methods", "only", "why_not", "not_run")


#: the rules of :func:`refusal` by which a setting's model refuses a method (a setting's ``why_not`` may word each)
REFUSALS = ("architecture", "level")


def check_settings(settings, field: str) -> None:
    """Checks the ``settings`` section (docs/benchmark.md, sections 1 and 3)."""
    for name, entry in schema._mapping(settings, field).items():
        where = f"{field}.{name}"
        schema._keys(schema._mapping(entry, where), where, SETTING_KEYS)
        if "base" in entry:
            schema.check_base(entry["base"], f"{where}.base")
        for method, own in entry.get("methods", {}).items():
            schema.check_methods({method: own}, f"{where}.methods")
        why = entry.get("why_not")
        if "only" in entry and not (isinstance(why, str) or isinstance(why, dict) and "default" in why):
            raise ConfigError(f"{where}.why_not", why, "a reason the other methods do not run (with `only`): a "
                              "string, or a mapping of methods to reasons with a `default`")
        if why is not None and not (isinstance(why, str) or isinstance(why, dict)
                                    and all(isinstance(v, str) for v in why.values())):
            raise ConfigError(f"{where}.why_not", why, "a reason (a string), or a mapping of methods or rules ("
                              + ", ".join(REFUSALS) + ") to reasons")


@dataclasses.dataclass
class Plan(study.TablePlan):
    """The benchmark under one profile; its methods are the profile's ``methods``."""

    paper = "benchmark"
    sections = {"settings": check_settings, "anchor": None}
    rows_key = "methods"
    method_names = study.TablePlan.table1_methods

    def setting_names(self) -> list[str]:
        return list(self.settings["settings"])

    def setting_seeds(self, setting: str) -> list[int]:
        """The setting's seeds: the profile's, or its own where a shared study fixes them (FedMPS: 1234-1236)."""
        return list(self.settings.get("setting_seeds", {}).get(setting, self.seeds))

    def section_seeds(self) -> str:
        """``seeds 0, 1, 2 (n=3; nway: 1234, 1235, 1236)``."""
        own = {s: v for s, v in self.settings.get("setting_seeds", {}).items() if s in self.setting_names()}
        return (f"seeds {', '.join(map(str, self.seeds))} (n={len(self.seeds)}"
                + "".join(f"; {s}: {', '.join(map(str, v))}" for s, v in own.items()) + ")")

    def setting_label(self, setting: str) -> str:
        return self.spec["settings"][setting]["label"]

    @classmethod
    def complete(cls, spec: dict) -> None:
        """``prototype_methods``, where the file does not fix it (:func:`scored_by_prototype`), in the file's order."""
        from fedlib.algorithms import ALGORITHMS

        if "prototype_methods" not in spec:
            spec["prototype_methods"] = [m for m, e in spec["methods"].items()
                                         if (c := ALGORITHMS.get(e.get("algorithm", {}).get("name"))) is not None
                                         and scored_by_prototype(c)]

    def why_not(self, method: str, setting: str) -> str | None:
        """Why ``method`` does not run on ``setting`` (None: it runs): ``not_run``, ``only``, else :meth:`refused`."""
        entry = self.spec["settings"][setting]
        if method in entry.get("not_run", {}):
            return entry["not_run"][method]
        why = entry.get("why_not")
        if "only" in entry:
            if method in entry["only"]:
                return None
            return why.get(method, why["default"]) if isinstance(why, dict) else why
        found = self.refused(method, setting)
        if found is None:
            return None
        rule, what, reason = found
        if isinstance(why, dict):
            why = why.get(method, why.get(rule, why.get("default")))
        return reason if why is None else why.replace("{level}", what)

    def refused(self, method: str, setting: str) -> tuple[str, str, str] | None:
        """:func:`refusal` of ``method`` (the setting's own entry of it replacing its entry) on ``setting``'s model."""
        from fedlib.algorithms import ALGORITHMS

        spec = self.spec["settings"][setting]
        entry = {**self.method_entry(method), **spec.get("methods", {}).get(method, {})}
        cls = ALGORITHMS.get(entry["algorithm"].get("name"))
        if cls is None:
            return None
        return refusal(cls, entry["algorithm"], entry.get("model", spec.get("base", self.spec["base"])["model"]))

    def setting_text(self) -> str:
        """What made the numbers, for every caption."""
        frac = self.settings["fraction"]
        data = "all of the data" if frac == 1 else f"{100 * frac:g}% of Fashion-MNIST (stratified)"
        full = self.settings.get("full_data")
        return (f"profile {self.profile}: {data}" + (f" ({', '.join(full)}: all of it)" if full else "")
                + f", {self.rounds} rounds, seeds {self.seeds}"
                + "".join(f" ({s}: {v})" for s, v in self.settings.get("setting_seeds", {}).items()))


def load_plan(profile: str = "quick", **options) -> Plan:
    """The plan of ``profile`` (:meth:`study.Plan.load` takes the ``options``)."""
    return Plan.load(profile, **options)


def config(plan: Plan, method: str, setting: str, full: bool = False, rounds: int | None = None,
           name: str | None = None, **changes) -> dict:
    """The validated config of ``method`` on ``setting`` (all of the data with ``full``; ``changes``: dotted keys)."""
    spec = plan.entry("settings", setting, "setting")
    entry = copy.deepcopy(plan.method_entry(method))
    entry.update(spec.get("methods", {}).get(method, {}))
    base = copy.deepcopy(spec.get("base", plan.spec["base"]))
    if not full and plan.settings["fraction"] != 1 and setting not in plan.settings.get("full_data", ()):
        base["dataset"] = {**base["dataset"], "fraction": plan.settings["fraction"]}
    return plan.config(entry, name or f"benchmark/{setting}/{method}", method=method, base=base,
                       partition=plan.spec["partitions"][spec["partition"]], rounds=rounds or plan.rounds,
                       changes=changes)


def configs(plan: Plan) -> dict[tuple[str, str], dict]:
    """``{(setting, method): config}`` for every setting and method of the profile that runs there."""
    return {(s, m): config(plan, m, s) for s in plan.setting_names() for m in plan.method_names()
            if plan.why_not(m, s) is None}


def anchor_configs(plan: Plan) -> dict[str, dict]:
    """The anchor's runs: its methods on its setting, all of the data, ``anchor_rounds`` (none where 0)."""
    rounds = plan.settings.get("anchor_rounds", 0)
    anchor = plan.spec["anchor"]
    return {m: config(plan, m, anchor["setting"], full=True, rounds=rounds, name=f"benchmark/anchor/{m}")
            for m in anchor["methods"]} if rounds else {}


def jobs(plan: Plan) -> list[tuple[dict, int]]:
    """Every (config, seed) of the profile, the anchor's included, costliest first (rounds x clients' data)."""
    out = [(c, s) for (setting, _), c in configs(plan).items() for s in plan.setting_seeds(setting)]
    out += [(c, plan.spec["anchor"]["seed"]) for c in anchor_configs(plan).values()]
    return study.unique_jobs(out, lambda c: c["train"]["rounds"] * c["dataset"].get("fraction", 1.0))


all_jobs = jobs   # the name every study gives its whole grid


def archived_tables() -> list[tuple[str, dict, list[int]]]:
    """The converged profile's runs the report reads, one table per setting and the anchor's."""
    cp = load_plan("converged")
    cfgs = configs(cp)
    return [(f"Benchmark {s} (converged profile)", {m: c for (t, m), c in cfgs.items() if t == s},
             cp.setting_seeds(s)) for s in cp.setting_names()] + [
        ("Benchmark anchor: all of Fashion-MNIST, Pat (converged profile)", anchor_configs(cp),
         [cp.spec["anchor"]["seed"]])]
