"""Store the reference outputs nbval compares: run notebooks under the smoke profile and copy the
stdout of every cell marked ``# NBVAL_CHECK_OUTPUT`` into the notebook (other cells stay empty).

    python scripts/store_checked_outputs.py notebooks/mpfedcl.ipynb [more.ipynb ...]

Run it after changing what a checked cell prints, then read the diff: the stored text is the claim
``make test`` holds the notebook to.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

MARK = "# NBVAL_CHECK_OUTPUT"


def store(path: Path) -> int:
    source = nbformat.read(path, as_version=4)
    executed = nbformat.read(path, as_version=4)
    os.environ["FEDLIB_PROFILE"] = "smoke"  # the kernel imports the installed fedlib (`make setup`)
    NotebookClient(executed, timeout=1800, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    count = 0
    for cell, done in zip(source.cells, executed.cells, strict=True):
        if cell.cell_type != "code":
            continue
        if cell.source.lstrip().startswith(MARK):
            cell.outputs = [o for o in done.outputs if o.get("output_type") == "stream" and o.get("name") == "stdout"]
            # nbval compares only cells that were run in the reference (an execution count);
            # a stored output on a cell without one fails as "Unrun reference cell has outputs"
            cell.execution_count = done.execution_count
            count += 1
        else:
            cell.outputs, cell.execution_count = [], None
    nbformat.write(source, path)
    return count


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(f"{name}: stored the output of {store(Path(name))} checked cells")
