"""Opening a notebook in JupyterLab must not change it: its stored kernelspec and ``language_info`` are what
JupyterLab writes once the ``python3`` kernel has started (the kernel's own kernel_info reply). The browser
test (tests/papers/test_notebooks_browser.py) checks the same in Chromium; this one asks the kernel directly."""

import json

import pytest

from tests.conftest import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.fixture(scope="module")
def kernel_language_info():
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3")
    try:
        kc.kernel_info()
        return kc.get_shell_msg(timeout=60)["content"]["language_info"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_a_notebook_stores_what_jupyterlab_writes_for_its_kernel(path, kernel_language_info):
    meta = json.loads(path.read_text())["metadata"]
    assert meta["kernelspec"] == {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    assert meta["language_info"] == kernel_language_info


JUPYTEXT = {"formats": "ipynb,py:percent",  # the pair (tests/papers/test_notebook_pairs.py)
            # the .py header names no jupytext version, so saving with another release leaves it unchanged
            "notebook_metadata_filter": "-jupytext.text_representation.jupytext_version"}


def test_a_notebook_stores_its_kernel_and_its_jupytext_pairing_only():
    metas = {p.stem: json.loads(p.read_text())["metadata"] for p in NOTEBOOKS}
    for name, meta in metas.items():
        assert sorted(meta) == ["jupytext", "kernelspec", "language_info"], name
        assert meta["jupytext"] == JUPYTEXT, name
    assert len({json.dumps(m["language_info"], sort_keys=True) for m in metas.values()}) == 1, "one language_info"
