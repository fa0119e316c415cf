"""REPORT.md rendered from the run archive alone: ``python -m fedlib report``.

Every section of the report is its paper notebook's cells run in this process under
:func:`fedlib.results.archive_only`: runs are read from ``archive/`` only (never from ``results/``), nothing
trains, and a cell that would need a run the archive lacks, or a trained model (which the archive does not keep),
is left out of the section; the render lists it. Each section is rendered under the strongest profile whose runs
the archive holds (:func:`section_profile`: the paper protocol, else the converged profile), so that every number
in REPORT.md has an archived run behind it and a fresh clone renders the same file, byte for byte
(``tests/papers/test_render.py`` re-renders it and compares).

A section's header says its profile and that it was read from the archive; what made its runs (commits, machines,
when) is in the tables' "made by" lines, read from the archived summaries. Figures drawn from the archived records
(curves, critical-difference diagrams, cost fronts) are drawn again with ``--figures``; figures that need trained
models (t-SNE, prototype heatmaps, reconstructions) come from the notebooks: the section links the ones the
notebook recorded in ``figures/<paper>/report.json``, under a line saying so.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
from pathlib import Path

from fedlib.papers.catalog import NAMES as SECTIONS   # the studies, in the report's order (one section each)
#: profiles a section may be rendered under, strongest first
STRONG_PROFILES = ("paper", "converged")


@dataclasses.dataclass
class Section:
    """One rendered section: its markdown, the claims of its ledger, the cells left out and why."""

    name: str
    profile: str
    markdown: str
    claims: list
    skipped: list


def study(name: str):
    """The study ``name``, checked against the study interface (:func:`fedlib.papers.catalog.load`)."""
    from fedlib.papers import catalog

    return catalog.load(name)


def section_profile(name: str) -> str | None:
    """The strongest of :data:`STRONG_PROFILES` the study has whose runs the archive holds at least one of."""
    from fedlib import archive, results

    mod = study(name)
    for profile in STRONG_PROFILES:
        try:
            plan = mod.load_plan(profile)
        except Exception:  # noqa: BLE001 - the study has no such profile
            continue
        with results.archive_only():
            if any(archive.summary(c, s) is not None for c, s in mod.all_jobs(plan)):
                return profile
    return None


def code_cells(name: str, notebooks: Path | None = None, parameters: bool = False) -> list[str]:
    """The notebook's code cells after its parameters cell, as source text (``parameters``: that cell first)."""
    import jupytext

    from fedlib.paths import CHECKOUT

    nb = jupytext.read(Path(notebooks or CHECKOUT / "notebooks") / f"{name}.py")
    cells = [c for c in nb.cells if c.cell_type == "code"]
    first = next(i for i, c in enumerate(cells) if "parameters" in (c.metadata.get("tags") or []))
    return [c.source for c in cells[first if parameters else first + 1:]]


@contextlib.contextmanager
def quiet():
    """stdout and stderr of the cells kept out of the terminal (the render prints its own lines)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        yield buf


def render_section(name: str, profile: str | None = None, figures: bool = False) -> Section:
    """The section of study ``name`` under ``profile`` (default :func:`section_profile`) from the archive alone.
    ``figures``: draw the figures the cells make from archived records (else their links only)."""
    import matplotlib

    matplotlib.use("Agg")
    from fedlib import report, results
    from fedlib.study import notebook as notebook_mod

    profile = profile or section_profile(name)
    if profile is None:
        return Section(name, "—", f"## {name}\n\nNo run of this study's long profiles is in the run archive.\n", [], [])
    captured: dict = {"claims": []}
    cells = code_cells(name, parameters=True)
    namespace: dict = {}
    exec(compile(cells[0], f"<{name} notebook parameters>", "exec"), namespace)   # noqa: S102 - every default
    namespace.update({"profile": profile, "methods": None, "seeds": None, "rounds": None, "workers": 0,
                      "embedding": "tsne", "device": "cpu", "backend": "local"})
    skipped = []
    with results.archive_only(), report.rendering(draw=figures), notebook_mod.capturing(captured), quiet():
        for source in cells[1:]:
            try:
                exec(compile(source, f"<{name} notebook cell>", "exec"), namespace)   # noqa: S102 - our notebook
            except results.NotArchived as exc:
                skipped.append((_first_call(source), str(exc)))
        nb = namespace.get("nb")
        if nb is None:
            raise RuntimeError(f"{name}: the notebook's set-up cell did not make `nb`")
        section = nb.section
        linked = {f["path"] for f in section.data["figures"]}
        extra, drawn_under = notebook_figures(name, profile, linked)
        if extra:
            section.text("**Figures from the notebook** (they need trained models, which the run archive does not "
                         f"keep; drawn by `notebooks/{name}.ipynb` under the `{drawn_under}` profile):\n\n"
                         + "\n\n".join(f"![{c}]({p})" for c, p in extra))
        markdown = section.markdown()
    return Section(name, profile, markdown, captured["claims"], skipped)


def _first_call(source: str) -> str:
    lines = [x for x in source.splitlines() if x.strip() and not x.lstrip().startswith("#")]
    return lines[0].strip() if lines else source.strip()[:60]


def notebook_figures(name: str, profile: str, linked: set) -> tuple[list[tuple[str, str]], str]:
    """``(caption, path)`` of the figures the notebook recorded (``figures/<name>/report.json``) that exist and that
    the render did not draw itself, in the notebook's order; and the profile the notebook ran under."""
    from fedlib.paths import CHECKOUT
    from fedlib.report import figure_dir

    folder = figure_dir(name, profile, CHECKOUT, create=False)
    try:
        record = json.loads((folder / "report.json").read_text())
    except (OSError, ValueError):
        return [], ""
    return ([(f["caption"], f["path"]) for f in record.get("figures", [])
             if f["path"] not in linked and (CHECKOUT / f["path"]).is_file()], record.get("profile", "?"))


def ledgers(names=SECTIONS) -> dict[str, list]:
    """``{section title: claims}`` of every section, from the archive alone (what the evidence planner reads)."""
    out = {}
    for name in names:
        sec = render_section(name)
        title = next((x[3:].strip() for x in sec.markdown.splitlines() if x.startswith("## ")), name)
        out[title] = sec.claims
    return out


def render(names=SECTIONS, figures: bool = False) -> tuple[str, list[Section]]:
    """REPORT.md's text and its sections: the header, the verdict summary of every ledger, then each section."""
    from fedlib import claims
    from fedlib.report import to_markdown

    sections = [render_section(n, figures=figures) for n in names]
    lines = ["# Reproduction report", "",
             "Rendered from the run archive (`archive/`) by `python -m fedlib report`: every number below is read from "
             "an archived run, nothing is trained. Each section is rendered under the strongest profile whose runs the "
             "archive holds (the paper protocol, else the converged profile); its header names the profile, and the "
             "tables' \"made by\" lines name the commits and machines that made the runs. Figures that need trained "
             "models come from the notebooks (`make reproduce`).", "",
             "| section | profile | cells left out (not in the archive) |", "|---|---|---:|"]
    for s in sections:
        lines.append(f"| {s.name} | {s.profile} | {len(s.skipped)} |")
    with_ledger = {s.name: s.markdown for s in sections if "**Claims ledger" in s.markdown}
    if with_ledger:
        lines += ["", "**Verdicts per paper** (one rule for every ledger, `fedlib.claims.verdict`: supported / not "
                  "supported need the paper protocol or the converged profile and a margin beyond the seed spread "
                  "(sample std) or an exact test; under the converged profile a comparison counts once the side "
                  "behind has plateaued, or its margin survives what that side could still gain up to the 400-round "
                  f"cap (a decision on a plateau with less than {claims.PLATEAU_SLACK:g} points to spare says so: "
                  "curves called plateaued have gone on to gain nearly that much, docs/runs.md); short-profile, "
                  "one-seed and within-spread evidence is inconclusive; a claim that holds by how the method is "
                  "built, message counts included, is by construction).", "",
                  to_markdown(claims.report_summary(with_ledger))]
        lines += ["", evidence_line(sections)]
    for s in sections:
        lines += ["", s.markdown.strip()]
    return "\n".join(lines) + "\n", sections


def evidence_line(sections: list[Section]) -> str:
    """The summary of the evidence planner (:mod:`fedlib.evidence`) over these sections' ledgers, planned from the
    archive alone (a machine's results folder, e.g. the checkpoints of runs under way, changes no line of it)."""
    from fedlib import evidence, results

    ledgers_ = {s.name: s.claims for s in sections}
    with results.archive_only():
        items = evidence.plan(ledgers_)
        line = evidence.summary(ledgers_, items)
    return "**Evidence.** " + line + " (`python -m fedlib evidence` lists them)."


def main(argv: list[str] | None = None) -> int:
    """``python -m fedlib report [--figures] [--out PATH] [--check]``."""
    import sys

    from fedlib import store
    from fedlib.paths import CHECKOUT
    from fedlib.validation import ConfigError, Parser

    parser = Parser(prog="python -m fedlib report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--figures", action="store_true", help="draw the figures made from archived records again")
    parser.add_argument("--out", default=None,
                        help="where to write it: a file, or a folder to hold REPORT.md (default: the checkout's)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if the committed REPORT.md differs from the render")
    args = parser.parse_args(argv)
    try:
        out = report_path(args.out, CHECKOUT, must_write=not args.check)   # before the minute of rendering
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text, sections = render(figures=args.figures and not args.check)
    for s in sections:
        left = "".join(f"\n    left out: {call}: {why}" for call, why in s.skipped)
        print(f"{s.name}: profile {s.profile}, {len(s.claims)} claims{left}", file=sys.stderr)
    if args.check:
        same = out.is_file() and out.read_text() == text
        print(f"{out}: {'the same as' if same else 'DIFFERS from'} the render of the archive")
        return 0 if same else 1
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        store.atomic_write(out, text)
    except OSError as exc:
        from fedlib.validation import os_error

        print(f"error: {os_error(exc)}", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0


def report_path(out: str | None, checkout: Path, must_write: bool = True) -> Path:
    """Where ``report`` writes: ``--out`` (a folder, existing or written with a trailing separator, holds
    ``REPORT.md``), else the checkout's REPORT.md; checked to be a folder this user can write in (one
    :class:`~fedlib.validation.ConfigError` line) before anything is rendered."""
    from fedlib.validation import ConfigError, check_writable

    if out is None:
        path = checkout / "REPORT.md"
    else:
        text = str(out)
        if not text.strip() or "\0" in text:
            raise ConfigError("--out", text, "a file or folder path")
        path = Path(text).expanduser()
        if text.endswith(("/", os.sep)) or path.is_dir():
            path = path / "REPORT.md"
    if must_write:
        check_writable(path.parent, "--out")
    return path


def _evidence_parser():
    """The options of ``python -m fedlib evidence``."""
    from fedlib import evidence
    from fedlib.device import device_arg
    from fedlib.validation import POSITIVE_INT, Interval, Parser, arg_type

    parser = Parser(prog="python -m fedlib evidence", description=evidence.__doc__.split("\n\n")[0])
    parser.add_argument("--run", action="store_true",
                        help="spend --budget on the cheapest decisive extensions and added seeds")
    parser.add_argument("--budget", default="3h", help="wall time for --run (3h, 90m, 45s; default 3h)")
    parser.add_argument("--workers", type=arg_type(POSITIVE_INT), default=None,
                        help="runs in parallel (default: one per CPU core)")
    parser.add_argument("--plan-hours", type=arg_type(Interval(0, None, low_open=True), float), default=10.0,
                        help="the CPU-hours the summary line plans (10); with --device cuda, the plan the GPU takes "
                             "its groups from, costliest first")
    parser.add_argument("--save-plan", default=None, metavar="FILE",
                        help="write the groups a GPU would take (--plan-hours of CPU work, costliest first) to FILE")
    parser.add_argument("--plan", default=None, metavar="FILE",
                        help="with --run: train the groups of a saved plan (no ledgers rendered: a GPU machine)")
    parser.add_argument("--claim", action="append", default=None, metavar="SECTION:N",
                        help="only these open claims (fedic:2, mpfedcl:8; repeat for several): the plan lists "
                             "them, --run spends --budget on them alone, cheapest first")
    parser.add_argument("--device", default=None, type=device_arg,
                        help="cuda: train the plan's extensions on the GPU, each group's seeds stacked "
                             "(scripts/gpu_evidence.sh; default: this machine's CPU)")
    parser.add_argument("--confirm", action="store_true",
                        help="list the decided claims resting on a young plateau with little to spare and the step "
                             "that would show it hold; with --run, take those steps within --budget")
    return parser


def _run_and_compare(books: dict, items: list, budget: float, workers, device, plan_hours: float) -> None:
    """``evidence --run``: the planned work, then which verdicts the ledgers rendered again changed."""
    from fedlib import evidence

    before = {(s, i): c.verdict for s, cs in books.items() for i, c in enumerate(cs, 1)}
    evidence.run(items, budget, workers, device=device, plan_hours=plan_hours)
    _print_changed(before)


def _print_changed(before: dict) -> None:
    """Which verdicts the ledgers rendered again from the archive changed since ``before``."""
    from fedlib import evidence

    changed = [(s, i, before.get((s, i)), c.verdict, c.claim) for s, cs in ledgers().items()
               for i, c in enumerate(cs, 1) if before.get((s, i)) != c.verdict]
    print(f"verdicts changed: {len(changed)}" + "".join(f"\n  {s} #{i}: {a} -> {b}: {evidence.shorten(t)}"
                                                      for s, i, a, b, t in changed))
    if changed:
        print("re-render them: python -m fedlib report")


def evidence_main(argv: list[str] | None = None) -> int:
    """``python -m fedlib evidence [--run] [--budget 3h] [--workers N] [--claim SECTION:N]``: the evidence planner's
    command (:mod:`fedlib.evidence`) over the ledgers rendered from the archive."""
    from fedlib import evidence
    from fedlib.device import resolve
    from fedlib.report import to_markdown
    from fedlib.study import command

    parser = _evidence_parser()

    @command
    def go(_argv):
        args = parser.parse_args(argv)
        budget = evidence.parse_budget(args.budget)
        for text in args.claim or ():
            evidence.parse_claim(text)
        device = None if args.device is None or resolve(args.device) == "cpu" else resolve(args.device)
        workers = args.workers or (1 if device else None)   # on a GPU one stacked group at a time, kept as it ends
        if args.plan is not None:
            groups, fills = evidence.load_plan(args.plan), evidence.load_fills(args.plan)
            if not args.run:
                print("\n".join([g.label for g in groups] + [f"{g.label}: seeds {', '.join(map(str, g.seeds))} to "
                                                             f"{r} rounds" for g, r in fills]))
                return 0
            evidence.run([], budget, workers, device=device, groups=groups, fills=fills)
            print("re-render the report where the ledgers are read: python -m fedlib report")
            return 0
        books = ledgers()
        if args.confirm:
            items = evidence.confirmations(books)
            print(to_markdown(evidence.table(items).set_index(["section", "#"])) if items else
                  "no decided claim rests on a young plateau with little to spare")
            if args.run and items:
                before = {(s, i): c.verdict for s, cs in books.items() for i, c in enumerate(cs, 1)}
                evidence.confirm(items, budget, workers)
                _print_changed(before)
            return 0
        items = evidence.plan(books)
        if args.claim:
            items = evidence.select(items, args.claim)
        print(to_markdown(evidence.table(items).set_index(["section", "#"])))
        print()
        print(evidence.summary(books, items, args.plan_hours))
        if args.save_plan:
            groups, fills = evidence.gpu_work(items, args.plan_hours)
            evidence.save_plan(args.save_plan, groups, fills)
            print(f"wrote {args.save_plan}: {len(groups)} groups to extend ({', '.join(g.label for g in groups)}), "
                  f"{len(fills)} to add seeds to ({', '.join(g.label for g, _ in fills)})")
        if args.run:
            _run_and_compare(books, items, budget, workers, device, args.plan_hours)
        return 0

    return go(argv)
