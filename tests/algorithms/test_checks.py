"""The contract as one check (fedlib.algorithms.checks) and methods loaded from files (fedlib.algorithms.loader):
every registered method passes it; a broken method file is one line naming the hook and what was expected; a loaded
method's run ids follow its file's bytes; the registry is left as it was."""

from __future__ import annotations

import sys
import textwrap
import types

import pytest

from fedlib.algorithms import ALGORITHMS, loader, make_algorithm
from fedlib.algorithms.checks import ContractViolation, architecture_keys, check_method
from fedlib.validation import ConfigError
from tests.conftest import ROOT

HEAD = """\
import dataclasses

import torch.nn.functional as F

from fedlib.algorithms.prototype_method import PrototypeMethod
from fedlib.validation import Interval


@dataclasses.dataclass(frozen=True)
class Mine(PrototypeMethod):
    lam: float = 1.0
    CONSTRAINTS = {"lam": Interval(0, None)}
"""
GOOD = HEAD + """
    def regulariser(self, z, y, table, present):
        return self.lam * ((z - table[y]) ** 2).sum(1).mul(present[y].float()).mean()
"""
#: broken files, each with what its one line must say
BROKEN = {
    "missing_hook": (HEAD, "missing_hook.py: regulariser: not implemented; a PrototypeMethod subclass implements "
                           "regulariser(self, z, y, table, present)"),
    "wrong_shape": (GOOD + """
    def finish(self, ctx, cid, client, msg, data, rnd, task, model, sums, metrics):
        state, up, metrics = super().finish(ctx, cid, client, msg, data, rnd, task, model, sums, metrics)
        return state, {**up, "protos": up["protos"].flatten()}, metrics
""", "wrong_shape.py: finish: upload (round 1, client 0): 'protos' has shape"),
    "nan_loss": (HEAD + """
    def regulariser(self, z, y, table, present):
        return z.sum() * float("nan")
""", "nan_loss.py: regulariser: the training loss is nan in round 2, client 0; expected a finite number"),
    "syntax_error": ("import dataclasses\nclass Mine(:\n    pass\n",
                     "syntax_error.py: import: SyntaxError at line 2"),
    "no_class": ("import dataclasses\nX = 1\n", "no_class.py: class: defines no method; expected one class on "
                                                 "PrototypeMethod, FedAvg or Algorithm"),
    "raises_on_import": ("raise RuntimeError('no GPU here')\n",
                         "raises_on_import.py: import: raised RuntimeError: no GPU here"),
    "not_frozen": (GOOD.replace("@dataclasses.dataclass(frozen=True)", "@dataclasses.dataclass"),
                   "not_frozen.py: class: Mine is not a frozen dataclass"),
    "no_constraint": (GOOD.replace('CONSTRAINTS = {"lam": Interval(0, None)}', "CONSTRAINTS = {}"),
                      "no_constraint.py: hyperparameters: field 'lam' has no constraint"),
    "bad_declaration": (GOOD + '    UPLOAD = {"protos": "tensor"}\n',
                        "bad_declaration.py: UPLOAD: 'protos': 'tensor'; expected"),
}


def write(folder, stem: str, text: str):
    path = folder / f"{stem}.py"
    path.write_text(textwrap.dedent(text))
    return path


def test_a_registered_method_passes_the_check():
    algo = check_method("fedproto")
    assert algo.name == "fedproto"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_registered_method_passes_the_check(name):
    assert check_method(name).name == name


@pytest.mark.parametrize("stem", sorted(BROKEN))
def test_a_broken_method_file_is_one_line_naming_the_hook(tmp_path, stem):
    text, expected = BROKEN[stem]
    path = write(tmp_path, stem, text)
    before = dict(ALGORITHMS)
    with pytest.raises(ConfigError) as err:
        loader.checked_method(path)
    line = str(err.value)
    assert "\n" not in line and line.startswith(expected), line
    assert dict(ALGORITHMS) == before   # nothing registered by a failed load


def test_a_method_file_is_a_user_method_whose_config_carries_its_file(tmp_path):
    path = write(tmp_path, "my_method", GOOD)
    cls, seconds, fresh = loader.checked_method(str(path))
    assert cls.name == "user:my_method" and fresh and seconds > 0
    assert "user:my_method" not in ALGORITHMS          # the 31 stay the 31
    again, _, fresh_again = loader.checked_method(str(path))
    assert again is cls and not fresh_again             # checked once per version of the file
    algo = make_algorithm({"name": "user:my_method", "source": str(path), "lam": 0.5})
    h = algo.hyperparameters()
    assert h["lam"] == 0.5 and h["source"] == str(path) and len(h["source_sha256"]) == 64
    with pytest.raises(ConfigError, match=r"^algorithm \(user:my_method\)\.lam: got -1"):
        make_algorithm({"name": "user:my_method", "source": str(path), "lam": -1})


def test_an_edited_method_file_gets_new_run_ids_and_its_old_configs_are_refused(tmp_path):
    from fedlib.config import run_id, validate

    path = write(tmp_path, "my_method", GOOD)
    raw = {"dataset": {"name": "fmnist", "fraction": 0.01}, "model": "cnn_fmnist",
           "partition": {"scheme": "dirichlet", "num_clients": 4, "alpha": 0.5},
           "algorithm": {"name": "user:my_method", "source": str(path)}, "train": {"rounds": 1},
           "results_dir": str(tmp_path / "results")}
    first = validate(raw)
    assert first["algorithm"]["source_sha256"] == loader.sha256(path.read_bytes())
    path.write_text(GOOD.replace("** 2", "** 2 * 0.5"))
    second = validate(raw)
    assert run_id(second, 0) != run_id(first, 0)
    assert second["algorithm"]["source_sha256"] != first["algorithm"]["source_sha256"]
    with pytest.raises(ConfigError) as err:   # the first config's runs are the earlier file's: never rebuilt now
        make_algorithm(first["algorithm"])
    line = str(err.value)
    assert line.startswith("algorithm.source_sha256: ") and "changed since this config was made" in line


def test_a_method_that_registers_itself_leaves_the_registry_as_it_was(tmp_path):
    text = GOOD.replace("from fedlib.validation import Interval",
                        "from fedlib.validation import Interval\nfrom fedlib.algorithms.registry import register")
    text = text.replace("@dataclasses.dataclass(frozen=True)", "@register\n@dataclasses.dataclass(frozen=True)")
    text = text.replace("    lam: float = 1.0", "    name = 'mine'\n    lam: float = 1.0")
    before = dict(ALGORITHMS)
    cls = loader.load_method(write(tmp_path, "selfreg", text))
    assert cls.name == "user:selfreg" and dict(ALGORITHMS) == before


def test_several_classes_need_method_named(tmp_path):
    two = GOOD + "\n\n@dataclasses.dataclass(frozen=True)\nclass Other(Mine):\n    pass\n\n\n" \
                 "@dataclasses.dataclass(frozen=True)\nclass Third(Mine):\n    pass\n"
    with pytest.raises(ContractViolation, match=r"^two\.py: class: defines 2 methods \(Other, Third\); expected "
                                                r"one, or METHOD = <the class to run>"):
        loader.load_method(write(tmp_path, "two", two))
    cls = loader.load_method(write(tmp_path, "two_chosen", two + "\nMETHOD = Third\n"))
    assert cls.__name__ == "Third" and cls.name == "user:two_chosen"


def test_a_path_that_is_no_method_file_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"^--method: got .*nope\.py'; allowed: an existing method file"):
        loader.canonical_source(str(tmp_path / "nope.py"))
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ConfigError, match="a method file ending in .py"):
        loader.canonical_source(str(tmp_path / "notes.txt"))
    with pytest.raises(ConfigError, match=r"^--method: got 'not_installed'; allowed: a method file \(a \.py path\) "
                                          r"or an installed entry point of group fedlib\.methods"):
        loader.canonical_source("not_installed")


def test_an_installed_entry_point_loads_as_a_user_method(tmp_path, monkeypatch):
    pkg = tmp_path / "site"
    pkg.mkdir()
    write(pkg, "ep_pkg_method", GOOD)
    monkeypatch.syspath_prepend(str(pkg))
    monkeypatch.setattr(loader, "_EP_SHA", {})
    point = types.SimpleNamespace(name="cosine", load=lambda: __import__("ep_pkg_method").Mine)
    monkeypatch.setattr(loader, "entry_points", lambda: {"cosine": point})
    try:
        cls = loader.load_method("cosine")
        assert cls.name == "user:cosine"
        assert cls.__dataclass_fields__["source"].default == "entry-point:cosine"
        digest = loader.sha256((pkg / "ep_pkg_method.py").read_bytes())
        assert cls.__dataclass_fields__["source_sha256"].default == digest
        assert make_algorithm({"name": "user:cosine", "source": "entry-point:cosine"}).name == "user:cosine"
    finally:
        sys.modules.pop("ep_pkg_method", None)


def test_architecture_keys_read_the_declarations():
    assert architecture_keys(ALGORITHMS["fedavg"]) == ["w.*"]
    assert architecture_keys(ALGORITHMS["fedproto"]) == []
    assert architecture_keys(ALGORITHMS["lgfedavg"]) == []        # heads only: one shape for a model family


def test_the_template_passes_the_check():
    cls, _, _ = loader.checked_method(str(ROOT / "docs" / "method_template.py"))
    assert cls.name == "user:method_template" and architecture_keys(cls) == []
    assert len((ROOT / "docs" / "method_template.py").read_text().splitlines()) <= 32
