"""Shared by the notebook generators (``scripts/make_<paper>_notebook.py``): write a list of ``(kind, source)``
cells as ``notebooks/<name>.ipynb``, the cell that starts with ``import os`` + ``profile`` tagged ``parameters``
(papermill injects the profile there). The notebook metadata is what JupyterLab writes for the ``python3`` kernel
once it has started (its kernelspec and the kernel's own ``language_info``, Python's version included), so opening
and saving a notebook leaves it byte-identical (tests/papers/test_notebooks_browser.py,
tests/papers/test_notebook_metadata.py)."""

import platform
from pathlib import Path

import nbformat

MD, CODE = "markdown", "code"


def metadata() -> dict:
    """What JupyterLab stores for this Python's ``python3`` kernel (ipykernel's kernel_info reply)."""
    return {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
            "language_info": {"codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py",
                              "mimetype": "text/x-python", "name": "python", "nbconvert_exporter": "python",
                              "pygments_lexer": "ipython3", "version": platform.python_version()}}


def write(cells: list[tuple[str, str]], name: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata = metadata()
    for kind, src in cells:
        cell = nbformat.v4.new_markdown_cell(src) if kind == MD else nbformat.v4.new_code_cell(src)
        if kind == CODE and src.startswith("import os\n\nprofile"):
            cell.metadata["tags"] = ["parameters"]
        nb.cells.append(cell)
    path = Path(__file__).resolve().parents[1] / "notebooks" / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path
