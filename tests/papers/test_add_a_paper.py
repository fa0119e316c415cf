"""README's "Add a paper", followed on a toy study: a plan file, a claims file, a plan module, a ledger module, a
study module and its name in the catalog are all it takes for the catalog to accept it, its runs to train and be read
through fedlib.results, and its claims to be judged by the one claims engine."""

import sys
import types

import pytest

from fedlib import claims, results
from fedlib.papers import catalog

EXPERIMENTS = """\
base:
  dataset: {name: spiral, fraction: 0.05}
  model: {name: mlp_spiral, feature_dim: 2}
  partition: {scheme: dirichlet, num_clients: 4, alpha: 0.5}
  train: {batch_size: 32, lr: 0.05, momentum: 0.5}
methods:
  fedavg:   {label: FedAvg, algorithm: {name: fedavg}}
  fedproto: {label: FedProto, algorithm: {name: fedproto, lam: 1.0}}
prototype_methods: [fedproto]
profiles:
  smoke: {seeds: [1, 2], rounds: 3, table1_methods: all}
"""

CLAIMS = """\
claims:
  - id: toy_best
    kind: best
    claim: FedProto beats FedAvg on the toy spiral
    source: Table 1
    table: table1
    subject: fedproto
    evidence: "{subject[label]} {subject[value]:.2f} vs {rival[label]} {rival[value]:.2f}"
    note: "{caveat}"
"""

PLAN = '''
"""The toy study's plan: one table, every method of the file on the base setting."""
import dataclasses

from fedlib import study


@dataclasses.dataclass
class Plan(study.TablePlan):
    paper = "toy"


def load_plan(profile="smoke", **options):
    return Plan.load(profile, **options)


def config(plan, method):
    return plan.config(plan.method_entry(method), f"toy/{method}", method=method, rounds=plan.rounds)


def table1_configs(plan):
    return {m: config(plan, m) for m in plan.table1_methods()}


def all_jobs(plan):
    return [(c, s) for c in table1_configs(plan).values() for s in plan.seeds]


def archived_tables():
    return []
'''

LEDGER = '''
"""The toy study's numbers, read or trained through fedlib.results, and the cells its claims read."""
import numpy as np

from fedlib import claims, results
from fedlib.claims import Cells
from fedlib.plans.toy import table1_configs


def table1(plan):
    """{method: [best-round accuracy (%) per seed]}."""
    runs = results.run_or_read(table1_configs(plan), plan.seeds, progress=False)
    return {m: [100 * s["metrics"][plan.metric(m)]["best_weighted"] for s in per] for m, per in runs.items()}


def tables(plan, res):
    return {"table1": Cells({m: {"label": plan.label(m), "value": float(np.mean(v)), "per_seed": v, "n": len(v),
                                 "trend": None} for m, v in res["table1"].items()}, plan.profile, "toy caveat")}


def ledger(plan, res):
    return claims.ledger("toy", tables(plan, res))
'''

STUDY = '''
"""The toy study: its one table, drawn from the numbers of its ledger module."""
from fedlib.ledgers.toy import ledger, table1, tables
from fedlib.plans.toy import Plan, all_jobs, archived_tables, load_plan, table1_configs


def show_table1(plan):
    return {m: round(sum(v) / len(v), 2) for m, v in table1(plan).items()}


def notebook(profile, **options):
    return load_plan(profile, **options)


def main(argv=None):
    print(show_table1(load_plan()))
    return 0
'''


def module(name: str, text: str, monkeypatch) -> types.ModuleType:
    mod = types.ModuleType(name)
    monkeypatch.setitem(sys.modules, name, mod)
    exec(compile(text, name, "exec"), mod.__dict__)
    return mod


@pytest.mark.slow
def test_a_toy_study_added_as_the_readme_says_trains_reads_and_judges_its_claims(tmp_path, monkeypatch):
    import fedlib.paths
    import fedlib.study

    params = tmp_path / "params"
    (params / "toy").mkdir(parents=True)
    (params / "toy" / "experiments.yaml").write_text(EXPERIMENTS)
    (params / "toy" / "claims.yaml").write_text(CLAIMS)
    monkeypatch.setattr(fedlib.study, "PARAMS_ROOT", params)
    monkeypatch.setattr(fedlib.paths, "PARAMS", params)
    module("fedlib.plans.toy", PLAN, monkeypatch)
    module("fedlib.ledgers.toy", LEDGER, monkeypatch)
    module("fedlib.papers.toy", STUDY, monkeypatch)
    monkeypatch.setattr(catalog, "NAMES", (*catalog.NAMES, "toy"))

    toy = catalog.load("toy")   # every member of the study interface, the plan's and the ledger's imported
    assert isinstance(toy, catalog.Study)
    plan = toy.load_plan("smoke", results_dir=str(tmp_path / "results"))
    jobs = toy.all_jobs(plan)
    assert sorted((c["algorithm"]["name"], s) for c, s in jobs) == [
        ("fedavg", 1), ("fedavg", 2), ("fedproto", 1), ("fedproto", 2)]
    assert {c["train"]["rounds"] for c, _ in jobs} == {3}

    res = {"table1": toy.table1(plan)}   # trained once ...
    assert {m: len(v) for m, v in res["table1"].items()} == {"fedavg": 2, "fedproto": 2}
    assert all(results.find(c, s)[1] is not None for c, s in jobs)   # ... then found where results looks
    assert toy.table1(plan) == res["table1"]   # read, not retrained: the same numbers
    assert toy.show_table1(plan) == {m: round(sum(v) / 2, 2) for m, v in res["table1"].items()}

    [claim] = toy.ledger(plan, res)
    mean = {m: sum(v) / 2 for m, v in res["table1"].items()}
    assert claim.claim == "FedProto beats FedAvg on the toy spiral" and claim.source == "Table 1"
    assert claim.verdict in (claims.SUPPORTED, claims.NOT_SUPPORTED, claims.INCONCLUSIVE)
    assert f"FedProto {mean['fedproto']:.2f} vs FedAvg {mean['fedavg']:.2f}" in claim.evidence
