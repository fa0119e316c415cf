"""Every notebook parameter is checked in the set-up cell, before any work, and a bad one stops the notebook with
one line (no traceback through fedlib); a kernel that imports another checkout's fedlib stops the same way."""

import json
import os
import subprocess
import sys

import pytest

from fedlib.papers import benchmark, fedic, fedmps, gfpl, mpfedcl, privacy, protonorm
from fedlib.study.notebook import ParameterError, checkout_problem
from tests.conftest import ROOT

STUDIES = {"benchmark": benchmark, "fedic": fedic, "fedmps": fedmps, "gfpl": gfpl, "mpfedcl": mpfedcl,
           "privacy": privacy, "protonorm": protonorm}
BAD = [({"profile": "nonsense"}, "profile: got 'nonsense'"), ({"seeds": "notalist"}, "seeds: got 'notalist'"),
       ({"rounds": "abc"}, "rounds: got 'abc'"), ({"rounds": 2.5}, "rounds: got 2.5"),
       ({"workers": -1}, "workers: got -1"), ({"methods": ["fedprotoo"]}, "did you mean 'fedprotoo' -> 'fedproto'"),
       ({"device": "gpu"}, "device: got 'gpu'"), ({"embedding": "foo"}, "embedding: got 'foo'"),
       ({"backend": "nope"}, "--backend: got 'nope'")]


@pytest.mark.parametrize("name", sorted(STUDIES))
def test_every_bad_parameter_is_one_line_in_the_set_up_cell(name, monkeypatch):
    import inspect

    from fedlib import runner

    monkeypatch.setattr(runner, "run_many", lambda *a, **k: pytest.fail("trained before checking its parameters"))
    open_ = STUDIES[name].notebook
    takes = set(inspect.signature(open_).parameters)
    for change, text in BAD:
        if not set(change) <= takes:
            continue
        with pytest.raises(ParameterError) as err:
            open_(**{"profile": "smoke", **change})
        (line,) = err.value._render_traceback_()
        assert text in line and "\n" not in line and line.startswith("ParameterError: ")


def test_a_kernel_importing_another_checkouts_fedlib_says_which_and_how_to_fix_it(tmp_path):
    other = tmp_path / "clone"
    (other / "fedlib").mkdir(parents=True)
    (other / "fedlib" / "__init__.py").write_text("")
    (other / "notebooks").mkdir()
    problem = checkout_problem(other / "notebooks")
    assert problem.startswith(f"this notebook's checkout is {other}, but the kernel imports fedlib from {ROOT}")
    assert f"run `make setup` in {other}" in problem
    assert checkout_problem(ROOT / "notebooks") is None and checkout_problem(tmp_path) is None


@pytest.mark.slow
def test_papermill_stops_at_the_set_up_cell_with_one_line(tmp_path):
    out = tmp_path / "out.ipynb"
    proc = subprocess.run([sys.executable, "-m", "papermill", str(ROOT / "notebooks" / "fedic.ipynb"), str(out),
                           "-p", "embedding", "foo", "-k", "python3", "--cwd", str(ROOT / "notebooks")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0
    cells = [c for c in json.loads(out.read_text())["cells"] if c["cell_type"] == "code"]
    failed = [c for c in cells if any(o.get("output_type") == "error" for o in c.get("outputs", []))]
    (cell,) = failed
    assert "I.notebook(" in "".join(cell["source"])          # the set-up cell, before any training cell ran
    (err,) = [o for o in cell["outputs"] if o.get("output_type") == "error"]
    assert err["traceback"] == ["ParameterError: embedding: got 'foo'; allowed: one of 'tsne', 'umap'"]
    later = cells[cells.index(cell) + 1:]
    assert all(c.get("execution_count") is None for c in later)


@pytest.mark.slow
def test_a_kernel_in_notebooks_imports_this_checkouts_fedlib_whatever_is_installed(tmp_path):
    """``notebooks/fedlib`` links to ``../fedlib``: a kernel started in ``notebooks/`` (JupyterLab, nbval, papermill's
    ``--cwd``) finds it on the working directory before the installed fedlib (here another "clone" in the user
    site-packages, as ``make setup`` in a second clone, since deleted, would leave it)."""
    import nbformat

    assert (ROOT / "notebooks" / "fedlib").resolve() == ROOT / "fedlib"
    site = tmp_path / "user" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    (site / "fedlib").mkdir(parents=True)
    (site / "fedlib" / "__init__.py").write_text("raise ImportError('the fedlib of another clone')\n")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import pathlib, fedlib\nprint(pathlib.Path(fedlib.__file__).resolve())")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "which.ipynb")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-m", "papermill", str(tmp_path / "which.ipynb"),
                           str(tmp_path / "out.ipynb"), "-k", "python3", "--cwd", str(ROOT / "notebooks")],
                          capture_output=True, text=True, timeout=300,
                          env={**env, "PYTHONUSERBASE": str(tmp_path / "user")})
    assert proc.returncode == 0, proc.stderr[-2000:]
    (cell,) = nbformat.read(tmp_path / "out.ipynb", 4).cells
    assert cell.outputs[0]["text"].strip() == str(ROOT / "fedlib" / "__init__.py")
