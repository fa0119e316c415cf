"""What a paper notebook writes: figures, paper-vs-ours tables and its section of REPORT.md.

A notebook ends like this::

    from fedlib import report

    paper = report.load_paper("fedmps")
    section = report.ReportSection("fedmps", profile, title="FedMPS (TNNLS 2025)")
    section.text(f"{rounds} rounds, seeds {seeds}; accuracy is the unweighted mean over clients (%).")
    section.table(paper["tables"]["table3"], {"fedproto": {"fmnist": (92.80, 0.41)}}, key="table3")
    section.figure(fig, "Test accuracy per round, Fashion-MNIST", name="fig4_fmnist")
    section.write()          # figures/fedmps/report.md and report.json

``python -m fedlib reproduce`` runs every notebook and joins their ``report.md`` files
into REPORT.md. Figures and reports of the ``quick`` and ``paper`` profiles go to
``figures/<paper>/``; the ``smoke`` profile (tests) writes to ``results/smoke/figures/<paper>/``
so that tests never overwrite real figures.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from fedlib.paths import CHECKOUT, git_commit, output_root, results_dir  # noqa: F401 (re-exported)

SCRATCH_PROFILES = ("smoke",)
# Set by :func:`rendering` (``python -m fedlib report``): sections say they were read from the archive (no commit,
# date or machine of the render in them), write no file, and save their figures only when ``draw``.
_RENDER: dict | None = None


@contextlib.contextmanager
def rendering(draw: bool = False):
    """Within it report sections are rendered from the archive (:mod:`fedlib.render`): a deterministic header,
    nothing written, figures saved only with ``draw`` (their links are written either way)."""
    global _RENDER
    before, _RENDER = _RENDER, {"draw": draw}
    try:
        yield
    finally:
        _RENDER = before
DASH = "—"
NOT_RUN = "not run"


def figure_dir(paper: str, profile: str, root: str | Path | None = None, create: bool = True) -> Path:
    """``figures/<paper>/`` (quick, paper) or ``results/smoke/figures/<paper>/`` (smoke) below the output root."""
    root = Path(root) if root is not None else output_root()
    folder = root / "results" / profile / "figures" / paper if profile in SCRATCH_PROFILES else root / "figures" / paper
    if create:
        folder.mkdir(parents=True, exist_ok=True)
    return folder


def savefig(fig, paper: str, profile: str, name: str, dpi: int = 120) -> Path:
    """Write ``fig`` (a Figure or an Axes) to ``<figure_dir>/<name>.png``; return the path."""
    fig = getattr(fig, "figure", fig)
    path = figure_dir(paper, profile) / f"{name}.png"
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    return path


def load_paper(paper: str, params: str | Path | None = None) -> dict:
    """A paper's reference numbers: ``params/<paper>/paper.yaml``."""
    path = Path(params or CHECKOUT / "params") / paper / "paper.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"no reference numbers for {paper!r}: {path} does not exist")
    from fedlib.config import read_yaml

    return read_yaml(path)


# ---------------------------------------------------------------------------------------------- tables

def _mean_std(value: Any) -> tuple[float, float, float]:
    """``x``, ``[mean, std]``, ``[mean, std, n]`` or ``(mean,)`` -> (mean, std, n); NaN where absent.
    With n = 1 the std is not a spread: it becomes NaN (and the cell reads ``x (n=1)``)."""
    if value is None:
        return math.nan, math.nan, math.nan
    if isinstance(value, list | tuple):
        if not value:
            return math.nan, math.nan, math.nan
        mean = float(value[0]) if value[0] is not None else math.nan
        std = float(value[1]) if len(value) > 1 and value[1] is not None else math.nan
        n = float(value[2]) if len(value) > 2 and value[2] is not None else math.nan
        return mean, (math.nan if n == 1 else std), n
    return float(value), math.nan, math.nan


def _rows(table: dict) -> dict:
    return table["rows"] if isinstance(table.get("rows"), dict) else table


def compare_numbers(paper_table: dict, ours: dict, scale: float = 1.0) -> pd.DataFrame:
    """Paper vs ours as numbers: one line per (row, column), columns
    ``paper_mean, paper_std, ours_mean, ours_std, diff`` (``diff = ours_mean - paper_mean``).

    ``paper_table`` is a table of ``paper.yaml`` (or its ``rows`` mapping): ``{row: {column: value}}``;
    ``ours`` has the same shape. A value is a number or ``[mean, std]``. Only columns where ours has
    at least one value appear; rows present on one side only are kept, with NaN on the other side.
    ``scale`` multiplies our values (100 turns fractions into %).
    """
    prow, orow = _rows(paper_table), ours
    pcols = list(paper_table.get("columns") or []) if "rows" in paper_table else []
    for r in prow.values():
        pcols += [c for c in r if c not in pcols]
    ocols = []
    for r in orow.values():
        ocols += [c for c, v in (r or {}).items() if c not in ocols and not math.isnan(_mean_std(v)[0])]
    columns = [c for c in pcols if c in ocols] + [c for c in ocols if c not in pcols]
    rows = list(prow) + [r for r in orow if r not in prow]
    records = []
    for r in rows:
        for c in columns:
            pm, ps, _ = _mean_std((prow.get(r) or {}).get(c))
            om, os_, on = _mean_std((orow.get(r) or {}).get(c))
            if math.isnan(pm) and math.isnan(om):
                continue
            records.append({"row": r, "column": c, "paper_mean": pm, "paper_std": ps,
                            "ours_mean": om * scale, "ours_std": os_ * scale, "ours_n": on, "diff": om * scale - pm})
    frame = pd.DataFrame.from_records(
        records, columns=["row", "column", "paper_mean", "paper_std", "ours_mean", "ours_std", "ours_n", "diff"])
    return frame.set_index(["row", "column"])


def fmt(mean: float, std: float = math.nan, digits: int = 2, sign: bool = False, n: float = math.nan) -> str:
    """``84.21 ± 3.39``, ``84.21``, ``84.21 (n=1)``, ``+0.51`` or ``—``: a single run never shows ``± 0.00``."""
    if mean is None or math.isnan(mean):
        return DASH
    text = f"{mean:{'+' if sign else ''},.{digits}f}"
    if n == 1:
        return f"{text} (n=1)"
    return text if std is None or math.isnan(std) else f"{text} ± {std:,.{digits}f}"


def compare(paper_table: dict, ours: dict, digits: int = 2, scale: float = 1.0,
            names: tuple[str, str] | None = None) -> pd.DataFrame:
    """Paper vs ours, rendered: columns ``paper | ours | diff`` (strings such as ``84.21 ± 3.39``),
    one line per (row, column) of :func:`compare_numbers`; ``—`` where the paper has no value or ours is NaN
    (a diverged run), ``not run`` where ours has no entry (a paper number never stands beside an empty cell).

    The index is (row, column), or just the row when a single column remains. Its names come
    from ``names``, else the table's ``row_name``/``column_name``, else ``row``/``column``.
    """
    nums = compare_numbers(paper_table, ours, scale)
    ran = {(r, c) for r, row in ours.items() for c, v in (row or {}).items() if v is not None}
    out = pd.DataFrame({
        "paper": [fmt(m, s, digits) for m, s in zip(nums.paper_mean, nums.paper_std, strict=True)],
        "ours": [(NOT_RUN if key not in ran else DASH) if math.isnan(m) else fmt(m, s, digits, n=n)
                 for key, m, s, n in zip(nums.index, nums.ours_mean, nums.ours_std, nums.ours_n, strict=True)],
        "diff": [fmt(d, digits=digits, sign=True) for d in nums["diff"]],
    }, index=nums.index)
    names = names or (paper_table.get("row_name", "row"), paper_table.get("column_name", "column"))
    out.index = out.index.set_names(list(names))
    if out.index.get_level_values(1).nunique() == 1:
        out.index = out.index.droplevel(1)
    return out


def with_n(caption: str | None, ns) -> str | None:
    """``caption`` with the number of seeds behind ours: ``(ours: n = 3 seeds)``, ``(ours: one seed)`` or
    ``(ours: n = 1-3 seeds)``; unchanged where no value of ours says its n or the caption already does."""
    ns = sorted({int(n) for n in ns if n is not None and not math.isnan(n)})
    if not caption or not ns or "n = " in caption or "n=" in caption:
        return caption
    what = "one seed" if ns == [1] else f"n = {ns[0]} seeds" if len(ns) == 1 else f"n = {ns[0]}-{ns[-1]} seeds"
    return f"{caption} (ours: {what})"


def reference_column(df: pd.DataFrame, paper: dict, table: str, column: str | None = None,
                     digits: int = 2) -> pd.DataFrame:
    """``df`` (a :func:`compare` frame of ``paper["tables"][table]``) with the numbers of
    ``paper["authors_code"]`` (runs of the authors' public code: reference data, neither the
    paper's nor ours) in a column right after ``paper``, headed by the block's ``label``.

    The block lists the tables it stands beside (``beside``) and its numbers as ``rows``
    (``{row: {column: value}}``, values as in :func:`compare`); a row without a number reads
    ``—``. ``column`` names the data column when ``df`` has one index level (:func:`compare`
    drops it when one column remains). ``df`` comes back unchanged, the same object, when
    paper.yaml has no such block or the block does not stand beside ``table``.
    """
    ref = paper.get("authors_code")
    if not ref or table not in ref.get("beside", []):
        return df
    if df.index.nlevels == 1 and column is None:
        raise ValueError(f"reference_column(): give column= for the one-column table {table!r}")
    keys = [(i if df.index.nlevels > 1 else (i, column)) for i in df.index]
    cells = [_mean_std((ref["rows"].get(r) or {}).get(c)) for r, c in keys]
    values = [fmt(m, s, digits, n=n) for m, s, n in cells]
    out = df.copy()
    out.insert(list(out.columns).index("paper") + 1, ref["label"], values)
    return out


def short_run(df: pd.DataFrame, profile: str) -> pd.DataFrame:
    """``df`` with its ``diff`` column named ``diff (<profile>: not converged)`` unless the profile is the
    paper's: a short run's gap to the paper is partly its length, and the table itself says so."""
    return df if profile == "paper" else df.rename(columns={"diff": f"diff ({profile}: not converged)"})


def to_markdown(df: pd.DataFrame) -> str:
    """A GitHub-markdown table of ``df`` (index levels first), without extra dependencies. A
    missing number (NaN: no paper value, a rule a method has not, a threshold never reached)
    prints as "—", the mark the formatted columns use for "none"."""
    def cell(v):
        if pd.api.types.is_float(v) and math.isnan(v):  # Python and numpy floats
            return "—"
        return str(v).replace("|", "\\|").replace("\n", " ")

    index_names = [n if n is not None else "" for n in df.index.names]
    header = index_names + [cell(c) for c in df.columns]
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join(["---"] * len(index_names) + ["---:"] * len(df.columns)) + "|"]
    for idx, row in zip(df.index, df.itertuples(index=False), strict=True):
        idx = idx if isinstance(idx, tuple) else (idx,)
        lines.append("| " + " | ".join([cell(i) for i in idx] + [cell(v) for v in row]) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- report

def _jsonable(x):
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    if hasattr(x, "item"):  # numpy scalars
        return _jsonable(x.item())
    return x


class ReportSection:
    """One paper's section of REPORT.md, built up cell by cell and written by :meth:`write`.

    Figure links are relative to the output root (``figures/fedmps/fig4.png``), as REPORT.md
    lives there.
    """

    def __init__(self, paper: str, profile: str, title: str | None = None, rounds: str | None = None,
                 seeds: list | None = None, device: str = "cpu"):
        self.paper, self.profile = paper, profile
        self.title = title or paper
        self.rounds, self.seeds, self.device = rounds, seeds, device
        self.folder = figure_dir(paper, profile, create=_RENDER is None)
        self.root = output_root()
        self.parts: list[str] = []
        self.data: dict = {"paper": paper, "profile": profile, "title": self.title, "tables": {}, "figures": [],
                           "values": {}}

    def text(self, markdown: str) -> ReportSection:
        """A paragraph of free markdown."""
        self.parts.append(markdown.strip())
        return self

    def table(self, paper_table: dict, ours: dict, caption: str | None = None, key: str | None = None,
              **kwargs) -> pd.DataFrame:
        """Add a paper-vs-ours table (see :func:`compare`); its numbers go to report.json under ``key``."""
        rendered = compare(paper_table, ours, **kwargs)
        nums = compare_numbers(paper_table, ours, kwargs.get("scale", 1.0)).reset_index()
        caption = with_n(caption or paper_table.get("caption"), nums["ours_n"])
        key = key or f"table{len(self.data['tables']) + 1}"
        self.data["tables"][key] = {"caption": caption, "metric": paper_table.get("metric"),
                                    "rows": _jsonable(nums.to_dict(orient="records"))}
        self.parts.append((f"**{caption}**\n\n" if caption else "") + to_markdown(rendered))
        return rendered

    def figure(self, fig, caption: str, name: str | None = None) -> Path:
        """Link a figure: a matplotlib Figure/Axes (saved as ``<name>.png``) or the path of a saved one."""
        if isinstance(fig, str | Path):
            path = Path(fig)
        else:
            if name is None:
                raise ValueError("figure(): give name= when passing a matplotlib figure")
            path = (savefig(fig, self.paper, self.profile, name) if _RENDER is None or _RENDER["draw"]
                    else figure_dir(self.paper, self.profile, create=False) / f"{name}.png")
        path = path.resolve()
        try:
            link = path.relative_to(self.root.resolve()).as_posix()
        except ValueError:
            link = path.as_posix()
        self.parts.append(f"![{caption}]({link})")
        self.data["figures"].append({"caption": caption, "path": link})
        return path

    def record(self, **values) -> ReportSection:
        """Extra numbers for report.json (not shown in the markdown)."""
        self.data["values"].update(_jsonable(values))
        return self

    def provenance(self) -> str:
        """Profile, commit, date, machine, rounds and seeds: what made the numbers below. Rendered from the archive
        (:func:`rendering`), the profile, rounds and seeds, and that the numbers were read from the archive (the
        commits and machines that made the runs are in the tables' "made by" lines)."""
        from fedlib.device import machine_record

        if _RENDER is not None:
            parts = [f"profile `{self.profile}`", "read from the run archive (archive/)"]
            if self.rounds is not None:
                parts.append(f"rounds {self.rounds}")
            if self.seeds is not None:
                parts.append(self.seeds_text())
            return "_" + " · ".join(parts) + "_"

        m = machine_record(self.device)
        where = (f"{m['gpu']} (CUDA {m['cuda']})" if self.device == "cuda" else
                 f"CPU {m['cpu']} ({m['cpu_capability']}), one torch thread per run")
        parts = [f"profile `{self.profile}`", f"commit {git_commit()}",
                 _dt.datetime.now().astimezone().strftime("%Y-%m-%d"), f"{where}, torch {m['torch']}"]
        if self.rounds is not None:
            parts.append(f"rounds {self.rounds}")
        if self.seeds is not None:
            parts.append(self.seeds_text())
        return "_" + " · ".join(parts) + "_"

    def seeds_text(self) -> str:
        """``seeds 0, 1, 2 (n=3)``, or the study's own wording where the seeds differ by setting (a string)."""
        if isinstance(self.seeds, str):
            return self.seeds
        return f"seeds {', '.join(map(str, self.seeds))} (n={len(self.seeds)})"

    def markdown(self) -> str:
        head = f"## {self.title}\n\n{self.provenance()}"
        return "\n\n".join([head, *self.parts]) + "\n"

    def write(self) -> Path:
        """Write ``report.md`` and ``report.json`` into the figure folder; return the markdown path (rendering from
        the archive, :func:`rendering`: nothing is written)."""
        md = self.folder / "report.md"
        if _RENDER is not None:
            return md
        md.write_text(self.markdown())
        stamp = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
        (self.folder / "report.json").write_text(json.dumps({**self.data, "written": stamp}, indent=1))
        return md
