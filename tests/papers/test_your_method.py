"""A method from outside the repository against the archived benchmark (fedlib.yours, `python -m fedlib.yours
--method FILE`, the notebooks' method_file): checked first, trained on every
setting its messages allow under the budget asked, ranked beside the archived methods at the same round, with no file
of the repository written."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from fedlib import archive, paths, results
from fedlib.config import run_id
from fedlib import yours as Y
from fedlib.papers import benchmark as B
from fedlib.study.notebook import ParameterError
from fedlib.validation import ConfigError
from tests.algorithms.test_checks import BROKEN, GOOD
from tests.conftest import ROOT

#: a prototype method as an author would write it, away from the repository
COSINE = '''\
"""Cross-entropy plus lam x (1 - cos) to the global prototype of each sample's class."""
import dataclasses

import torch.nn.functional as F

from fedlib.algorithms.prototype_method import PrototypeMethod
from fedlib.validation import Interval


@dataclasses.dataclass(frozen=True)
class CosinePull(PrototypeMethod):
    lam: float = 0.5
    CONSTRAINTS = {"lam": Interval(0, None)}

    def regulariser(self, z, y, table, present):
        has = present[y].float()
        return self.lam * ((1 - F.cosine_similarity(z, table[y], dim=1)) * has).sum() / has.sum().clamp(min=1)
'''
#: a FedAvg subclass: it sends the client's whole model
PROX = '''\
import dataclasses

import torch.nn.functional as F

from fedlib.algorithms.fedavg import FedAvg
from fedlib.validation import Interval


@dataclasses.dataclass(frozen=True)
class ProxLike(FedAvg):
    mu: float = 0.01
    CONSTRAINTS = {"mu": Interval(0, None)}

    def extras(self, msg):
        return {k: v for k, v in msg.items() if k.startswith("w.")}

    def local_loss(self, out, y, extras, teachers, params):
        prox = sum(((p - extras["w." + n]) ** 2).sum() for n, p in params.items())
        return F.cross_entropy(out[0], y) + 0.5 * self.mu * prox
'''


@pytest.fixture
def real_archive(monkeypatch):
    """The repository's run archive (the 31 methods' converged runs), not the tests' empty one."""
    monkeypatch.setattr(archive, "ARCHIVE", paths.ARCHIVE)


@pytest.fixture
def outside(tmp_path):
    """A folder outside the repository holding the author's method file."""
    folder = tmp_path / "my_research"
    folder.mkdir()
    (folder / "cosine_pull.py").write_text(COSINE)
    return folder


_WRITES: list | None = None   # where the audit hook records the paths opened for writing, while a test records


def _audit(event, args):
    if _WRITES is None:
        return
    if event == "open":
        path, mode, flags = args
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
            (isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
        if writing and isinstance(path, (str, bytes, os.PathLike)):
            _WRITES.append(os.path.abspath(os.fsdecode(path)))
    elif event in ("os.mkdir", "os.rename", "os.replace", "os.remove", "shutil.rmtree"):
        _WRITES.append(os.path.abspath(os.fsdecode(args[0])))


sys.addaudithook(_audit)


@pytest.fixture
def repository_untouched():
    """Within it, every file this process opens for writing (and every folder it makes, every file it renames or
    removes) is recorded; afterwards none may lie in the repository (bytecode caches aside). Other people and jobs
    may write in the same tree meanwhile, so the repository's own status is no witness; the process's writes are."""
    global _WRITES
    _WRITES = []
    try:
        yield
        inside = sorted({p for p in _WRITES if Path(p).is_relative_to(ROOT) and "__pycache__" not in Path(p).parts})
        assert not inside, f"wrote in the repository: {inside[:5]}"
    finally:
        _WRITES = None


def test_the_write_record_sees_files_written_folders_made_and_files_replaced(tmp_path):
    global _WRITES
    _WRITES = []
    try:
        (tmp_path / "a.txt").write_text("x")
        (tmp_path / "sub").mkdir()
        os.replace(tmp_path / "a.txt", tmp_path / "sub" / "b.txt")
        (tmp_path / "sub" / "b.txt").read_text()
        seen = list(_WRITES)
    finally:
        _WRITES = None
    assert seen == [str(tmp_path / "a.txt"), str(tmp_path / "sub"), str(tmp_path / "a.txt")]


def test_a_method_file_from_outside_is_ranked_beside_the_archived_methods_at_the_same_round(
        outside, tmp_path, real_archive, repository_untouched):
    yours = Y.load(str(outside / "cosine_pull.py"))
    assert yours.key == "user:cosine_pull" and yours.label == "cosine_pull (yours)" and yours.rule == "head"
    plan = Y.plan(yours, "smoke", rounds=1, settings=["dir"], results_dir=tmp_path / "results")
    result = Y.compare(plan, workers=0, progress=False)
    assert not result.failed and not result.missing

    (cfg, seed), = Y.jobs(plan)   # its one run, in the results folder the test chose (never the repository's)
    assert cfg["algorithm"]["source"] == str(outside / "cosine_pull.py") and cfg["train"]["rounds"] == 1
    assert (tmp_path / "results" / run_id(cfg, seed) / "summary.json").is_file()
    assert not (ROOT / "results" / run_id(cfg, seed)).exists()

    ranked = result.ranked   # beside the 30 built-in methods that run on dir (FedMPS does not)
    assert "cosine_pull (yours)" in ranked.index and {"FedAvg", "FedProto", "MP-FedCL"} <= set(ranked.index)
    assert len(ranked) == 31 and ranked.loc["cosine_pull (yours)", "rule"] == "head"

    # every built-in method read from its archived 100-round run at round 1, the method's own budget
    archived = results.rounds(Y.configs(plan)[("dir", "fedavg")], 0)
    assert len(archived) >= 100
    fedavg = result.table[result.table.method == "fedavg"].iloc[0]
    assert fedavg["round"] == 1 and fedavg["best"] == pytest.approx(100 * archived[0]["acc"]["acc_head"]["weighted"])
    assert set(result.table["round"]) == {1}
    assert "read at round 1 of their 100" in result.caption() and "not the converged one" in result.caption()

    cd = next(fig for fig, _, name in result.figures if name == "cd")
    labels = [t.get_text() for t in cd.axes[0].texts]
    assert any(t.startswith("cosine_pull (yours) (") for t in labels) and any(t.startswith("FedAvg (") for t in labels)
    assert "every method at round 1" in cd.axes[0].get_title()
    mine = next(t for t in cd.axes[0].texts if t.get_text().startswith("cosine_pull (yours)"))
    assert mine.get_fontweight() == "bold"   # highlighted

    land = result.landing.loc["PFLlib Dir(0.1)"]
    assert land["rank"].endswith(" of 31") and land["round"] == 1
    (claim,) = result.claims
    assert claim.verdict == "inconclusive" and "smoke-profile evidence only" in claim.note

    written = result.save(tmp_path / "out")
    assert "cosine_pull (yours)" in (tmp_path / "out" / "ranked.md").read_text()
    assert {p.name for p in written} >= {"ranked.md", "cd.png", "dir_communication.png", "dir_time.png"}


@pytest.mark.slow
def test_the_command_checks_trains_on_every_setting_and_ranks_it_writing_nothing_in_the_repository(
        outside, tmp_path, real_archive, capsys, repository_untouched):
    source = str(outside / "cosine_pull.py")
    argv = ["--method", source, "--profile", "smoke", "--results-dir", str(tmp_path / "results"), "--out",
            str(tmp_path / "out"), "--workers", "1"]   # one worker process: it imports the method from its file
    assert Y.main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("cosine_pull (cosine_pull.py, SHA-256 ") and "contract check passed" in out.splitlines()[0]
    plan = Y.plan(Y.load(source), "smoke", results_dir=tmp_path / "results")
    assert Y.runs_on(plan) == ["pat", "dir", "nway", "hetero"]   # prototypes: every setting, hetero too
    for cfg, seed in Y.jobs(plan):
        assert cfg["train"]["rounds"] == 2
        assert (tmp_path / "results" / run_id(cfg, seed) / "summary.json").is_file()
    ranked = (tmp_path / "out" / "ranked.md").read_text()
    assert "| cosine_pull (yours) | head |" in ranked and "| FedAvg | head |" in ranked
    assert all(f"{s} rank" in ranked for s in ("pat", "dir", "nway", "hetero"))
    assert (tmp_path / "out" / "cd.png").is_file() and (tmp_path / "out" / "cd_homogeneous.png").is_file()
    assert "read at round 2 of their 100" in out
    # a second run reads its finished runs: nothing trains
    assert Y.main(argv) == 0
    assert "to run" not in capsys.readouterr().err


def test_a_method_sending_its_model_skips_heterogeneous_models_and_says_why(tmp_path):
    (tmp_path / "prox_like.py").write_text(PROX)
    plan = Y.plan(Y.load(str(tmp_path / "prox_like.py")), "smoke", results_dir=tmp_path / "results")
    assert Y.runs_on(plan) == ["pat", "dir", "nway"]
    why = Y.why_not(plan, "hetero")
    assert why.startswith("sends w.* (weights of the client's own model") and "models differ here" in why
    table = Y.settings_table(plan)
    assert table.loc["Heterogeneous models (ht0_lite)", "runs"] == f"no: {why}"
    assert [c["partition"]["scheme"] for c, _ in Y.jobs(plan)] == ["pathological", "dirichlet", "nway_kshot"]
    assert [s for _, s in Y.jobs(plan)] == [0, 0, 1234]   # each setting's first archived seed


def test_a_method_on_low_level_features_runs_only_where_the_model_exposes_them(tmp_path):
    low = GOOD.replace("    lam: float = 1.0", "    lam: float = 1.0\n    level = \"low\"")
    (tmp_path / "low_level.py").write_text(low)
    plan = Y.plan(Y.load(str(tmp_path / "low_level.py")), "smoke", results_dir=tmp_path / "results")
    assert Y.runs_on(plan) == ["nway"]
    assert Y.why_not(plan, "pat") == ("its prototypes live on the 'low' feature level, which fedavg_cnn does not "
                                            "expose")


@pytest.mark.parametrize("stem", ["missing_hook", "wrong_shape", "nan_loss", "syntax_error", "no_class"])
def test_a_broken_method_file_stops_the_command_with_one_line_before_any_training(tmp_path, monkeypatch, capsys, stem):
    from fedlib import grid, runner

    def refuse(*args, **kwargs):
        raise AssertionError("trained before the contract check")

    monkeypatch.setattr(grid, "run_many", refuse)
    monkeypatch.setattr(runner, "run_many", refuse)
    text, expected = BROKEN[stem]
    (tmp_path / f"{stem}.py").write_text(text)
    rc = Y.main(["--method", str(tmp_path / f"{stem}.py"), "--profile", "smoke", "--results-dir",
                         str(tmp_path / "results")])
    out = capsys.readouterr().out
    assert rc == 2 and out.count("\n") == 1 and out.startswith(f"error: {expected}"), out
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("options, line", [
    (["--profile", "paper"], "error: --profile: got 'paper'; allowed: one of smoke, quick, converged"),
    (["--rounds", "101"], "error: rounds: got 101; allowed: at most 100, the rounds of the archived benchmark's runs"),
    (["--seeds", "7"], "error: seeds: got [7]; allowed: a subset of the archived benchmark's seeds [0, 1, 2]"),
    (["--rule", "nearest"], "error: --rule: got 'nearest'; allowed: one of 'head', 'proto'"),
    (["--methods", "fedprotoo"], "error: methods: got ['fedprotoo']"),
])
def test_a_budget_that_cannot_be_compared_is_refused_in_one_line(outside, tmp_path, capsys, options, line):
    argv = ["--method", str(outside / "cosine_pull.py"), "--profile", "smoke", "--results-dir",
            str(tmp_path / "results"), *options]
    assert Y.main(argv) == 2
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith(line), out


def test_the_command_needs_a_method_and_the_benchmarks_command_points_to_it(capsys):
    with pytest.raises(SystemExit) as exc:
        Y.main(["--out", "somewhere"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == ("python -m fedlib.yours: error: the following arguments are "
                                                        "required: --method")
    assert B.main(["--method", "mine.py"]) == 2
    assert capsys.readouterr().out == ("error: --method: got 'mine.py'; allowed: nothing here: your method runs with "
                                       "`python -m fedlib.yours --method FILE`\n")


def test_rows_are_read_at_the_budgets_round():
    recs = [{"round": r, "acc": {"acc_head": {"weighted": w}}, "up_params": 10, "down_params": r, "seconds": s}
            for r, w, s in [(1, 0.2, 1.0), (2, 0.6, 3.0), (3, 0.4, 2.0), (4, 0.9, 9.0)]]
    row = Y._at_round(recs, "acc_head", 3)
    assert row == {"best": pytest.approx(60.0), "last": pytest.approx(40.0), "at": 3, "floats": pytest.approx(12.0),
                   "seconds": pytest.approx(2.0)}
    assert Y._at_round(recs, "acc_proto", 3) is None


def _synthetic(monkeypatch, mine: float, theirs: float):
    """Every run "finished" with a flat 100-round curve: the method at ``mine`` + 0.1 x seed, every other at
    ``theirs`` + 0.1 x seed (no file read)."""
    def rounds(cfg, seed, archive_root=None):
        level = mine if cfg["algorithm"]["name"].startswith("user:") else theirs
        acc = level + 0.001 * (seed % 10)
        return [{"round": r + 1, "acc": {m: {"mean": acc, "weighted": acc, "std": 0.0}
                                         for m in ("acc_head", "acc_proto")}, "up_params": 5, "down_params": 5,
                 "seconds": 1.0} for r in range(cfg["train"]["rounds"])]
    monkeypatch.setattr(results, "rounds", rounds)


@pytest.mark.parametrize("mine, verdict", [(0.9, "supported"), (0.3, "not supported")])
def test_under_the_converged_budget_better_is_judged_by_the_verdict_rule(tmp_path, monkeypatch, mine, verdict):
    _synthetic(monkeypatch, mine, 0.5)
    (tmp_path / "cosine_pull.py").write_text(COSINE)
    plan = Y.plan(Y.load(str(tmp_path / "cosine_pull.py")), "converged", settings=["dir"],
                       results_dir=tmp_path / "results")
    assert plan.budget_rounds == 100 and plan.equal_rounds and plan.setting_seeds("dir") == [0, 1, 2]
    result = Y.compare(plan, train_missing=False)
    (claim,) = result.claims
    assert claim.verdict == verdict and claim.profile == "converged", claim.note
    assert "read at round 100" in result.caption() and "not the converged one" not in result.caption()


def test_the_notebooks_check_the_method_file_in_their_set_up_cell(tmp_path, monkeypatch):
    from fedlib import runner
    from fedlib import quickstart

    monkeypatch.setenv("FEDLIB_ROOT", str(tmp_path / "root"))
    monkeypatch.setattr(runner, "run_many", lambda *a, **k: pytest.fail("trained before checking its parameters"))
    text, expected = BROKEN["nan_loss"]
    (tmp_path / "nan_loss.py").write_text(text)
    def benchmark_notebook(profile, method_file=None):
        Y.attach(B.notebook(profile), method_file)

    for open_ in (benchmark_notebook, quickstart.notebook):
        with pytest.raises(ParameterError) as err:
            open_("smoke", method_file=str(tmp_path / "nan_loss.py"))
        (line,) = err.value._render_traceback_()
        assert line == f"ParameterError: {expected}"
        with pytest.raises(ParameterError, match=r"^method_file: got .*missing\.py'; allowed: an existing method "):
            open_("smoke", method_file=str(tmp_path / "missing.py"))
    with pytest.raises(ParameterError, match=r"^method_rule: got 'proto'; allowed: None without a method_file$"):
        Y.attach(B.notebook("smoke"), None, "proto")
    with pytest.raises(ParameterError, match=r"^profile: got 'nonsense'; allowed: one of smoke, quick"):
        quickstart.notebook("nonsense")
    with pytest.raises(ParameterError, match=r"^workers: got -1"):
        quickstart.notebook("smoke", workers=-1)


def test_the_benchmark_notebooks_last_cell_without_a_method_file_says_how(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FEDLIB_ROOT", str(tmp_path / "root"))
    nb = B.notebook("smoke")
    capsys.readouterr()
    assert Y.show(nb) is None
    assert capsys.readouterr().out.startswith("No method file: set method_file in the parameters cell")
    assert nb.section.parts == [] or all("yours" not in p for p in nb.section.parts)


def test_an_unknown_budget_or_setting_is_one_line(outside, tmp_path):
    yours = Y.load(str(outside / "cosine_pull.py"))
    with pytest.raises(ConfigError, match=r"^settings: got \['moon'\]; allowed: a non-empty list of pat, dir, nway, "):
        Y.plan(yours, "smoke", settings=["moon"], results_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"^--profile: got 'extended'; allowed: one of smoke, quick, converged"):
        Y.plan(yours, "extended", results_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"^algorithm \(user:cosine_pull\)\.lam: got -2"):
        Y.load(str(outside / "cosine_pull.py"), hyperparameters={"lam": -2})


def test_the_leakage_row_needs_a_budget_whose_models_are_at_hand(outside, capsys):
    assert Y.main(["--method", str(outside / "cosine_pull.py"), "--profile", "converged", "--leakage"]) == 2
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("error: --leakage: got 'converged'; allowed: a budget of smoke, "
                                                   "quick (the attacks need every method's trained model")


def test_the_leakage_row_puts_the_method_under_the_studys_attacks(outside, tmp_path, monkeypatch):
    monkeypatch.setenv("FEDLIB_ROOT", str(tmp_path / "root"))
    yours = Y.load(str(outside / "cosine_pull.py"))
    head = Y.leakage(yours, "smoke", tmp_path / "results", workers=0, progress=False)
    mine = head[head.method == "cosine_pull (yours)"].iloc[0]
    assert mine["holds"] == "prototypes" and mine["best realistic attack"].startswith("decoder")
    assert {"FedAvg", "FedProto"} <= set(head.method) and (head.method == "—").sum() == 3   # the three references


#: what a tester tries beyond the issue's three broken files, each with the start of its one line: a hook with a
#: signature the library cannot call, a loss term of the wrong kind, an upload in another dtype than the models',
#: a FedAvg-style loss with a wrong signature, a helper module beside the file (a method is one file)
_FINISH = '''
    def finish(self, ctx, cid, client, msg, data, rnd, task, model, sums, metrics):
        state, up, metrics = super().finish(ctx, cid, client, msg, data, rnd, task, model, sums, metrics)
        return state, {**up, "protos": up["protos"].double()}, metrics
'''
TRIED = {
    "too_few_parameters": (COSINE.replace("regulariser(self, z, y, table, present)", "regulariser(self, z, y)"),
                           "too_few_parameters.py: regulariser: takes (self, z, y); expected regulariser(self, z, y, "
                           "table, present)"),
    "extra_parameter": (COSINE.replace("table, present)", "table, present, tau)"),
                        "extra_parameter.py: regulariser: takes (self, z, y, table, present, tau); expected "
                        "regulariser(self, z, y, table, present)"),
    "local_loss_signature": (PROX.replace("local_loss(self, out, y, extras, teachers, params)",
                                          "local_loss(self, out, y)"),
                             "local_loss_signature.py: local_loss: takes (self, out, y); expected local_loss(self, "
                             "out, y, extras, teachers, params)"),
    "per_sample_loss": (COSINE.replace(").sum() / has.sum().clamp(min=1)", ")"),
                        "per_sample_loss.py: regulariser: returned a tensor of shape (8,) (round 2, client 0); "
                        "expected a number or a one-element float tensor"),
    "no_loss": (COSINE.replace("return self.lam *", "self.lam *"),
                "no_loss.py: regulariser: returned None (round 2, client 0); expected a number or a one-element "
                "float tensor"),
    "float64_upload": (COSINE + _FINISH, "float64_upload.py: finish: upload (round 1, client 0): 'protos' is "
                                         "torch.float64; expected torch.float32, the models' dtype"),
    "uses_helper": (COSINE.replace("import dataclasses\n", "import dataclasses\n\nfrom helper import LAM\n"),
                    "uses_helper.py: import: raised ModuleNotFoundError: No module named 'helper' (helper.py beside "
                    "it is not imported: a method is one file"),
}


@pytest.mark.parametrize("stem", sorted(TRIED))
def test_what_a_tester_tries_is_one_line_naming_the_hook_before_any_training(tmp_path, monkeypatch, capsys, stem):
    from fedlib import grid, runner

    monkeypatch.setattr(grid, "run_many", lambda *a, **k: pytest.fail("trained before the contract check"))
    monkeypatch.setattr(runner, "run_many", lambda *a, **k: pytest.fail("trained before the contract check"))
    monkeypatch.setattr(results, "run_many", lambda *a, **k: pytest.fail("trained before the contract check"))
    text, expected = TRIED[stem]
    (tmp_path / f"{stem}.py").write_text(text)
    (tmp_path / "helper.py").write_text("LAM = 1.0\n")
    rc = Y.main(["--method", str(tmp_path / f"{stem}.py"), "--profile", "smoke", "--results-dir",
                 str(tmp_path / "results")])
    out = capsys.readouterr().out
    assert rc == 2 and out.count("\n") == 1 and out.startswith(f"error: {expected}"), out
    assert not (tmp_path / "results").exists()


def test_readmes_first_section_points_a_newcomer_to_a_command_that_runs_their_method():
    first = (ROOT / "README.md").read_text().split("\n## ", 1)[0]
    commands = [c for c in first.replace("\n", " ").split("`") if c.startswith("python -m ")]
    assert commands and all(c.startswith("python -m fedlib.yours --method ") for c in commands if "--method" in c)
    assert any("--method" in c for c in commands)
