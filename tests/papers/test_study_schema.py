"""The one schema of params/<study>/experiments.yaml (fedlib/study/schema.py) and the one config builder
(Plan.config): every study file passes, a damaged one fails with one line naming the field, references
resolve to the setting's values, and the order of changes is the documented one."""

import copy

import pytest
import yaml

from fedlib.papers import catalog, fedic, fedmps, gfpl
from fedlib.study import schema
from fedlib.validation import ConfigError


def spec_of(module) -> dict:
    return yaml.safe_load(module.Plan.params_file().read_text())


def damaged(module, change) -> dict:
    spec = copy.deepcopy(spec_of(module))
    change(spec)
    return spec


@pytest.mark.parametrize("module", catalog.studies(), ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_every_study_file_passes_the_one_schema(module):
    spec = spec_of(module)
    assert schema.check(spec, "x.yaml", module.Plan.sections) is spec
    assert set(spec) <= set(schema.COMMON) | set(module.Plan.sections)


@pytest.mark.parametrize("change, field, allowed", [
    (lambda s: s.update(tables={}), "x.yaml: tables", "a known section"),
    (lambda s: s.pop("profiles"), "x.yaml: profiles", "a section every study file has"),
    (lambda s: s["methods"]["fedic"]["algorithm"].update(name="fedicc"), "x.yaml: methods.fedic.algorithm.name",
     "a registered algorithm"),
    (lambda s: s["methods"]["fedic"].update(lable="FedIC"), "x.yaml: methods.fedic.lable", "a known key"),
    (lambda s: s["variants"]["fedic"].update(of="fedicc"), "x.yaml: variants.fedic.of", "one of the methods"),
    (lambda s: s.update(prototype_methods=["fedproto", "protonorm"]), "x.yaml: prototype_methods",
     "methods of the file"),
    (lambda s: s["profiles"]["quick"].pop("seeds"), "x.yaml: profiles.quick.seeds", "a non-empty list"),
    (lambda s: s["profiles"]["quick"].update(rounds=0), "x.yaml: profiles.quick.rounds", "an integer in [1, inf)"),
    (lambda s: s["partitions"]["pat"].pop("scheme"), "x.yaml: partitions.pat.scheme", "a value"),
    (lambda s: s["datasets"]["cifar100"].pop("K"), "x.yaml: methods refers to {dataset.K}", "datasets that all"),
    (lambda s: s["profiles"]["paper"].pop("fedccfa_align_start"),
     "x.yaml: methods refers to {profile.fedccfa_align_start}", "profiles that all define"),
    (lambda s: s["profiles"]["quick"].update(method_changes={"fedavg": {"train.lr": 0.1}}),
     "x.yaml: profiles.quick.method_changes.fedavg", "a method: ifca"),
])
def test_a_damaged_study_file_fails_with_one_line_naming_the_field(change, field, allowed):
    with pytest.raises(ConfigError) as err:
        schema.check(damaged(fedic, change), "x.yaml")
    message = str(err.value)
    assert "\n" not in message and message.startswith(field) and f"allowed: {allowed}" in message


def test_a_damaged_file_stops_the_plan_before_anything_runs(tmp_path):
    path = tmp_path / "experiments.yaml"
    bad = damaged(fedic, lambda s: s["methods"]["ifca"]["algorithm"].update(name="ifc"))
    path.write_text(yaml.safe_dump(bad))
    field = r"^test_a_damaged\w*/experiments.yaml: methods.ifca.algorithm.name"
    with pytest.raises(ConfigError, match=field + r": got 'ifc'"):
        fedic.Plan.load("smoke", path=path)


def test_references_take_the_settings_values():
    ctx = {"dataset": {"K": 5}, "profile": {"schedule": {"start": 2}}, "train": {"rounds": 7}}
    got = schema.resolve({"a": "{dataset.K}", "b": ["{profile.schedule.start}"], "c": "{train.rounds}",
                          "d": "dataset.K", "e": "{dataset.K} clusters"}, ctx)
    assert got == {"a": 5, "b": [2], "c": 7, "d": "dataset.K", "e": "{dataset.K} clusters"}
    with pytest.raises(ConfigError, match=r"^run: got '\{dataset.gamma\}'; allowed: a reference"):
        schema.resolve("{dataset.gamma}", ctx, "run")


def test_the_setting_dependent_values_come_from_the_file():
    plan = fedic.load_plan("smoke")
    assert fedic.config(plan, "fedic", "pra", dataset="cifar100")["algorithm"]["K"] == 5
    assert fedic.config(plan, "fedccfa", "pra")["algorithm"]["align_start"] == plan.settings["fedccfa_align_start"]
    assert fedic.config(plan, "fedic", "pat", dataset="cifar100")["partition"]["classes_per_client"] == 10
    g = gfpl.load_plan("quick")
    assert {k: gfpl.config(g, "no_pfg", variant=True)["algorithm"][k] for k in ("start", "every")} == \
        g.settings["schedule"]


def test_method_changes_apply_to_their_method_only_and_in_profiles_that_have_them():
    smoke, paper = fedmps.load_plan("smoke"), fedmps.load_plan("paper")
    assert fedmps.config(smoke, "fedproc")["algorithm"]["ramp_rounds"] == smoke.settings["rounds"]["main"] == 2
    assert fedmps.config(smoke, "fedproc", rounds="sweep")["algorithm"]["ramp_rounds"] == 1
    assert fedmps.config(paper, "fedproc")["algorithm"]["ramp_rounds"] == 100   # FedProc's default, the code's
    assert "ramp_rounds" not in fedmps.config(smoke, "fedproto")["algorithm"]


def test_changes_apply_in_the_documented_order():
    """A setting's own changes, then the profile's overrides, then the caller's: GFPL's Fashion-MNIST entry sets
    100 shots, the smoke profile 6, a caller 3."""
    plan = gfpl.load_plan("smoke")
    assert gfpl.config(plan, "fedavg", "fmnist")["partition"]["shots"] == 6
    assert gfpl.config(plan, "fedavg", "fmnist", **{"partition.shots": 3})["partition"]["shots"] == 3
    assert gfpl.config(gfpl.load_plan("quick"), "fedavg", "fmnist")["partition"]["shots"] == 100


def test_an_unknown_method_is_one_line_naming_the_choices():
    with pytest.raises(ConfigError, match=r"^variant: got 'gfpll'; allowed: one of no_dcs_no_pfg, no_dcs"):
        gfpl.config(gfpl.load_plan("smoke"), "gfpll", variant=True)


def test_every_study_declares_the_study_interface_and_a_module_that_does_not_is_refused(monkeypatch):
    """The catalog's one list of studies: each is a module with every member of catalog.Study beside its plan,
    claims and notebook files; the render and the archive command reach the studies through it."""
    import types

    from fedlib import render
    from fedlib.paths import CHECKOUT

    assert render.SECTIONS == catalog.NAMES and set(catalog.ARCHIVE_ORDER) == set(catalog.NAMES)
    assert set(catalog.MEMBERS) == {"load_plan", "all_jobs", "archived_tables", "tables", "ledger", "notebook", "main"}
    for name, module in zip(catalog.NAMES, catalog.studies(), strict=True):
        assert isinstance(module, catalog.Study) and module.__name__ == f"fedlib.papers.{name}"
        for path in (f"params/{name}/experiments.yaml", f"params/{name}/claims.yaml", f"notebooks/{name}.py"):
            assert (CHECKOUT / path).is_file(), path
    with pytest.raises(KeyError, match="no study 'fedmpss': the studies are benchmark, fedic"):
        catalog.load("fedmpss")
    broken = types.ModuleType("fedlib.papers.broken")
    broken.load_plan = broken.all_jobs = broken.main = lambda *a, **k: None
    monkeypatch.setattr(catalog, "NAMES", (*catalog.NAMES, "broken"))
    monkeypatch.setitem(__import__("sys").modules, "fedlib.papers.broken", broken)
    with pytest.raises(TypeError, match="fedlib.papers.broken is not a study: it lacks archived_tables, tables, "
                                        "ledger, notebook"):
        catalog.load("broken")
