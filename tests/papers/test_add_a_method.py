"""Adding a method as README's "Add an algorithm" and docs/adding_a_method.md say, on two toy methods: a prototype
method (PrototypeMethod, as the template) and one that sends its whole model (a FedAvg subclass). Step 1, each
module in a folder of ``fedlib.algorithms``' package path (a temporary one, as ``fedlib/algorithms/`` would be);
step 3, one line each under ``methods:`` of the benchmark plan (in a copy of ``params/``); no repository file is
edited. Then, with no further edit, each is in the contract suite, in the batched-equals-sequential equivalence test
(both batch), in every benchmark setting its declared messages allow (the prototype method on heterogeneous models,
the other not), scored by the rule it reports, and a row of the privacy study's leakage table."""

from __future__ import annotations

import shutil
import sys

import pytest

import fedlib.algorithms as algorithms
from fedlib import study
from fedlib.algorithms import ALGORITHMS
from fedlib.papers import benchmark as B
from fedlib.papers import privacy as P
from tests.conftest import ROOT

TOY_PROTO = '''
import dataclasses

import torch.nn.functional as F

from fedlib.algorithms.prototype_method import PrototypeMethod
from fedlib.algorithms.registry import register
from fedlib.validation import Interval


@register
@dataclasses.dataclass(frozen=True)
class ToyProto(PrototypeMethod):
    """Cross-entropy plus lam x (1 - cosine) between each feature and its class's global prototype."""

    lam: float = 1.0
    name = "toyproto"
    CONSTRAINTS = {"lam": Interval(0, None)}

    def regulariser(self, z, y, table, present):
        has = present[y].float()
        cos = F.cosine_similarity(z, table[y], dim=1)
        return self.lam * ((1 - cos) * has).sum() / has.sum().clamp(min=1)
'''

TOY_AVG = '''
import dataclasses

from fedlib.algorithms.fedavg import FedAvg
from fedlib.algorithms.registry import register


@register
@dataclasses.dataclass(frozen=True)
class ToyAvg(FedAvg):
    """FedAvg under another name: it sends the client's whole model."""

    name = "toyavg"
'''

#: step 3: the one line of each in params/benchmark/experiments.yaml
LINES = ("  toyproto:   {label: ToyProto, algorithm: {name: toyproto, lam: 0.5}}\n"
         "  toyavg:     {label: ToyAvg, algorithm: {name: toyavg}}\n")
TOYS = ("toyproto", "toyavg")
WHOLE_MODEL = "uploads a whole model, or a part whose shape depends on the architecture"


@pytest.fixture
def added(tmp_path, monkeypatch):
    """The two toy methods added: their modules registered by the package's own import step, and a copy of
    ``params/`` whose benchmark plan has their lines, read by every study (``study.PARAMS_ROOT``)."""
    folder = tmp_path / "algorithms"
    folder.mkdir()
    (folder / "toyproto.py").write_text(TOY_PROTO)
    (folder / "toyavg.py").write_text(TOY_AVG)
    params = tmp_path / "params"
    shutil.copytree(ROOT / "params", params)
    plan_file = params / "benchmark" / "experiments.yaml"
    text = plan_file.read_text()
    first = "  local:      {label: Local, algorithm: {name: local}}\n"   # the methods block's first line
    assert text.count(first) == 1
    plan_file.write_text(text.replace(first, LINES + first))
    monkeypatch.setattr(study, "PARAMS_ROOT", params)
    monkeypatch.setattr(algorithms, "__path__", [*algorithms.__path__, str(folder)])
    before = dict(ALGORITHMS)
    try:
        algorithms.import_methods()   # what `import fedlib.algorithms` does: every module of the package
        yield
    finally:
        ALGORITHMS.clear()
        ALGORITHMS.update(before)
        for name in TOYS:
            sys.modules.pop(f"fedlib.algorithms.{name}", None)
            if hasattr(algorithms, name):
                delattr(algorithms, name)


def test_a_module_in_the_package_registers_itself_with_no_import_line(added):
    assert set(TOYS) <= set(ALGORITHMS)
    assert ALGORITHMS["toyproto"].__module__ == "fedlib.algorithms.toyproto"


def test_it_is_in_the_contract_suite():
    import tests.algorithms.test_algorithms as contract   # its cases are read from the registry when collected

    def names():
        return {p if isinstance(p, str) else p.values[0] for p in contract.slow_except()}

    assert names() == set(ALGORITHMS)


@pytest.mark.slow
def test_it_enters_the_contract_suite_and_passes_the_contract_check(added):
    import tests.algorithms.test_algorithms as contract
    from fedlib.algorithms.checks import check_method

    assert set(TOYS) <= {p if isinstance(p, str) else p.values[0] for p in contract.slow_except()}
    assert check_method("toyproto").name == "toyproto"   # the check every registered method passes (test_checks)
    contract.test_contract_two_rounds_deterministic_and_rules("toyproto")


def test_it_enters_the_equivalence_test_where_it_batches(added):
    import tests.core.test_executors as executors

    cases = executors.batched_cases()
    assert ("toyproto", {}) in cases and ("toyavg", {}) in cases
    assert all(case in cases for case in executors.HAND_CASES)


@pytest.mark.slow
def test_its_batched_rounds_equal_the_sequential_ones(added):
    import tests.core.test_executors as executors

    executors.test_batched_equals_sequential_after_one_update_and_three_rounds("toyproto", {})


def test_it_enters_every_benchmark_setting_its_messages_allow(added):
    plan = B.load_plan("converged")
    assert set(TOYS) <= set(plan.method_names()) and set(plan.methods) == set(ALGORITHMS)
    cfgs = B.configs(plan)
    # prototypes have one shape whatever a client's model: every setting; a whole model: not heterogeneous models
    assert all((s, "toyproto") in cfgs for s in plan.setting_names())
    assert [s for s in plan.setting_names() if (s, "toyavg") in cfgs] == ["pat", "dir", "nway"]
    assert plan.why_not("toyavg", "hetero") == WHOLE_MODEL
    assert cfgs[("hetero", "toyproto")]["algorithm"]["lam"] == 0.5   # its line's hyperparameters
    # scored by the rule it reports (PrototypeMethod's last rule: the nearest global prototype)
    assert plan.metric("toyproto") == "acc_proto" and plan.metric("toyavg") == "acc_head"
    assert B.missing(plan).loc[("Heterogeneous models (ht0_lite)", "ToyAvg"), "why not"] == WHOLE_MODEL


def test_it_is_a_row_of_the_leakage_table(added):
    from fedlib.privacy import holdings_table, what_server_holds

    plan = P.load_plan("paper")
    assert plan.settings["methods"] == "all" and set(TOYS) <= set(plan.table_methods())
    assert sorted(plan.table_methods()) == sorted(ALGORITHMS)
    assert [plan.label(m) for m in TOYS] == ["ToyProto", "ToyAvg"]   # the benchmark's labels
    table = P.table_configs(plan)
    assert table["toyproto"]["algorithm"]["name"] == "toyproto" and table["toyproto"]["model"]["name"] == "mlp_mnist"
    assert what_server_holds("toyproto").attacks == what_server_holds("fedproto").attacks
    assert what_server_holds("toyavg").attacks == what_server_holds("fedavg").attacks
    assert set(TOYS) <= set(holdings_table(plan.table_methods()).index)
    # the file's own entries are where they were, the added ones after them
    assert plan.table_methods()[-2:] == sorted(TOYS)


def test_the_derived_lists_are_the_hand_lists_they_replace():
    """What params/benchmark/experiments.yaml listed by hand before it derived them."""
    plan = B.load_plan("converged")
    assert {m for m in plan.methods if plan.why_not(m, "hetero") is None} == {
        "local", "lgfedavg", "fml", "fedkd", "feddistill", "fedproto", "fedtgp", "protonorm", "gfpl"}
    assert set(plan.spec["prototype_methods"]) == {"fedproto", "fedtgp", "protonorm", "fedmps", "mpfedcl"}
    assert plan.why_not("fedmps", "hetero") == "needs a low-level feature map, which the ht0 models do not expose"
    assert plan.why_not("fedmps", "pat").startswith("needs a low-level feature map, which PFLlib's 4-layer CNN")
    assert plan.refused("fedmps", "nway") is None and plan.refused("fedmps", "dir")[:2] == ("level", "low")
    assert plan.refused("fedavg", "hetero")[:2] == ("architecture", "w.*")


def test_a_hand_list_still_overrides_the_derived_one(tmp_path):
    import yaml

    spec = yaml.safe_load((ROOT / "params" / "benchmark" / "experiments.yaml").read_text())
    spec["settings"]["hetero"].update(only=["local", "fedproto"], why_not={"default": "left out by hand"})
    spec["prototype_methods"] = ["fedproto"]
    path = tmp_path / "experiments.yaml"
    path.write_text(yaml.safe_dump(spec))
    plan = B.load_plan("converged", path=path)
    assert {m for m in plan.methods if plan.why_not(m, "hetero") is None} == {"local", "fedproto"}
    assert plan.why_not("protonorm", "hetero") == "left out by hand"
    assert plan.metric("fedproto") == "acc_proto" and plan.metric("protonorm") == "acc_head"
