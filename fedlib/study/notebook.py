"""What a paper notebook carries from cell to cell, and what its first code cell sets up.

A paper notebook (``notebooks/<paper>.py``, paired with its ``.ipynb``) is one short call per table or figure into
``fedlib.papers.<paper>``: ``M.table6(nb)`` returns the table's DataFrame, ``M.fig5(nb)`` the figure, each having
added its part to the notebook's report section. ``nb`` is a :class:`Notebook`: the plan, the report section, the
paper's reference numbers, the notebook's own parameters (``workers``, ``embedding``) and what earlier cells
computed (:meth:`Notebook.once`), so that a later cell (the summary, the claims ledger) reads the same runs
without loading them again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Any


_CAPTURE: dict | None = None


@contextlib.contextmanager
def capturing(into: dict):
    """Within it every ledger a notebook writes (:meth:`Notebook.ledger`) adds its claims to ``into["claims"]``
    (:mod:`fedlib.render` collects the claims of the sections it renders this way)."""
    global _CAPTURE
    before, _CAPTURE = _CAPTURE, into
    try:
        yield
    finally:
        _CAPTURE = before


def start(backend: str | None = None) -> None:
    """The kernel set-up of every paper notebook: one torch thread, fedlib's notes as plain stdout lines (not
    red stderr), the backend the grids train on (local processes, or Ray with ``backend="ray"`` /
    ``FEDLIB_BACKEND=ray``), and pandas wide enough that long claims and evidence wrap instead of ending in
    ``...``."""
    import pandas as pd
    import torch

    from fedlib import backends, logs

    torch.set_num_threads(1)
    logs.to_stdout()
    backends.use(backend)
    pd.set_option("display.width", 160)
    pd.set_option("display.max_colwidth", None)


class ParameterError(Exception):
    """A notebook parameter that cannot work, or a kernel that imports another checkout's fedlib: raised by the
    set-up cell before any work, and shown by Jupyter, papermill and nbval as its one line (``_render_traceback_``),
    not as a traceback through fedlib."""

    def _render_traceback_(self) -> list[str]:
        return [f"ParameterError: {self}"]


EMBEDDINGS = ("tsne", "umap")


def checkout_problem(cwd: str | os.PathLike | None = None) -> str | None:
    """Why this kernel cannot serve a notebook in ``cwd`` (default the working directory: Jupyter and nbval start a
    kernel in the notebook's folder, papermill in ``--cwd``): that folder lies in one checkout (a folder holding
    ``fedlib/`` and ``notebooks/``) while Python imports fedlib from another (``make setup`` in a second clone points
    the editable install there). ``None`` where they agree or the folder is in no checkout."""
    from pathlib import Path

    import fedlib

    mine = Path(fedlib.__file__).resolve().parents[1]
    here = Path(cwd or os.getcwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "fedlib" / "__init__.py").is_file() and (folder / "notebooks").is_dir():
            if folder == mine:
                return None
            return (f"this notebook's checkout is {folder}, but the kernel imports fedlib from {mine}: run "
                    f"`make setup` in {folder} (it installs that checkout's fedlib into this Python), or open the "
                    f"notebook from {mine}")
    return None


def check_parameters(workers=None, embedding: str = "tsne", device=None) -> None:
    """The parameters every notebook shares that the plan does not check (one-line :class:`ConfigError`)."""
    from fedlib.validation import ConfigError, Interval, Options, check_value

    if workers is not None:
        check_value("workers", workers, Interval(0, None, integer=True))
    check_value("embedding", embedding, Options(EMBEDDINGS))
    if device is not None:
        from fedlib.device import resolve

        resolve(device)
    if isinstance(workers, bool):
        raise ConfigError("workers", workers, "None or a number of processes (0: in the kernel)")


def open_notebook(paper: str, load_plan, profile: str, about, *, backend=None, workers=None, embedding: str = "tsne",
                  title: str | None = None, reference: str | None = "tables", results: dict | None = None,
                  **options) -> Notebook:
    """A paper notebook's set-up cell: :func:`start`, the plan of ``profile`` (``load_plan(profile, **options)``,
    the notebook's parameters), its report section and a line on the setting. ``about(plan)`` gives
    ``(rounds text, device, line)`` for the section header and the printout; ``reference`` the part of
    ``params/<paper>/paper.yaml`` the cells read (``None``: the whole file; a study without one: ``{}``).

    Every parameter is checked here, before any work, and a bad one (or a kernel importing another checkout's
    fedlib, :func:`checkout_problem`) stops the notebook with one line (:class:`ParameterError`)."""
    from fedlib import report
    from fedlib.data.sources import DatasetUnavailable
    from fedlib.validation import ConfigError

    problem = checkout_problem()
    if problem:
        raise ParameterError(problem)
    try:
        check_parameters(workers, embedding, options.get("device"))
        start(backend)
        plan = load_plan(profile, **options)
    except (ConfigError, DatasetUnavailable) as exc:
        raise ParameterError(str(exc)) from None
    rounds, device, line = about(plan)
    if profile == "converged":
        from fedlib.plateau import CAP

        rounds = f"{rounds}; curves still rising extended towards their plateau, up to {CAP} (fedlib.plateau)"
    try:
        numbers = report.load_paper(paper)
    except FileNotFoundError:
        numbers = {}
    section = report.ReportSection(paper, profile, title=title or numbers.get("title", paper),
                                   seeds=plan.section_seeds(),
                                   rounds=rounds, device=device)
    print(line)
    return Notebook(plan, section, numbers.get(reference, {}) if reference else numbers, workers, embedding,
                    results=dict(results or {}))


class Shown(tuple):
    """Several outputs of one cell (figures, tables; a string is printed), shown in order as the cell's value;
    unpacks as a tuple."""

    def _ipython_display_(self):
        from IPython.display import display

        for item in self:
            print(item) if isinstance(item, str) else display(item)


@dataclasses.dataclass
class Notebook:
    """One paper notebook's state: ``plan`` (the study's :class:`~fedlib.study.Plan`), ``section`` (its
    :class:`~fedlib.report.ReportSection`), ``paper`` (``params/<paper>/paper.yaml``), the parameters ``workers``
    and ``embedding``, and ``results``: what cells computed, by name."""

    plan: Any
    section: Any
    paper: dict
    workers: int | None = None
    embedding: str = "tsne"
    results: dict = dataclasses.field(default_factory=dict)

    @property
    def profile(self) -> str:
        return self.plan.profile

    @property
    def seed0(self) -> int:
        """The first seed: the seed of the single-seed studies and of the figures."""
        return self.plan.seeds[0]

    def label(self, method: str) -> str:
        return self.plan.label(method)

    def part(self, make, default=None):
        """``make()``, or ``default`` where it needs a run or a trained model that the run archive lacks while the
        report is rendered from the archive alone (:class:`fedlib.results.NotArchived`): a ledger then judges the
        claims whose evidence it has and leaves the others out."""
        from fedlib.results import NotArchived

        try:
            return make()
        except NotArchived:
            return default

    def with_added_seeds(self, configs: dict, runs: dict, protocol: bool = False) -> dict:
        """``runs`` of ``configs`` with the seeds the evidence planner added after them where a claim's margin was
        within the seed spread (:func:`fedlib.results.with_more_seeds`), under a profile whose evidence decides
        (:data:`fedlib.claims.DECISIVE_PROFILES`); under a short profile ``runs`` as they are."""
        from fedlib import results
        from fedlib.claims import DECISIVE_PROFILES

        if self.profile not in DECISIVE_PROFILES:
            return runs
        return results.with_more_seeds(configs, runs, protocol=protocol)

    def once(self, key: str, make):
        """``make()`` the first time ``key`` is asked for, the same value afterwards."""
        if key not in self.results:
            self.results[key] = make()
        return self.results[key]

    def run_all(self, jobs: list, desc: str) -> None:
        """The "All runs" cell: every ``(config, seed)`` job of the notebook at once, longest first, one process per
        core (``workers``); finished runs are cache hits, an interrupted run resumes, and a run the results folder
        lacks but the run archive (or another placement) holds is read, not trained (:func:`fedlib.results.find`)."""
        from fedlib import results

        todo = [(c, s) for c, s in jobs if results.finished_here(c, s) is not None or results.find(c, s)[1] is None]
        read = len(jobs) - len(todo)
        print(f"{len(jobs)} runs ({sum(c['train']['rounds'] for c, _ in jobs)} rounds in all)"
              + (f"; {read} finished elsewhere (the run archive or another device) are read, not trained" if read
                 else ""))
        results.run_many(todo, workers=self.workers, desc=desc)

    def setting(self, rows: dict, title: str = "**Setting: paper vs this run.**"):
        """The setting table from ``{row: (the paper's, this run's)}``, into the report section."""
        import pandas as pd

        return self.table(title, pd.DataFrame(rows, index=["paper", f"this run ({self.profile})"]).T)

    def table(self, title: str, df, *more: str):
        """Add ``title`` and ``df`` as markdown (then the ``more`` paragraphs) to the report section; return
        ``df``."""
        from fedlib import report

        self.section.text("\n\n".join([title, report.to_markdown(df), *more]))
        return df

    def figure(self, fig, caption: str, name: str):
        """Save ``fig`` into the report section as ``<name>.png`` and return it: the cell shows it once, as its
        value (closed here, so that the inline backend does not show it a second time)."""
        import matplotlib.pyplot as plt

        self.section.figure(fig, caption, name=name)
        plt.close(fig)
        return fig

    def markdown(self, text: str):
        """Add ``text`` to the report section and return it for display."""
        from IPython.display import Markdown

        self.section.text(text)
        return Markdown(text)

    def evidence(self):
        """The evidence planner (:mod:`fedlib.evidence`) on this notebook's claims ledger: for each open claim, why
        it is open, what would decide it (extending a group towards its plateau, more seeds) and its CPU-hours,
        cheapest first; into the report section. ``python -m fedlib evidence --run --budget 3h`` runs them."""
        from fedlib import evidence

        claims = self.results.get("claims", [])
        items = evidence.plan({self.section.title: claims})
        frame = evidence.table(items).drop(columns="section").set_index("#")
        decided, testable = evidence.counts({self.section.title: claims})
        out = self.table(f"**What would decide the open claims** ({decided} of {testable} testable claims decided; "
                          "CPU-hours on this kind of machine, from the archived runs' seconds per round; `python -m "
                          "fedlib evidence --run --budget 3h` runs the cheapest extensions).", frame)
        self.section.write()
        return out

    def paper_protocol(self, what: str, key: str, load, finished, command: str, counts: bool = False,
                       profile: str = "paper"):
        """The opening of a cell that shows ``what`` (e.g. "Table III") under the paper protocol (or another long
        ``profile``, e.g. ``converged``) from finished runs, training nothing: ``(data, None)`` to go on with, or
        ``(data, text)`` for the cell to return where this profile is that protocol itself (``counts``: with its
        runs found and who made them) or none of the runs has finished (the command that makes them).
        ``load(plan)`` reads the runs once (under ``key``), ``finished(data)`` says whether any table part is
        complete."""
        from fedlib import study

        data = self.once(key, lambda: load(self.plan))
        name = "the paper protocol" if profile == "paper" else f"the {profile} profile"
        if self.profile == profile:
            tail = f" ({data['found']} of {data['total']} runs; {data['made_by']})" if counts else ""
            verb = "are" if what.startswith("Figs") else "is"
            return data, self.markdown(f"This profile is {name}: {what} above {verb} it{tail}.")
        if not finished(data):
            return data, self.markdown(study.not_run_text(what, data["found"], data["total"], command, name))
        return data, None

    def ledger(self, claims: list, record: bool = True, write: bool = True):
        """The claims-ledger cell's end: the ledger table (and the claims ours contradict) into the section
        (:func:`fedlib.claims.write`; ``record``: its verdict counts into report.json), the verdict count printed,
        and with ``write`` the section written and its path printed; returns the ledger table."""
        from fedlib import claims as C

        df = C.write(self.section, claims, record=record)
        self.results.setdefault("claims", []).extend(claims)
        if _CAPTURE is not None:
            _CAPTURE.setdefault("claims", []).extend(claims)
        print(C.summary_line(claims))
        if write:
            print("report section:", self.section.write())
        return df
