"""The notebooks as a person uses them: JupyterLab started as the README says, a notebook opened in Chromium
(Debian's, driven by Playwright; `make setup` installs both), Run All under the smoke profile.

Checks, per notebook: opening it leaves it clean (no unsaved change once the kernel is up, and the file on disk
byte-identical after an explicit save), the kernel runs every code cell to the end, no cell shows an error or
stderr output, and every cell that shows a figure (a call of a paper module's ``fig...`` function, e.g.
``M.fig5(nb)``) renders it as an image. A failing run saves a
screenshot as ``results/browser/<notebook>.png``.

``make test`` runs one notebook (:data:`DEFAULT`, the quickest under smoke); ``make test-browser`` runs all five
(``FEDLIB_BROWSER_NOTEBOOKS=all``, or a comma-separated list of names); ``pytest -m "not browser"`` leaves it out of
a quick loop. The server gets a fresh results root, so the notebook trains its runs instead of reading a cache.
Run All must end within ``FEDLIB_BROWSER_TIMEOUT`` seconds (default 900: a safety limit for a loaded machine, not a
speed target; the notebooks' smoke times are stated in their first cells).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT

CHROMIUM = os.environ.get("FEDLIB_CHROMIUM", "/usr/bin/chromium")
#: the README's command ("Study a paper interactively"); the test adds a free port, --no-browser and, as root,
#: --allow-root
LAB_COMMAND = "jupyter lab --ip 127.0.0.1 --IdentityProvider.token=''"
DEFAULT = "mpfedcl"
#: seconds Run All may take: a safety limit, not a speed target (the notebooks' first cells state their times)
RUN_TIMEOUT_S = int(os.environ.get("FEDLIB_BROWSER_TIMEOUT", 900))
ALL = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))

pytestmark = pytest.mark.browser


def chosen() -> list[str]:
    names = os.environ.get("FEDLIB_BROWSER_NOTEBOOKS", DEFAULT)
    return ALL if names == "all" else names.split(",")


def test_readme_starts_jupyterlab_as_this_test_does():
    assert f"\n{LAB_COMMAND}\n" in (ROOT / "README.md").read_text()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server at the checkout's root, started with the README's command and no PYTHONPATH, under
    smoke, writing results to a fresh folder; its own (empty) user settings and workspaces."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run `make setup` (as root it installs Debian's chromium)")
    tmp = tmp_path_factory.mktemp("lab")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(FEDLIB_PROFILE="smoke", FEDLIB_ROOT=str(tmp / "root"), JUPYTERLAB_SETTINGS_DIR=str(tmp / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"),
               PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]))
    # every cell in the page (not only those scrolled into view), so each cell's output can be inspected
    settings = tmp / "settings" / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"windowingMode": "none"}))
    # no autosave: Run All must not write its outputs into the committed notebook
    docmanager = tmp / "settings" / "@jupyterlab" / "docmanager-extension" / "plugin.jupyterlab-settings"
    docmanager.parent.mkdir(parents=True)
    docmanager.write_text(json.dumps({"autosave": False}))
    # `jupyter lab` is `python -m jupyterlab` of the `jupyter` on PATH; this interpreter's, so a virtual environment
    # with fedlib installed is tested as such
    assert LAB_COMMAND.startswith("jupyter lab ")
    args = [sys.executable, "-m", "jupyterlab", *LAB_COMMAND.replace("''", "").split()[2:], "--port", str(port),
            "--no-browser"]
    args += ["--allow-root"] if os.geteuid() == 0 else []  # as the README says for root (CI containers)
    log = (tmp / "lab.log").open("w")
    server = subprocess.Popen(args, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{url}/api/status", timeout=1)
                break
            except OSError:
                assert server.poll() is None, (tmp / "lab.log").read_text()[-2000:]
                time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield b
        b.close()


PROMPTS = """() => [...document.querySelectorAll('.jp-Notebook .jp-Cell')].map(c => ({
    code: c.classList.contains('jp-CodeCell'),
    prompt: (c.querySelector('.jp-InputPrompt') || {}).textContent || '',
    errors: c.querySelectorAll('[data-mime-type="application/vnd.jupyter.stderr"],'
                               + '[data-mime-type="application/vnd.jupyter.error"]').length,
    errorText: [...c.querySelectorAll('[data-mime-type="application/vnd.jupyter.stderr"]')]
               .map(e => e.textContent.slice(0, 300)).join(' | '),
    images: c.querySelectorAll('.jp-OutputArea-output img').length}))"""


#: a cell that draws a figure: it calls a paper module's figure function (``fig3(nb)``, ``fig_pool(nb)``)
FIGURE_CALL = re.compile(r"\.fig\w*\(")
TAB = ".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current"  # the notebook's tab in the main area


def open_clean(page, url: str, path: Path) -> None:
    """Open the notebook, wait for its kernel, assert nothing changed, save it, assert the bytes are the same."""
    before, mtime = path.read_bytes(), path.stat().st_mtime_ns
    # ?reset: a fresh workspace, not the tabs an earlier test left open (their notebooks would match the locators)
    page.goto(f"{url}/lab/tree/{path.relative_to(ROOT)}?reset")
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=60_000)
    page.wait_for_timeout(5000)  # the kernel's info (language_info) arrives after it is idle
    dirty = page.evaluate(f"() => document.querySelector(\"{TAB}\").classList.contains('jp-mod-dirty')")
    assert not dirty, "opening the notebook left unsaved changes"
    assert (path.read_bytes(), path.stat().st_mtime_ns) == (before, mtime), "opening the notebook wrote the file"
    page.keyboard.press("Control+s")
    page.wait_for_function(f"() => !document.querySelector(\"{TAB}\").classList.contains('jp-mod-dirty')")
    saved = None
    for _ in range(100):  # the server writes the file in place: wait for a complete one
        page.wait_for_timeout(100)
        if path.stat().st_mtime_ns != mtime and path.read_bytes().endswith(b"}\n"):
            saved = path.read_bytes()
            break
    assert saved is not None, "JupyterLab did not save the notebook"
    assert saved == before, "saving the opened notebook changed the file"


def run_all(page) -> list[dict]:
    page.locator(".jp-Notebook").first.click()
    page.click("text=Run", timeout=10_000)  # the menu bar's Run menu
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    page.wait_for_timeout(2000)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        cells = page.evaluate(PROMPTS)
        busy = page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").count() == 0
        if not busy and not any("*" in c["prompt"] for c in cells):
            return cells
        page.wait_for_timeout(1000)
    raise AssertionError(f"the notebook was still running after {RUN_TIMEOUT_S} s")


@pytest.mark.parametrize("name", chosen())
def test_notebook_runs_in_jupyterlab(lab, browser, name):
    import nbformat  # here, not at the top: importing it costs seconds in every run that collects this file

    path = ROOT / "notebooks" / f"{name}.ipynb"
    nb = nbformat.read(path, as_version=4)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        open_clean(page, lab, path)
        cells = run_all(page)
        assert len(cells) == len(nb.cells)
        for i, (cell, shown) in enumerate(zip(nb.cells, cells, strict=True)):
            if cell.cell_type != "code":
                continue
            assert shown["prompt"].strip("[]: ").isdigit(), f"cell {i} did not run: {shown['prompt']!r}"
            assert shown["errors"] == 0, f"cell {i} shows an error or stderr: {shown['errorText']}"
            if FIGURE_CALL.search(cell.source):
                assert shown["images"] >= 1, f"cell {i} shows no figure"
    except BaseException:
        shot = ROOT / "results" / "browser" / f"{name}.png"
        shot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shot), full_page=True)
        raise
    finally:
        page.close()   # its kernel runs on until the server stops at the end of the module
