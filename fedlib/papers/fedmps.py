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

import numpy as np
import torch

from fedlib import papers, results
from fedlib.analysis import embed_2d, next_uploads, pairwise_distances, test_features  # noqa: F401 (re-exported)
from fedlib.config import run_id
from fedlib.data import FederatedData
from fedlib.data.partition import nway_kshot
from fedlib.data.sources import Dataset
from fedlib.papers import check_methods, check_rounds
from fedlib.runner import RunState
from fedlib.grid import run_configs as run  # noqa: F401 (S.run in the notebook)
from fedlib.validation import ConfigError
from fedlib.privacy.attack import attacker_aux  # noqa: F401  (the notebook's S.attacker_aux)

PAPER_METRIC_PROTO = "acc_proto_own"
COMMON_METRIC = "acc_head"
TABLE6_BLOCKS = {3: "table6_block1", 4: "table6_block2"}  # Table VI's printed blocks by n (decision 12)


@dataclasses.dataclass
class Plan(papers.Plan):
    """The FedMPS experiments under one profile."""

    paper = "fedmps"
    sections = {"ablation": None, "time_target": None}   # its own sections of experiments.yaml

    def selected(self, key: str) -> list[str]:
        value = self.settings[key]
        return self.methods if value == "all" else list(value)

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


# -- reading results -------------------------------------------------------------------
def paper_vs_ours(paper: dict, table: str | None, ours: dict):
    """``paper | [authors' code |] ours | diff`` for the Fashion-MNIST column: :func:`fedlib.report.compare`
    of paper.yaml's ``table`` (``None``: no paper block, ours alone) with ``ours`` (``{method: {"fmnist":
    value}}``), plus the reference runs of the authors' code where paper.yaml has them for ``table``
    (:func:`fedlib.report.reference_column`; docs/fedmps.md, decision 27)."""
    from fedlib import report

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

    ``summaries[method]`` holds one summary per seed. Mean and std (ddof 0) over seeds of
    the best-round accuracy; ``p_vs_fedmps`` is the exact two-sided Wilcoxon-Mann-Whitney rank-sum
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
        rows[m] = {"mean": float(vals.mean()), "std": float(vals.std()), "n": len(vals), "per_seed": vals.tolist(),
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
    shorter profile's report: ``{"plan", "found", "total", "rows", "head", "made_by"}``, with
    ``rows``/``head`` (:func:`table3`, the paper's convention / head over all classes) over the
    methods whose every seed has finished, ``None`` while none has. The runs come from
    ``python -m fedlib.papers.fedmps --profile paper`` (or the paper profile's notebook) into the
    same results folder, on ``plan``'s device and executor or else another (:func:`fedlib.results.find`);
    a run the results folder lacks is read from the run archive (:mod:`fedlib.archive`)."""
    pplan = _paper_plan(plan)
    configs = table3_configs(pplan)
    done, found = results.cached(configs, pplan.seeds)
    out = {"plan": pplan, "found": found, "total": len(configs) * len(pplan.seeds), "rows": None, "head": None,
           "made_by": papers.made_by(s for runs in done.values() for s in runs) if done else ""}
    if done:
        out["rows"], out["head"] = table3(pplan, done), table3(pplan, done, metric=COMMON_METRIC)
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
    ``{"plan", "found", "total", "rows", "missing", "made_by"}`` with ``rows`` (:func:`ways_rows`) over
    the methods finished so far for each n (the first seed, as the paper's "same random seed"; ``None``
    while none has), and ``missing``: ``{n: [methods not finished]}``. n = 3 is Table III's first seed."""
    pplan = _paper_plan(plan)
    configs, seed0 = ways_configs(pplan), pplan.seeds[0]
    done, found = results.cached(configs, [seed0])
    missing = {n: [m for m in pplan.selected("sweep_methods") if (m, n) not in done] for n in pplan.settings["ways"]}
    return {"plan": pplan, "found": found, "total": len(configs), "rows": ways_rows(pplan, done) or None,
            "missing": missing, "made_by": papers.made_by(s for runs in done.values() for s in runs) if done else ""}


def paper_table7(plan: Plan) -> dict:
    """Table VII under the ``paper`` profile from finished runs only (trains nothing):
    ``{"plan", "found", "total", "rows", "made_by"}`` with ``rows`` (:func:`ablation_table`) once
    every row has finished (first seed; row 6, every term on, is Table III's FedMPS run)."""
    pplan = _paper_plan(plan)
    configs, seed0 = ablation_configs(pplan), pplan.seeds[0]
    done, found = results.cached(configs, [seed0])
    full = len(done) == len(configs)
    return {"plan": pplan, "found": found, "total": len(configs),
            "rows": ablation_table(pplan, done, configs) if full else None,
            "made_by": papers.made_by(s for runs in done.values() for s in runs) if full else ""}


def ablation_table(plan: Plan, summaries: dict[int, list[dict]], configs: dict[int, dict]) -> dict[int, dict]:
    """Table VII rows: the paper's rule (nearest prototype, own classes) at the best round and at
    the last round, the head over all classes (the soft-label term acts on the head), each with
    the std across clients, and the mean soft-label loss l_soft over the rounds that had soft labels
    (``None`` where the term is off). Best-round selection alone can hide a term that only acts
    after round 1 (soft labels exist from round 2): the last-round columns show it."""
    rows = {}
    for row, runs in summaries.items():
        s = runs[0]
        recs = results.rounds(configs[row], s["seed"])
        soft = [r["local"]["l_soft"] for r in recs if "l_soft" in r.get("local", {})]
        rows[row] = {"proto_own_best": accuracy(s, PAPER_METRIC_PROTO), "proto_own_best_std": client_std(
            s, PAPER_METRIC_PROTO), "best_round": s["metrics"][PAPER_METRIC_PROTO]["best_round"],
            "proto_own_last": accuracy(s, PAPER_METRIC_PROTO, "last"), "head_best": accuracy(s, COMMON_METRIC),
            "head_last": accuracy(s, COMMON_METRIC, "last"), "l_soft_mean": float(np.mean(soft)) if soft else None}
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
def global_prototypes(state: RunState, level: str = "high") -> tuple[np.ndarray, np.ndarray]:
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
    from fedlib.runner import one_thread

    data = cifar10_shaped()
    out = {}
    with one_thread():
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
            ("FedMPS Table VII (paper profile)", ablation_configs(pp), pp.seeds[:1])]


@papers.command
def main(argv: list[str] | None = None) -> int:
    """``python -m fedlib.papers.fedmps [--profile P] [--table III|VI|VII] [--methods M ...] [--seeds S ...]
    [--rounds N]``: run one table headless (no notebook) and print paper | ours | diff. Table III runs
    every seed of the profile; Tables VI and VII its first seed (the paper's "same random seed")."""
    from fedlib import report

    parser = papers.add_retrain_archived(papers.cli("python -m fedlib.papers.fedmps", main.__doc__))
    parser.add_argument("--table", default="III", choices=["III", "VI", "VII"],
                        help="III (default: every method, every seed), VI (n = 3, 4, 5) or VII (the loss ablation)")
    args = parser.parse_args(argv)

    def obtain(*a, **kw):  # a finished run (another device, the run archive) is read, not retrained
        return results.run_or_read(*a, retrain_archived=args.retrain_archived, **kw)

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
        configs = ablation_configs(plan)
        rows = ablation_table(plan, obtain(configs, seeds=[seed0], workers=args.workers, desc="Table VII"), configs)
        print(f"FedMPS Table VII (Fashion-MNIST; the paper's is CIFAR-10), profile {args.profile}: {R['ablation']} "
              f"rounds, seed {seed0}; nearest prototype among own classes, best and last round; head, last round (%)")
        for row, r in rows.items():
            soft = "—" if r["l_soft_mean"] is None else f"{r['l_soft_mean']:.4f}"
            print(f"({row}) best {r['proto_own_best']:.2f} (round {r['best_round']}), gain over (1) "
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
    for configs in (variant_configs(plan), ways_configs(plan), ablation_configs(plan), stdev_configs(plan),
                    clients_configs(plan), temperature_configs(plan)):
        jobs_ += [(c, seed0) for c in configs.values()]
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


if __name__ == "__main__":
    raise SystemExit(main())


# -- the claims ledger ---------------------------------------------------------------------------
def ledger(plan: Plan, res: dict) -> list:
    """FedMPS's claims with our evidence and a verdict each, by :func:`fedlib.claims.verdict`.

    ``res`` holds what the notebook computed (each key optional; a missing one leaves its claims
    out or "not tested"): ``table3`` / ``table3_head`` (:func:`table3` rows), ``comm`` (uplink parameters
    per round per method, Fashion-MNIST runs), ``ways`` (``{n: {method: accuracy}}``), ``ablation``
    (:func:`ablation_table`), ``comm_cifar10`` (:func:`communication_cifar10`), ``time``
    (``{method: time_to_target}``), ``stdev`` and ``clients``
    (``{value: {method: accuracy}}``), ``tau_std`` (``{"tau1": std, "tau2": std}`` of FedMPS's
    accuracy in points), ``attack`` (the attack's summary frame). Tables VI-VII, the sweeps, the time to
    target and the attack run one seed: inconclusive under any profile; traffic counts are exact.
    """
    from fedlib.claims import claim

    R, seeds, prof = plan.settings["rounds"], plan.seeds, plan.profile
    short = prof != "paper"
    where = f"{prof} profile, {R['main']} rounds, seed{'s' if len(seeds) > 1 else ''} {seeds}"
    caveat = "short runs: not converged" if short else ""
    out = []
    out += _table3_claims(plan, prof, res.get("table3"), res.get("table3_head"), where, caveat, len(seeds),
                          "Table III")
    pp = res.get("table3_paper")
    if pp and short:
        pseeds = pp["plan"].seeds
        out += _table3_claims(plan, "paper", pp["rows"], pp["head"], f"paper profile, "
                              f"{pp['plan'].settings['rounds']['main']} rounds, seeds {pseeds}", "", len(pseeds),
                              "Table III, paper protocol")
    cifar = res.get("comm_cifar10")
    if cifar and "fedmps" in cifar:
        params = {m: c["up"] for m, c in cifar.items() if m not in ("fedproto", "fedmps")}
        out.append(claim("FedMPS sends far fewer parameters per round than methods that share the model",
                         "Table V (CIFAR-10 setting)", f"FedMPS uplink {cifar['fedmps']['up']:,.0f} floats per round "
                         f"vs at least {min(params.values()):,.0f} for the others (measured from the messages)",
                         cifar["fedmps"]["up"] < min(params.values()) / 10, prof, len(seeds), exact=True,
                         note="rule: at least 10 times fewer"))
    comm = res.get("comm")
    if comm and "fedmps" in comm:
        params = {m: v for m, v in comm.items() if m not in ("fedproto", "fedmps")}
        out.append(claim("(our check) FedMPS also sends far fewer parameters in the Fashion-MNIST setting",
                         "Table V, Fashion-MNIST runs",
                         f"FedMPS uplink {comm['fedmps']:,.0f} floats per round vs at least "
                         f"{min(params.values()):,.0f} for the others (measured from the messages)",
                         comm["fedmps"] < min(params.values()) / 10, prof, len(seeds), exact=True,
                         note="rule: at least 10 times fewer; not a claim of the paper (Table V is CIFAR-10): here "
                         "each held class costs 3136 + 1568 floats, large beside FedProto's small CNN"))
    out += _ways_claims(plan, prof, res.get("ways"), f"seed {seeds[0]}", caveat, "Table VI")
    out += _ablation_claims(prof, res.get("ablation"), "Fashion-MNIST instead of the paper's CIFAR-10"
                            + (f"; {caveat}" if short else ""), "Table VII")
    for key, label, what in (("ways_paper", "Table VI", "ways"), ("ablation_paper", "Table VII", "ablation")):
        pp = res.get(key)
        if pp and pp.get("rows") and short:
            pr = pp["plan"]
            if what == "ways":
                acc = {n: {m: v[0] for m, v in row.items()} for n, row in pp["rows"].items()}
                out += _ways_claims(plan, "paper", acc, f"paper profile, {pr.settings['rounds']['main']} rounds, "
                                    f"seed {pr.seeds[0]}", "", f"{label}, paper protocol")
            else:
                out += _ablation_claims("paper", pp["rows"], f"Fashion-MNIST instead of the paper's CIFAR-10; paper "
                                        f"profile, {pr.settings['rounds']['ablation']} rounds, seed {pr.seeds[0]}",
                                        f"{label}, paper protocol")
    tt = res.get("time")
    if tt and "fedmps" in tt:
        reached = {m: v["round"] for m, v in tt.items() if v["round"] is not None}
        out.append(claim("FedMPS converges fastest (fewest rounds to a target accuracy)", "Figs. 4-5",
                         "rounds to target: " + ", ".join(f"{plan.label(m)} {v['round'] or 'never'}"
                                                          for m, v in tt.items()),
                         None if not reached else reached.get("fedmps") == min(reached.values()), prof, 1,
                         note=caveat))
    for key, value, fig in (("stdev", "noise std", "Fig. 8"), ("clients", "number of clients N", "Fig. 9")):
        sw = res.get(key)
        if sw:
            ok = all(v.get("fedmps", -1) >= max(v.values()) for v in sw.values())
            cells = []
            for k, v in sw.items():
                other = max((x for m, x in v.items() if m != "fedmps"), default=float("nan"))
                ours = v.get("fedmps", float("nan"))
                cells.append(f"{value.split()[0]} {k}: FedMPS {ours:.2f}, best other {other:.2f}")
            out.append(claim(f"FedMPS stays ahead as the {value} varies", fig, ", ".join(cells), ok, prof, 1,
                             note=f"{R['sweep']} rounds" + (f"; {caveat}" if short else "")))
    tau = res.get("tau_std")
    if tau:
        out.append(claim("FedMPS is insensitive to its temperatures (accuracy std across the grid: tau1 0.36, "
                         "tau2 0.13 points on Fashion-MNIST)", "Fig. 10",
                         f"std tau1 {tau['tau1']:.2f}, tau2 {tau['tau2']:.2f} points", max(tau.values()) < 1.0, prof,
                         1, note="rule: std below 1 point" + (f"; {caveat}" if short else "")))
    atk = res.get("attack")
    if atk is not None:
        ssim = atk.set_index(["source", "levels"])["ssim"]
        proto = max(v for (src, _), v in ssim.items() if src == "prototype")
        ref = ssim.get(("class_average", "-"))
        out.append(claim("Uploaded prototypes do not let the server reconstruct the client's images", "Fig. 11",
                         f"best mean SSIM from prototypes {proto:.3f}; the attacker's own class average "
                         f"{ref:.3f}" if ref is not None else f"best mean SSIM from prototypes {proto:.3f}",
                         None if ref is None else proto <= ref + 0.02, prof, 1,
                         note="rule: no better than the class average (+0.02); the paper judges by eye"))
    return out


def _ways_claims(plan: Plan, profile: str, ways: dict | None, where: str, caveat: str, source: str) -> list:
    """Table VI's claim: FedMPS is best for every n (``ways``: ``{n: {method: accuracy}}``, one seed)."""
    from fedlib.claims import claim

    if not ways:
        return []
    wins = {n: max(v, key=v.get) == "fedmps" for n, v in ways.items()}
    return [claim("FedMPS is the best method for every average number of classes n", source,
                  ", ".join(f"n = {n}: best {plan.label(max(v, key=v.get))} {max(v.values()):.2f}"
                            + ("" if wins[n] else f", FedMPS {v.get('fedmps', float('nan')):.2f}")
                            for n, v in ways.items()) + f" ({where})",
                  all(wins.values()), profile, 1, note=caveat)]


def _ablation_claims(profile: str, abl: dict | None, note: str, source: str) -> list:
    """Table VII's claims (each term alone above cross-entropy; soft labels on top of both contrastive terms)
    from :func:`ablation_table` rows (one seed)."""
    from fedlib.claims import claim

    if not abl:
        return []
    a = {row: r["proto_own_best"] for row, r in abl.items()}
    last = {row: r["proto_own_last"] for row, r in abl.items()}
    rows = [r for r in (1, 2, 3, 4) if r in a]
    out = [claim("Each loss term alone adds accuracy over cross-entropy (rows 2-4 above row 1)", source,
                 "best round " + ", ".join(f"({r}) {a[r]:.2f}" for r in rows) + "; last round "
                 + ", ".join(f"({r}) {last[r]:.2f}" for r in rows),
                 all(a[r] > a[1] for r in (2, 3, 4) if r in a), profile, 1, note=note)]
    if 5 in a and 6 in a:
        out.append(claim("Soft labels add accuracy on top of both contrastive terms (row 6 above row 5)", source,
                         f"best round (6) {a[6]:.2f} vs (5) {a[5]:.2f}; last round (6) {last[6]:.2f} vs (5) "
                         f"{last[5]:.2f}; head (6) {abl[6]['head_last']:.2f} vs (5) {abl[5]['head_last']:.2f}",
                         a[6] > a[5] or last[6] > last[5], profile, 1, note=f"{note}; the soft-label term acts from "
                         "round 2 on and on the head"))
    return out


def _table3_claims(plan: Plan, profile: str, t3: dict | None, head: dict | None, where: str, caveat: str,
                   n_seeds: int, source: str) -> list:
    """Table III's claims (ranking, significance, prototype vs parameter methods, our common-rule check); every
    method runs on the same seeds, so each seed's partition is shared and the comparisons are paired."""
    from fedlib.claims import ALPHA, INCONCLUSIVE, Claim, claim, compare, smallest_p, untested, versus_best

    if not (t3 and "fedmps" in t3):
        return [untested("FedMPS has the highest accuracy of the eight methods", source, "not run")]
    out = []
    fm = t3["fedmps"]["mean"]
    others = {m: r["mean"] for m, r in t3.items() if m != "fedmps"}
    best = max(others, key=others.get)
    seeds = {plan.label(m): r["per_seed"] for m, r in t3.items()}
    out.append(claim("FedMPS has the highest accuracy of the eight methods on Fashion-MNIST", source,
                     f"FedMPS {fm:.2f} ± {t3['fedmps']['std']:.2f} vs best other {plan.label(best)} "
                     f"{others[best]:.2f} ± {t3[best]['std']:.2f} ({where})", fm > others[best], profile, n_seeds,
                     [versus_best(plan.label("fedmps"), seeds)] if n_seeds > 1 else (), caveat))
    ps = {m: r["p_vs_fedmps"] for m, r in t3.items() if m != "fedmps"}
    text = "FedMPS is significantly better than every baseline (Wilcoxon rank-sum, p < 0.05)"
    if n_seeds > 1 and all(p is not None for p in ps.values()):
        sig = [m for m in ps if t3[m]["mean"] < fm and ps[m] < ALPHA]
        floor = smallest_p(n_seeds, n_seeds)
        evidence = (f"exact p < 0.05 against {len(sig)} of {len(ps)} baselines (smallest p "
                    f"{min(ps.values()):.3f}, largest {max(ps.values()):.3f}); {n_seeds} seeds")
        if floor >= ALPHA:
            out.append(Claim(text, source, evidence, INCONCLUSIVE, "; ".join(x for x in (
                caveat, f"{n_seeds} vs {n_seeds} runs: the exact two-sided rank-sum test cannot go below p = "
                f"{floor:.2f}, so this design cannot show p < 0.05") if x), profile))
        else:
            out.append(claim(text, source, evidence, len(sig) == len(ps), profile, n_seeds, note=caveat))
    else:
        out.append(untested(text, source, f"needs several seeds; this profile runs {n_seeds}"))
    protos = [m for m in ("fedproto", "fedmps") if m in t3]
    params = [m for m in t3 if m not in protos]
    if protos and params:
        lo = min(protos, key=lambda m: t3[m]["mean"])
        hi = max(params, key=lambda m: t3[m]["mean"])
        tests = [compare(f"{plan.label(lo)} - {plan.label(hi)}", t3[lo]["per_seed"], t3[hi]["per_seed"])] \
            if n_seeds > 1 else ()
        out.append(claim("The prototype methods (FedProto, FedMPS) beat every parameter-sharing method",
                         source, f"lowest prototype method {plan.label(lo)} {t3[lo]['mean']:.2f} vs best parameter "
                         f"method {plan.label(hi)} {t3[hi]['mean']:.2f} (paper's rule: nearest prototype among own "
                         "classes vs head over all classes)", t3[lo]["mean"] > t3[hi]["mean"], profile, n_seeds, tests,
                         caveat))
    if head and "fedmps" in head:
        hb = max((m for m in head if m != "fedmps"), key=lambda m: head[m]["mean"])
        tests = [versus_best(plan.label("fedmps"), {plan.label(m): r["per_seed"] for m, r in head.items()})] \
            if n_seeds > 1 else ()
        out.append(claim("(our check) FedMPS still wins under one common rule, the head over all classes",
                         source + ", common rule", f"FedMPS {head['fedmps']['mean']:.2f} vs {plan.label(hb)} "
                         f"{head[hb]['mean']:.2f} (column 'ours, head over all classes')",
                         head["fedmps"]["mean"] > head[hb]["mean"], profile, n_seeds, tests,
                         "; ".join(x for x in (caveat, "not a claim of the paper: the evaluation convention is part "
                                               "of its result") if x)))
    return out
