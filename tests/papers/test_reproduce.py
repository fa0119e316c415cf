"""The notebook runner, on two tiny notebooks: ``bad`` raises, ``good`` writes a report section."""

import contextlib
import io
import json
import types
import re

import pytest

from fedlib.__main__ import main
from fedlib.reproduce import Outcome, assemble, reproduce, select_notebooks
from fedlib.validation import ConfigError
from tests.conftest import DATA, ROOT

NOTEBOOKS = DATA / "notebooks"


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """One smoke run of both fixture notebooks (each notebook costs a kernel start: run them once)."""
    root = tmp_path_factory.mktemp("out")
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out):
        # were the profile not injected, the notebooks would fall back to this and write to figures/
        mp.setenv("FEDLIB_PROFILE", "quick")
        code = reproduce("smoke", notebooks=NOTEBOOKS, root=root, progress=False)
    return code, root, out.getvalue()


@pytest.mark.slow
def test_failure_does_not_stop_the_batch(smoke_run):
    code, root, out = smoke_run
    assert code == 1
    executed = root / "results" / "executed" / "smoke"
    assert (executed / "bad.ipynb").is_file() and (executed / "good.ipynb").is_file()
    assert out.index("[1/2] bad") < out.index("[2/2] good: ok")  # sorted, and good ran after bad failed
    assert "1 passed, 1 failed" in out
    status = json.loads((executed / "status.json").read_text())
    assert [(s["name"], s["status"]) for s in status] == [("bad", "FAILED"), ("good", "ok")]


@pytest.mark.slow
def test_report_has_both_sections_and_the_failure(smoke_run):
    _, root, _ = smoke_run
    assert not (root / "REPORT.md").exists()  # smoke writes to the scratch folder
    text = (root / "results" / "smoke" / "REPORT.md").read_text()
    assert text.startswith("# Reproduction report") and "Run with profile `smoke`" in text
    assert re.search(r"\| bad \| FAILED \| \d+\.\d \|", text) and re.search(r"\| good \| ok \| \d+\.\d \|", text)
    assert text.index("## bad: FAILED") < text.index("## Good fixture")
    assert "ValueError: boom under smoke" in text
    assert str(root / "results" / "executed" / "smoke" / "bad.ipynb") in text
    assert "| fedavg | 84.21 ± 3.39 | 85.00 ± 1.00 | +0.79 |" in text
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert links and all(((root / "results" / "smoke") / link).is_file() for link in links)


@pytest.mark.slow
def test_profile_is_injected_and_smoke_output_is_scratch(smoke_run):
    _, root, _ = smoke_run
    nb = json.loads((root / "results" / "executed" / "smoke" / "good.ipynb").read_text())
    injected = [c for c in nb["cells"] if "injected-parameters" in c["metadata"].get("tags", [])]
    assert len(injected) == 1 and 'profile = "smoke"' in "".join(injected[0]["source"])
    assert nb["metadata"]["papermill"]["parameters"] == {"profile": "smoke"}
    figures = root / "results" / "smoke" / "figures" / "good"
    assert {p.name for p in figures.iterdir()} == {"line.png", "report.md", "report.json"}
    assert json.loads((figures / "report.json").read_text())["profile"] == "smoke"
    assert not (root / "figures").exists()


@pytest.mark.slow
def test_root_outside_the_checkout_runs_the_studies(smoke_run):
    # the fixture root is a temporary folder: the studies' params resolve from the checkout and their
    # runs are cached under the root (a plan built from a relative params path failed here before)
    _, root, _ = smoke_run
    nb = json.loads((root / "results" / "executed" / "smoke" / "good.ipynb").read_text())
    out = "".join("".join(o.get("text", "")) for c in nb["cells"] for o in c.get("outputs", []))
    assert "cwd is the root: True" in out
    assert "study configs: 3 2" in out  # smoke: Table III's 3 methods; Table 1's 2 methods x 1 partition
    assert not str(root).startswith(str(ROOT))


def test_select_notebooks_sorted_and_filtered(tmp_path):
    assert [p.stem for p in select_notebooks(NOTEBOOKS)] == ["bad", "good"]
    assert [p.stem for p in select_notebooks(NOTEBOOKS, ["good.ipynb"])] == ["good"]
    with pytest.raises(ConfigError, match="nope"):
        select_notebooks(NOTEBOOKS, ["nope"])
    assert reproduce("smoke", notebooks=tmp_path, root=tmp_path, progress=False) == 1  # nothing to run
    with pytest.raises(ConfigError, match="profile"):
        reproduce("fast", notebooks=NOTEBOOKS, root=tmp_path)


def test_cli_rejects_unknown_notebook_before_running(tmp_path, capsys):
    code = main(["reproduce", "--profile", "smoke", "--notebooks", str(NOTEBOOKS), "--root", str(tmp_path),
                 "--only", "nope"])
    assert code == 2 and "--only: got 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_assemble_keeps_earlier_sections_and_relinks(tmp_path):
    section = "## Paper A\n\n![fig](results/smoke/figures/a/x.png) and [site](https://example.org)\n"
    outcomes = [Outcome("a", "not run", None, None, section=section),
                Outcome("b", "ok", 0.5, "results/executed/smoke/b.ipynb")]
    text = assemble(outcomes, "smoke", tmp_path)
    assert "| a | not run | — | — |" in text and "| b | ok | 0.5 | — |" in text
    assert "## Paper A\n\n_Not run this time; section from an earlier run._" in text
    assert "](../../results/smoke/figures/a/x.png)" in text and "](https://example.org)" in text
    assert "Ran without writing a report section" in text
    quick = assemble(outcomes, "quick", tmp_path)  # every profile's own report is in results/<profile>/
    assert "](../../results/smoke/figures/a/x.png)" in quick


def test_assemble_states_each_sections_profile_and_the_verdict_summary(tmp_path):
    from fedlib import claims as C

    texts = []
    ledger = [C.claim("A wins", "Table 1", "A 91.00 vs B 81.00", True, "paper", 3,
                      [C.compare("A - B", [91.0, 91.5, 90.5], [81.0, 81.5, 80.5])]),
              C.claim("A wins, short", "Table 1", "A 90.00", True, "quick", 1),
              C.claim("Sizes", "Supp.", "x", True, "paper", 1, construction="fixed by the model")]
    C.write(types.SimpleNamespace(text=texts.append, record=lambda **kw: None), ledger)
    new = "## Paper A (2025)\n\n_profile `quick` · commit abc_\n\n" + "\n\n".join(texts) + "\n"
    old = ("## Paper B\n\n_profile `paper` · commit def_\n\n**Claims ledger (1 supported).**\n\n"
           "| # | claim | source | evidence | verdict | note |\n|---|---:|---:|---:|---:|---:|\n"
           "| 1 | B wins | Table 2, paper protocol | B 1 | supported |  |\n")
    text = assemble([Outcome("a", "ok", 1.0, "x", section=new), Outcome("b", "not run", None, None, section=old)],
                    "quick", tmp_path)
    assert "Sections: a `quick`, b `paper`." in text.splitlines()[2]
    assert "| a | ok | 1.0 | quick |" in text and "| b | not run | — | paper |" in text
    assert ("| Paper A (2025) | quick | 1 | 0 | 1 | 1 | 0 | paper | this one |") in text
    assert ("| Paper B | paper | 1 | 0 | 0 | 0 | 0 | paper | an earlier one: re-render |") in text


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")),
                         ids=lambda p: p.name)
def test_stored_nbval_outputs_are_marked_run(path):
    """nbval compares a stored output only on a cell with an execution count; a stored output without
    one fails every ``make test`` as "Unrun reference cell has outputs" (and an output on an unmarked
    cell would be compared too, against the smoke profile's numbers)."""
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    checked = [c for c in cells if "".join(c["source"]).lstrip().startswith("# NBVAL_CHECK_OUTPUT")]
    assert checked, "the notebook holds no checked cell"
    for c in cells:
        if c["outputs"]:
            assert c in checked and isinstance(c["execution_count"], int), "".join(c["source"])[:80]
