"""The plan of the privacy study (which runs it makes): its Plan subclass, the run configs and grids, every (config,
seed) of a profile and the tables the run archive keeps. Its tables and figures are drawn by
:mod:`fedlib.papers.privacy`."""

from __future__ import annotations

import copy
import dataclasses

from fedlib import study
from fedlib.algorithms import ALGORITHMS
from fedlib.config import read_yaml
from fedlib.privacy.dpsgd import DP_SGD_METHODS
from fedlib.study import check_methods
from fedlib.validation import ConfigError

IMAGE_ATTACKS = ("gradient_inversion", "feature_inversion", "decoder", "imprint")


CURVE_KINDS = ("mean", "kmeans", "gmm")


@dataclasses.dataclass
class Plan(study.TablePlan):
    """The privacy study under one profile; the leakage table's rows are the profile's ``methods``."""

    paper = "privacy"
    sections = {"defense": None, "dp_sgd": None}   # its own sections of experiments.yaml
    rows_key = "methods"
    table_methods = study.TablePlan.table1_methods

    @classmethod
    def complete(cls, spec: dict) -> None:
        """Add every registered method the file lacks, with its defaults and the benchmark's label, in name order."""
        named = {e.get("algorithm", {}).get("name", m) for m, e in spec["methods"].items()}
        new = [m for m in sorted(ALGORITHMS) if m not in named and m not in spec["methods"]
               and not m.startswith("user:")]   # a method file's, registered only for a call (loader.registered)
        if new:
            labels = read_yaml(study.PARAMS_ROOT / "benchmark" / "experiments.yaml", "benchmark/experiments.yaml")
            spec["methods"] |= {m: {"label": labels["methods"].get(m, {}).get("label", m), "algorithm": {"name": m}}
                                for m in new}


def check_spec(plan: Plan) -> None:
    """Check the study's own fields of the profile; a one-line :class:`ConfigError` naming the field otherwise."""
    s, where = plan.settings, f"privacy/experiments.yaml: profiles.{plan.profile}"
    if s["methods"] != "all":
        check_methods(s["methods"], plan.methods)
    for key, allowed in (("attacks", IMAGE_ATTACKS), ("curve_kinds", CURVE_KINDS),
                         ("utility_methods", tuple(plan.methods))):
        if not isinstance(s.get(key), list) or not s[key] or any(a not in allowed for a in s[key]):
            raise ConfigError(f"{where}.{key}", s.get(key), "a non-empty list of " + ", ".join(allowed))
    dp = s.get("dp_sgd_methods", [])
    if not isinstance(dp, list) or any(m not in DP_SGD_METHODS or m not in plan.methods for m in dp):
        raise ConfigError(f"{where}.dp_sgd_methods", dp, "a list of methods of this file that DP-SGD applies to: "
                          + ", ".join(DP_SGD_METHODS))
    if not isinstance(s.get("noise"), list) or not s["noise"] or any(
            isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 for v in s["noise"]):
        raise ConfigError(f"{where}.noise", s.get("noise"), "a non-empty list of noise multipliers >= 0")
    for key in ("attack_steps", "restarts", "batch1_images", "decoder_steps", "aux_images", "curve_groups"):
        study.check_value(f"{where}.{key}", s.get(key), study.POSITIVE_INT)
    sizes = s.get("curve_sizes")
    if not isinstance(sizes, list) or not sizes or any(not study.POSITIVE_INT.ok(n) for n in sizes):
        raise ConfigError(f"{where}.curve_sizes", sizes, "a non-empty list of positive integers")


def load_plan(profile: str = "quick", results_dir: str | None = None, data_root: str | None = None,
              methods: list[str] | None = None, seeds: list[int] | None = None, rounds: int | None = None,
              device: str | None = None, executor: str | None = None) -> Plan:
    """The plan of ``profile``; ``methods``, ``seeds`` and ``rounds`` override it (e.g. from the notebook)."""
    plan = Plan.load(profile, results_dir, data_root, seeds, device=device, executor=executor, methods=methods,
                     rounds=rounds)
    check_spec(plan)
    return plan


def config(plan: Plan, method: str, noise: float | None = None, dp_sgd: bool = False, **changes) -> dict:
    """The run config of ``method``; ``noise``: the defence's noise multiplier (None: none), on every upload or,
    with ``dp_sgd``, on each sample's gradient in local training."""
    base, name = copy.deepcopy(plan.spec["base"]), f"privacy-study/{method}"
    if noise is not None:
        mechanism = {"mechanism": "dp_sgd", **plan.spec["dp_sgd"]} if dp_sgd else plan.spec["defense"]
        base["defense"] = {**mechanism, "noise_multiplier": float(noise)}
        name += f"/{'dpsgd' if dp_sgd else 'noise'}{noise:g}"
    return plan.config(plan.method_entry(method), name, method=method, base=base, rounds=plan.rounds, changes=changes)


def table_configs(plan: Plan) -> dict[str, dict]:
    """The leakage table's runs: one per method of the profile, no defence."""
    return {m: config(plan, m) for m in plan.table_methods()}


def defense_configs(plan: Plan, dp_sgd: bool = False) -> dict[tuple[str, float], dict]:
    """The privacy-utility runs ``{(method, noise): config}`` of the upload defence (``dp_sgd``: of DP-SGD, for the
    ``dp_sgd_methods``); noise 0 is the leakage table's undefended run."""
    methods = plan.settings.get("dp_sgd_methods", []) if dp_sgd else plan.settings["utility_methods"]
    return {(m, float(s)): config(plan, m, None if s == 0 else float(s), dp_sgd=dp_sgd)
            for m in methods for s in plan.settings["noise"]}


def dp_sgd_configs(plan: Plan) -> dict[tuple[str, float], dict]:
    """The DP-SGD points of the privacy-utility curve (:func:`defense_configs`)."""
    return defense_configs(plan, dp_sgd=True)


def all_jobs(plan: Plan) -> list[tuple[dict, int]]:
    """Every (config, seed) of the study, unique, longest first."""
    jobs = [(c, s) for configs in (table_configs(plan), defense_configs(plan), dp_sgd_configs(plan))
            for c in configs.values() for s in plan.seeds]
    return study.unique_jobs(jobs, lambda cfg: cfg["train"]["rounds"] * cfg["partition"]["num_clients"])


def study_profile(profile: str) -> str:
    """The study's profile for a paper notebook's: the same where the study has it, else the paper profile."""
    return profile if profile in read_yaml(Plan.params_file())["profiles"] else "paper"


def archived_tables() -> list[tuple[str, dict, list[int]]]:
    """The paper-profile runs the report reads, archived with their derived values (attack scores, pictures, ...)."""
    pp = load_plan("paper")
    return [("Privacy leakage table (paper profile)", table_configs(pp), pp.seeds),
            ("Privacy-utility curve (paper profile)", {f"{m}/noise{s:g}": c for (m, s), c in
                                                       defense_configs(pp).items() if s > 0}
             | {f"{m}/dpsgd{s:g}": c for (m, s), c in dp_sgd_configs(pp).items() if s > 0}, pp.seeds)]
