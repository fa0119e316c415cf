"""Every notebook is one source in two files: ``notebooks/<name>.ipynb`` (outputs, what JupyterLab opens) paired
with the jupytext percent script ``notebooks/<name>.py`` (what an editor and a diff read). Editing either one and
running ``jupytext --sync notebooks/*.ipynb`` (or saving in JupyterLab, whose jupytext contents manager writes
both) brings the other up to date; these tests fail when a commit holds one side edited and the other not."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
FORMATS = "ipynb,py:percent"
SYNC = "run `jupytext --sync notebooks/*.ipynb`"


def cells(nb) -> list[tuple[str, str, dict]]:
    return [(c.cell_type, c.source, dict(c.metadata)) for c in nb.cells]


def first_line(source: str) -> str:
    return repr(source.strip().splitlines()[0][:60]) if source.strip() else "an empty cell"


def difference(name: str, script: list, notebook: list) -> str | None:
    """One line naming the first cell where the script's cells and the notebook's differ, or None."""
    for i, (s, n) in enumerate(zip(script, notebook, strict=False)):
        if s != n:
            what = ("type" if s[0] != n[0] else "source" if s[1] != n[1] else f"metadata {s[2]} vs {n[2]}")
            return (f"notebooks/{name}: cell {i} ({n[0]}, {first_line(n[1])} in the .ipynb) differs in its {what} "
                    f"between {name}.py and {name}.ipynb; {SYNC}")
    if len(script) != len(notebook):
        i = min(len(script), len(notebook))
        longer, cell = ("py", script[i]) if len(script) > len(notebook) else ("ipynb", notebook[i])
        return (f"notebooks/{name}: {name}.py has {len(script)} cells, {name}.ipynb {len(notebook)}; the first one "
                f"only the .{longer} has is cell {i} ({cell[0]}, {first_line(cell[1])}); {SYNC}")
    return None


def pair_difference(path) -> str | None:
    """Read both sides of a pair as jupytext does: the .ipynb written to the percent format and read back keeps
    exactly what the .py can hold (cell types, sources, the cell metadata jupytext keeps, e.g. tags)."""
    import jupytext

    script = path.with_suffix(".py")
    if not script.exists():
        return (f"notebooks/{path.name} has no paired notebooks/{script.name}; run "
                f"`jupytext --set-formats {FORMATS} {path}`")
    notebook = jupytext.read(path)
    expected = jupytext.reads(jupytext.writes(notebook, "py:percent"), "py:percent")
    return difference(path.stem, cells(jupytext.read(script)), cells(expected))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_a_notebook_is_paired_with_its_percent_script(path):
    meta = json.loads(path.read_text())["metadata"]
    assert meta.get("jupytext", {}).get("formats") == FORMATS, f"notebooks/{path.name}: jupytext formats not {FORMATS}"
    message = pair_difference(path)
    assert message is None, message


def test_every_script_in_notebooks_has_its_notebook():
    scripts = {p.stem for p in (ROOT / "notebooks").glob("*.py")}
    assert scripts == {p.stem for p in NOTEBOOKS}, "a notebooks/*.py without its .ipynb (or the reverse)"


def test_a_drifted_pair_is_named_with_its_first_differing_cell(tmp_path):
    """Editing one side only fails with one line naming the notebook and the cell (a copy, not the repository)."""
    source = NOTEBOOKS[0]
    for suffix in (".ipynb", ".py"):
        (tmp_path / (source.stem + suffix)).write_bytes(source.with_suffix(suffix).read_bytes())
    script = tmp_path / f"{source.stem}.py"
    assert pair_difference(tmp_path / source.name) is None
    text = script.read_text()
    marker = "\n# %% tags=[\"parameters\"]\n"
    script.write_text(text.replace(marker, marker + "extra = 1\n", 1))
    message = pair_difference(tmp_path / source.name)
    assert message is not None and "\n" not in message
    assert message.startswith(f"notebooks/{source.stem}: cell ") and "source" in message
    script.write_text(text.replace(marker, "\n# %%\n", 1))
    assert "metadata" in pair_difference(tmp_path / source.name)
    script.write_text(text + "\n# %%\nprint(1)\n")
    assert "the first one only the .py has" in pair_difference(tmp_path / source.name)
