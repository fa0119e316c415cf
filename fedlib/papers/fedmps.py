"""The FedMPS study (Yang et al., TNNLS 2025) on Fashion-MNIST: configs, tables, analyses.

``load_plan(profile)`` reads ``params/fedmps/experiments.yaml``; the ``*_configs``
functions give the validated experiment configs of each table and figure; the
remaining functions turn finished runs into numbers (Table III with Wilcoxon rank-sum
tests, Tables V-VII, time to a target accuracy) and into the inputs of the t-SNE,
prototype-distance and privacy figures.

Evaluation conventions (docs/fedmps.md, decision 11): the paper scores FedProto and
FedMPS by the nearest global prototype among the client's own classes
(``acc_proto_own``) and every other method by its head over all classes
(``acc_head``); the "common" convention scores every method by ``acc_head``.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import torch

from fedlib import claims, report, results, study
from fedlib.analysis import embed_2d, next_uploads, pairwise_distances, test_features  # noqa: F401 (re-exported)
from fedlib.claims import Cells, sample_std
from fedlib.config import run_id
from fedlib.data import FederatedData
from fedlib.data.partition import nway_kshot
from fedlib.data.sources import Dataset
from fedlib.privacy.attack import attacker_aux  # noqa: F401  (the notebook's S.attacker_aux)
from fedlib.study import check_methods, check_rounds
from fedlib.study.notebook import Shown
from fedlib.validation import ConfigError

run = results.train   # the notebook's grids: trained on the plan's own device and executor (S.run in the notebook)

PAPER_METRIC_PROTO = "acc_proto_own"
COMMON_METRIC = "acc_head"
TABLE6_BLOCKS = {3: "table6_block1", 4: "table6_block2"}  # Table VI's printed blocks by n (decision 12)


@dataclasses.dataclass
class Plan(study.Plan):
    """The FedMPS experiments under one profile."""

    paper = "fedmps"
    sections = {"ablation": None, "time_target": None}   # its own sections of experiments.yaml

    def selected(self, key: str) -> list[str]:
        value = self.settings[key]
        return self.methods if value == "all" else list(value)

    def ablation_seeds(self) -> list[int]:
        """Table VII's seeds: the profile's ``ablation_seeds`` (``all``: every seed of the profile, after a ``seeds``
        override; or a list of seeds), else its first seed, so that a profile without the setting keeps its one-seed
        runs and their run ids."""
        value = self.settings.get("ablation_seeds")
        if value is None:
            return self.seeds[:1]
        return self.seeds if value == "all" else study.check_seeds(value, f"{self.profile}.ablation_seeds")

    def paper_metric(self, method: str) -> str:
        """The paper's convention for ``method`` (see the module docstring; a variant follows its method)."""
        method = self.spec.get("variants", {}).get(method, {}).get("of", method)
        return PAPER_METRIC_PROTO if method in self.spec["prototype_methods"] else COMMON_METRIC

    def override(self, methods: list[str] | None = None, rounds: int | None = None) -> None:
        """``methods`` (Table III rows; the sweeps keep those of theirs that remain) and ``rounds``
        (every study) replace the profile's settings."""
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
    """The plan of ``profile``; ``methods`` (Table III rows), ``seeds`` and ``rounds`` (every
    study) override the profile's settings, ``device`` and ``executor`` place every run, e.g.
    from a notebook's parameters cell."""
    return Plan.load(profile, results_dir, data_root, seeds, device=device, executor=executor, methods=methods,
                     rounds=rounds)


def config(plan: Plan, method: str, rounds: str = "main", name: str | None = None, **changes) -> dict:
    """The validated config of ``method`` (a Table III method or a code-faithful variant) in this
    plan; ``changes`` are dotted overrides (``{"partition.ways": 4}``) applied after the
    profile's own overrides. A profile's ``method_changes`` rescale a schedule written for the
    paper's 100 rounds to the run's rounds in the short profiles (FedProc's CE ramp)."""
    variants = plan.spec.get("variants", {})
    if method not in plan.spec["methods"] and method not in variants:
        raise ConfigError("method", method, "one of " + ", ".join(plan.methods + list(variants)))
    entry = plan.method_entry(method, variant=method in variants)
    return plan.config(entry, name or f"fedmps-study/{method}", method=method,
                       rounds=plan.settings["rounds"][rounds], changes=changes)


def jobs(configs: dict, seeds: list[int] | None = None) -> list[tuple[dict, int]]:
    """(config, seed) pairs for :func:`fedlib.experiments.run_many`."""
    return [(cfg, s) for cfg in configs.values() for s in (seeds or cfg["seeds"])]


# -- the configs of each table and figure ----------------------------------------------
def table3_configs(plan: Plan) -> dict[str, dict]:
    """Table III: every method in the paper's setting (n = 3), all seeds of the profile."""
    return {m: config(plan, m) for m in plan.selected("table3_methods")}


def variant_configs(plan: Plan) -> dict[str, dict]:
    """Code-faithful variants of the profile on Table III's setting (run with the first seed)."""
    return {v: config(plan, v, name=f"fedmps-study/{v}") for v in plan.settings.get("variants", [])}


def ways_configs(plan: Plan) -> dict[tuple[str, int], dict]:
    """Table VI: n in the profile's ``ways``; one seed ("under the same random seed")."""
    return {(m, n): config(plan, m, name=f"fedmps-study/{m}/n{n}", **{"partition.ways": n})
            for m in plan.selected("sweep_methods") for n in plan.settings["ways"]}


def stdev_configs(plan: Plan) -> dict[tuple[str, int], dict]:
    """Fig. 8: FedProto and FedMPS under the noise std of n and k (values: docs/fedmps.md, decision 21)."""
    return {(m, s): config(plan, m, rounds="sweep", name=f"fedmps-study/{m}/std{s}", **{"partition.stdev": s})
            for m in ("fedproto", "fedmps") for s in plan.settings["stdev"]}


def clients_configs(plan: Plan) -> dict[tuple[str, int], dict]:
    """Fig. 9: the number of clients N."""
    return {(m, n): config(plan, m, rounds="sweep", name=f"fedmps-study/{m}/N{n}", **{"partition.num_clients": n})
            for m in plan.selected("sweep_methods") for n in plan.settings["clients"]}


def temperature_configs(plan: Plan) -> dict[tuple[str, float], dict]:
    """Fig. 10: FedMPS under tau1 (contrastive) and tau2 (soft-label) values."""
    out = {}
    for t in plan.settings["tau1"]:
        out[("tau1", t)] = config(plan, "fedmps", rounds="sweep", name=f"fedmps-study/fedmps/tau1={t}",
                                  **{"algorithm.tau1": float(t)})
    for t in plan.settings["tau2"]:
        out[("tau2", t)] = config(plan, "fedmps", rounds="sweep", name=f"fedmps-study/fedmps/tau2={t}",
                                  **{"algorithm.tau2": float(t)})
    return out


def ablation_configs(plan: Plan) -> dict[int, dict]:
    """Table VII: FedMPS with each loss term switched on or off (alpha, beta, mu = 0 or the
    Fashion-MNIST value)."""
    algo = plan.spec["methods"]["fedmps"]["algorithm"]
    out = {}
    for row in plan.spec["ablation"]:
        changes = {"algorithm.alpha": algo["alpha"] * row["low"], "algorithm.beta": algo["beta"] * row["high"],
                   "algorithm.mu": algo["mu"] * row["soft"]}
        out[row["row"]] = config(plan, "fedmps", rounds="ablation", name=f"fedmps-study/ablation{row['row']}",
                                 **changes)
    return out


def trend_groups(plan: Plan) -> dict:
    """``{key: (label, config, seeds, metric)}``: every run group a ledger comparison rests on, keyed as the ledger
    looks its trend up: ``("table3", m)`` (Table III, every seed, the paper's convention) and ``("table3_head", m)``
    (the same runs under the head over all classes), ``("time", m)`` (Table III, every seed: the time to target is
    read per seed), ``("attack",)`` (Table III's first seed: the attack reads its trained model), ``("ways", m, n)``
    (Table VI, first seed), ``("ablation", row)`` (Table VII, :meth:`Plan.ablation_seeds`), ``("stdev", m, std)``,
    ``("clients", m, N)`` and ``("tau", "tau1" | "tau2", value)`` (Figs. 8-10), those first seed."""
    L, seed0 = plan.label, plan.seeds[:1]
    out = {}
    for m, c in table3_configs(plan).items():
        out[("table3", m)] = (f"{L(m)} (Table III)", c, plan.seeds, plan.paper_metric(m))
        out[("table3_head", m)] = (f"{L(m)} (Table III, head)", c, plan.seeds, COMMON_METRIC)
        out[("time", m)] = (f"{L(m)} (Table III)", c, plan.seeds, plan.paper_metric(m))
        if m == "fedmps":
            out[("attack",)] = (f"{L(m)} (Table III, seed {seed0[0]})", c, seed0, plan.paper_metric(m))
    out.update({("ways", m, n): (f"{L(m)} n = {n}", c, seed0, plan.paper_metric(m))
                for (m, n), c in ways_configs(plan).items()})
    out.update({("ablation", row): (f"FedMPS ablation row {row}", c, plan.ablation_seeds(), PAPER_METRIC_PROTO)
                for row, c in ablation_configs(plan).items()})
    out.update({("stdev", m, s): (f"{L(m)} std {s}", c, seed0, plan.paper_metric(m))
                for (m, s), c in stdev_configs(plan).items()})
    out.update({("clients", m, n): (f"{L(m)} N = {n}", c, seed0, plan.paper_metric(m))
                for (m, n), c in clients_configs(plan).items()})
    out.update({("tau", t, x): (f"FedMPS {t} = {x:g}", c, seed0, PAPER_METRIC_PROTO)
                for (t, x), c in temperature_configs(plan).items()})
    return out


def trends(plan: Plan, keys=None, seeds: list[int] | None = None) -> dict:
    """``{key: Trend}`` (:func:`fedlib.papers.trend`) of the run groups of :func:`trend_groups` (``keys``: only
    those) that have a finished run (results folder, else the run archive; trains nothing), judged on the unweighted
    mean over clients (``stat="mean"``, the accuracy every FedMPS table reports) under each cell's rule. Each trend
    names its runs (:class:`fedlib.plateau.Group`), so that the evidence planner can give them more seeds.
    ``seeds``: the seeds a table actually read, in place of each group's own (a table shown on the seeds finished so
    far names those runs, so that the planner counts what it has)."""
    groups = trend_groups(plan)
    out = {}
    for key in groups if keys is None else [k for k in keys if k in groups]:
        label, cfg, own, metric = groups[key]
        t = study.trend(label, cfg, own if seeds is None else seeds, metric, "mean")
        if t is not None:
            out[key] = t
    return out


def _per_seed(v) -> list[float]:
    """A cell's per-seed values: a list as given, a single value (one seed) as a list of one."""
    return [float(x) for x in v] if isinstance(v, (list, tuple, np.ndarray)) else [float(v)]


def mean_std_n(values, digits: int = 2) -> str:
    """``84.21 ± 3.39 (n = 3)``: the mean and sample std (ddof 1) over seeds with their number; ``84.21 (n = 1)`` for
    one seed, ``—`` for none (NaN seeds left out)."""
    v = [float(x) for x in values if x is not None and not np.isnan(x)]
    if not v:
        return report.DASH
    return f"{report.fmt(float(np.mean(v)), sample_std(v), digits)} (n = {len(v)})"


# -- reading results -------------------------------------------------------------------
def paper_vs_ours(paper: dict, table: str | None, ours: dict):
    """``paper | [authors' code |] ours | diff`` for the Fashion-MNIST column: :func:`fedlib.report.compare`
    of paper.yaml's ``table`` (``None``: no paper block, ours alone) with ``ours`` (``{method: {"fmnist":
    value}}``), plus the reference runs of the authors' code where paper.yaml has them for ``table``
    (:func:`fedlib.report.reference_column`; docs/fedmps.md, decision 27)."""
    df = report.compare(paper["tables"][table] if table else {"rows": {}}, ours)
    return report.reference_column(df, paper, table, "fmnist") if table else df


def accuracy(summary: dict, metric: str, stat: str = "best") -> float:
    """A run's accuracy in % (``stat``: best or last round, mean over clients)."""
    return 100.0 * summary["metrics"][metric][stat]


def client_std(summary: dict, metric: str, stat: str = "best") -> float:
    """Std across clients (%) at the best or last round (Tables VI-VII report it)."""
    return 100.0 * summary["metrics"][metric][f"{stat}_std"]


def table3(plan: Plan, summaries: dict[str, list[dict]], metric: str | None = None) -> dict:
    """Table III rows ``{method: {"mean", "std", "per_seed", "p_vs_fedmps", "metric"}}``.

    ``summaries[method]`` holds one summary per seed. Mean and sample std (ddof 1,
    :func:`fedlib.claims.sample_std`) over seeds of the best-round accuracy (unweighted mean over
    clients); ``p_vs_fedmps`` is the exact two-sided Wilcoxon-Mann-Whitney rank-sum
    test against FedMPS (:func:`fedlib.claims.rank_sum_p`), ``None`` with fewer than two seeds. With
    3 vs 3 runs it cannot go below 0.10 (:func:`fedlib.claims.smallest_p`); the paper's p < 0.05
    with 3 vs 3 runs is the floor of the normal approximation (0.0495), not an exact p.
    ``metric=None`` uses the paper's convention per method.
    """
    from fedlib.claims import rank_sum_p

    rows = {}
    for m, runs in summaries.items():
        key = metric or plan.paper_metric(m)
        vals = np.array([accuracy(s, key) for s in runs])
        rows[m] = {"mean": float(vals.mean()), "std": sample_std(vals), "n": len(vals), "per_seed": vals.tolist(),
                   "metric": key}
    ref = rows.get("fedmps")
    for m, row in rows.items():
        row["p_vs_fedmps"] = None
        if ref is not None and m != "fedmps" and len(row["per_seed"]) > 1 and len(ref["per_seed"]) > 1:
            row["p_vs_fedmps"] = rank_sum_p(row["per_seed"], ref["per_seed"])
    return rows


def _paper_plan(plan: Plan) -> Plan:
    """The ``paper`` profile on ``plan``'s results folder, device kind and executor, with the
    methods ``plan`` selected (a short profile's report reads the paper profile's runs from it)."""
    pplan = Plan.load("paper", plan.results_dir, plan.data_root, device=plan.device, executor=plan.executor)
    pplan.override(methods=plan.selected("table3_methods"))
    return pplan


def paper_table3(plan: Plan) -> dict:
    """Table III under the ``paper`` profile from finished runs only (trains nothing), for a
    shorter profile's report: ``{"plan", "found", "total", "rows", "head", "made_by", "trends"}``, with
    ``rows``/``head`` (:func:`table3`, the paper's convention / head over all classes) over the
    methods whose every seed has finished, ``None`` while none has, and ``trends`` (:func:`trends`) of
    their run groups. The runs come from
    ``python -m fedlib.papers.fedmps --profile paper`` (or the paper profile's notebook) into the
    same results folder, on ``plan``'s device and executor or else another (:func:`fedlib.results.find`);
    a run the results folder lacks is read from the run archive (through :mod:`fedlib.results`)."""
    pplan = _paper_plan(plan)
    configs = table3_configs(pplan)
    done, found = results.cached(configs, pplan.seeds)
    out = {"plan": pplan, "found": found, "total": len(configs) * len(pplan.seeds), "rows": None, "head": None,
           "made_by": study.made_by(s for runs in done.values() for s in runs) if done else ""}
    if done:
        out["rows"], out["head"] = table3(pplan, done), table3(pplan, done, metric=COMMON_METRIC)
    out["trends"] = trends(pplan, [(part, m) for m in done for part in ("table3", "table3_head")])
    return out


def ways_rows(plan: Plan, summaries: dict[tuple[str, int], list[dict]]) -> dict[int, dict]:
    """Table VI: ``{n: {method: (accuracy, std across clients)}}`` at the best round under the
    paper's convention per method, from one seed's runs (:func:`ways_configs` keys)."""
    rows: dict[int, dict] = {}
    for (m, n), runs in summaries.items():
        key = plan.paper_metric(m)
        rows.setdefault(n, {})[m] = (accuracy(runs[0], key), client_std(runs[0], key))
    return rows


def paper_table6(plan: Plan) -> dict:
    """Table VI under the ``paper`` profile from finished runs only (trains nothing):
    ``{"plan", "found", "total", "rows", "missing", "made_by", "trends"}`` with ``rows`` (:func:`ways_rows`) over
    the methods finished so far for each n (the first seed, as the paper's "same random seed"; ``None``
    while none has), ``missing``: ``{n: [methods not finished]}`` and ``trends`` (:func:`trends`) of the finished
    runs. n = 3 is Table III's first seed."""
    pplan = _paper_plan(plan)
    configs, seed0 = ways_configs(pplan), pplan.seeds[0]
    done, found = results.cached(configs, [seed0])
    missing = {n: [m for m in pplan.selected("sweep_methods") if (m, n) not in done] for n in pplan.settings["ways"]}
    return {"plan": pplan, "found": found, "total": len(configs), "rows": ways_rows(pplan, done) or None,
            "missing": missing, "made_by": study.made_by(s for runs in done.values() for s in runs) if done else "",
            "trends": trends(pplan, [("ways", m, n) for m, n in done])}


def paper_table7(plan: Plan) -> dict:
    """Table VII under the ``paper`` profile from finished runs only (trains nothing):
    ``{"plan", "found", "total", "seeds", "rows", "made_by", "trends"}`` with ``rows`` (:func:`ablation_table`) and
    ``trends`` (:func:`trends`) over ``seeds``, the seeds of the profile's :meth:`Plan.ablation_seeds` on which every
    row has finished (``rows`` ``None`` while none has; row 6, every term on, is Table III's FedMPS run)."""
    pplan = _paper_plan(plan)
    configs, seeds = ablation_configs(pplan), pplan.ablation_seeds()
    _, found = results.cached(configs, seeds)
    done_seeds = study.finished_seeds(configs, seeds)
    done = results.cached(configs, done_seeds)[0] if done_seeds else {}
    return {"plan": pplan, "found": found, "total": len(configs) * len(seeds), "seeds": done_seeds,
            "rows": ablation_table(pplan, done, configs) if done else None,
            "made_by": study.made_by(s for runs in done.values() for s in runs) if done else "",
            "trends": trends(pplan, [("ablation", row) for row in done], done_seeds) if done else {}}


def ablation_table(plan: Plan, summaries: dict[int, list[dict]], configs: dict[int, dict]) -> dict[int, dict]:
    """Table VII rows: the paper's rule (nearest prototype, own classes) at the best round and at
    the last round, the head over all classes (the soft-label term acts on the head), each with
    the std across clients, and the mean soft-label loss l_soft over the rounds that had soft labels
    (``None`` where the term is off). Best-round selection alone can hide a term that only acts
    after round 1 (soft labels exist from round 2): the last-round columns show it.

    ``summaries[row]`` holds one summary per seed (every row on the same seeds, so the rows pair up by seed): each
    value is the mean over seeds (the std across clients too), ``per_seed`` holds the per-seed values of the
    accuracies (``proto_own_best``, ``proto_own_last``, ``head_best``, ``head_last``), ``seed_std`` the sample std
    (ddof 1) over seeds of ``proto_own_best`` (NaN with one seed), ``n`` and ``seeds`` the seeds, and ``best_round``
    the best round (a list per seed where there are several)."""
    rows = {}
    accs = ("proto_own_best", "proto_own_last", "head_best", "head_last")
    for row, runs in summaries.items():
        per = {k: [] for k in (*accs, "proto_own_best_std", "best_round", "l_soft_mean")}
        for s in runs:
            recs = results.rounds(configs[row], s["seed"])
            soft = [r["local"]["l_soft"] for r in recs if "l_soft" in r.get("local", {})]
            per["proto_own_best"].append(accuracy(s, PAPER_METRIC_PROTO))
            per["proto_own_best_std"].append(client_std(s, PAPER_METRIC_PROTO))
            per["best_round"].append(s["metrics"][PAPER_METRIC_PROTO]["best_round"])
            per["proto_own_last"].append(accuracy(s, PAPER_METRIC_PROTO, "last"))
            per["head_best"].append(accuracy(s, COMMON_METRIC))
            per["head_last"].append(accuracy(s, COMMON_METRIC, "last"))
            per["l_soft_mean"].append(float(np.mean(soft)) if soft else None)
        soft = [x for x in per["l_soft_mean"] if x is not None]
        rows[row] = {**{k: float(np.mean(per[k])) for k in (*accs, "proto_own_best_std")},
                     "best_round": per["best_round"][0] if len(runs) == 1 else per["best_round"],
                     "l_soft_mean": float(np.mean(soft)) if soft else None,
                     "per_seed": {k: per[k] for k in accs}, "seed_std": sample_std(per["proto_own_best"]),
                     "n": len(runs), "seeds": [s["seed"] for s in runs]}
    return rows


def time_to_target(records: list[dict], metric: str, target: float) -> dict:
    """Rounds and cumulative training+evaluation seconds until ``metric`` first reaches
    ``target`` (a fraction); ``None`` when it never does (FedMPS Fig. 5)."""
    elapsed = 0.0
    for r in records:
        elapsed += r["seconds"]
        if "acc" in r and r["acc"][metric]["mean"] >= target:
            return {"round": r["round"], "seconds": elapsed}
    return {"round": None, "seconds": None}


def seconds_per_round(records: list[dict]) -> float:
    """Median wall seconds of the local training + aggregation of a round (round 1 skipped
    when there are more, since it includes warm-up)."""
    vals = [r["train_seconds"] for r in records[1:] or records]
    return float(np.median(vals))


# -- prototypes of a finished run (features, uploads, distances: fedlib.analysis) ----------
def global_prototypes(state: results.RunState, level: str = "high") -> tuple[np.ndarray, np.ndarray]:
    """(classes, prototypes) the server holds for ``level`` (FedProto: its only level)."""
    msg = state.message(0)
    key = level if level in msg else "protos"
    return msg["classes"].numpy(), msg[key].numpy()


# -- Table V in the paper's CIFAR-10 setting (labels and shapes only) --------------------
def cifar10_shaped(seed: int = 1234, shots: int = 2) -> FederatedData:
    """CIFAR-10's label layout (5,000 train / 1,000 test images per class) with constant
    3x32x32 images, partitioned as in FedMPS Table II (n = 3, std 1, 20 clients).

    Communication counts depend on the model and on which classes each client holds,
    not on the pixels or on k, so a 2-shot partition gives the paper's counts
    (n_list is drawn before k_list from the same seed) at a fraction of the cost.
    """
    y_tr = torch.arange(10).repeat(5000)
    y_te = torch.arange(10).repeat(1000)
    img = torch.zeros(1, 3, 32, 32)
    ds = Dataset("cifar10-shaped", img.expand(len(y_tr), -1, -1, -1), y_tr, img.expand(len(y_te), -1, -1, -1),
                 y_te, 10, "CIFAR-10 label layout with constant images (communication counts only)")
    part = nway_kshot(y_tr.numpy(), y_te.numpy(), 10, num_clients=20, ways=3, shots=shots, stdev=1,
                      block=110, test_shots=1, seed=seed)
    return FederatedData(ds, part)


def communication_cifar10(plan: Plan, methods: list[str] | None = None) -> dict[str, dict]:
    """Parameters per round measured from the messages of two rounds of every method on the
    CIFAR-10 setting with the CNN of MOON/FedMPS (62,006 parameters).

    Returns ``{method: {"up": ..., "down": ...}}`` from round 2 (round 1 has no global
    knowledge to send for the prototype methods).
    """
    from fedlib.algorithms import make_algorithm
    from fedlib.algorithms.base import Context, TrainSettings
    from fedlib.engine import Simulator

    data = cifar10_shaped()
    out = {}
    with results.one_thread():
        for m in methods or plan.methods:
            ctx = Context(num_classes=10, input_shape=(3, 32, 32), num_clients=20, model_name="cnn_cifar",
                          model_args={}, train=TrainSettings(local_epochs=1), seed=1234)
            algo = make_algorithm(plan.spec["methods"][m]["algorithm"])
            recs = Simulator(algo, ctx, data, rounds=2, progress=False).run()
            out[m] = {"up": recs[1]["up_params"], "down": recs[1]["down_params"],
                      "up_bytes": recs[1]["up_bytes"], "down_bytes": recs[1]["down_bytes"]}
    return out


def archived_tables() -> list[tuple[str, dict, list[int]]]:
    """The paper-profile tables the report reads: ``(name, configs, seeds)`` (:mod:`fedlib.papers.catalog`)."""
    pp = load_plan("paper")
    return [("FedMPS Table III (paper profile)", table3_configs(pp), pp.seeds),
            ("FedMPS Table VI (paper profile)", ways_configs(pp), pp.seeds[:1]),
            ("FedMPS Table VII (paper profile)", ablation_configs(pp), pp.ablation_seeds())]


@study.command
def main(argv: list[str] | None = None) -> int:
    """``python -m fedlib.papers.fedmps [--profile P] [--table III|VI|VII] [--methods M ...] [--seeds S ...]
    [--rounds N]``: run one table headless (no notebook) and print paper | ours | diff. Table III runs
    every seed of the profile; Table VI its first seed (the paper's "same random seed"); Table VII the profile's
    ``ablation_seeds`` (the paper profile: every seed; else the first)."""
    parser = study.add_retrain_archived(study.cli("python -m fedlib.papers.fedmps", main.__doc__))
    parser.add_argument("--table", default="III", choices=["III", "VI", "VII"],
                        help="III (default: every method, every seed), VI (n = 3, 4, 5) or VII (the loss ablation)")
    args = parser.parse_args(argv)

    def obtain(*a, **kw):  # a finished run (another device, the run archive) is read, not retrained; at the
        # paper's rounds: Table III's runs are the benchmark's nway runs, which an evidence step may extend elsewhere
        return results.run_or_read(*a, retrain_archived=args.retrain_archived, longest=False, **kw)

    plan = Plan.load(args.profile, seeds=args.seeds, rounds=args.rounds, device=args.device, executor=args.executor)
    if args.methods:
        methods = check_methods(args.methods, plan.methods)
        plan.settings["table3_methods"] = plan.settings["sweep_methods"] = methods
    full = report.load_paper("fedmps")
    seed0, R = plan.seeds[0], plan.settings["rounds"]
    if args.table == "VI":
        rows = ways_rows(plan, obtain(ways_configs(plan), seeds=[seed0], workers=args.workers, desc="Table VI"))
        for n, ours in sorted(rows.items()):
            print(f"FedMPS Table VI, n = {n}, profile {args.profile}: {R['main']} rounds, seed {seed0}; best round, "
                  "mean ± std across clients (%)")
            df = paper_vs_ours(full, TABLE6_BLOCKS.get(n), {m: {"fmnist": v} for m, v in ours.items()})
            df.index = [plan.label(m) for m in df.index]
            print(report.to_markdown(df))
        return 0
    if args.table == "VII":
        configs, seeds = ablation_configs(plan), plan.ablation_seeds()
        rows = ablation_table(plan, obtain(configs, seeds=seeds, workers=args.workers, desc="Table VII"), configs)
        print(f"FedMPS Table VII (Fashion-MNIST; the paper's is CIFAR-10), profile {args.profile}: {R['ablation']} "
              f"rounds, seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}; nearest prototype among own "
              "classes, best and last round; head, last round (%)" + ("; mean over seeds, per-seed values in brackets"
                                                                       if len(seeds) > 1 else ""))
        for row, r in rows.items():
            soft = "—" if r["l_soft_mean"] is None else f"{r['l_soft_mean']:.4f}"
            each = (" [" + ", ".join(f"{x:.2f}" for x in r["per_seed"]["proto_own_best"]) + "]") if r["n"] > 1 else ""
            print(f"({row}) best {r['proto_own_best']:.2f}{each} (round {r['best_round']}), gain over (1) "
                  f"{r['proto_own_best'] - rows[1]['proto_own_best']:+.2f}; last {r['proto_own_last']:.2f}; head "
                  f"{r['head_last']:.2f}; mean l_soft {soft}")
        return 0
    configs = table3_configs(plan)
    rows = table3(plan, obtain(configs, workers=args.workers, desc="Table III"))
    head = table3(plan, obtain(configs, workers=args.workers, progress=False), metric=COMMON_METRIC)
    df = paper_vs_ours(full, "table3", {m: {"fmnist": (r["mean"], r["std"], r["n"])} for m, r in rows.items()})
    df["rule"] = [rows[m]["metric"] if m in rows else "" for m in df.index]
    df["ours, head all classes"] = [report.fmt(head[m]["mean"], head[m]["std"], n=head[m]["n"]) if m in head else "—"
                                    for m in df.index]
    df["p vs FedMPS"] = [f"{rows[m]['p_vs_fedmps']:.3g}" if rows.get(m, {}).get("p_vs_fedmps") is not None else "—"
                         for m in df.index]
    df.index = [plan.label(m) for m in df.index]
    print(f"FedMPS Table III, Fashion-MNIST, profile {args.profile}: {R['main']} rounds, "
          f"seeds {plan.seeds}; best round, unweighted mean over clients (%)")
    print(report.to_markdown(df))
    return 0


def all_jobs(plan: Plan) -> list[tuple[dict, int]]:
    """Every (config, seed) the notebook needs, longest first (rounds x local epochs x
    clients x ways, a proxy for cost), so parallel workers stay busy until the end."""
    seed0 = plan.seeds[0]
    jobs_ = jobs(table3_configs(plan))
    for configs, seeds in ((variant_configs(plan), [seed0]), (ways_configs(plan), [seed0]),
                           (ablation_configs(plan), plan.ablation_seeds()), (stdev_configs(plan), [seed0]),
                           (clients_configs(plan), [seed0]), (temperature_configs(plan), [seed0])):
        jobs_ += [(c, s) for c in configs.values() for s in seeds]
    unique = {}
    for cfg, seed in jobs_:
        unique.setdefault(run_id(cfg, seed), (cfg, seed))

    def cost(job):
        cfg = job[0]
        p, t = cfg["partition"], cfg["train"]
        return t["rounds"] * t["local_epochs"] * p.get("num_clients", 20) * p.get("ways", 3)

    return sorted(unique.values(), key=cost, reverse=True)


def local_prototypes_by_class(uploads: dict[int, dict], level: str = "high") -> dict[int, list[tuple[int, np.ndarray]]]:
    """``{class: [(client, local prototype), ...]}`` from uploads (FedMPS ``high``/``low``,
    FedProto ``protos``)."""
    owners: dict[int, list] = {}
    for cid, up in uploads.items():
        rows = up[level] if level in up else up["protos"]
        for i, c in enumerate(up["classes"].tolist()):
            owners.setdefault(c, []).append((cid, rows[i].numpy()))
    return owners



# The notebook (notebooks/fedmps.py): one function per cell, each adding its table or figure to the report section
# and returning it; ``nb`` is the notebook's state (:class:`fedlib.study.notebook.Notebook`), ``nb.paper`` the whole
# params/fedmps/paper.yaml.

def notebook(profile: str, methods=None, seeds=None, rounds=None, workers=None, embedding: str = "tsne",
             device=None, backend=None):
    """The set-up cell (:func:`fedlib.study.notebook.open_notebook`): returns the notebook state the other cells
    take, ``nb.paper`` the whole params/fedmps/paper.yaml."""
    from fedlib.study.notebook import open_notebook

    def about(plan):
        R = plan.settings["rounds"]
        return (f"{R['main']} (sweeps {R['sweep']}, ablation {R['ablation']})", config(plan, "fedmps")["device"],
                f"profile {profile!r}: rounds {R}, seeds {plan.seeds}, profile overrides {plan.settings['overrides']}")

    return open_notebook("fedmps", load_plan, profile, about, backend=backend, workers=workers, embedding=embedding,
                         reference=None, methods=methods, seeds=seeds, rounds=rounds, device=device)


def introduction(nb) -> None:
    """The report section's opening paragraph: the setting of the Fashion-MNIST column and the profile."""
    R = nb.plan.settings["rounds"]
    nb.section.text(
        "Fashion-MNIST column of FedMPS (Table II partition: 20 clients, n = 3, k = 100, |A_ij| = 110, t = 15, "
        "std 2; FedProto's CNN; SGD lr 0.01, momentum 0.5, batch 8, 1 local epoch). "
        f"Profile `{nb.profile}`: rounds {R}, seeds {nb.plan.seeds}. Accuracy = best round of the unweighted mean over "
        "clients (%). Paper numbers are reference data (params/fedmps/paper.yaml); *ours* come from runs of this "
        "suite." + (" **Quick/smoke runs are far shorter than the paper's: their numbers are not converged.**"
                    if nb.profile != "paper" else ""))


def _partition(nb):
    """The Table II partition of Table III's FedMPS run, first seed."""
    return nb.once("partition", lambda: results.build(config(nb.plan, "fedmps"), nb.seed0)[0].partition)


def _pairs(nb) -> int:
    """The (client, class) pairs of the partition."""
    return int((_partition(nb).counts > 0).sum())


def fig3(nb):
    """Fig. 3 (e): training samples per client and class of the Fashion-MNIST partition."""
    import matplotlib.pyplot as plt

    from fedlib import plots

    fig, ax = plt.subplots(figsize=(10, 3.8))
    plots.partition_heatmap(_partition(nb), ax=ax, title=f"Fashion-MNIST, n = 3, std 2, 20 clients (seed {nb.seed0})")
    return nb.figure(fig, "Fig. 3 (e): training samples per client (x) and class (y)", "fig3_partition")


def check_partition(nb) -> None:
    """Print the partition's classes per client, (client, class) pairs and client 0's classes."""
    part = _partition(nb)
    print("classes per client:", [len(part.classes(c)) for c in range(part.num_clients)])
    print("(client, class) pairs:", _pairs(nb))
    print("client 0 classes:", part.classes(0).tolist())


def _communication_cifar(nb) -> dict:
    plan = nb.plan
    return nb.once("comm_cifar", lambda: communication_cifar10(plan, plan.selected("table3_methods")))


def print_table5(nb) -> None:
    """Print Table V's measured parameters per round, up and down, of the Table III rows (CIFAR-10 setting)."""
    for m, c in _communication_cifar(nb).items():
        print(f"{nb.label(m):9} up {c['up']:>10,}   down {c['down']:>10,}")


def show_table5(nb):
    """Table V (CIFAR-10 setting): parameters per round, paper vs measured in the paper's direction."""
    comm = _communication_cifar(nb)
    direction = {m: ("down" if m == "fedgkd" else "up") for m in comm}
    df = report.compare(nb.paper["tables"]["table5"], {m: {"params": c[direction[m]]} for m, c in comm.items()},
                        digits=0)
    df["our direction"] = [direction.get(m, "") for m in df.index]
    df["ours down"] = [f"{comm[m]['down']:,}" if m in comm else "-" for m in df.index]
    return nb.table("**Table V (CIFAR-10 setting): parameters per round, paper vs measured.** FedMPS: the paper's "
                    "30,780 = our uplink 30,680 + one 10 x 10 soft-label table; our downlink sends each client all "
                    "global prototypes (400 + 120) and soft labels (10) per class.", df)


def _table3(nb) -> dict:
    """Table III's runs and rows under the paper's convention and under the head over all classes."""
    def make():
        runs = run(table3_configs(nb.plan), workers=nb.workers, desc="Table III")
        return {"runs": runs, "rows": table3(nb.plan, runs), "head": table3(nb.plan, runs, metric=COMMON_METRIC)}
    return nb.once("table3", make)


def _table3_columns(df, rows: dict, head: dict) -> None:
    """Add Table III's last columns to ``df`` (indexed by method): the Wilcoxon p against FedMPS, and ours under
    the head over all classes."""
    df["p vs FedMPS"] = [("—" if rows.get(m, {}).get("p_vs_fedmps") is None else f"{rows[m]['p_vs_fedmps']:.3g}")
                         for m in df.index]
    df["ours, head over all classes"] = [report.fmt(head[m]["mean"], head[m]["std"], n=head[m]["n"]) if m in head
                                         else "—" for m in df.index]


def show_table3(nb):
    """Table III (Fashion-MNIST): accuracy of the eight methods under the paper's convention and under the head
    over all classes, with the Wilcoxon rank-sum p against FedMPS."""
    t3 = _table3(nb)
    rows3, head3 = t3["rows"], t3["head"]
    ours = {m: {"fmnist": (r["mean"], r["std"], r["n"])} for m, r in rows3.items()}
    df3 = report.short_run(paper_vs_ours(nb.paper, "table3", ours), nb.profile)
    df3["rule (paper's convention)"] = [rows3[m]["metric"] if m in rows3 else "" for m in df3.index]
    _table3_columns(df3, rows3, head3)
    df3.index = [nb.label(m) for m in df3.index]
    nb.section.record(table3=rows3, table3_head=head3)
    return nb.table("**Table III (Fashion-MNIST): accuracy (%), mean ± std over seeds; paper's evaluation convention, "
                    "and the head over all classes for every method.**", df3)


def _uplinks(nb) -> dict:
    """Each Table III method's measured uplink per round (Fashion-MNIST)."""
    t3 = _table3(nb)["runs"]
    return {m: t3[m][0]["comm_per_round"]["up_params"] for m in t3}


def check_table3(nb) -> None:
    """Print Table III's checks: no two methods share a code path, prototype methods upload less, the prototype
    uplinks match the (client, class) pairs."""
    rows3, fm_comm = _table3(nb)["rows"], _uplinks(nb)
    proto_methods = [m for m in ("fedproto", "fedmps") if m in fm_comm]
    param_methods = [m for m in fm_comm if m not in proto_methods]
    print("every method's accuracy differs from FedMPS's (no two methods share one code path):",
          all(rows3[m]["per_seed"] != rows3["fedmps"]["per_seed"] for m in rows3 if m != "fedmps"))
    print("prototype methods upload fewer parameters than every parameter method:",
          max(fm_comm[m] for m in proto_methods) < min([fm_comm[m] for m in param_methods], default=float("inf")))
    print("FedProto uploads one 1568-d prototype per (client, class) pair:", fm_comm["fedproto"] == 1568 * _pairs(nb))
    print("FedMPS uploads (3136 + 1568) per pair:", fm_comm["fedmps"] == (3136 + 1568) * _pairs(nb))


def show_conventions(nb):
    """Table III's methods under four evaluation conventions, with the rank under two of them."""
    L, t3 = nb.label, _table3(nb)
    runs, rows3, head3 = t3["runs"], t3["rows"], t3["head"]
    conv = pd.DataFrame({
        "paper's convention": {L(m): rows3[m]["mean"] for m in rows3},
        "head, all classes": {L(m): head3[m]["mean"] for m in head3},
        "head, own classes": {L(m): np.mean([accuracy(s, "acc_head_own") for s in runs[m]]) for m in runs},
        "nearest prototype, all classes": {L(m): np.mean([accuracy(s, "acc_proto") for s in runs[m]])
                                           for m in runs if "acc_proto" in runs[m][0]["metrics"]},
    }).round(2)
    conv["rank (paper)"] = conv["paper's convention"].rank(ascending=False).astype(int)
    conv["rank (head, all)"] = conv["head, all classes"].rank(ascending=False).astype(int)
    return nb.table("**Evaluation conventions (Fashion-MNIST, mean over seeds, %).** The paper's rule restricts the "
                    "prototype methods to each client's 2-5 classes; the head over all classes is one common rule.",
                    conv)


def _paper_protocol(nb, key: str, load):
    return nb.once(key, lambda: load(nb.plan))


def _from_paper_runs(roman: str, load, flag: str = ""):
    """A cell that shows Table ``roman`` under the paper protocol from the paper profile's finished runs (trains
    nothing): it gets ``(nb, data)``, or returns what :meth:`~fedlib.study.notebook.Notebook.paper_protocol`
    says where this profile is the paper protocol or nothing has finished."""
    import functools

    def wrap(fn):
        @functools.wraps(fn)
        def cell(nb):
            data, early = nb.paper_protocol(f"Table {roman}", f"paper_{load.__name__.removeprefix('paper_')}", load,
                                            lambda d: d["rows"], "python -m fedlib.papers.fedmps --profile paper"
                                            + flag)
            return early if early is not None else fn(nb, data)
        return cell
    return wrap


@_from_paper_runs("III", paper_table3, "")
def paper_protocol_table3(nb, pt3):
    """Table III under the paper protocol, from the paper profile's finished runs (trains nothing)."""
    rows = pt3["rows"]
    df = paper_vs_ours(nb.paper, "table3", {m: {"fmnist": (r["mean"], r["std"], r["n"])} for m, r in rows.items()})
    _table3_columns(df, rows, pt3["head"])
    df.index = [nb.label(m) for m in df.index]
    missing = [nb.label(m) for m in table3_configs(pt3["plan"]) if m not in pt3["rows"]]
    return nb.markdown(f"**Table III under the paper protocol (profile `paper`: "
                       f"{pt3['plan'].settings['rounds']['main']} rounds, seeds {pt3['plan'].seeds}), from finished "
                       f"runs: {pt3['found']} of {pt3['total']}; {pt3['made_by']}.**"
                       + (f" Not finished yet: {', '.join(missing)}." if missing else "")
                       + "\n\n" + report.to_markdown(df))


def show_variants(nb):
    """Paper-faithful vs code-faithful: each variant's accuracy beside its paper-faithful Table III row (first
    seed)."""
    plan, L, seed0, t3 = nb.plan, nb.label, nb.seed0, _table3(nb)["runs"]
    rows = {}
    for v, runs in run(variant_configs(plan), seeds=[seed0], workers=nb.workers, desc="variants").items():
        of = plan.spec["variants"][v]["of"]
        key = plan.paper_metric(of)
        ref = [s for s in t3.get(of, []) if s["seed"] == seed0]
        rows[L(v)] = {"paper-faithful": round(accuracy(ref[0], key), 2) if ref else float("nan"),
                      "code-faithful": round(accuracy(runs[0], key), 2), "rule": key, "seed": seed0}
        rows[L(v)]["code minus paper"] = round(rows[L(v)]["code-faithful"] - rows[L(v)]["paper-faithful"], 2)
    return nb.table(f"**Paper-faithful vs code-faithful (Table III setting, seed {seed0}, best round, %).**",
                    pd.DataFrame(rows).T)


def _curves_all(nb) -> dict:
    """Table III's round records of every seed of the profile, ``{method: [records per seed]}`` (the plan's seed
    order), wherever each run finished (:func:`fedlib.results.rounds`: the results folder, another placement or the
    run archive), after :func:`_table3` has trained or read them."""
    def make():
        _table3(nb)
        return {m: [results.rounds(cfg, s) for s in nb.plan.seeds] for m, cfg in table3_configs(nb.plan).items()}
    return nb.once("curves_all", make)


def fig4(nb):
    """Fig. 4: mean client accuracy per round, under the paper's convention and under the head over all
    classes: the seed-mean curve of every seed of the profile, with a band of ± the sample std over seeds."""
    import matplotlib.pyplot as plt

    from fedlib.plots import curve_panel

    per, seeds = _curves_all(nb), nb.plan.seeds
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    curve_panel(axes[0], per, nb.plan.paper_metric, nb.label)
    curve_panel(axes[1], per, lambda m: COMMON_METRIC, nb.label)
    axes[0].set_ylabel("accuracy (%), paper's convention")
    axes[1].set_ylabel("accuracy (%), head over all classes")
    which = f"seed {seeds[0]}" if len(seeds) == 1 else f"mean ± std over seeds {', '.join(map(str, seeds))} " \
                                                        f"(n = {len(seeds)})"
    axes[0].set_title(f"Fig. 4 (e) Fashion-MNIST, {which}")
    axes[1].set_title("same runs, one common rule")
    return nb.figure(fig, "Fig. 4: mean client accuracy per round (left: paper's convention; right: head over all "
                     "classes)" + ("" if len(seeds) == 1 else f"; mean over {len(seeds)} seeds, band ± sample std"),
                     "fig4_accuracy_per_round")


def times_to_target(plan: Plan, records: dict[str, list[list[dict]]]) -> dict[str, list[dict]]:
    """Per method, the time to the profile's target accuracy (:func:`time_to_target`) of each seed's run
    (``records``: ``{method: [records per seed]}``), under the method's paper convention."""
    target = plan.spec["time_target"]
    return {m: [time_to_target(recs, plan.paper_metric(m), target) for recs in per] for m, per in records.items()}


def _time_to_target(nb) -> dict:
    """Per method, the time to the profile's target accuracy of every seed's run (:func:`times_to_target`)."""
    return nb.once("time", lambda: times_to_target(nb.plan, _curves_all(nb)))


def _rounds_cell(times: list[dict], never: int) -> str:
    """Rounds to the target over seeds: ``2.33 ± 0.58 (n = 3)``; a seed that never reached it counts as ``never``
    rounds (a lower bound, marked ``≥``); ``never (n = 3)`` where none did."""
    got = [t["round"] for t in times]
    if all(r is None for r in got):
        return f"never (n = {len(got)})"
    text = mean_std_n([never if r is None else r for r in got])
    return ("≥ " + text) if None in got else text


def fig5(nb):
    """Fig. 5: seconds per round and time to the target accuracy of every method (every seed of the profile: mean ±
    sample std over seeds, with n, and the rounds of each seed); returns the figure and its numbers."""
    import matplotlib.pyplot as plt

    target, tt_all, per = nb.plan.spec["time_target"], _time_to_target(nb), _curves_all(nb)
    never, pct, seeds = nb.plan.settings["rounds"]["main"] + 1, f"{100 * target:.0f}%", nb.plan.seeds
    spr = {m: [seconds_per_round(recs) for recs in per[m]] for m in tt_all}
    secs = {m: [np.nan if t["seconds"] is None else t["seconds"] for t in v] for m, v in tt_all.items()}
    timing = pd.DataFrame({
        nb.label(m): {"s per round (median)": mean_std_n(spr[m]),
                      f"rounds to {pct}": _rounds_cell(tt_all[m], never),
                      f"rounds to {pct}, per seed": ", ".join("never" if t["round"] is None else str(t["round"])
                                                             for t in tt_all[m]),
                      f"seconds to {pct} (seeds that reached it)": mean_std_n(secs[m])}
        for m in tt_all}).T
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.6))
    x, names = np.arange(len(tt_all)), [nb.label(m) for m in tt_all]
    err = [np.nan_to_num([sample_std(v) if len(v) > 1 else 0.0 for v in d.values()]) for d in (spr, secs)]
    axes[0].bar(x, [np.mean(v) for v in spr.values()], yerr=err[0], color="tab:blue", capsize=3)
    axes[0].set_ylabel("seconds per round")
    tt = np.array([np.nanmean(v) if not np.isnan(v).all() else np.nan for v in secs.values()])
    axes[1].bar(x, np.nan_to_num(tt), yerr=err[1], color="tab:orange", capsize=3)
    axes[1].set_ylabel(f"seconds until {pct} (paper's convention)")
    for i, v in enumerate(tt):
        if np.isnan(v):
            axes[1].text(i, 0, "not reached", rotation=90, ha="center", va="bottom", fontsize=8)
    for ax in axes:
        ax.set_xticks(x, names, rotation=90)
    fig.suptitle("Fig. 5: training time (2 CPU cores, parallel single-thread runs: timings include contention)"
                 + ("" if len(seeds) == 1 else f"; mean ± std over {len(seeds)} seeds"))
    nb.figure(fig, f"Fig. 5: seconds per round and time to {pct} accuracy", "fig5_time")
    nb.section.text(f"**Fig. 5 numbers** (seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}: mean ± "
                    f"sample std over seeds, n seeds; a seed that never reached {pct} counts as {never} rounds, a "
                    "lower bound marked ≥).\n\n" + report.to_markdown(timing))
    return Shown((fig, timing))


TABLE6_NOTES = {4: " (paper block 2: n label uncertain)", 5: " (no paper block)"}


def _ways(nb) -> dict:
    """Table VI: per n, per method, (accuracy, std across clients) at the best round, first seed."""
    def make():
        out = {}
        for (m, n), runs in run(ways_configs(nb.plan), seeds=[nb.seed0], workers=nb.workers, desc="Table VI").items():
            s, key = runs[0], nb.plan.paper_metric(m)
            out.setdefault(n, {})[m] = {"fmnist": (accuracy(s, key), client_std(s, key))}
        return out
    return nb.once("ways", make)


def show_table6(nb):
    """Table VI: accuracy per average number of classes per client n, paper | ours | diff, one block per n."""
    tables = {}
    for n, ours in _ways(nb).items():
        df = report.short_run(paper_vs_ours(nb.paper, TABLE6_BLOCKS.get(n), ours), nb.profile)
        df.index = [nb.label(m) for m in df.index]
        tables[n] = nb.table(f"**Table VI, n = {n}{TABLE6_NOTES.get(n, '')}: accuracy (%) mean ± std across "
                             f"clients, seed {nb.seed0}.**", df)
    return pd.concat(tables, names=["n"])


@_from_paper_runs("VI", paper_table6, " --table VI")
def paper_protocol_table6(nb, pt6):
    """Table VI under the paper protocol: per n, the methods finished so far (trains nothing)."""
    pp6 = pt6["plan"]
    text = (f"**Table VI under the paper protocol (profile `paper`: {pp6.settings['rounds']['main']} rounds, "
            f"seed {pp6.seeds[0]}), from finished runs: {pt6['found']} of {pt6['total']}; {pt6['made_by']}.**"
            + "".join(f" n = {n}: not finished yet: {', '.join(nb.label(m) for m in left)}." if n in pt6["rows"]
                      else f" n = {n}: no run finished yet." for n, left in pt6["missing"].items() if left))
    for n, ours in sorted(pt6["rows"].items()):
        df = paper_vs_ours(nb.paper, TABLE6_BLOCKS.get(n), {m: {"fmnist": v} for m, v in ours.items()})
        df.index = [nb.label(m) for m in df.index]
        partial = " (not every method has finished)" if pt6["missing"][n] else ""
        text += (f"\n\n**Table VI, paper protocol, n = {n}{TABLE6_NOTES.get(n, '')}: accuracy (%) mean ± std across "
                 f"clients{partial}.**\n\n" + report.to_markdown(df))
    return nb.markdown(text)


def _ablation(nb) -> dict:
    """Table VII's rows (:func:`ablation_table`) over the plan's :meth:`Plan.ablation_seeds` (those whose every row is
    archived, where the report is rendered from the archive alone)."""
    def make():
        cfgs = ablation_configs(nb.plan)
        seeds = study.seeds_at_hand(cfgs, nb.plan.ablation_seeds())
        return ablation_table(nb.plan, run(cfgs, seeds=seeds, workers=nb.workers, desc="Table VII"), cfgs)
    return nb.once("ablation", make)


def _table7_rows(nb, rows7: dict, paper_column: bool = True):
    """Table VII as shown, one row per ablation row: the paper's gain over row (1) and ours. With one seed, ours are
    that seed's values, ± the std across clients; with several, the mean ± the sample std over seeds (n), the gain
    over row (1) the mean ± std of the per-seed (paired) gains, and the std across clients in a column of its own."""
    comp, prow7 = nb.paper["tables"]["table7"]["components"], nb.paper["tables"]["table7"]["rows"]
    by_number, paper_base = {v["number"]: k for k, v in comp.items()}, prow7["sup"]["acc"][0]
    table = {}
    for row, r in rows7.items():
        k = by_number[row]
        many = r.get("n", 1) > 1
        if many:
            ps, base = r["per_seed"], rows7[1]["per_seed"]["proto_own_best"]
            gains = [a - b for a, b in zip(ps["proto_own_best"], base, strict=True)]
            ours = {"ours: best round": mean_std_n(ps["proto_own_best"]),
                    "our gain over (1)": f"{report.fmt(float(np.mean(gains)), sample_std(gains), sign=True)}",
                    "ours: last round": mean_std_n(ps["proto_own_last"]),
                    "ours: head, last round": mean_std_n(ps["head_last"]),
                    "std across clients, best round": f"{r['proto_own_best_std']:.2f}"}
        else:
            ours = {"ours: best round": report.fmt(r["proto_own_best"], r["proto_own_best_std"]),
                    "our gain over (1)": f"{r['proto_own_best'] - rows7[1]['proto_own_best']:+.2f}",
                    "ours: last round": f"{r['proto_own_last']:.2f}",
                    "ours: head, last round": f"{r['head_last']:.2f}"}
        best_round = r["best_round"]
        table[f"({row}) low {comp[k]['con_low']} high {comp[k]['con_high']} soft {comp[k]['soft']}"] = {
            **({"paper (CIFAR-10)": report.fmt(*prow7[k]["acc"])} if paper_column else {}),
            "paper gain over (1)" + ("" if paper_column else ", CIFAR-10"): f"{prow7[k]['acc'][0] - paper_base:+.2f}",
            **ours,
            **({"best round": ", ".join(map(str, best_round)) if isinstance(best_round, list) else best_round}
               if paper_column else {}),
            "mean l_soft": "—" if r["l_soft_mean"] is None else f"{r['l_soft_mean']:.4f}"}
    return pd.DataFrame(table).T


def _seeds_text(rows7: dict) -> str:
    """``seed 1234; mean ± std across clients`` or ``seeds 1234, 1235, 1236 (n = 3); mean ± sample std over seeds``:
    what Table VII's numbers are."""
    seeds = next(iter(rows7.values())).get("seeds") or []
    if len(seeds) > 1:
        return (f"seeds {', '.join(map(str, seeds))} (n = {len(seeds)}); mean ± sample std over seeds, the std across "
                "clients (mean over seeds) in its own column")
    return f"seed {seeds[0] if seeds else '?'}; mean ± std across clients"


def show_table7(nb):
    """Table VII, the loss-component ablation on Fashion-MNIST beside the paper's CIFAR-10 gains over row (1)."""
    R, rows7 = nb.plan.settings["rounds"], _ablation(nb)
    return nb.table("**Table VII: FedMPS loss ablation (%). Paper: CIFAR-10; ours: Fashion-MNIST, "
                    f"{R['ablation']} rounds, {_seeds_text(rows7)}.** No difference is taken "
                    "between the two datasets: compare the gains over row (1). The paper's rule picks the best round, "
                    "which hides a term that acts only from round 2 on (soft labels exist after the first aggregation) "
                    "or only on the head: the last round, the head and the logged soft-label loss show what the term "
                    "does.", _table7_rows(nb, rows7))


def check_table7(nb) -> None:
    """Print Table VII's check: the rows that log a soft-label loss are the soft-label rows."""
    rows7, comp = _ablation(nb), nb.paper["tables"]["table7"]["components"]
    by_number = {v["number"]: k for k, v in comp.items()}
    soft_rows = sorted(row for row in rows7 if comp[by_number[row]]["soft"])
    logged = sorted(row for row, r in rows7.items() if r["l_soft_mean"] is not None and r["l_soft_mean"] > 0)
    print("the rows that log a soft-label loss are the soft-label rows (from round 2 on):",
          logged == (soft_rows if nb.plan.settings["rounds"]["ablation"] > 1 else []))


@_from_paper_runs("VII", paper_table7, " --table VII")
def paper_protocol_table7(nb, pt7):
    """Table VII under the paper protocol, over the seeds on which all six rows have finished (trains nothing)."""
    pp7 = pt7["plan"]
    left = [s for s in pp7.ablation_seeds() if s not in pt7["seeds"]]
    return nb.markdown(f"**Table VII under the paper protocol (profile `paper`: {pp7.settings['rounds']['ablation']} "
                       f"rounds, {_seeds_text(pt7['rows'])}; Fashion-MNIST), from finished runs: {pt7['found']} of "
                       f"{pt7['total']}; {pt7['made_by']}.**"
                       + (f" Seed{'s' if len(left) > 1 else ''} {', '.join(map(str, left))}: not every row has "
                          "finished yet." if left else "") + "\n\n"
                       + report.to_markdown(_table7_rows(nb, pt7["rows"], paper_column=False)))


def _sweeps(nb):
    """Figs. 8-10's runs, first seed; returns ``acc_of(key, method)``, the accuracy of one of them under the
    method's paper rule."""
    def make():
        sweeps = {}
        for kind, cfgs in (("std", stdev_configs(nb.plan)), ("N", clients_configs(nb.plan)),
                           ("tau", temperature_configs(nb.plan))):
            sweeps.update({(kind, *k): c for k, c in cfgs.items()})
        return run(sweeps, seeds=[nb.seed0], workers=nb.workers, desc="Figs. 8-10")
    sw = nb.once("sweeps", make)
    return lambda key, method: accuracy(sw[key][0], nb.plan.paper_metric(method))


def fig8_10(nb):
    """Figs. 8-10: accuracy over the noise std, over the number of clients, and over FedMPS's temperatures; returns
    the figure and Fig. 10's sensitivity (std of accuracy across the temperature grid) beside the paper's."""
    import matplotlib.pyplot as plt

    plan, L, acc_of, R = nb.plan, nb.label, _sweeps(nb), nb.plan.settings["rounds"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
    for m in ("fedproto", "fedmps"):
        xs = plan.settings["stdev"]
        axes[0].plot(xs, [acc_of(("std", m, s), m) for s in xs], marker="o", label=L(m))
    axes[0].set_xlabel("noise std of n and k")
    axes[0].set_title("Fig. 8: accuracy vs std")
    for m in plan.selected("sweep_methods"):
        xs = plan.settings["clients"]
        axes[1].plot(xs, [acc_of(("N", m, n), m) for n in xs], marker="o", label=L(m))
    axes[1].set_xlabel("clients N")
    axes[1].set_title("Fig. 9: accuracy vs number of clients")
    for t, ax_label in (("tau1", "tau1 (contrastive)"), ("tau2", "tau2 (soft labels)")):
        xs = plan.settings[t]
        axes[2].plot(range(len(xs)), [acc_of(("tau", t, x), "fedmps") for x in xs], marker="o", label=ax_label)
        for i, x in enumerate(xs):
            axes[2].annotate(f"{x:g}", (i, acc_of(("tau", t, x), "fedmps")), fontsize=7)
    axes[2].set_xlabel("grid position (value annotated)")
    axes[2].set_title("Fig. 10: FedMPS temperature sensitivity")
    for ax in axes:
        ax.set_ylabel("accuracy (%), paper's convention")
        ax.legend(fontsize=8)
    fig.suptitle(f"Fashion-MNIST, {R['sweep']} rounds, seed {nb.seed0}")
    nb.figure(fig, "Figs. 8-10: accuracy vs noise std, number of clients, and FedMPS temperatures", "fig8_10_sweeps")
    sens = {}
    for t in ("tau1", "tau2"):
        vals = [acc_of(("tau", t, x), "fedmps") for x in plan.settings[t]]
        sens[t] = {"fedmps": {"fmnist": float(np.std(vals)) if len(vals) > 1 else float("nan")}}
    df10 = pd.concat({t: report.short_run(report.compare(nb.paper["tables"][f"{t}_sensitivity"], sens[t]), nb.profile)
                      for t in ("tau1", "tau2")}, names=["temperature"])
    nb.table("**Fig. 10 sensitivity: std (%) of FedMPS accuracy across the temperature grid.**", df10)
    return Shown((fig, df10))


def _states(nb) -> dict:
    """Every Table III method's trained state, first seed."""
    return nb.once("states", lambda: {m: results.state(cfg, nb.seed0) for m, cfg in table3_configs(nb.plan).items()})


def fig6(nb):
    """Fig. 6: t-SNE (or UMAP) of the high-level test features of every method, all clients pooled."""
    import matplotlib.pyplot as plt

    from fedlib import plots

    n_pts, states = nb.plan.settings["tsne_points"], _states(nb)
    fig, axes = plt.subplots(2, (len(states) + 1) // 2, figsize=(4 * ((len(states) + 1) // 2), 8), squeeze=False)
    for ax in axes.flat[len(states):]:
        ax.set_visible(False)
    for ax, (m, st) in zip(axes.flat, states.items(), strict=False):
        f = test_features(st, "high", max_points=n_pts, seed=0)
        plots.embedding_scatter(embed_2d(f["z"], nb.embedding), f["y"], ax=ax, title=nb.label(m), num_classes=10)
    axes.flat[0].legend(fontsize=6, markerscale=3, ncol=2, title="class")
    fig.suptitle(f"Fig. 6: {nb.embedding.upper()} of high-level test features, all clients pooled ({n_pts} points)")
    return nb.figure(fig, f"Fig. 6: {nb.embedding} of the high-level test features of every method", "fig6_embedding")


def fig7(nb):
    """Fig. 7: t-SNE (or UMAP) of the attacked client's test features, FedProto vs FedMPS."""
    import matplotlib.pyplot as plt

    from fedlib import plots

    target = nb.plan.spec["attack"]["client"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 4))
    for ax, m in zip(axes, ("fedproto", "fedmps"), strict=False):
        f = test_features(_states(nb)[m], "high", clients=[target])
        plots.embedding_scatter(embed_2d(f["z"], nb.embedding), f["y"], ax=ax, num_classes=10,
                                title=f"{nb.label(m)}: client {target + 1} ({len(f['y'])} test images)")
    axes[0].legend(fontsize=7, markerscale=3, title="class")
    return nb.figure(fig, f"Fig. 7: {nb.embedding} of client {target + 1}'s test features, FedProto vs FedMPS",
                     "fig7_client_embedding")


def fig_distances(nb):
    """Prototype-distance heatmaps of FedProto and FedMPS: the global high-level prototypes, and the local
    prototypes of the most held class; returns the figure and its numbers."""
    import matplotlib.pyplot as plt

    from fedlib import plots

    fig, axes = plt.subplots(2, 2, figsize=(11, 9))
    summary = {}
    for row, m in enumerate(("fedproto", "fedmps")):
        st, L = _states(nb)[m], nb.label
        classes, protos = global_prototypes(st, "high")
        D = pairwise_distances(protos)
        plots.distance_heatmap(D, classes.tolist(), ax=axes[row, 0], title=f"{L(m)}: global prototypes")
        owners = local_prototypes_by_class(next_uploads(st))
        c_star = max(owners, key=lambda c: (len(owners[c]), -c))
        cids, P = zip(*owners[c_star], strict=False)
        Dl = pairwise_distances(np.stack(P))
        plots.distance_heatmap(Dl, [c + 1 for c in cids], ax=axes[row, 1],
                               title=f"{L(m)}: local prototypes of class {c_star} (clients)")
        off = ~np.eye(len(D), dtype=bool)
        summary[L(m)] = {"global: min distance": D[off].min(), "global: mean distance": D[off].mean(),
                         f"local (class {c_star}): mean distance": Dl[~np.eye(len(Dl), dtype=bool)].mean()}
    nb.figure(fig, "Prototype distances: global prototypes (left), one class's local prototypes (right)",
              "prototype_distances")
    df = nb.table("**Prototype distances (high level).**", pd.DataFrame(summary).T.round(3))
    return Shown((fig, df))


def _attack(nb):
    """Fig. 11's attack on the attacked client's FedMPS prototypes (:func:`fedlib.privacy.prototype_attack`)."""
    from fedlib.data.sources import MNIST_MEAN, MNIST_STD
    from fedlib.privacy import prototype_attack

    def make():
        atk, st = nb.plan.spec["attack"], _states(nb)["fedmps"]
        target = atk["client"]
        up = next_uploads(st, clients=[target])[target]
        aux_x, aux_y = attacker_aux(st, target, atk["aux_images"], seed=0)
        private = st.data.train[target]
        return prototype_attack(st.model(target), aux_x, {"low": up["low"], "high": up["high"]}, up["classes"],
                                aux_y=aux_y, client_x=private.x, client_y=private.y,
                                steps=nb.plan.settings["attack_steps"], batch_size=atk["batch_size"], lr=atk["lr"],
                                seed=0, mean=MNIST_MEAN, std=MNIST_STD)
    return nb.once("attack", make)


def fig11(nb):
    """Fig. 11: the client's classes reconstructed from its FedMPS prototypes and the decoders' loss curves;
    returns the figure and the PSNR / SSIM scores."""
    from fedlib.privacy import attack_figure

    attack, target = _attack(nb), nb.plan.spec["attack"]["client"]
    fig = nb.figure(attack_figure(attack), f"Fig. 11: reconstructions of client {target + 1}'s classes from its "
                    f"FedMPS prototypes ({nb.plan.settings['attack_steps']} decoder steps) and the decoders' loss "
                    "curves", "fig11_attack")
    table = attack.summary().round(3)
    nb.section.text("**Fig. 11 scores: PSNR (dB) / SSIM of reconstructions vs client 1's private images of the "
                    "class.**\n\n" + report.to_markdown(table.set_index(["source", "levels"])))
    return Shown((fig, table))


def show_summary(nb):
    """The summary: FedMPS vs FedProto against the paper, the best parameter-sharing method, the attack's SSIM,
    what the profile means."""
    rows3, head3 = _table3(nb)["rows"], _table3(nb)["head"]
    L, R, T, attack = nb.label, nb.plan.settings["rounds"], nb.paper["tables"], _attack(nb)
    fm, fp = rows3["fedmps"], rows3["fedproto"]
    paper_fm, paper_fp = T["table3"]["rows"]["fedmps"]["fmnist"][0], T["table3"]["rows"]["fedproto"]["fmnist"][0]
    lines = [f"FedMPS {fm['mean']:.2f} vs FedProto {fp['mean']:.2f} (paper {paper_fm} vs {paper_fp}): FedMPS "
             f"{'>=' if fm['mean'] >= fp['mean'] else '<'} FedProto; gaps to the paper {fm['mean'] - paper_fm:+.2f} "
             f"and {fp['mean'] - paper_fp:+.2f} points ({R['main']} rounds, seeds {nb.plan.seeds})."]
    best_param = max(((r["mean"], m) for m, r in rows3.items() if m not in ("fedmps", "fedproto")), default=None)
    if best_param:
        below = best_param[0] < min(fm["mean"], fp["mean"])
        lines.append(f"Best parameter-sharing method: {L(best_param[1])} {best_param[0]:.2f}, "
                     f"{'below' if below else 'NOT below'} both prototype methods under the paper's convention; "
                     f"under one common rule (head over all classes) the order is "
                     + " > ".join(L(m) for m in sorted(head3, key=lambda m: -head3[m]["mean"])) + ".")
    ssim = attack.summary().set_index(["source", "levels"])["ssim"]
    lines.append("Attack (Fig. 11): mean SSIM of the reconstructions from client 1's prototypes "
                 + ", ".join(f"{lv} {ssim[('prototype', lv)]:.3f}" for lv in attack.runs)
                 + (f"; the attacker's own class-average image scores {ssim[('class_average', '-')]:.3f}"
                    if ("class_average", "-") in ssim.index else "")
                 + (f"; decoding single private images' features {ssim[('single_sample', 'low+high')]:.3f}"
                    if ("single_sample", "low+high") in ssim.index else "") + ".")
    if nb.profile != "paper":
        lines.append(f"Profile `{nb.profile}`: {R['main']} rounds (paper: 100), seeds {nb.plan.seeds}; the numbers are "
                     "not converged. Paper protocol: `python -m fedlib reproduce --profile paper` (hours on a CPU), "
                     "or Table III alone: `python -m fedlib.papers.fedmps --profile paper`.")
    text = "\n".join(f"- {x}" for x in lines)
    nb.section.text("**Summary.**\n\n" + text)
    from IPython.display import Markdown

    return Markdown(text)


def show_ledger(nb):
    """The claims ledger: every claim the paper makes about Fashion-MNIST-sized settings, our evidence and a
    verdict; writes the report section. Each part is left out where it needs a run or a trained model that the run
    archive lacks while the report is rendered from the archive alone (:meth:`~fedlib.study.notebook.Notebook.part`):
    the ledger then judges the claims whose evidence it has. Every comparison carries the trends of its two sides
    (:func:`trends`), which name the runs behind it."""
    plan, part = nb.plan, nb.part
    acc_of = part(lambda: _sweeps(nb))
    t3 = part(lambda: _table3(nb))
    pt3, pt6, pt7 = (_paper_protocol(nb, f"paper_{k}", f) for k, f in
                     (("table3", paper_table3), ("table6", paper_table6), ("table7", paper_table7)))
    res = {"table3": t3 and t3["rows"], "table3_head": t3 and t3["head"], "comm": t3 and _uplinks(nb),
           "ways": part(lambda: {n: {m: v["fmnist"][0] for m, v in rows.items()} for n, rows in _ways(nb).items()}),
           "ablation": part(lambda: _ablation(nb)), "time": part(lambda: _time_to_target(nb)),
           "attack": part(lambda: _attack(nb).summary()), "comm_cifar10": _communication_cifar(nb),
           "table3_paper": pt3 if pt3["found"] == pt3["total"] else None,
           "ways_paper": pt6 if pt6["found"] == pt6["total"] else None, "ablation_paper": pt7}
    if acc_of is not None:
        tau = {t: {x: acc_of(("tau", t, x), "fedmps") for x in plan.settings[t]} for t in ("tau1", "tau2")}
        res.update(stdev={s: {m: acc_of(("std", m, s), m) for m in ("fedproto", "fedmps")}
                          for s in plan.settings["stdev"]},
                   clients={n: {m: acc_of(("N", m, n), m) for m in plan.selected("sweep_methods")}
                            for n in plan.settings["clients"]},
                   tau=tau, tau_std={t: float(np.std(list(v.values()))) for t, v in tau.items()})  # across each grid
    res = {k: v for k, v in res.items() if v is not None}
    res["trends"] = dict(nb.once("trends", lambda: trends(plan)))
    if res.get("ablation"):   # Table VII's rows name the seeds they were read on
        res["trends"].update(trends(plan, [("ablation", row) for row in res["ablation"]],
                                    _row_seeds(res["ablation"]) or None))
    return nb.ledger(ledger(plan, res), record=False)

if __name__ == "__main__":
    raise SystemExit(main())


# -- the claims ledger ---------------------------------------------------------------------------
def ledger(plan: Plan, res: dict) -> list:
    """FedMPS's claims (``params/fedmps/claims.yaml``) with our evidence and a verdict each, judged by the claims
    engine (:func:`fedlib.claims.evaluate`, every verdict by :func:`fedlib.claims.verdict`) on :func:`tables`.

    ``res`` holds what the notebook computed (each key optional; a missing one leaves its claims
    out or "not tested"): ``table3`` / ``table3_head`` (:func:`table3` rows), ``comm`` (uplink parameters
    per round per method, Fashion-MNIST runs), ``ways`` (``{n: {method: accuracy}}``), ``ablation``
    (:func:`ablation_table`, one seed or several), ``comm_cifar10`` (:func:`communication_cifar10`), ``time``
    (``{method: [time_to_target per seed]}``, :func:`times_to_target`; or ``{method: time_to_target}``, one seed),
    ``stdev`` and ``clients``
    (``{value: {method: accuracy}}``; also ``[accuracy per seed]``), ``tau_std`` (``{"tau1": std, "tau2": std}`` of
    FedMPS's accuracy in points across each grid, or ``[std per seed]``), ``tau`` (``{"tau1": {value: accuracy}}``:
    which grid runs set the spread), ``attack`` (the attack's summary frame), ``trends`` (:func:`trends`: where the
    curves of the runs behind each cell stand; each comparison carries the trends of its two sides, so that the
    evidence planner knows which runs need more seeds), and the paper protocol's parts under a shorter profile
    (``table3_paper``, ``ways_paper``, ``ablation_paper``: :func:`paper_table3`, :func:`paper_table6`,
    :func:`paper_table7`, each with its own ``trends``). The time to target is read on every seed of Table III and
    Table VII on the profile's ``ablation_seeds`` (the paper profile: every seed), each compared per seed, paired;
    Table VI, the sweeps and the attack run one seed: their claims rest on one comparison per value (one seed:
    inconclusive under any profile); traffic counts are exact.
    """
    return claims.ledger("fedmps", tables(plan, res))


def tables(plan: Plan, res: dict) -> dict:
    """The tables FedMPS's claims (``params/fedmps/claims.yaml``) read, by name (:class:`fedlib.claims.Cells`; None
    where ``res``, as :func:`ledger` takes it, lacks them), every cell with the trend of its runs (``res["trends"]``),
    and under a shorter profile the paper protocol's (:func:`_paper_tables`)."""
    R, seeds, prof = plan.settings["rounds"], plan.seeds, plan.profile
    short = prof != "paper"
    caveat = "short runs: not converged" if short else ""
    tr = res.get("trends") or {}
    where = f"{prof} profile, {R['main']} rounds, seed{'s' if len(seeds) > 1 else ''} {seeds}"
    out = {**_table3_tables(plan, prof, res.get("table3"), res.get("table3_head"), where, caveat, len(seeds), tr),
           "comm_cifar10": _comm_table(plan, {m: c["up"] for m, c in (res.get("comm_cifar10") or {}).items()}),
           "comm": _comm_table(plan, res.get("comm")),
           "ways": _ways_table(plan, prof, res.get("ways"), f"seed {seeds[0]}", caveat, tr),
           "ablation": _ablation_claim_table(prof, res.get("ablation"), caveat, tr),
           "time": _time_table(plan, res.get("time"), R["main"], caveat, tr),
           "stdev": _sweep_table(plan, "stdev", res.get("stdev"), R["sweep"], caveat, tr),
           "clients": _sweep_table(plan, "clients", res.get("clients"), R["sweep"], caveat, tr),
           "tau": _tau_table(plan, res.get("tau_std"), res.get("tau") or {}, caveat, tr),
           "attack": _attack_table(plan, res.get("attack"), tr)}
    return {**out, **_paper_tables(plan, res if short else {})}


def _paper_tables(plan: Plan, res: dict) -> dict:
    """The paper protocol's tables beside a shorter profile's (``*_paper``; None where ``res`` lacks them): Table III
    (``table3_paper``), Table VI (``ways_paper``, first seed) and Table VII (``ablation_paper``, on the seeds its rows
    were read on), each with the paper profile's rounds and seeds and its own trends."""
    pp, pw, pa = res.get("table3_paper"), res.get("ways_paper"), res.get("ablation_paper")
    out = dict.fromkeys(("table3_paper", "table3_head_paper", "ways_paper", "ablation_paper"))
    if pp:
        pseeds = pp["plan"].seeds
        got = _table3_tables(plan, "paper", pp["rows"], pp["head"], f"paper profile, "
                             f"{pp['plan'].settings['rounds']['main']} rounds, seeds {pseeds}", "", len(pseeds),
                             pp.get("trends") or {})
        out.update(table3_paper=got["table3"], table3_head_paper=got["table3_head"])
    if pw and pw.get("rows"):
        pr = pw["plan"]
        acc = {n: {m: v[0] for m, v in row.items()} for n, row in pw["rows"].items()}
        out["ways_paper"] = _ways_table(plan, "paper", acc, f"paper profile, {pr.settings['rounds']['main']} rounds, "
                                        f"seed {pr.seeds[0]}", "", pw.get("trends") or {})
    if pa and pa.get("rows"):
        pr = pa["plan"]
        seeds = _seeds_words(pa.get("seeds") or _row_seeds(pa["rows"]) or pr.seeds[:1])
        out["ablation_paper"] = _ablation_claim_table("paper", pa["rows"], f"paper profile, "
                                                      f"{pr.settings['rounds']['ablation']} rounds, {seeds}",
                                                      pa.get("trends") or {})
    return out


def _table3_tables(plan: Plan, profile: str, t3: dict | None, head: dict | None, where: str, caveat: str,
                   n_seeds: int, tr: dict) -> dict:
    """Table III's tables from :func:`table3` rows: ``table3`` under the paper's convention (a cell's ``std``, ``p``
    against FedMPS, trend ``("table3", m)``) and ``table3_head`` under the head over all classes (``("table3_head",
    m)``), the verdicts counting the profile's ``n_seeds``; ``where`` (the profile, rounds and seeds) as text."""
    def table(rows, key):
        return Cells({m: {"label": plan.label(m), "value": r["mean"], "std": r.get("std"), "per_seed": r["per_seed"],
                          "p": r.get("p_vs_fedmps"), "trend": tr.get((key, m))} for m, r in rows.items()},
                     profile, caveat, seeds=n_seeds, text={"where": where}) if rows else None

    return {"table3": table(t3, "table3"), "table3_head": table(head, "table3_head")}


def _comm_table(plan: Plan, up: dict | None):
    """Table V's table (``up``: uplink floats per round per method): FedMPS and the methods that share the model
    (FedProto left out), exact counts."""
    if not up:
        return None
    cells = {m: {"label": plan.label(m), "value": v} for m, v in up.items() if m != "fedproto"}
    return Cells(cells, plan.profile, seeds=len(plan.seeds))


def _ways_table(plan: Plan, profile: str, ways: dict | None, where: str, caveat: str, tr: dict):
    """Table VI's table (``ways``: ``{n: {method: accuracy or [per seed]}}``): a cell per (n, method), labelled with its
    n (``FedMPS (n = 3)``; ``name`` without), its trend ``("ways", m, n)``; the seeds the fewest of any cell."""
    if not ways:
        return None
    cells = {}
    for n, row in ways.items():
        for m, a in row.items():
            per = _per_seed(a)
            cells[(n, m)] = {"label": f"{plan.label(m)} (n = {n})", "name": plan.label(m), "value": float(np.mean(per)),
                             "per_seed": per, "n": len(per), "trend": tr.get(("ways", m, n))}
    return Cells(cells, profile, caveat, seeds=min(c["n"] for c in cells.values()), text={"where": where})


def _ablation_claim_table(profile: str, abl: dict | None, caveat: str, tr: dict):
    """Table VII's table from :func:`ablation_table` rows: per row its best-round accuracy (value, per seed: a row's
    ``per_seed`` values, else its one value), last-round (``last``) and head (``head``) means, trend ``("ablation",
    row)``; ``over`` says the means are over several seeds."""
    if not abl:
        return None

    def seeds_of(r, key):
        return _per_seed((r.get("per_seed") or {}).get(key, r[key]))

    cells = {row: {"label": str(row), "value": float(np.mean(seeds_of(r, "proto_own_best"))),
                   "per_seed": seeds_of(r, "proto_own_best"), "n": len(seeds_of(r, "proto_own_best")),
                   "last": float(np.mean(seeds_of(r, "proto_own_last"))),
                   "head": float(np.mean(seeds_of(r, "head_last"))), "trend": tr.get(("ablation", row))}
             for row, r in abl.items()}
    over = " (mean over seeds)" if min(c["n"] for c in cells.values()) > 1 else ""
    return Cells(cells, profile, caveat, text={"over": over})


def _time_table(plan: Plan, tt: dict | None, rounds: int, caveat: str, tr: dict):
    """The time to target's table (``tt``: ``{method: [time_to_target per seed]}``, every method on the same seeds, or
    one ``time_to_target`` per method: one seed): per method the rounds per seed, a seed that never reached the target
    counted as ``rounds + 1`` (``censored``, a lower bound), their mean, whether any seed ``reached`` it, its trend
    ``("time", m)`` and its printed ``text`` (``FedGKD 89/never/never (mean ≥ 97.0)``)."""
    if not tt:
        return None
    per = {m: list(v) if isinstance(v, (list, tuple)) else [v] for m, v in tt.items()}
    never, n = rounds + 1, min(len(v) for v in per.values())
    cells = {}
    for m, v in per.items():
        got = [never if t["round"] is None else t["round"] for t in v]
        missed = [t["round"] is None for t in v]
        text = f"{plan.label(m)} " + "/".join("never" if x else str(t["round"]) for x, t in zip(missed, v, strict=True))
        if len(v) > 1 and not all(missed):   # a never counts as rounds + 1: the mean is a lower bound
            text += f" (mean {'≥ ' if any(missed) else ''}{float(np.mean(got)):.1f})"
        cells[m] = {"label": plan.label(m), "value": float(np.mean(got)), "per_seed": got, "n": len(v),
                    "reached": not all(missed), "censored": any(missed), "trend": tr.get(("time", m)), "text": text}
    return Cells(cells, plan.profile, caveat, seeds=n,
                 text={"per_seed": f" per seed (n = {n})" if n > 1 else "", "never": never})


def _sweep_table(plan: Plan, key: str, sweep: dict | None, rounds: int, caveat: str, tr: dict):
    """Fig. 8's (``key`` ``stdev``) or Fig. 9's (``clients``) table (``sweep``: ``{value: {method: accuracy or [per
    seed]}}``): a cell per (value, method) with the swept value ``x`` and the trend ``(key, m, value)``."""
    if not sweep:
        return None
    cells = {(k, m): {"label": plan.label(m), "value": float(np.mean(_per_seed(a))), "per_seed": _per_seed(a),
                      "n": len(_per_seed(a)), "x": k, "trend": tr.get((key, m, k))}
             for k, row in sweep.items() for m, a in row.items()}
    return Cells(cells, plan.profile, caveat, text={"rounds": rounds})


def _tau_table(plan: Plan, tau_std: dict | None, grid: dict, caveat: str, tr: dict):
    """Fig. 10's table (``tau_std``: ``{"tau1": std, "tau2": std}`` in points, or per-seed lists): per temperature its
    std (the mean over seeds, ``std``; ``value``: over the seeds that have one) and the trends of the grid's lowest
    and highest runs (``grid``: ``{"tau1": {value: accuracy}}``)."""
    if not tau_std:
        return None
    cells = {}
    for t, s in tau_std.items():
        v = _per_seed(s)
        acc = grid.get(t) or {}
        lo, hi = (min(acc, key=acc.get), max(acc, key=acc.get)) if acc else (None, None)
        cells[t] = {"label": t, "std": float(np.mean(v)), "per_seed": v, "n": len(v),
                    "value": math.nan if np.isnan(v).all() else float(np.nanmean(v)),
                    "trend": tr.get(("tau", t, lo)), "b_trend": tr.get(("tau", t, hi))}
    return Cells(cells, plan.profile, caveat)


def _attack_table(plan: Plan, atk, tr: dict):
    """Fig. 11's table (the attack's summary frame): the best mean SSIM from the prototypes and the attacker's class
    average's, on the attacked run (trend ``("attack",)``, one seed)."""
    if atk is None:
        return None
    ssim = atk.set_index(["source", "levels"])["ssim"]
    proto = max(v for (src, _), v in ssim.items() if src == "prototype")
    ref = ssim.get(("class_average", "-"))
    cells = {"prototypes": {"label": "prototypes", "value": proto, "class_average": math.nan if ref is None else ref,
                            "trend": tr.get(("attack",))}}
    return Cells(cells, plan.profile, seeds=1)


def _seeds_words(seeds) -> str:
    """``seed 1234`` or ``seeds 1234, 1235, 1236``."""
    seeds = list(seeds)
    return f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"


def _row_seeds(rows: dict | None) -> list:
    """The seeds :func:`ablation_table` rows were read on (``[]`` where they do not say)."""
    return list(next(iter(rows.values())).get("seeds") or []) if rows else []
