"""Shared by the notebook generators (``scripts/make_<paper>_notebook.py``): write a list of ``(kind, source)``
cells as ``notebooks/<name>.ipynb``, the cell that starts with ``import os`` + ``profile`` tagged ``parameters``
(papermill injects the profile there). The notebook metadata is what JupyterLab writes for the ``python3`` kernel
before a cell runs, so opening and saving a notebook leaves it byte-identical (tests/test_notebooks_browser.py)."""

from pathlib import Path

import nbformat

MD, CODE = "markdown", "code"


def write(cells: list[tuple[str, str]], name: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
                   "language_info": {"name": "python"}}
    for kind, src in cells:
        cell = nbformat.v4.new_markdown_cell(src) if kind == MD else nbformat.v4.new_code_cell(src)
        if kind == CODE and src.startswith("import os\n\nprofile"):
            cell.metadata["tags"] = ["parameters"]
        nb.cells.append(cell)
    path = Path(__file__).resolve().parents[1] / "notebooks" / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path
