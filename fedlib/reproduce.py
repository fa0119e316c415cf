"""The main job: run every paper notebook headless under one profile, then render REPORT.md.

``python -m fedlib reproduce --profile quick`` executes each ``notebooks/*.ipynb`` (sorted)
with papermill, one notebook at a time and each in its own process (papermill is not safe
with several kernels in one process), injecting ``profile``. Executed notebooks go to
``results/executed/<profile>/<paper>.ipynb``. Each notebook writes its section and figures through
:mod:`fedlib.report`; the sections are joined into ``results/<profile>/REPORT.md``. The repository's
``REPORT.md`` is then rendered from the run archive alone (:mod:`fedlib.render`), so that every number in
it has an archived run behind it whatever profile the notebooks ran under. One failing notebook does not
stop the others; the exit status is non-zero when any failed. Finished experiments are cache hits inside
the notebooks, so running again is fast.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path


from fedlib.report import CHECKOUT, figure_dir, git_commit
from fedlib.validation import ConfigError

PROFILES = CHECKOUT / "params" / "profiles.yaml"
KERNEL = "python3"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
LINK = re.compile(r"(\]\()([^)\s]+)(\))")


def load_profile(name: str, path: Path = PROFILES) -> dict:
    """The ``{dotted.key: value}`` overrides of profile ``name``."""
    from fedlib.config import read_yaml

    profiles = read_yaml(path) or {}
    if name not in profiles:
        raise ConfigError("profile", name, "one of " + ", ".join(profiles))
    return dict(profiles[name] or {})


@dataclass
class Outcome:
    name: str
    status: str  # "ok", "FAILED" or "not run"
    minutes: float | None
    executed: str | None
    error: str = ""
    section: str | None = None  # the notebook's report.md, if it wrote one


def select_notebooks(folder: Path, only: list[str] | None = None) -> list[Path]:
    """``folder/*.ipynb`` sorted, restricted to the names in ``only`` (with or without ``.ipynb``)."""
    found = sorted(p for p in Path(folder).glob("*.ipynb") if not p.name.startswith("."))
    if not only:
        return found
    wanted = [n.removesuffix(".ipynb") for n in only]
    missing = [n for n in wanted if n not in {p.stem for p in found}]
    if missing:
        raise ConfigError("--only", ", ".join(missing), "a notebook in " + str(folder) + ": "
                          + (", ".join(p.stem for p in found) or "(none)"))
    return [p for p in found if p.stem in wanted]


def report_path(profile: str, root: Path) -> Path:
    """Where the notebooks' own sections of a run are joined: ``results/<profile>/REPORT.md``. The repository's
    REPORT.md is not this file: it is rendered from the run archive alone (:mod:`fedlib.render`), at the end of a
    non-scratch run in the checkout."""
    return root / "results" / profile / "REPORT.md"


def notebook_error(path: Path, lines: int = 15) -> str:
    """The last lines of the first error recorded in an executed notebook ('' if none)."""
    try:  # plain JSON: importing nbformat costs seconds
        cells = json.loads(Path(path).read_text())["cells"]
    except (OSError, ValueError, KeyError):  # missing or half-written: the caller falls back to stderr
        return ""
    for cell in cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                text = ANSI.sub("", "\n".join(out.get("traceback") or [f"{out.get('ename')}: {out.get('evalue')}"]))
                tail = "\n".join(text.strip().splitlines()[-lines:])
                return f"In [{cell.get('execution_count')}]:\n{tail}"
    return ""


def _run_papermill(nb: Path, out: Path, profile: str, root: Path, progress: bool, log_output: bool,
                   start_timeout: int, device: str | None = None) -> tuple[int, str]:
    """Execute one notebook in a child process; stream its stderr (the progress bar) and keep the tail."""
    params = ["-p", "profile", profile] + (["-p", "device", device] if device else [])
    cmd = [sys.executable, "-m", "papermill", str(nb), str(out), *params, "-k", KERNEL,
           "--cwd", str(root), "--start-timeout", str(start_timeout),
           "--progress-bar" if progress else "--no-progress-bar"]
    if log_output:
        cmd.append("--log-output")
    progress_file = out.with_suffix(".progress.json")
    progress_file.unlink(missing_ok=True)
    env = {**os.environ, "FEDLIB_ROOT": str(root), "FEDLIB_PROGRESS": str(progress_file)}
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, env=env)
    watcher = threading.Thread(target=_watch_progress, args=(proc, progress_file, nb.stem), daemon=True)
    watcher.start()
    tail, show = b"", progress or log_output
    try:
        while chunk := proc.stderr.read1(4096):
            if show:
                # papermill's own Python traceback repeats the notebook error we report below: not shown
                cut = 0 if chunk.startswith(b"Traceback (most") else chunk.find(b"\nTraceback (most")
                if cut >= 0:
                    chunk_shown, show = chunk[:cut], False
                else:
                    chunk_shown = chunk
                sys.stderr.buffer.write(chunk_shown)
                sys.stderr.buffer.flush()
            tail = (tail + chunk)[-20000:]
        return proc.wait(), ANSI.sub("", tail.decode(errors="replace"))
    except BaseException:  # interrupted (Ctrl-C, SIGTERM): stop the notebook too, not only this process
        stop_child(proc)
        raise


def stop_child(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """Stop papermill as Ctrl-C would (it then shuts its kernel down; the kernel's workers stop with it,
    :func:`fedlib.runner.run_many`), then SIGTERM and SIGKILL for a child still there after ``grace`` s."""
    for send in (lambda: proc.send_signal(signal.SIGINT), proc.terminate, proc.kill):
        if proc.poll() is not None:
            return
        send()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            continue


def progress_line(state: dict, name: str) -> str:
    """``fedmps: runs 12/34, rounds 340/1200, 6.2 min elapsed, ETA 11 min`` from a progress file."""
    eta = state.get("eta_seconds")
    return (f"{name}: {state['desc']}: runs {state['runs_done']}/{state['runs_total']}, rounds "
            f"{state['rounds_done']}/{state['rounds_total']}, {state['elapsed_seconds'] / 60:.1f} min elapsed"
            + (f", ETA {eta / 60:.0f} min" if eta is not None else ""))


def _watch_progress(proc, path: Path, name: str, every: float = 15.0) -> None:
    """While ``proc`` runs, print the notebook's runs done / total and ETA when they change."""
    last, last_t = None, 0.0
    while proc.poll() is None:
        time.sleep(1.0)
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        key = (state.get("desc"), state.get("runs_done"), state.get("rounds_done"))
        if key != last and (last is None or time.time() - last_t >= every):
            last, last_t = key, time.time()
            print("\n" + progress_line(state, name), file=sys.stderr, flush=True)


def run_notebook(nb: Path, profile: str, root: Path, progress: bool = True, log_output: bool = False,
                 start_timeout: int = 120, device: str | None = None) -> Outcome:
    """Execute ``nb`` under ``profile``; collect its status, time, error and report section."""
    out = root / "results" / "executed" / profile / nb.name
    out.parent.mkdir(parents=True, exist_ok=True)
    section_file = figure_dir(nb.stem, profile, root, create=False) / "report.md"
    t0, started = time.perf_counter(), time.time()
    code, stderr = _run_papermill(nb, out, profile, root, progress, log_output, start_timeout, device)
    minutes = (time.perf_counter() - t0) / 60
    fresh = section_file.exists() and section_file.stat().st_mtime >= started - 1
    section = section_file.read_text() if fresh else None
    if code == 0:
        return Outcome(nb.stem, "ok", minutes, str(out), section=section)
    error = notebook_error(out) or "\n".join(stderr.strip().splitlines()[-15:]) or f"papermill exited with {code}"
    return Outcome(nb.stem, "FAILED", minutes, str(out) if out.exists() else None, error, section)


def _relink(markdown: str, prefix: str) -> str:
    """Re-anchor links written relative to the output root for a report living below it."""
    if prefix in ("", "."):
        return markdown

    def fix(m):
        target = m.group(2)
        if re.match(r"^([a-z]+:|/|#)", target):
            return m.group(0)
        return f"{m.group(1)}{prefix}/{target}{m.group(3)}"

    return LINK.sub(fix, markdown)


def assemble(outcomes: list[Outcome], profile: str, root: Path, extra: str = "") -> str:
    """REPORT.md: header (the run's profile and each section's), status table, the verdict summary of the
    sections' claims ledgers (:func:`fedlib.claims.report_summary`), then every notebook's section in order."""
    from fedlib import claims
    from fedlib.report import to_markdown

    stamp = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    profiles = {o.name: claims.section_profile(o.section or "") or "—" for o in outcomes}
    lines = ["# Reproduction report", "",
             f"Run with profile `{profile}`, {stamp}, commit {git_commit()}.{extra} Sections: "
             + ", ".join(f"{name} `{p}`" for name, p in profiles.items()) + ".", "",
             "| notebook | status | minutes | section profile |", "|---|---|---:|---|"]
    for o in outcomes:
        lines.append(f"| {o.name} | {o.status} | {'—' if o.minutes is None else f'{o.minutes:.1f}'} | "
                     f"{profiles[o.name]} |")
    ledgers = {o.name: o.section for o in outcomes if o.section and "**Claims ledger" in o.section}
    if ledgers:
        lines += ["", "**Verdicts per paper** (one rule for every ledger, `fedlib.claims.verdict`: supported / not "
                  "supported need the paper protocol or the converged profile and a margin beyond the seed spread "
                  "or an exact test; short-profile, one-seed and within-spread evidence is inconclusive, and so is "
                  "converged-profile evidence whose curves have not plateaued; a claim that "
                  "holds by how the method is built, message counts included, is by construction).", "",
                  to_markdown(claims.report_summary(ledgers))]
    prefix = os.path.relpath(root, report_path(profile, root).parent)
    for o in outcomes:
        lines.append("")
        if o.status == "FAILED":
            lines += [f"## {o.name}: FAILED", "", f"Executed notebook: `{o.executed or 'not written'}`", "",
                      "```", o.error.strip(), "```"]
            if o.section:
                lines += ["", "Report section written before the failure:", "", _relink(o.section, prefix).strip()]
        elif o.section:
            note = "" if o.status == "ok" else "\n\n_Not run this time; section from an earlier run._"
            body = _relink(o.section, prefix).strip().split("\n", 1)
            lines.append(body[0] + note + ("\n" + body[1] if len(body) > 1 else ""))
        elif o.status == "ok":
            lines += [f"## {o.name}", "", f"Ran without writing a report section; see `{o.executed}`."]
        else:
            lines += [f"## {o.name}", "", "Not run this time and no earlier section."]
    return "\n".join(lines) + "\n"


def check_output_folders(root: Path, profile: str, notebooks: list[Path]) -> None:
    """Every folder a run writes below ``root`` (``--root``) can be made and written, checked before any kernel
    starts (:func:`fedlib.validation.check_writable`: a root under a file, an immutable or read-only folder, ``/proc``
    or ``/sys`` give one line, exit status 2): the root itself, ``results/executed/<profile>/``,
    ``results/<profile>/`` and each notebook's figure folder."""
    from fedlib.validation import check_writable

    folders = [root, root / "results" / "executed" / profile, report_path(profile, root).parent]
    folders += [figure_dir(nb.stem, profile, root, create=False) for nb in notebooks]
    for folder in folders:
        check_writable(folder, "--root")


def reproduce(profile: str = "quick", notebooks: str | Path = CHECKOUT / "notebooks", root: str | Path = CHECKOUT,
              only: list[str] | None = None, progress: bool = True, log_output: bool = False,
              device: str | None = None) -> int:
    """Run the notebooks of ``notebooks`` under ``profile``, outputs below ``root``; 0 if all passed, else 1.
    ``device`` (cpu, cuda, auto) is injected into every notebook as its ``device`` parameter."""
    load_profile(profile)  # an unknown profile stops here, before any kernel starts
    if device is not None and device not in ("auto", "cpu", "cuda"):
        raise ConfigError("--device", device, "one of auto, cpu, cuda")
    root = Path(root).resolve()
    chosen = select_notebooks(Path(notebooks), only)
    if not chosen:
        print(f"reproduce: no notebooks in {notebooks}", file=sys.stderr)
        return 1
    check_output_folders(root, profile, chosen)
    outcomes: list[Outcome] = []
    for i, nb in enumerate(chosen, 1):
        print(f"[{i}/{len(chosen)}] {nb.stem} (profile {profile}) ...", flush=True)
        o = run_notebook(nb, profile, root, progress, log_output, device=device)
        print(f"[{i}/{len(chosen)}] {nb.stem}: {o.status} in {o.minutes:.1f} min -> {o.executed}", flush=True)
        if o.status == "FAILED":
            print("    " + "\n    ".join(o.error.strip().splitlines()[-3:]), flush=True)
        outcomes.append(o)
    extra = ""
    if only:  # keep the other notebooks' earlier sections so REPORT.md stays whole
        extra = (" Run with --only " + ", ".join(p.stem for p in chosen) + "; the other sections come from earlier "
                 "runs, each under the profile its header states.")
        ran = {o.name: o for o in outcomes}
        outcomes = []
        for nb in select_notebooks(Path(notebooks)):
            if nb.stem in ran:
                outcomes.append(ran[nb.stem])
            else:
                old = figure_dir(nb.stem, profile, root, create=False) / "report.md"
                outcomes.append(Outcome(nb.stem, "not run", None, None,
                                        section=old.read_text() if old.exists() else None))
    report = report_path(profile, root)
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(assemble(outcomes, profile, root, extra))
    status = root / "results" / "executed" / profile / "status.json"
    status.write_text(json.dumps([{k: v for k, v in asdict(o).items() if k != "section"} for o in outcomes],
                                 indent=1))
    ran_now = [o for o in outcomes if o.status != "not run"]
    failed = [o for o in ran_now if o.status == "FAILED"]
    print(f"\nreproduce (profile {profile}): {len(ran_now) - len(failed)} passed, {len(failed)} failed; the "
          f"notebooks' sections -> {report}")

    for o in ran_now:
        print(f"  {o.status:6} {o.name:20} {o.minutes:6.1f} min  {o.executed or ''}")
    return 1 if failed else 0
